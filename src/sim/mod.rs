//! The discrete-event simulation.

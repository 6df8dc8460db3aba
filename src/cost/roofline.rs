//! Roofline cost model.

//! Scheduling policies and the paged KV-cache manager: pure logic, no time source.
pub mod batch;

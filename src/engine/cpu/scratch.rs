//! Per-thread scratch memory for the attention kernels, so that a kernel call allocates nothing
//! once each worker thread has seen the largest shape (the calibration harness's warm-up, or an
//! engine's first steps).

use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's scratch buffer of at least `len` floats. The contents are
/// whatever the last user left: callers initialise what they read.
///
/// # Panics
/// If `f` calls `with_scratch` again (kernels never nest).
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|cell| {
        let mut buf = cell.borrow_mut();
        if buf.len() < len {
            // Grows only: a long-running engine settles at its largest shape.
            buf.resize(len, 0.0);
        }
        f(&mut buf[..len])
    })
}

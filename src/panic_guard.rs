//! Panics inside a dependency, contained: a malformed file that makes a library panic is our
//! crash unless it becomes an error naming the file. [`contain`] runs a closure, catches its
//! panic, and keeps the panic hook quiet for it on this thread only (other threads' panics still
//! print as before), returning the panic's message for the error.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    /// Set while this thread runs inside [`contain`].
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`; its panic, if any, comes back as `Err(message)` without being printed.
pub fn contain<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static QUIET_HOOK: Once = Once::new();
    // The hook is replaced once per process, wrapping whatever hook was there: a panic outside
    // `contain` (or on another thread) still reaches it.
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINED.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let outer = CONTAINED.with(|c| c.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(outer));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_its_message_and_a_value_passes_through() {
        assert_eq!(contain(|| 7), Ok(7));
        let index = 5;
        let err = contain(|| [1, 2, 3][index]).unwrap_err();
        assert!(err.contains("index out of bounds"), "{err}");
        assert_eq!(contain(|| std::panic::panic_any(String::from("owned"))), Err::<(), _>("owned".to_string()));
        // Nested: the inner panic is contained, the outer closure goes on.
        assert_eq!(contain(|| contain(|| panic!("inner")).unwrap_err()), Ok("inner".to_string()));
    }
}

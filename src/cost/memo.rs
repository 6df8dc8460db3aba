//! Prices that depend only on a step's row count, computed once per row count.
//!
//! A calibrated step price interpolates a curve (a log, an exp) for each of a layer's GEMMs and
//! the LM head, yet a run asks for the same few row counts again and again (decode batches,
//! graph capture sizes): in a 240-candidate plan these interpolations were about a third of the
//! time (issue 14). The memo returns the very value the computation gives, so prices do not
//! change.

use std::sync::OnceLock;

/// Row counts remembered: up to a large step's token budget. Larger ones are computed each time.
const ROWS_REMEMBERED: usize = 8192;

/// `f(rows)` for whole row counts `0..ROWS_REMEMBERED`, filled on first use. Shared between
/// threads (a plan prices candidates in parallel): each slot is set once, to the one value `f`
/// gives.
pub struct ByRows {
    values: Box<[OnceLock<f64>]>,
}

impl ByRows {
    pub fn new() -> ByRows {
        ByRows { values: (0..ROWS_REMEMBERED).map(|_| OnceLock::new()).collect() }
    }

    /// `compute()`, which must be `f(rows)` for the one `f` this memo serves.
    #[inline]
    pub fn get(&self, rows: f64, compute: impl FnOnce() -> f64) -> f64 {
        if rows >= 0.0 && rows.fract() == 0.0 && rows < ROWS_REMEMBERED as f64 {
            *self.values[rows as usize].get_or_init(compute)
        } else {
            compute()
        }
    }
}

impl Default for ByRows {
    fn default() -> ByRows {
        ByRows::new()
    }
}

/// A copy starts empty: it is a cache, not part of what the model is.
impl Clone for ByRows {
    fn clone(&self) -> ByRows {
        ByRows::new()
    }
}

impl std::fmt::Debug for ByRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ByRows({} remembered)", self.values.iter().filter(|v| v.get().is_some()).count())
    }
}

/// Two models are equal whatever their caches hold.
impl PartialEq for ByRows {
    fn eq(&self, _: &ByRows) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_whole_row_counts_and_computes_the_rest() {
        let memo = ByRows::new();
        let calls = std::cell::Cell::new(0);
        let f = |rows: f64| {
            calls.set(calls.get() + 1);
            rows.ln_1p()
        };
        assert_eq!(memo.get(3.0, || f(3.0)), 3f64.ln_1p());
        assert_eq!(memo.get(3.0, || f(3.0)), 3f64.ln_1p());
        assert_eq!(calls.get(), 1, "the second ask is remembered");
        memo.get(2.5, || f(2.5));
        memo.get(1e6, || f(1e6));
        memo.get(2.5, || f(2.5));
        assert_eq!(calls.get(), 4, "fractions and large counts are computed each time");
    }
}

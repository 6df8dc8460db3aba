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
        // A whole number in range converts to an integer and back unchanged (`as` truncates),
        // without `fract`'s library call (a `trunc` on baseline x86-64); through i64, whose
        // conversions are one instruction each where u64's take a dozen.
        let whole = rows as i64;
        if rows >= 0.0 && rows < ROWS_REMEMBERED as f64 && whole as f64 == rows {
            self.get_whole(whole as u64, compute)
        } else {
            compute()
        }
    }

    /// [`ByRows::get`] for a row count that is a whole number already: no check of the float.
    #[inline]
    pub fn get_whole(&self, rows: u64, compute: impl FnOnce() -> f64) -> f64 {
        match usize::try_from(rows).ok().and_then(|index| self.values.get(index)) {
            Some(slot) => *slot.get_or_init(compute),
            None => compute(),
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

/// Decode batches remembered by size: up to the largest `max_num_seqs` in common use.
const BATCHES_REMEMBERED: usize = 1024;

/// A price's parts that depend only on a decode batch's size and its graph (every sequence
/// decoding one token, no prefill): the roofline's GEMMs, elementwise work, communication and
/// overheads, everything but attention, which reads the contexts. A simulated run is about half
/// such steps, and their sizes repeat (issue 14). One graph variant is kept per size (a run
/// has one); another is computed each time. Shared between threads as [`ByRows`] is.
pub struct ByDecodeBatch<T> {
    values: Box<[OnceLock<(Option<u32>, T)>]>,
}

impl<T: Copy> ByDecodeBatch<T> {
    pub fn new() -> ByDecodeBatch<T> {
        ByDecodeBatch { values: (0..BATCHES_REMEMBERED).map(|_| OnceLock::new()).collect() }
    }

    /// `compute()`, which must be `f(seqs, graph_size)` for the one `f` this memo serves.
    #[inline]
    pub fn get(&self, seqs: u64, graph_size: Option<u32>, compute: impl FnOnce() -> T) -> T {
        let Some(slot) = self.values.get(seqs as usize) else { return compute() };
        match slot.get() {
            Some(&(graph, value)) if graph == graph_size => value,
            Some(_) => compute(),
            None => {
                let value = compute();
                // Another thread may have set it meanwhile, to the same value.
                let _ = slot.set((graph_size, value));
                value
            }
        }
    }
}

impl<T: Copy> Default for ByDecodeBatch<T> {
    fn default() -> ByDecodeBatch<T> {
        ByDecodeBatch::new()
    }
}

/// A copy starts empty, as [`ByRows`]'s does.
impl<T: Copy> Clone for ByDecodeBatch<T> {
    fn clone(&self) -> ByDecodeBatch<T> {
        ByDecodeBatch::new()
    }
}

impl<T> std::fmt::Debug for ByDecodeBatch<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ByDecodeBatch({} remembered)", self.values.iter().filter(|v| v.get().is_some()).count())
    }
}

/// Two models are equal whatever their caches hold.
impl<T> PartialEq for ByDecodeBatch<T> {
    fn eq(&self, _: &ByDecodeBatch<T>) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_decode_batches_by_size_and_graph() {
        let memo = ByDecodeBatch::new();
        let calls = std::cell::Cell::new(0);
        let f = |seqs: u64, graph: Option<u32>| {
            calls.set(calls.get() + 1);
            seqs * 10 + u64::from(graph.unwrap_or(0))
        };
        assert_eq!(memo.get(3, Some(4), || f(3, Some(4))), 34);
        assert_eq!(memo.get(3, Some(4), || f(3, Some(4))), 34);
        assert_eq!(calls.get(), 1, "the second ask is remembered");
        assert_eq!(memo.get(3, None, || f(3, None)), 30, "another graph variant of the size is its own");
        assert_eq!(memo.get(3, None, || f(3, None)), 30);
        assert_eq!(memo.get(5_000, None, || f(5_000, None)), 50_000);
        assert_eq!(memo.get(5_000, None, || f(5_000, None)), 50_000);
        assert_eq!(calls.get(), 5, "the second variant and large batches are computed each time");
        assert_eq!(memo.clone().get(3, Some(4), || f(3, Some(4))), 34);
        assert_eq!(calls.get(), 6, "a copy starts empty");
    }

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

//! An attention surface prepared for pricing steps: what a step's price reads again and again
//! is worked out once, when the model is built.
//!
//! A calibrated step reads each phase's surface at (ln batch, ln query length, ln context
//! length): three logarithms and three binary searches before the blend (issue 33: a fifth of a
//! default-path run). The batch is a whole number of sequences, so its bracket on the batch
//! axis is kept for every batch size up to [`BATCHES_BRACKETED`]; a query length or a context of
//! at most one token is coordinate 0 (see [`ln1`]), whose bracket is kept too (every decode's
//! query length, and every prefill's context). The brackets are the ones [`bracket`] gives, so
//! the price has the same bits as [`Surface::eval`] at [`attention_coords`].
//!
//! [`attention_coords`]: crate::calibrate::profile::index::attention_coords

use crate::calibrate::profile::interpolate::{Surface, bracket, ln1};

/// Batch sizes whose bracket is kept: up to the largest `max_num_seqs` in common use.
const BATCHES_BRACKETED: usize = 1025;

/// A [`Surface`] with the brackets a step's price needs most, worked out once.
#[derive(Clone, Debug)]
pub(super) struct AttentionSurface {
    surface: Surface,
    /// `bracket(axis 0, ln1(n))` for each whole batch size `n` below [`BATCHES_BRACKETED`].
    batches: Box<[(usize, f64)]>,
    /// `bracket(axis, 0)` of each axis: where `ln1` of one token or fewer lands.
    at_zero: [(usize, f64); 3],
}

impl AttentionSurface {
    pub(super) fn new(surface: Surface) -> AttentionSurface {
        let batches = (0..BATCHES_BRACKETED).map(|n| bracket(&surface.axes[0], ln1(n as f64))).collect();
        let at_zero = std::array::from_fn(|a| bracket(&surface.axes[a], 0.0));
        AttentionSurface { surface, batches, at_zero }
    }

    /// The surface at `attention_coords(batch, query_len, context_len)`, to the bit.
    #[inline]
    pub(super) fn eval(&self, batch: f64, query_len: f64, context_len: f64) -> f64 {
        let axes = &self.surface.axes;
        // `as` saturates (NaN to 0), and the comparison then sends anything but a whole batch
        // size in range to the search. To i64, not usize: one instruction, not a dozen.
        let whole = batch as i64;
        let b0 = match usize::try_from(whole).ok().and_then(|n| self.batches.get(n)) {
            Some(&b) if whole as f64 == batch => b,
            _ => bracket(&axes[0], ln1(batch)),
        };
        // ln1(x) is 0 unless x > 1.
        let b1 = if query_len > 1.0 { bracket(&axes[1], query_len.ln()) } else { self.at_zero[1] };
        let b2 = if context_len > 1.0 { bracket(&axes[2], context_len.ln()) } else { self.at_zero[2] };
        self.surface.eval_bracketed([b0, b1, b2])
    }
}

/// Two models are equal when their surfaces are: the brackets follow from them.
impl PartialEq for AttentionSurface {
    fn eq(&self, other: &AttentionSurface) -> bool {
        self.surface == other.surface
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::profile::index::attention_coords;

    #[test]
    fn gives_the_surface_bits_at_the_attention_coordinates() {
        // An uneven grid of irregular values over (ln batch, ln query, ln context), probed at
        // whole and fractional batches (in and beyond the kept range), query lengths and
        // contexts of at most one token, on grid points, between and beyond them.
        let mut points = Vec::new();
        let mut v = 0.37_f64;
        for b in [1.0f64, 4.0, 16.0, 64.0, 256.0] {
            for q in [1.0f64, 8.0, 512.0] {
                for c in [16.0f64, 100.0, 1000.0, 8000.0] {
                    v = (v * 7.31 + 0.113).fract() - 0.5;
                    points.push(([b.ln(), q.ln(), c.ln()], v));
                }
            }
        }
        let surface = Surface::new(&points).unwrap();
        let prepared = AttentionSurface::new(surface.clone());
        let batches = [0.0, 1.0, 2.0, 3.0, 4.0, 17.0, 255.0, 256.0, 300.0, 1024.0, 1025.0, 5000.0, 2.5, 0.5, f64::NAN];
        let lengths = [0.0, 0.5, 1.0, 1.5, 2.0, 8.0, 77.7, 512.0, 999.0, 1000.0, 8000.0, 9000.5, 1e6];
        let mut checked = 0;
        for &b in &batches {
            for &q in &lengths {
                for &c in &lengths {
                    let want = surface.eval(attention_coords(b, q, c));
                    assert_eq!(prepared.eval(b, q, c).to_bits(), want.to_bits(), "at ({b}, {q}, {c})");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 15 * 13 * 13);
    }
}

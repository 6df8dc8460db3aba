//! `x.round() as u64` without the libm call: the simulator rounds a few values per engine step
//! and per request (step prices to nanoseconds, arrival times and sampled lengths to integers),
//! and the call was 4% of a 100k-request run (issue 14). Same result, for every f64. And counts
//! to f64 the short way, for the same reason.

/// The largest f64 below ½. Adding it and truncating rounds half away from zero: a tie
/// (k + ½) sums to a value that rounds up to k + 1, and anything below a tie stays below k + 1.
/// With ½ itself, 0.49999999999999994 would round to 1.
const JUST_BELOW_HALF: f64 = 0.499_999_999_999_999_94;

/// `x.round() as u64`, exactly: the nearest integer, ties away from zero, saturating at 0 (for
/// negative values and NaN) and at `u64::MAX`.
#[inline]
pub fn round_to_u64(x: f64) -> u64 {
    // A negative x sums below ½ + ½ and truncates to 0, as its rounding saturates to 0.
    (x + JUST_BELOW_HALF) as u64
}

/// [`round_to_u64`] for values that fit an i64 (below 2⁶³, about 292 years in ns: every price a
/// cost model gives): the same result there, and `i64::MAX` past it. The signed conversion is
/// one instruction on baseline x86-64 where the unsigned one takes a dozen, and a step rounds
/// five prices (issue 14).
#[inline]
pub fn round_to_i64_range(x: f64) -> u64 {
    // Negative sums and NaN convert to at most 0 (NaN to 0), as they saturate to 0 above.
    ((x + JUST_BELOW_HALF) as i64).max(0) as u64
}

/// `x as f64` for a count that fits an i64 (token and key counts of a step, far below 2⁶³):
/// the same value there, and 2⁶³ past it. The signed conversion is one instruction on baseline
/// x86-64 where the unsigned one takes six, and a step converts five counts (issue 14).
#[inline]
pub fn count_to_f64(x: u64) -> f64 {
    x.min(i64::MAX as u64) as i64 as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_std_at_the_edges() {
        let integral_from = 4_503_599_627_370_496.0; // 2⁵²
        let edges = [
            0.0,
            0.5,
            1.5,
            2.5,
            JUST_BELOW_HALF,
            0.500_000_000_000_000_1,
            integral_from / 2.0 + 0.5,
            integral_from - 0.5,
            integral_from,
            integral_from + 1.0,
            18_446_744_073_709_549_568.0, // the largest f64 below 2⁶⁴
            18_446_744_073_709_551_616.0, // 2⁶⁴
            f64::MAX,
            f64::INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
        ];
        for x in edges.into_iter().flat_map(|x| [x, -x]) {
            assert_eq!(round_to_u64(x), x.round() as u64, "{x}");
        }
    }

    proptest! {
        #[test]
        fn matches_std_on_any_bits(bits in any::<u64>()) {
            let x = f64::from_bits(bits);
            prop_assert_eq!(round_to_u64(x), x.round() as u64, "{}", x);
        }

        #[test]
        fn matches_std_near_ties(whole in 0u64..1 << 53, fraction in prop::sample::select(vec![0.0, 0.25, 0.5, 0.75, JUST_BELOW_HALF])) {
            let x = whole as f64 + fraction;
            prop_assert_eq!(round_to_u64(x), x.round() as u64, "{}", x);
        }

        /// Below 2⁶³ it is the unsigned rounding; at and past it, `i64::MAX`.
        #[test]
        fn the_i64_range_rounding_matches_below_two_to_the_63(bits in any::<u64>()) {
            let x = f64::from_bits(bits);
            let expected = if x.round() < 9_223_372_036_854_775_808.0 || x.is_nan() { x.round() as u64 } else { i64::MAX as u64 };
            prop_assert_eq!(round_to_i64_range(x), expected, "{}", x);
        }

        #[test]
        fn counts_convert_as_unsigned_below_two_to_the_63(x in any::<u64>()) {
            let expected = if x <= i64::MAX as u64 { x as f64 } else { 9_223_372_036_854_775_808.0 };
            prop_assert_eq!(count_to_f64(x).to_bits(), expected.to_bits(), "{}", x);
            prop_assert_eq!(count_to_f64(x >> 11).to_bits(), ((x >> 11) as f64).to_bits());
        }

        #[test]
        fn matches_std_on_nanosecond_products(seconds in 0.0f64..1e6) {
            let x = seconds * 1e9;
            prop_assert_eq!(round_to_u64(x), x.round() as u64, "{}", x);
        }
    }
}

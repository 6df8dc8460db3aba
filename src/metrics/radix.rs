//! Sorting by a 64-bit key in linear time (least-significant digit first, 11 bits a digit).
//!
//! The summary of a 100k-request run sorts three latency lists, the pooled ITL samples and the
//! concurrency sweep's events: with a comparison sort that was a quarter of the whole simulated
//! benchmark (issue 14). The order is the same as a comparison sort's, so sums and percentiles
//! taken over the sorted values are bit-for-bit the same.

/// Below this, a comparison sort is as fast and needs no scratch buffer.
const RADIX_MIN_LEN: usize = 256;

/// Bits per digit: 2,048 buckets, whose counters stay in L1/L2 while a pass scatters. Latencies
/// in nanoseconds span about 35 bits, four digits of 11 against five bytes; a float's bits
/// about 55, five digits against seven bytes.
const DIGIT_BITS: u32 = 11;
const BUCKETS: usize = 1 << DIGIT_BITS;
const DIGITS: usize = 64usize.div_ceil(DIGIT_BITS as usize);

/// Sorts `values` ascending by `key`. Elements with equal keys may end up in any order.
pub fn sort_by_key_u64<T: Copy>(values: &mut Vec<T>, key: impl Fn(&T) -> u64) {
    sort_by_key_u64_with(values, &mut Vec::new(), key);
}

/// [`sort_by_key_u64`] with the scratch space the passes alternate with: a caller sorting
/// several lists passes the same one (`values` and `scratch` may trade their buffers).
pub fn sort_by_key_u64_with<T: Copy>(values: &mut Vec<T>, scratch: &mut Vec<T>, key: impl Fn(&T) -> u64) {
    if values.len() < RADIX_MIN_LEN {
        values.sort_unstable_by_key(|v| key(v));
        return;
    }
    // Digits above every key's highest bit are 0 in all keys: neither counted nor passed over
    // (nanosecond latencies have about 35 bits: four digits of six). Finding them is one pass
    // of `or`s, which vectorise; counting them cost two increments a key (issue 33). Four are
    // counted at least, so that three loops serve every list.
    let high_bits = values.iter().fold(0, |bits, v| bits | key(v));
    let digits = ((u64::BITS - high_bits.leading_zeros()).div_ceil(DIGIT_BITS) as usize).clamp(4, DIGITS);
    // One pass counts every digit position at once; a position where all keys share their
    // digit needs no pass of its own.
    let mut counts = vec![[0usize; BUCKETS]; digits];
    match digits {
        4 => count_digits::<4, T>(values, &mut counts, &key),
        5 => count_digits::<5, T>(values, &mut counts, &key),
        _ => count_digits::<DIGITS, T>(values, &mut counts, &key),
    }
    for (d, count) in counts.iter_mut().enumerate() {
        if count.contains(&values.len()) {
            continue;
        }
        // The counts become each bucket's next free place.
        let mut total = 0;
        for c in count.iter_mut() {
            let n = *c;
            *c = total;
            total += n;
        }
        // Every place is written below: the scratch only needs the length, which after a first
        // pass it has (the lists trade buffers).
        if scratch.len() != values.len() {
            scratch.clear();
            scratch.resize(values.len(), values[0]);
        }
        for v in values.iter() {
            let bucket = digit(key(v), d);
            scratch[count[bucket]] = *v;
            count[bucket] += 1;
        }
        std::mem::swap(values, scratch);
    }
}

/// Digit `d` of `key`, from the least significant.
#[inline]
fn digit(key: u64, d: usize) -> usize {
    ((key >> (DIGIT_BITS as usize * d)) & (BUCKETS as u64 - 1)) as usize
}

/// Counts the `D` digits of every key into `counts`, which has `D` rows: with `D` a constant the
/// loop over the digits unrolls.
#[inline]
fn count_digits<const D: usize, T>(values: &[T], counts: &mut [[usize; BUCKETS]], key: &impl Fn(&T) -> u64) {
    let counts: &mut [[usize; BUCKETS]; D] = counts.try_into().expect("a row of counts per digit");
    for v in values {
        let k = key(v);
        for (d, count) in counts.iter_mut().enumerate() {
            count[digit(k, d)] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn matches_a_comparison_sort(keys in prop::collection::vec(any::<u64>(), 0..2000), shift in 0u32..64) {
            let mut values: Vec<(u64, u32)> = keys.iter().enumerate().map(|(i, &k)| (k >> shift, i as u32)).collect();
            let mut expected = values.clone();
            expected.sort_unstable();
            sort_by_key_u64(&mut values, |&(k, _)| k);
            let sorted_keys: Vec<u64> = values.iter().map(|&(k, _)| k).collect();
            prop_assert_eq!(sorted_keys, expected.iter().map(|&(k, _)| k).collect::<Vec<_>>());
            // A permutation: nothing lost or duplicated.
            values.sort_unstable();
            prop_assert_eq!(values, expected);
        }

        #[test]
        fn floats_sort_as_total_cmp(values in prop::collection::vec(0.0f64..1e15, 0..2000)) {
            let mut expected = values.clone();
            expected.sort_unstable_by(f64::total_cmp);
            // Non-negative floats' IEEE bits order as the numbers do.
            let mut sorted = values;
            sort_by_key_u64(&mut sorted, |v| v.to_bits());
            prop_assert_eq!(sorted, expected);
        }
    }
}

//! Matching recorded token totals.
//!
//! A recorded benchmark tells only how many input and output tokens each block used in total,
//! not each request's length. To replay it, lengths are sampled from the dataset's distribution
//! and then scaled so their sum is exactly the recorded total, keeping the distribution's shape.

/// Scales `lengths` so they sum to `target`, each within `[1, max]`. Rounding leftovers are
/// spread one token at a time from the first request on, so the result is deterministic.
///
/// Panics if the target is unreachable (`target < len` or `target > len × max`): scenario
/// validation rejects such totals first.
pub fn scale_to_total(lengths: &mut [u32], target: u64, max: u32) {
    let n = lengths.len() as u64;
    assert!(n > 0 && target >= n && target <= n * max as u64, "total {target} unreachable for {n} requests of 1..={max}");
    let sum: u64 = lengths.iter().map(|&l| l as u64).sum();
    let ratio = target as f64 / sum as f64;
    for l in lengths.iter_mut() {
        *l = ((*l as f64 * ratio).round() as u32).clamp(1, max);
    }
    let mut sum: u64 = lengths.iter().map(|&l| l as u64).sum();
    // Each pass moves every request that can move by one token toward the target; clamping
    // leaves at most a few passes.
    while sum != target {
        for l in lengths.iter_mut() {
            if sum < target && *l < max {
                *l += 1;
                sum += 1;
            } else if sum > target && *l > 1 {
                *l -= 1;
                sum -= 1;
            }
            if sum == target {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_the_total_exactly_and_keeps_bounds() {
        let mut v = vec![80, 80];
        scale_to_total(&mut v, 159, 1000);
        assert_eq!(v, vec![79, 80]);
        let mut v: Vec<u32> = (1..=100).collect();
        scale_to_total(&mut v, 7000, 150);
        assert_eq!(v.iter().map(|&x| x as u64).sum::<u64>(), 7000);
        assert!(v.iter().all(|&x| (1..=150).contains(&x)));
        // The shape survives: longer stays longer (up to clamping).
        assert!(v[10] < v[50]);
    }

    #[test]
    fn scales_down_with_floor_of_one() {
        let mut v = vec![100, 1, 50, 3];
        scale_to_total(&mut v, 4, 150);
        assert_eq!(v, vec![1, 1, 1, 1]);
    }

    #[test]
    #[should_panic(expected = "unreachable")]
    fn unreachable_total_is_a_bug_upstream() {
        scale_to_total(&mut [5, 5], 400, 150);
    }
}

//! Compact sample containers: a run-length multiset of nanosecond values with numpy-compatible
//! statistics, and per-second token counts.
//!
//! ```text
//!  push(v) ×10⁷ ──► WeightedSamples { runs: [(v, count), …] }   (append order, O(1) push)
//!                              │ sorted(): sort + merge once, O(R log R) for R runs
//!                              ▼
//!                   SortedSamples { runs: [(v, count), …], a cumulative count every 32 runs }
//!                              │ percentile(p): two binary searches and short walks, O(log R)
//!                              ▼
//!                   numpy.percentile(expanded values, p)   (linear method)
//! ```

use std::borrow::Cow;

/// A multiset of nanosecond values stored as `(value_ns, count)` runs, in push order.
///
/// The simulator pushes one inter-token gap per generated token (tens of millions in a big run),
/// and consecutive gaps are often equal (every sequence in a decode step sees the same step
/// time), so run-length storage keeps memory proportional to the number of distinct consecutive
/// values rather than the number of tokens. Runs are not sorted and equal values may appear in
/// several runs; [`WeightedSamples::sorted`] merges them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeightedSamples {
    pub runs: Vec<(u64, u64)>,
}

impl WeightedSamples {
    /// An empty multiset.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one sample of `value_ns`.
    ///
    /// O(1); allocates only when the value differs from the previous one and the vector is full.
    #[inline]
    pub fn push(&mut self, value_ns: u64) {
        self.push_n(value_ns, 1);
    }

    /// Adds `count` samples of `value_ns`. A zero count adds nothing.
    #[inline]
    pub fn push_n(&mut self, value_ns: u64, count: u64) {
        if count == 0 {
            return;
        }
        match self.runs.last_mut() {
            Some((last_value_ns, last_count)) if *last_value_ns == value_ns => {
                *last_count += count;
            }
            _ => self.runs.push((value_ns, count)),
        }
    }

    /// Adds every sample of `other` (e.g. to pool the samples of several replicas).
    pub fn append(&mut self, other: &WeightedSamples) {
        for &(value_ns, count) in &other.runs {
            self.push_n(value_ns, count);
        }
    }

    /// Number of samples (not runs). O(runs): call it once, not per push.
    pub fn len(&self) -> u64 {
        self.runs.iter().map(|&(_, count)| count).sum()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.runs.iter().all(|&(_, count)| count == 0)
    }

    /// Arithmetic mean in ns; 0 when empty (vLLM's `np.mean(x or 0)`).
    pub fn mean(&self) -> f64 {
        let (count_total, sum_ns) = sum_runs(&self.runs);
        mean_of(count_total, sum_ns)
    }

    /// Population standard deviation (numpy's default `ddof=0`) in ns; 0 when empty.
    pub fn std(&self) -> f64 {
        let (count_total, sum_ns) = sum_runs(&self.runs);
        std_of(
            self.runs.iter().copied(),
            count_total,
            mean_of(count_total, sum_ns),
        )
    }

    /// numpy's default (linear) percentile in ns, `p` in [0, 100]; 0 when empty.
    ///
    /// Sorts a copy of the runs on every call: use [`WeightedSamples::sorted`] to ask for several.
    pub fn percentile(&self, p: f64) -> f64 {
        self.sorted().percentile(p)
    }

    /// Sorts and merges a copy of the runs once, for repeated order-statistic queries.
    /// A multiset already [sorted in place](WeightedSamples::sort) is read as it is; any other
    /// is copied first.
    pub fn sorted(&self) -> SortedSamples<'_> {
        if self.is_sorted() {
            // Already sorted (the simulator's output is): read where they are, no copy.
            SortedSamples::from_merged(Cow::Borrowed(&self.runs))
        } else {
            self.clone().into_sorted()
        }
    }

    /// Like [`WeightedSamples::sorted`], but reuses this multiset's storage (no copy).
    pub fn into_sorted(mut self) -> SortedSamples<'static> {
        sort_and_merge(&mut self.runs);
        SortedSamples::from_merged(Cow::Owned(self.runs))
    }

    /// Sorts the runs by value and merges those of equal values, in place: the same samples,
    /// which [`WeightedSamples::sorted`] then reads without sorting a copy (the simulator's
    /// output, whose summary would otherwise hold the runs twice, and a scratch copy).
    pub fn sort(&mut self) {
        sort_and_merge(&mut self.runs);
    }

    /// Whether the runs are in ascending order of distinct values, none empty.
    fn is_sorted(&self) -> bool {
        self.runs.iter().all(|&(_, count)| count > 0) && self.runs.is_sorted_by(|a, b| a.0 < b.0)
    }
}

/// A push-only store of `(value_ns, count)` runs, as [`WeightedSamples::push_n`] builds them, in
/// chunks of a fixed size. A simulation pushes about one run per engine step and the steps per
/// request depend on the engine, so no capacity can be guessed up front: a `Vec` that outgrows
/// its guess doubles, overshooting by up to 2× and holding the old and new blocks while it copies
/// (a 100k run went from 56 to 85 bytes per request when its steps outgrew the guess). Chunks
/// never move; [`RunChunks::into_samples`] copies them into one exact-length vector, freeing each
/// chunk as it goes.
#[derive(Clone, Debug)]
pub struct RunChunks {
    full: Vec<Vec<(u64, u64)>>,
    last: Vec<(u64, u64)>,
    chunk_runs: usize,
}

impl Default for RunChunks {
    fn default() -> Self {
        // 1 MiB of runs: a small share of any run that needs more than one.
        Self::with_chunk_runs(1 << 16)
    }
}

impl RunChunks {
    /// An empty store whose chunks hold `chunk_runs` runs each (at least 1).
    pub fn with_chunk_runs(chunk_runs: usize) -> Self {
        RunChunks { full: Vec::new(), last: Vec::new(), chunk_runs: chunk_runs.max(1) }
    }

    /// Adds `count` samples of `value_ns`, merged into the last run when its value is the same.
    #[inline]
    pub fn push_n(&mut self, value_ns: u64, count: u64) {
        if count == 0 {
            return;
        }
        let previous = match self.last.last_mut() {
            Some(run) => Some(run),
            None => self.full.last_mut().and_then(|chunk| chunk.last_mut()),
        };
        if let Some((last_value_ns, last_count)) = previous
            && *last_value_ns == value_ns
        {
            *last_count += count;
            return;
        }
        if self.last.len() == self.chunk_runs {
            let next = Vec::with_capacity(self.chunk_runs);
            self.full.push(std::mem::replace(&mut self.last, next));
        }
        // The first chunk grows as a Vec does, so a short run takes no more than it needs.
        self.last.push((value_ns, count));
    }

    /// Adds one sample of `value_ns`.
    #[inline]
    pub fn push(&mut self, value_ns: u64) {
        self.push_n(value_ns, 1);
    }

    /// The runs as one [`WeightedSamples`], in push order, in a vector of exactly their length.
    pub fn into_samples(self) -> WeightedSamples {
        let total = self.full.iter().map(Vec::len).sum::<usize>() + self.last.len();
        let mut runs = Vec::with_capacity(total);
        for chunk in self.full {
            runs.extend_from_slice(&chunk);
        }
        runs.extend_from_slice(&self.last);
        WeightedSamples { runs }
    }
}

/// Runs in ascending order of value, equal values merged and empty runs dropped.
fn sort_and_merge(runs: &mut Vec<(u64, u64)>) {
    runs.retain(|&(_, count)| count > 0);
    super::radix::sort_by_key_u64(runs, |&(value_ns, _)| value_ns);
    runs.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 += later.1;
        }
        same
    });
}

/// A sorted, merged view of a [`WeightedSamples`], answering numpy-compatible queries.
///
/// Invariant: `runs` holds `(value_ns, count)` with strictly increasing `value_ns` and `count` >
/// 0. `checkpoints[j]` is the number of samples in the runs before run `j · CHECKPOINT_RUNS`, so
/// the `k`-th sample is found by a binary search of the checkpoints and a short walk. The runs are
/// read where they are when they were sorted already: a copy of a million-request run's runs
/// was 22 MB (issue 14).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SortedSamples<'a> {
    runs: Cow<'a, [(u64, u64)]>,
    checkpoints: Vec<u64>,
    len: u64,
    sum_ns: u128,
}

/// Runs between two checkpoints of [`SortedSamples`]: the walk after the binary search is at
/// most this long, and the checkpoints take 8 bytes per this many runs.
const CHECKPOINT_RUNS: usize = 32;

impl SortedSamples<'_> {
    /// From `(value, count)` runs in ascending order of distinct values.
    fn from_merged(runs: Cow<'_, [(u64, u64)]>) -> SortedSamples<'_> {
        let (len, sum_ns) = sum_runs(&runs);
        let mut checkpoints = Vec::with_capacity(runs.len().div_ceil(CHECKPOINT_RUNS));
        let mut start = 0u64;
        for chunk in runs.chunks(CHECKPOINT_RUNS) {
            checkpoints.push(start);
            start += chunk.iter().map(|&(_, count)| count).sum::<u64>();
        }
        SortedSamples { runs, checkpoints, len, sum_ns }
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Arithmetic mean in ns; 0 when empty.
    pub fn mean(&self) -> f64 {
        mean_of(self.len(), self.sum_ns)
    }

    /// Population standard deviation (ddof=0) in ns; 0 when empty.
    pub fn std(&self) -> f64 {
        std_of(self.runs(), self.len(), self.mean())
    }

    /// The distinct values, ascending, each with how many samples have it.
    pub fn runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.runs.iter().copied()
    }

    /// The `k`-th smallest sample (0-based) in ns; `k` is clamped to the last sample.
    ///
    /// Returns 0 when empty.
    pub fn nth(&self, k: u64) -> u64 {
        let Some(&(last_ns, _)) = self.runs.last() else { return 0 };
        let chunk = self.checkpoints.partition_point(|&start| start <= k).saturating_sub(1);
        let mut end = self.checkpoints[chunk];
        for &(value_ns, count) in &self.runs[chunk * CHECKPOINT_RUNS..] {
            end += count;
            if end > k {
                return value_ns;
            }
        }
        last_ns
    }

    /// numpy's `median` in ns: the middle sample, or the mean of the two middle ones; 0 when empty.
    pub fn median(&self) -> f64 {
        numpy_median(self.len(), |k| self.nth(k) as f64)
    }

    /// numpy's default (linear) `percentile` in ns, `p` in [0, 100]; 0 when empty.
    pub fn percentile(&self, p: f64) -> f64 {
        numpy_percentile(self.len(), p, |k| self.nth(k) as f64)
    }
}

/// Output tokens per 1-second bucket: `(s, n)` in `counts` says `n` tokens have a time in
/// `[s, s + 1)` seconds after the origin the producer chose (vLLM: the earliest request send).
/// Sparse, in second order: only seconds with tokens are kept, so memory follows the tokens, not
/// the simulated time (a run at 10⁻⁹ req/s spans 10⁹ seconds).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenBuckets {
    pub counts: Vec<(u64, u64)>,
}

impl TokenBuckets {
    const NS_PER_S: u64 = 1_000_000_000;

    /// No buckets yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts `count` tokens at `time_ns` after the origin.
    #[inline]
    pub fn add(&mut self, time_ns: u64, count: u64) {
        if count == 0 {
            return;
        }
        let second = time_ns / Self::NS_PER_S;
        // Producers count in time order, so the second is the last one or a new one.
        match self.counts.last_mut() {
            Some((last, n)) if *last == second => *n += count,
            Some((last, _)) if *last > second => match self.counts.binary_search_by_key(&second, |&(s, _)| s) {
                Ok(i) => self.counts[i].1 += count,
                Err(i) => self.counts.insert(i, (second, count)),
            },
            _ => self.counts.push((second, count)),
        }
    }

    /// The largest bucket (tokens in the busiest second); 0 when empty.
    pub fn peak(&self) -> u64 {
        self.counts.iter().map(|&(_, n)| n).max().unwrap_or(0)
    }

    /// Tokens counted in all.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|&(_, n)| n).sum()
    }

    /// Whether no token was counted.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

/// numpy's `percentile(a, p)` with the default `method="linear"`, for `n` sorted values read
/// through `nth(k)` (0-based). Returns 0 when `n == 0`; `p` is clamped to [0, 100].
///
/// Mirrors numpy's arithmetic step by step (q = p/100, rank = (n−1)·q, and its `_lerp`, which
/// interpolates from the upper neighbour when the fraction is ≥ 0.5) so results agree to the bit
/// for the same inputs.
pub(crate) fn numpy_percentile(n: u64, p: f64, nth: impl Fn(u64) -> f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let q = (p / 100.0).clamp(0.0, 1.0);
    let rank = (n - 1) as f64 * q;
    let below = rank.floor();
    let fraction = rank - below;
    // `as` saturates (NaN → 0), and the clamp keeps both indices in range.
    let index_below = (below as u64).min(n - 1);
    let index_above = (index_below + 1).min(n - 1);
    numpy_lerp(nth(index_below), nth(index_above), fraction)
}

/// numpy's `median`: the middle value, or `(a + b) / 2` of the two middle values; 0 when empty.
pub(crate) fn numpy_median(n: u64, nth: impl Fn(u64) -> f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let upper = n / 2;
    if n % 2 == 1 {
        nth(upper)
    } else {
        (nth(upper - 1) + nth(upper)) / 2.0
    }
}

/// numpy's `_lerp(a, b, t)`: `a + (b−a)·t`, or `b − (b−a)·(1−t)` when `t ≥ 0.5` (more accurate
/// near `b`, and exact at `t = 1`).
fn numpy_lerp(a: f64, b: f64, t: f64) -> f64 {
    let diff = b - a;
    if t >= 0.5 {
        b - diff * (1.0 - t)
    } else {
        a + diff * t
    }
}

/// Sample count and exact sum (u128 cannot overflow: < 2⁶⁴ samples of < 2⁶⁴ ns).
fn sum_runs(runs: &[(u64, u64)]) -> (u64, u128) {
    runs.iter()
        .fold((0, 0), |(count_total, sum_ns), &(value_ns, count)| {
            (
                count_total + count,
                sum_ns + value_ns as u128 * count as u128,
            )
        })
}

fn mean_of(count_total: u64, sum_ns: u128) -> f64 {
    if count_total == 0 {
        0.0
    } else {
        sum_ns as f64 / count_total as f64
    }
}

/// Two-pass population variance around a known mean, like numpy (no catastrophic cancellation).
fn std_of(runs: impl Iterator<Item = (u64, u64)>, count_total: u64, mean_ns: f64) -> f64 {
    if count_total == 0 {
        return 0.0;
    }
    let squares: f64 = runs
        .map(|(value_ns, count)| {
            let deviation = value_ns as f64 - mean_ns;
            deviation * deviation * count as f64
        })
        .sum();
    (squares / count_total as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks hold exactly the runs a `WeightedSamples` would, merges across a chunk boundary
    /// included.
    #[test]
    fn run_chunks_hold_what_weighted_samples_hold() {
        let values = [5u64, 5, 7, 7, 7, 3, 3, 9, 1, 1, 1, 1, 2, 2, 8, 8, 8, 6];
        for chunk_runs in [1, 2, 3, 100] {
            let mut chunks = RunChunks::with_chunk_runs(chunk_runs);
            let mut samples = WeightedSamples::new();
            for (i, &v) in values.iter().enumerate() {
                let count = (i % 3) as u64;
                chunks.push_n(v, count);
                samples.push_n(v, count);
            }
            let out = chunks.into_samples();
            assert_eq!(out, samples, "chunk of {chunk_runs}");
            assert_eq!(out.runs.capacity(), out.runs.len(), "exact length");
        }
    }

    fn from_values(values: &[u64]) -> WeightedSamples {
        let mut samples = WeightedSamples::new();
        for &v in values {
            samples.push(v);
        }
        samples
    }

    proptest::proptest! {
        #[test]
        fn sorting_in_place_keeps_the_samples(runs in proptest::collection::vec((0u64..50, 0u64..4), 0..400)) {
            let samples = WeightedSamples { runs };
            let mut in_place = samples.clone();
            in_place.sort();
            // Ascending distinct values, none empty, and the same statistics as a sorted copy.
            proptest::prop_assert!(in_place.runs.windows(2).all(|w| w[0].0 < w[1].0));
            proptest::prop_assert!(in_place.runs.iter().all(|&(_, count)| count > 0));
            proptest::prop_assert_eq!(in_place.sorted(), samples.sorted());
            proptest::prop_assert_eq!(in_place.len(), samples.len());
        }

        /// The checkpoints find every sample, across many of them, whether the runs were sorted
        /// already (read in place) or not (a sorted copy).
        #[test]
        fn nth_is_the_expanded_lists(runs in proptest::collection::vec((0u64..400, 0u64..5), 0..300)) {
            let mut flat: Vec<u64> = runs.iter().flat_map(|&(value, count)| std::iter::repeat_n(value, count as usize)).collect();
            flat.sort_unstable();
            let samples = WeightedSamples { runs };
            let mut in_place = samples.clone();
            in_place.sort();
            for sorted in [samples.sorted(), in_place.sorted()] {
                proptest::prop_assert_eq!(sorted.len(), flat.len() as u64);
                for (k, &value) in flat.iter().enumerate() {
                    proptest::prop_assert_eq!(sorted.nth(k as u64), value);
                }
                // Past the end: the last sample.
                proptest::prop_assert_eq!(sorted.nth(flat.len() as u64 + 3), flat.last().copied().unwrap_or(0));
            }
        }
    }

    fn assert_close(actual: f64, expected: f64) {
        assert!(
            (actual - expected).abs() <= 1e-9 * expected.abs().max(1.0),
            "{actual} != {expected}"
        );
    }

    #[test]
    fn percentile_matches_numpy_on_small_array() {
        // numpy.percentile([1, 2, 3, 4], [0, 25, 50, 90, 100]) = [1, 1.75, 2.5, 3.7, 4]
        let samples = from_values(&[3, 1, 4, 2]).into_sorted();
        assert_eq!(samples.percentile(0.0), 1.0);
        assert_eq!(samples.percentile(25.0), 1.75);
        assert_eq!(samples.percentile(50.0), 2.5);
        assert_close(samples.percentile(90.0), 3.7);
        assert_eq!(samples.percentile(100.0), 4.0);
        assert_eq!(samples.median(), 2.5);
    }

    #[test]
    fn percentile_matches_numpy_with_ties_and_odd_length() {
        // numpy.percentile([10, 20, 20, 20, 50], [10, 37.5, 99, 99.9]) = [14, 20, 48.8, 49.88]
        let samples = from_values(&[20, 50, 20, 10, 20]).into_sorted();
        assert_close(samples.percentile(10.0), 14.0);
        assert_eq!(samples.percentile(37.5), 20.0);
        assert_close(samples.percentile(99.0), 48.8);
        assert_close(samples.percentile(99.9), 49.88);
        assert_eq!(samples.median(), 20.0);
        assert_eq!(samples.nth(0), 10);
        assert_eq!(samples.nth(3), 20);
        assert_eq!(samples.nth(4), 50);
    }

    #[test]
    fn mean_and_population_std() {
        // numpy.std([2, 4, 4, 4, 5, 5, 7, 9]) = 2.0 (ddof=0; with ddof=1 it would be 2.138…).
        let samples = from_values(&[2, 4, 4, 4, 5, 5, 7, 9]);
        assert_eq!(samples.mean(), 5.0);
        assert_eq!(samples.std(), 2.0);
        let sorted = samples.sorted();
        assert_eq!(sorted.mean(), 5.0);
        assert_eq!(sorted.std(), 2.0);
    }

    #[test]
    fn push_extends_the_last_run_only_when_equal() {
        let samples = from_values(&[7, 7, 7, 3, 3, 7]);
        assert_eq!(samples.runs, vec![(7, 3), (3, 2), (7, 1)]);
        assert_eq!(samples.len(), 6);
        let mut more = WeightedSamples::new();
        more.push_n(7, 0);
        assert!(more.is_empty());
        more.push_n(7, 2);
        more.push(7);
        assert_eq!(more.runs, vec![(7, 3)]);
    }

    #[test]
    fn weighted_runs_equal_the_expanded_list() {
        let runs = vec![(50, 3), (10, 2), (90, 1), (50, 4), (10, 0), (30, 5)];
        let weighted = WeightedSamples { runs: runs.clone() };
        let mut expanded = WeightedSamples::new();
        let mut flat: Vec<u64> = Vec::new();
        for &(value, count) in &runs {
            for _ in 0..count {
                // Interleave so the expanded multiset has many short runs.
                expanded.runs.push((value, 1));
                flat.push(value);
            }
        }
        flat.sort_unstable();
        let weighted_sorted = weighted.sorted();
        let expanded_sorted = expanded.sorted();
        assert_eq!(weighted_sorted, expanded_sorted);
        assert_eq!(weighted_sorted.len(), flat.len() as u64);
        for (k, &value) in flat.iter().enumerate() {
            assert_eq!(weighted_sorted.nth(k as u64), value);
        }
        // numpy: a = [10]*2 + [30]*5 + [50]*7 + [90]; mean 40.666…, std 19.1369…,
        // percentile(a, [5, 50, 95]) = [10.0, 50.0, 62.0]
        assert_close(weighted.mean(), 610.0 / 15.0);
        assert_close(weighted.std(), expanded.std());
        assert_close(weighted.std(), 19.136933459209768);
        assert_close(weighted.percentile(5.0), 10.0);
        assert_eq!(weighted.percentile(50.0), 50.0);
        assert_close(weighted.percentile(95.0), 62.0);
    }

    #[test]
    fn empty_samples_give_zeros() {
        let samples = WeightedSamples::new();
        assert_eq!(samples.len(), 0);
        assert_eq!(samples.mean(), 0.0);
        assert_eq!(samples.std(), 0.0);
        assert_eq!(samples.percentile(99.0), 0.0);
        let sorted = samples.sorted();
        assert!(sorted.is_empty());
        assert_eq!(sorted.median(), 0.0);
        assert_eq!(sorted.nth(5), 0);
    }

    #[test]
    fn out_of_range_percentiles_clamp_instead_of_panicking() {
        let samples = from_values(&[1, 2, 3]).into_sorted();
        assert_eq!(samples.percentile(-5.0), 1.0);
        assert_eq!(samples.percentile(250.0), 3.0);
        assert!(samples.percentile(f64::NAN).is_nan());
    }

    #[test]
    fn append_pools_samples() {
        let mut a = from_values(&[1, 1, 2]);
        a.append(&from_values(&[2, 3]));
        assert_eq!(a.runs, vec![(1, 2), (2, 2), (3, 1)]);
    }

    #[test]
    fn token_buckets_are_sparse_and_peak() {
        let mut buckets = TokenBuckets::new();
        assert_eq!(buckets.peak(), 0);
        buckets.add(0, 2);
        buckets.add(999_999_999, 1);
        buckets.add(3_000_000_000, 5);
        buckets.add(7_000_000_000, 0);
        assert_eq!(buckets.counts, vec![(0, 3), (3, 5)]);
        assert_eq!(buckets.peak(), 5);
        // Out of order still lands in its second; a second 10⁹ s later costs one entry.
        buckets.add(1_500_000_000, 4);
        buckets.add(3_200_000_000, 1);
        buckets.add(1_000_000_000 * 1_000_000_000, 7);
        assert_eq!(buckets.counts, vec![(0, 3), (1, 4), (3, 6), (1_000_000_000, 7)]);
        assert_eq!((buckets.peak(), buckets.total()), (7, 20));
    }
}

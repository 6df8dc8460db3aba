//! Per-request records → benchmark summary, following vLLM `benchmark_serving.py`'s
//! `calculate_metrics` (see docs/design.md, "Metric definitions").
//!
//! Only successful requests contribute to token totals, latencies and the peak lines; failed
//! requests are only counted. Latencies are kept in ns while computing and stored in ms (f64),
//! the unit vLLM prints and saves.

use super::samples::{SortedSamples, WeightedSamples, numpy_median, numpy_percentile};
use super::{LatencyMetric, RequestRecord, RunRecords};

const NS_PER_MS: f64 = 1e6;
const NS_PER_S: u64 = 1_000_000_000;

/// Summary statistics of one latency metric, in milliseconds.
///
/// An empty sample gives 0 for everything, like vLLM's `np.mean(x or 0)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stat {
    pub mean_ms: f64,
    /// numpy `median` (mean of the two middle values for an even count).
    pub median_ms: f64,
    /// Population standard deviation (numpy `std`, ddof=0).
    pub std_ms: f64,
    /// `(p, value_ms)` for each requested percentile `p` in [0, 100], in request order.
    pub percentiles_ms: Vec<(f64, f64)>,
}

impl Stat {
    /// The value of percentile `p` if it was requested when the summary was built.
    pub fn percentile_ms(&self, p: f64) -> Option<f64> {
        self.percentiles_ms
            .iter()
            .find(|&&(q, _)| q == p)
            .map(|&(_, value_ms)| value_ms)
    }

    /// Statistics of pooled samples (ITL): sorts and merges the runs once for all percentiles.
    fn of_samples(samples: &WeightedSamples, percentiles: &[f64]) -> Stat {
        let sorted: SortedSamples = samples.sorted();
        Stat {
            mean_ms: sorted.mean() / NS_PER_MS,
            median_ms: sorted.median() / NS_PER_MS,
            std_ms: sorted.std() / NS_PER_MS,
            percentiles_ms: percentiles
                .iter()
                .map(|&p| (p, sorted.percentile(p) / NS_PER_MS))
                .collect(),
        }
    }

    /// Statistics of `n` values in ascending order, the `k`-th read by `nth(k)`, in ns.
    fn of_sorted(n: usize, nth: impl Fn(usize) -> f64, percentiles: &[f64]) -> Stat {
        debug_assert!((1..n).all(|k| nth(k - 1) <= nth(k)));
        let mean_ns = mean((0..n).map(&nth), n);
        let nth_u64 = |k: u64| nth(k as usize);
        Stat {
            mean_ms: mean_ns / NS_PER_MS,
            median_ms: numpy_median(n as u64, nth_u64) / NS_PER_MS,
            std_ms: population_std((0..n).map(&nth), n, mean_ns) / NS_PER_MS,
            percentiles_ms: percentiles.iter().map(|&p| (p, numpy_percentile(n as u64, p, nth_u64) / NS_PER_MS)).collect(),
        }
    }
}

/// The per-request lists (TTFT, TPOT, E2EL) are sorted one after another in the same two
/// buffers: each fresh one is memory the kernel zeroes first, a fifth of a 1M-request summary
/// (issue 14). Each list is kept as 64-bit keys that sort as its values do.
struct RequestLists {
    keys: Vec<u64>,
    scratch: Vec<u64>,
}

impl RequestLists {
    /// Room for lists of up to `requests` values, so that none grows by copying.
    fn for_requests(requests: usize) -> RequestLists {
        RequestLists { keys: Vec::with_capacity(requests), scratch: Vec::with_capacity(requests) }
    }

    /// Statistics of whole nanoseconds, one per request: sorted as integers, whose keys have
    /// fewer significant bits (fewer radix passes) than their floats', in the same order (u64 →
    /// f64 never reverses an order).
    fn of_whole_ns(&mut self, values_ns: impl Iterator<Item = u64>, percentiles: &[f64]) -> Stat {
        self.sort(values_ns);
        Stat::of_sorted(self.keys.len(), |k| self.keys[k] as f64, percentiles)
    }

    /// Statistics of non-negative floats, in ns (TPOT is not a whole number of ns): their IEEE
    /// bits order as the numbers do.
    fn of_floats(&mut self, values_ns: impl Iterator<Item = f64>, percentiles: &[f64]) -> Stat {
        self.sort(values_ns.map(|v| {
            debug_assert!(v.is_sign_positive() && !v.is_nan(), "negative or NaN");
            v.to_bits()
        }));
        Stat::of_sorted(self.keys.len(), |k| f64::from_bits(self.keys[k]), percentiles)
    }

    fn sort(&mut self, keys: impl Iterator<Item = u64>) {
        self.keys.clear();
        self.keys.extend(keys);
        super::radix::sort_by_key_u64_with(&mut self.keys, &mut self.scratch, |&k| k);
    }
}

/// vLLM's benchmark summary of one run (`BenchmarkMetrics` plus the duration).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Successful requests.
    pub completed: u64,
    /// Unsuccessful requests.
    pub failed: u64,
    /// Benchmark duration in seconds: last completion − benchmark start.
    pub duration_s: f64,
    /// Prompt tokens of successful requests.
    pub total_input_tokens: u64,
    /// Generated tokens of successful requests.
    pub total_output_tokens: u64,
    /// Successful requests per second of duration.
    pub request_throughput: f64,
    /// Generated tokens per second of duration.
    pub output_throughput: f64,
    /// Prompt plus generated tokens per second of duration.
    pub total_token_throughput: f64,
    /// Most output tokens in any 1-second bucket (tok/s).
    pub max_output_tokens_per_s: f64,
    /// Most successful requests active in any 1-second bucket.
    pub max_concurrent_requests: u64,
    /// Time to first token: first token − send, per successful request.
    pub ttft: Stat,
    /// Time per output token after the first: (E2EL − TTFT)/(output tokens − 1), per successful
    /// request with more than one output token.
    pub tpot: Stat,
    /// Inter-token latency: every gap between consecutive tokens, pooled.
    pub itl: Stat,
    /// End-to-end latency: end − send, per successful request.
    pub e2el: Stat,
}

impl Summary {
    /// Summarises one run like vLLM's `calculate_metrics`, with numpy-linear `percentiles`
    /// (each in [0, 100]) computed for every latency metric.
    ///
    /// Never panics: empty records give zeros, a zero duration gives zero throughputs (where
    /// Python would raise), and inconsistent times saturate at 0 instead of underflowing.
    pub fn from_records(records: &RunRecords, percentiles: &[f64]) -> Summary {
        let successful = || records.requests.iter().filter(|r| r.success);
        let totals = Totals::of(&records.requests);
        let completed = totals.completed;
        let failed = records.requests.len() as u64 - completed;
        let (total_input_tokens, total_output_tokens) = (totals.input_tokens, totals.output_tokens);
        let per_second = |amount: u64| per_second(amount, records.duration_ns);
        // The ITL samples are read where they are (sorted by the simulator; a sorted copy
        // otherwise, gone before the lists' buffers are made).
        let itl = Stat::of_samples(&records.itl_ns, percentiles);
        let mut lists = RequestLists::for_requests(completed as usize);

        Summary {
            completed,
            failed,
            duration_s: records.duration_ns as f64 / NS_PER_S as f64,
            total_input_tokens,
            total_output_tokens,
            request_throughput: per_second(completed),
            output_throughput: per_second(total_output_tokens),
            total_token_throughput: per_second(total_input_tokens + total_output_tokens),
            max_output_tokens_per_s: records.tokens_per_second.peak() as f64,
            max_concurrent_requests: peak_concurrent_requests(&records.requests, &totals),
            ttft: lists.of_whole_ns(successful().map(RequestRecord::ttft_ns), percentiles),
            tpot: lists.of_floats(successful().filter_map(RequestRecord::tpot_ns), percentiles),
            itl,
            e2el: lists.of_whole_ns(successful().map(RequestRecord::e2el_ns), percentiles),
        }
    }

    /// The statistics of one latency metric.
    pub fn stat(&self, metric: LatencyMetric) -> &Stat {
        match metric {
            LatencyMetric::Ttft => &self.ttft,
            LatencyMetric::Tpot => &self.tpot,
            LatencyMetric::Itl => &self.itl,
            LatencyMetric::E2el => &self.e2el,
        }
    }
}

/// `amount / duration` in units per second; 0 for a zero duration (no run, nothing to rate).
fn per_second(amount: u64, duration_ns: u64) -> f64 {
    if duration_ns == 0 {
        return 0.0;
    }
    amount as f64 / (duration_ns as f64 / NS_PER_S as f64)
}

/// What one pass over the records gives: the successful requests' count, token totals and
/// time span. A 100k-request summary read the records once for each of these (issue 14).
struct Totals {
    completed: u64,
    input_tokens: u64,
    output_tokens: u64,
    /// The earliest send and the latest end (or send, if later) of a successful request.
    span_ns: Option<(u64, u64)>,
}

impl Totals {
    fn of(requests: &[RequestRecord]) -> Totals {
        let mut totals = Totals { completed: 0, input_tokens: 0, output_tokens: 0, span_ns: None };
        for r in requests.iter().filter(|r| r.success) {
            totals.completed += 1;
            totals.input_tokens += u64::from(r.input_tokens);
            totals.output_tokens += u64::from(r.output_tokens);
            let end_ns = span_end_ns(r);
            totals.span_ns = Some(match totals.span_ns {
                None => (r.send_ns, end_ns),
                Some((first_ns, last_ns)) => (first_ns.min(r.send_ns), last_ns.max(end_ns)),
            });
        }
        totals
    }
}

/// Where a request's span ends for the peak concurrency: its end, or its send if inconsistent
/// times put the end first.
fn span_end_ns(r: &RequestRecord) -> u64 {
    r.end_ns.max(r.send_ns)
}

/// vLLM's peak concurrency: for every 1-second bucket since the earliest send of a successful
/// request, the number of successful requests whose `[floor(send_s), floor(end_s)]` covers it
/// (both ends inclusive, so a request counts in the second it ends); the maximum over buckets.
///
/// vLLM loops over every second of every request. Counting where spans begin and end, per
/// second, gives the same counts in O(requests + seconds); a run far longer in seconds than it
/// has requests (a tiny rate spans 10⁹ of them) sweeps over the spans' ends, sorted, instead.
fn peak_concurrent_requests(requests: &[RequestRecord], totals: &Totals) -> u64 {
    let Some((origin_ns, last_ns)) = totals.span_ns else {
        return 0;
    };
    let second = |time_ns: u64| (time_ns - origin_ns) / NS_PER_S;
    // Each request's first and last second.
    let spans = || requests.iter().filter(|r| r.success).map(|r| (second(r.send_ns), second(span_end_ns(r))));
    // The latest second of any span: `second` never decreases.
    let last_second = second(last_ns);
    if last_second < totals.completed.saturating_add(SECONDS_COUNTED_MIN) {
        peak_by_second(spans(), last_second)
    } else {
        peak_by_sorted_changes(spans())
    }
}

/// The peak over `[first, last]` second spans by a count per second, up to `last_second`: no
/// sort, and 8 bytes a second.
fn peak_by_second(spans: impl Iterator<Item = (u64, u64)>, last_second: u64) -> u64 {
    let mut change_at = vec![0i64; last_second as usize + 2];
    for (first, last) in spans {
        change_at[first as usize] += 1;
        change_at[last as usize + 1] -= 1;
    }
    let mut active = 0i64;
    let active_at = change_at.iter().map(|&change| {
        active += change;
        active
    });
    active_at.max().unwrap_or(0) as u64
}

/// The peak over `[first, last]` second spans by a sweep over their ends, sorted: for runs far
/// longer in seconds than they have requests.
fn peak_by_sorted_changes(spans: impl Iterator<Item = (u64, u64)>) -> u64 {
    // (second, change): +1 where a request's first second begins, −1 after its last one. At one
    // second the −1s sort first: a request that ended in the second before is gone.
    // Encoded as `second · 2 + (1 for a start)`, so one integer sort puts them in that order.
    let mut changes: Vec<u64> = spans.flat_map(|(first, last)| [first * 2 + 1, (last + 1) * 2]).collect();
    super::radix::sort_by_key_u64(&mut changes, |&c| c);
    let mut active = 0i64;
    let mut peak = 0i64;
    for change in changes {
        active += if change & 1 == 1 { 1 } else { -1 };
        peak = peak.max(active);
    }
    peak as u64
}

/// Runs up to this many seconds long count concurrency per second whatever their number of
/// requests (32 KiB); longer ones only while they have more requests than seconds.
const SECONDS_COUNTED_MIN: u64 = 4096;

/// The mean of `n` values, summed in the order given.
fn mean(values: impl Iterator<Item = f64>, n: usize) -> f64 {
    if n == 0 {
        0.0
    } else {
        values.sum::<f64>() / n as f64
    }
}

/// Population (ddof=0) standard deviation of `n` values around `mean`; 0 when empty.
fn population_std(values: impl Iterator<Item = f64>, n: usize, mean: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let squares: f64 = values.map(|v| (v - mean) * (v - mean)).sum();
    (squares / n as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::TokenBuckets;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn request(send_ns: u64, first_ns: u64, end_ns: u64, output_tokens: u32) -> RequestRecord {
        RequestRecord {
            send_ns,
            first_token_ns: Some(first_ns),
            end_ns,
            input_tokens: 100,
            output_tokens,
            success: true,
        }
    }

    fn failed(send_ns: u64, end_ns: u64) -> RequestRecord {
        RequestRecord {
            send_ns,
            first_token_ns: None,
            end_ns,
            input_tokens: 7,
            output_tokens: 3,
            success: false,
        }
    }

    fn records(requests: Vec<RequestRecord>, duration_ns: u64) -> RunRecords {
        RunRecords {
            requests,
            duration_ns,
            ..RunRecords::default()
        }
    }

    #[test]
    fn totals_and_throughputs_count_only_successful_requests() {
        let run = records(
            vec![
                request(0, 10 * MS, 100 * MS, 10),
                failed(0, 5 * MS),
                request(0, 20 * MS, 200 * MS, 30),
            ],
            2 * S,
        );
        let summary = Summary::from_records(&run, &[99.0]);
        assert_eq!(summary.completed, 2);
        assert_eq!(summary.failed, 1);
        assert_eq!(summary.total_input_tokens, 200);
        assert_eq!(summary.total_output_tokens, 40);
        assert_eq!(summary.duration_s, 2.0);
        assert_eq!(summary.request_throughput, 1.0);
        assert_eq!(summary.output_throughput, 20.0);
        assert_eq!(summary.total_token_throughput, 120.0);
    }

    #[test]
    fn latencies_follow_vllm_definitions() {
        // TTFTs 10 and 30 ms; E2ELs 100 and 330 ms; TPOTs (100−10)/9 = 10 and (330−30)/3 = 100 ms.
        let run = records(
            vec![
                request(0, 10 * MS, 100 * MS, 10),
                request(S, S + 30 * MS, S + 330 * MS, 4),
            ],
            2 * S,
        );
        let summary = Summary::from_records(&run, &[50.0, 100.0]);
        assert_eq!(summary.ttft.mean_ms, 20.0);
        assert_eq!(summary.ttft.median_ms, 20.0);
        assert_eq!(summary.ttft.std_ms, 10.0);
        assert_eq!(
            summary.ttft.percentiles_ms,
            vec![(50.0, 20.0), (100.0, 30.0)]
        );
        assert_eq!(summary.e2el.mean_ms, 215.0);
        assert_eq!(summary.tpot.mean_ms, 55.0);
        assert_eq!(summary.tpot.percentile_ms(100.0), Some(100.0));
        assert_eq!(summary.tpot.percentile_ms(99.0), None);
    }

    #[test]
    fn tpot_excludes_single_token_requests() {
        let run = records(
            vec![
                request(0, 50 * MS, 50 * MS, 1),
                request(0, 10 * MS, 30 * MS, 3), // TPOT 10 ms
                request(0, 10 * MS, 10 * MS, 0),
            ],
            S,
        );
        let summary = Summary::from_records(&run, &[99.0]);
        assert_eq!(summary.tpot.mean_ms, 10.0);
        assert_eq!(summary.tpot.std_ms, 0.0);
        assert_eq!(summary.tpot.percentiles_ms, vec![(99.0, 10.0)]);
        // …but TTFT still counts every successful request.
        assert_eq!(summary.ttft.mean_ms, (50.0 + 10.0 + 10.0) / 3.0);
    }

    #[test]
    fn itl_pools_samples() {
        let mut run = records(vec![request(0, MS, 10 * MS, 4)], S);
        run.itl_ns = WeightedSamples {
            runs: vec![(2 * MS, 2), (5 * MS, 1), (2 * MS, 1)],
        };
        let summary = Summary::from_records(&run, &[50.0, 90.0]);
        assert_eq!(summary.itl.mean_ms, 2.75);
        assert_eq!(summary.itl.median_ms, 2.0);
        // numpy.percentile([2, 2, 2, 5], 90) = 4.1
        assert!((summary.itl.percentile_ms(90.0).unwrap() - 4.1).abs() < 1e-9);
    }

    #[test]
    fn empty_records_give_zeros_without_panicking() {
        let summary = Summary::from_records(&RunRecords::default(), &[50.0, 99.0]);
        let zero_stat = Stat {
            percentiles_ms: vec![(50.0, 0.0), (99.0, 0.0)],
            ..Stat::default()
        };
        assert_eq!(
            summary,
            Summary {
                ttft: zero_stat.clone(),
                tpot: zero_stat.clone(),
                itl: zero_stat.clone(),
                e2el: zero_stat,
                ..Summary::default()
            }
        );
        // Only failures: counted, but nothing else.
        let only_failed = Summary::from_records(&records(vec![failed(0, S)], S), &[]);
        assert_eq!((only_failed.completed, only_failed.failed), (0, 1));
        assert_eq!(only_failed.max_concurrent_requests, 0);
        assert_eq!(only_failed.ttft, Stat::default());
    }

    #[test]
    fn peak_output_tokens_is_the_largest_bucket() {
        let mut run = records(vec![request(0, MS, 2 * S, 5)], 3 * S);
        run.tokens_per_second = TokenBuckets {
            counts: vec![(0, 1), (1, 3), (2, 1)],
        };
        assert_eq!(
            Summary::from_records(&run, &[]).max_output_tokens_per_s,
            3.0
        );
    }

    #[test]
    fn peak_concurrency_on_a_hand_example() {
        // Origin = earliest successful send = 0.5 s, so seconds are floor((t − 0.5 s) / 1 s):
        //   A: send 0.5 → s0, end 1.4 → s0      covers {0}
        //   B: send 0.6 → s0, end 2.5 → s2      covers {0, 1, 2}
        //   C: send 1.5 → s1, end 1.6 → s1      covers {1}
        //   D: send 2.4 → s1, end 4.0 → s3      covers {1, 2, 3}
        //   failed request spanning everything: ignored.
        // Counts per second: [2, 3, 2, 1] → peak 3.
        let at = |tenths: u64| tenths * S / 10;
        let run = records(
            vec![
                request(at(5), at(6), at(14), 2),
                request(at(6), at(7), at(25), 2),
                request(at(15), at(15), at(16), 2),
                request(at(24), at(30), at(40), 2),
                failed(0, at(50)),
            ],
            4 * S,
        );
        assert_eq!(Summary::from_records(&run, &[]).max_concurrent_requests, 3);
    }

    #[test]
    fn peak_concurrency_matches_vllm_loop_over_seconds() {
        // Pseudo-random spans (an LCG keeps the test dependency-free and deterministic).
        let mut state = 12345u64;
        let mut next = |bound: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % bound
        };
        let requests: Vec<RequestRecord> = (0..300)
            .map(|_| {
                let send_ns = 3 * S + next(40 * S);
                let end_ns = send_ns + next(5 * S);
                RequestRecord {
                    success: next(10) > 0,
                    ..request(send_ns, send_ns, end_ns, 2)
                }
            })
            .collect();
        // vLLM's O(requests × seconds) loop, transcribed.
        let successful: Vec<&RequestRecord> = requests.iter().filter(|r| r.success).collect();
        let origin_ns = successful.iter().map(|r| r.send_ns).min().unwrap();
        let mut per_second = vec![0u64; 64];
        for r in &successful {
            let start_s = (r.send_ns - origin_ns) / S;
            let end_s = (r.end_ns - origin_ns) / S;
            for s in start_s..=end_s {
                per_second[s as usize] += 1;
            }
        }
        let expected = per_second.into_iter().max().unwrap();
        assert!(expected > 1);
        assert_eq!(peak_concurrent_requests(&requests, &Totals::of(&requests)), expected);
        // Both ways of counting, whichever the run's length picks.
        let spans = || successful.iter().map(|r| ((r.send_ns - origin_ns) / S, (r.end_ns - origin_ns) / S));
        let last_second = spans().map(|(_, last)| last).max().unwrap();
        assert_eq!(peak_by_second(spans(), last_second), expected);
        assert_eq!(peak_by_sorted_changes(spans()), expected);
    }

    #[test]
    fn inconsistent_times_saturate_instead_of_panicking() {
        let odd = RequestRecord {
            first_token_ns: Some(0),
            end_ns: 0,
            ..request(5 * S, 0, 0, 3)
        };
        let summary = Summary::from_records(&records(vec![odd], 0), &[99.0]);
        assert_eq!(summary.ttft.mean_ms, 0.0);
        assert_eq!(summary.tpot.mean_ms, 0.0);
        assert_eq!(summary.request_throughput, 0.0);
        assert_eq!(summary.max_concurrent_requests, 1);
    }
}

//! Arrival process: when the client wants to send each request, in nanoseconds since the
//! benchmark started.
//!
//! Follows vLLM's `benchmark_serving.py` `get_request`: the first request goes at t = 0, and after
//! each request the client sleeps for a gap drawn from Gamma(shape = burstiness,
//! scale = 1 / (request_rate × burstiness)) seconds, whose mean is 1 / request_rate whatever the
//! burstiness and whose squared coefficient of variation is 1 / burstiness (burstiness 1 gives
//! exponential gaps, i.e. Poisson arrivals; below 1 is burstier, above 1 more regular).
//! `request_rate = inf` sends everything at t = 0. A trace dataset brings its own arrival times.
//!
//! ```text
//!   t=0        gap₁         gap₂     gap₃
//!    │◄──────────────────►│◄──────►│◄─►│ ...      gapᵢ ~ Gamma(b, 1/(rate·b)) s
//!  req 0                req 1    req 2 req 3
//! ```
//!
//! These are *intended* send times; the simulated client's `max_concurrency` gate may delay a send.

use rand_distr::{Distribution, Gamma};

use super::rng::{Stream, stream};
use crate::scenario::trace;
use crate::scenario::{Dataset, WorkloadConfig};

/// Intended send time of each of the first `num_prompts` requests, nanoseconds since the benchmark
/// started; non-decreasing.
///
/// Deterministic in (`rate`, `cfg.burstiness`, `cfg.seed`, `num_prompts`), or in the
/// trace rows for a trace dataset. Request `i` always takes the `i`-th gap of the
/// [`Stream::Arrivals`] stream, so the first `n` arrivals of a larger sweep point are the
/// arrivals of a sweep point with `n` prompts.
///
/// # Panics
///
/// On parameters scenario validation must reject first: a request rate that is not positive (or
/// `inf`), a burstiness that is not positive and finite, or a trace with fewer than `num_prompts`
/// rows.
pub fn arrival_times_ns(cfg: &WorkloadConfig, rate: f64, num_prompts: u32) -> Vec<u64> {
    let n = num_prompts as usize;
    if let Dataset::Trace { rows, .. } = &cfg.dataset {
        // Offsets are kept as recorded: a trace starting at 5 s sends its first request at 5 s,
        // so a trace cut from the middle of a longer recording keeps its idle lead-in.
        return trace::first_rows(rows, n)
            .iter()
            .map(|row| seconds_to_ns(row.arrival_s))
            .collect();
    }

    if rate == f64::INFINITY {
        return vec![0; n];
    }
    assert!(
        rate > 0.0 && rate.is_finite(),
        "request_rate must be > 0 or inf, got {rate} (scenario validation should reject it)"
    );
    let burstiness = cfg.burstiness;
    assert!(
        burstiness > 0.0 && burstiness.is_finite(),
        "burstiness must be > 0 and finite, got {burstiness} (scenario validation should reject it)"
    );
    // vLLM: theta = 1.0 / (request_rate * burstiness); np.random.gamma(shape=burstiness, scale=theta).
    let scale_s = 1.0 / (rate * burstiness);
    let gap_s = Gamma::new(burstiness, scale_s).expect("shape and scale checked positive");

    let mut rng = stream(cfg.seed, Stream::Arrivals);
    let mut arrivals_ns = Vec::with_capacity(n);
    // The clock is accumulated in f64 seconds and each cumulative time rounded once; summing
    // rounded gaps instead would drift by up to 0.5 ns per request.
    let mut time_s = 0.0_f64;
    for i in 0..n {
        if i > 0 {
            time_s += gap_s.sample(&mut rng);
        }
        arrivals_ns.push(seconds_to_ns(time_s));
    }
    arrivals_ns
}

/// Seconds to the nearest nanosecond; saturates at `u64::MAX` (about 585 years).
#[inline]
fn seconds_to_ns(time_s: f64) -> u64 {
    debug_assert!(time_s >= 0.0, "negative time {time_s} s");
    crate::rounding::round_to_u64(time_s * 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{LengthDist, TraceRow};
    use std::path::PathBuf;

    fn config(request_rate: f64, burstiness: f64, seed: u64) -> WorkloadConfig {
        WorkloadConfig {
            num_prompts: vec![100],
            request_rate: vec![request_rate],
            burstiness,
            max_concurrency: None,
            dataset: Dataset::Fixed {
                input_len: 10,
                output_len: 10,
            },
            seed,
            input_tokens_total: None,
            output_tokens_total: None,
            system_prompts: None,
            sessions: None,
        }
    }

    /// Mean and squared coefficient of variation of the gaps, in seconds.
    fn gap_stats(arrivals_ns: &[u64]) -> (f64, f64) {
        let gaps: Vec<f64> = arrivals_ns
            .windows(2)
            .map(|w| (w[1] - w[0]) as f64 * 1e-9)
            .collect();
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var / (mean * mean))
    }

    #[test]
    fn first_request_at_zero_and_times_never_decrease() {
        let arrivals = arrival_times_ns(&config(10.0, 1.0, 1), 10.0, 1000);
        assert_eq!(arrivals.len(), 1000);
        assert_eq!(arrivals[0], 0);
        assert!(arrivals.is_sorted());
        assert!(arrival_times_ns(&config(10.0, 1.0, 1), 10.0, 0).is_empty());
    }

    #[test]
    fn infinite_rate_sends_everything_at_zero() {
        assert_eq!(
            arrival_times_ns(&config(f64::INFINITY, 1.0, 1), f64::INFINITY, 50),
            vec![0; 50]
        );
    }

    #[test]
    fn mean_gap_is_one_over_rate_and_cv2_is_one_over_burstiness() {
        let n = 200_000;
        for burstiness in [0.25, 0.5, 1.0, 2.0, 4.0] {
            let arrivals = arrival_times_ns(&config(8.0, burstiness, 11), 8.0, n);
            let (mean_s, cv2) = gap_stats(&arrivals);
            let want_mean_s = 1.0 / 8.0;
            assert!(
                (mean_s - want_mean_s).abs() < 0.02 * want_mean_s,
                "b={burstiness}: mean gap {mean_s} s"
            );
            let want_cv2 = 1.0 / burstiness;
            assert!(
                (cv2 - want_cv2).abs() < 0.04 * want_cv2,
                "b={burstiness}: CV² {cv2}, want {want_cv2}"
            );
        }
    }

    #[test]
    fn deterministic_in_the_seed() {
        let a = arrival_times_ns(&config(5.0, 1.0, 42), 5.0, 1000);
        assert_eq!(a, arrival_times_ns(&config(5.0, 1.0, 42), 5.0, 1000));
        assert_ne!(a, arrival_times_ns(&config(5.0, 1.0, 43), 5.0, 1000));
    }

    #[test]
    fn a_smaller_sweep_point_is_a_prefix_of_a_larger_one() {
        let small = arrival_times_ns(&config(5.0, 0.7, 3), 5.0, 100);
        let large = arrival_times_ns(&config(5.0, 0.7, 3), 5.0, 1000);
        assert_eq!(small[..], large[..100]);
    }

    #[test]
    fn arrivals_do_not_depend_on_the_dataset() {
        let mut other = config(5.0, 1.0, 42);
        other.dataset = Dataset::ShareGpt {
            input: LengthDist::Uniform { min: 1, max: 9 },
            output: LengthDist::Normal {
                mean: 50.0,
                std: 5.0,
                min: 1,
                max: 100,
            },
        };
        assert_eq!(
            arrival_times_ns(&config(5.0, 1.0, 42), 5.0, 500),
            arrival_times_ns(&other, 5.0, 500)
        );
    }

    #[test]
    fn trace_arrivals_are_taken_as_recorded() {
        let row = |arrival_s| TraceRow {
            arrival_s,
            input_tokens: 1,
            output_tokens: 1,
                    ..TraceRow::default()
        };
        let mut cfg = config(f64::INFINITY, 1.0, 0);
        cfg.dataset = Dataset::Trace {
            path: PathBuf::from("t.csv"),
            rows: vec![
                row(5.0),
                row(5.0000000004),
                row(5.0000000006),
                row(7.25),
                row(9.0),
            ],
        };
        assert_eq!(
            arrival_times_ns(&cfg, f64::INFINITY, 4),
            vec![5_000_000_000, 5_000_000_000, 5_000_000_001, 7_250_000_000]
        );
    }

    #[test]
    #[should_panic(expected = "exceeds the trace")]
    fn too_few_trace_rows_is_a_bug_upstream() {
        let mut cfg = config(1.0, 1.0, 0);
        cfg.dataset = Dataset::Trace {
            path: PathBuf::from("t.csv"),
            rows: vec![TraceRow {
                arrival_s: 0.0,
                input_tokens: 1,
                output_tokens: 1,
                    ..TraceRow::default()
            }],
        };
        arrival_times_ns(&cfg, 1.0, 2);
    }
}

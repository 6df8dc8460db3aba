//! Datasets: the input (prompt) and output (generation) length of every request, in tokens.
//!
//! Input lengths are drawn from the [`Stream::InputLengths`] stream and output lengths from
//! [`Stream::OutputLengths`], so changing how one side is drawn never changes the other (nor the
//! arrival times, which have their own stream). Request `i` always takes the `i`-th draw of each
//! stream, so the first `n` requests of a larger sweep point are the `n` requests of a smaller one.

use rand::Rng;
use rand::distr::Uniform;
use rand_distr::{Distribution, LogNormal, Normal};

use super::rng::{Stream, stream};
use crate::scenario::trace;
use crate::scenario::{Dataset, LengthDist};

/// `(input_tokens, output_tokens)` for each of the first `num_prompts` requests of `dataset`.
///
/// Deterministic in (`dataset`, `num_prompts`, `seed`). Every length is at least 1.
///
/// # Panics
///
/// On parameters that scenario validation must reject first: see [`LengthSampler::new`],
/// a `Random` dataset whose `range_ratio` is not in `[0, 1)`, or a trace with fewer than
/// `num_prompts` rows.
pub fn sample_lengths(dataset: &Dataset, num_prompts: u32, seed: u64) -> Vec<(u32, u32)> {
    let n = num_prompts as usize;
    let mut lengths = Vec::with_capacity(n);
    let mut input_rng = stream(seed, Stream::InputLengths);
    let mut output_rng = stream(seed, Stream::OutputLengths);
    match dataset {
        &Dataset::Fixed {
            input_len,
            output_len,
        } => {
            lengths.resize(n, (input_len.max(1), output_len.max(1)));
        }
        &Dataset::Random {
            input_len,
            output_len,
            range_ratio,
            prefix_len,
        } => {
            let (input, output) =
                random_dataset_ranges(input_len, output_len, range_ratio, prefix_len);
            for _ in 0..n {
                let input_tokens = prefix_len.saturating_add(input.sample(&mut input_rng));
                lengths.push((input_tokens, output.sample(&mut output_rng)));
            }
        }
        Dataset::Sonnet {
            input_len,
            prefix_len: _,
            output,
        } => {
            // The prefix is part of `input_len` (shared prompt text), so the length is fixed.
            let input_tokens = (*input_len).max(1);
            let output = LengthSampler::new(output);
            for _ in 0..n {
                lengths.push((input_tokens, output.sample(&mut output_rng)));
            }
        }
        Dataset::ShareGpt { input, output } => {
            let input = LengthSampler::new(input);
            let output = LengthSampler::new(output);
            for _ in 0..n {
                lengths.push((input.sample(&mut input_rng), output.sample(&mut output_rng)));
            }
        }
        Dataset::Trace { rows, .. } => {
            let rows = trace::first_rows(rows, n);
            lengths.extend(
                rows.iter()
                    .map(|r| (r.input_tokens.max(1), r.output_tokens.max(1))),
            );
        }
    }
    debug_assert_eq!(lengths.len(), n);
    debug_assert!(lengths.iter().all(|&(i, o)| i >= 1 && o >= 1));
    lengths
}

/// The uniform ranges of vLLM's random dataset (vLLM ≥ 0.9 semantics): for a length `L` and
/// ratio `r`, uniform integers in `[floor(L × (1 − r)), ceil(L × (1 + r))]`, both ends included.
///
/// Returns the (input-without-prefix, output) samplers. The output's lower end is raised to 1 as
/// vLLM does; the input's too when there is no prefix, so that no prompt is empty.
fn random_dataset_ranges(
    input_len: u32,
    output_len: u32,
    range_ratio: f64,
    prefix_len: u32,
) -> (Uniform<u32>, Uniform<u32>) {
    assert!(
        (0.0..1.0).contains(&range_ratio),
        "random dataset range_ratio must be in [0, 1), got {range_ratio} (scenario validation should reject it)"
    );
    // Same expressions, in the same f64 arithmetic, as vLLM's `RandomDataset.sample`, so the bounds
    // agree exactly (e.g. 1024 × 0.9 = 921.6 → 921). Float → int casts saturate.
    let range = |len: u32, min: u32| {
        let low = ((len as f64 * (1.0 - range_ratio)).floor() as u32).max(min);
        let high = ((len as f64 * (1.0 + range_ratio)).ceil() as u32).max(low);
        Uniform::new_inclusive(low, high).expect("low <= high by construction")
    };
    let input_min = if prefix_len == 0 { 1 } else { 0 };
    (range(input_len, input_min), range(output_len, 1))
}

/// A [`LengthDist`] prepared for repeated sampling (parameters converted once, not per draw).
#[derive(Clone, Copy, Debug)]
pub struct LengthSampler {
    kind: SamplerKind,
    /// Smallest value returned: the distribution's `min`, but at least 1.
    low: u32,
    /// Largest value returned: the distribution's `max`, but at least `low`.
    high: u32,
}

#[derive(Clone, Copy, Debug)]
enum SamplerKind {
    Fixed,
    Uniform(Uniform<u32>),
    Normal(Normal<f64>),
    LogNormal(LogNormal<f64>),
}

impl LengthSampler {
    /// Prepares `dist` for sampling.
    ///
    /// # Panics
    ///
    /// On parameters scenario validation must reject first: a non-finite mean or standard
    /// deviation, a negative standard deviation, or a log-normal mean that is not positive.
    pub fn new(dist: &LengthDist) -> LengthSampler {
        // Clamp bounds, made consistent so that clamping can never panic or return 0.
        let bounds = |min: u32, max: u32| {
            let low = min.max(1);
            (low, max.max(low))
        };
        let check = |mean: f64, std: f64| {
            assert!(
                mean.is_finite() && std.is_finite() && std >= 0.0,
                "length distribution needs a finite mean and a finite std >= 0, got mean {mean}, std {std} \
                 (scenario validation should reject it)"
            );
        };
        let (kind, (low, high)) = match *dist {
            LengthDist::Fixed { value } => (SamplerKind::Fixed, bounds(value, value)),
            LengthDist::Uniform { min, max } => {
                let (low, high) = bounds(min, max);
                let uniform =
                    Uniform::new_inclusive(low, high).expect("low <= high by construction");
                (SamplerKind::Uniform(uniform), (low, high))
            }
            LengthDist::Normal {
                mean,
                std,
                min,
                max,
            } => {
                check(mean, std);
                let normal = Normal::new(mean, std).expect("std is finite");
                (SamplerKind::Normal(normal), bounds(min, max))
            }
            LengthDist::LogNormal {
                mean,
                std,
                min,
                max,
            } => {
                check(mean, std);
                assert!(mean > 0.0, "log-normal length mean must be > 0, got {mean}");
                // Choose the underlying normal's (μ, σ) so that the log-normal itself has the given
                // mean m and std s: E = exp(μ + σ²/2) = m and Var = m²(exp(σ²) − 1) = s².
                // std² / mean² overflows to inf / inf = NaN at mean = std = 1e300, where the
                // scenario's check (through std / mean, ratio 1) passed: then the ratio form. The
                // direct form stays where it is finite, so every other run samples the same bits.
                let direct = (1.0 + (std * std) / (mean * mean)).ln();
                let sigma_sq = if direct.is_finite() { direct } else { (1.0 + (std / mean).powi(2)).ln() };
                let mu = mean.ln() - sigma_sq / 2.0;
                let log_normal = LogNormal::new(mu, sigma_sq.sqrt()).expect("sigma is finite");
                (SamplerKind::LogNormal(log_normal), bounds(min, max))
            }
        };
        LengthSampler { kind, low, high }
    }

    /// One length, in tokens, within `[max(min, 1), max]`.
    /// Inlined into the draw loops: as a call, its set-up was a third of a log-normal draw's
    /// instructions (issue 33).
    #[inline(always)]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u32 {
        match self.kind {
            SamplerKind::Fixed => self.low,
            SamplerKind::Uniform(uniform) => uniform.sample(rng),
            SamplerKind::Normal(normal) => self.round_and_clamp(normal.sample(rng)),
            SamplerKind::LogNormal(log_normal) => self.round_and_clamp(log_normal.sample(rng)),
        }
    }

    #[inline(always)]
    fn round_and_clamp(&self, x: f64) -> u32 {
        // Rounding saturates a negative or NaN draw to 0, and one past 2⁶³ to i64::MAX, which the
        // bounds then clamp, as they clamp `x.round()`. Clamped as integers: the bounds are exact
        // in f64 and u64 → f64 keeps the order, so this is the value a clamp of floats gave,
        // without float max/min and saturating casts (two per request, issue 14).
        crate::rounding::round_to_i64_range(x).clamp(u64::from(self.low), u64::from(self.high)) as u32
    }
}

/// One length, in tokens, from `dist`: rounded, clamped to `[min, max]`, at least 1.
///
/// Converts the parameters on every call; to draw many, build a [`LengthSampler`] once.
pub fn sample<R: Rng + ?Sized>(dist: &LengthDist, rng: &mut R) -> u32 {
    LengthSampler::new(dist).sample(rng)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::TraceRow;
    use std::path::PathBuf;

    const N: usize = 100_000;

    fn draws(dist: &LengthDist, n: usize) -> Vec<u32> {
        let sampler = LengthSampler::new(dist);
        let mut rng = stream(1, Stream::OutputLengths);
        (0..n).map(|_| sampler.sample(&mut rng)).collect()
    }

    /// Mean and std so large their squares overflow: the sampler is built from their ratio and
    /// every draw lands in the bounds (this panicked once: σ² = ln(1 + inf / inf) is NaN).
    #[test]
    fn a_lognormal_of_huge_mean_and_std_samples_within_bounds() {
        let dist = LengthDist::LogNormal { mean: 1e300, std: 1e300, min: 1, max: 4096 };
        assert!(draws(&dist, 1000).iter().all(|&x| (1..=4096).contains(&x)));
    }

    fn mean_std(xs: &[u32]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt())
    }

    fn assert_close(what: &str, got: f64, want: f64, rel: f64) {
        assert!(
            (got - want).abs() <= rel * want,
            "{what}: got {got}, want {want} ± {}%",
            rel * 100.0
        );
    }

    #[test]
    fn fixed_dist_is_constant() {
        assert!(
            draws(&LengthDist::Fixed { value: 17 }, 100)
                .iter()
                .all(|&x| x == 17)
        );
        // A zero is raised to the minimum length of one token.
        assert!(
            draws(&LengthDist::Fixed { value: 0 }, 10)
                .iter()
                .all(|&x| x == 1)
        );
    }

    #[test]
    fn uniform_dist_is_inclusive_with_the_right_mean() {
        let xs = draws(&LengthDist::Uniform { min: 10, max: 20 }, N);
        assert_eq!(*xs.iter().min().unwrap(), 10);
        assert_eq!(*xs.iter().max().unwrap(), 20);
        assert_close("uniform mean", mean_std(&xs).0, 15.0, 0.01);
    }

    #[test]
    fn normal_dist_mean_and_std() {
        let xs = draws(
            &LengthDist::Normal {
                mean: 500.0,
                std: 100.0,
                min: 1,
                max: 100_000,
            },
            N,
        );
        let (mean, std) = mean_std(&xs);
        assert_close("normal mean", mean, 500.0, 0.01);
        assert_close("normal std", std, 100.0, 0.02);
    }

    #[test]
    fn log_normal_dist_has_the_given_mean_and_std() {
        // ShareGPT-like output lengths: heavy right tail.
        let xs = draws(
            &LengthDist::LogNormal {
                mean: 250.0,
                std: 200.0,
                min: 1,
                max: 1_000_000,
            },
            N,
        );
        let (mean, std) = mean_std(&xs);
        assert_close("log-normal mean", mean, 250.0, 0.015);
        assert_close("log-normal std", std, 200.0, 0.05);
    }

    #[test]
    fn clamping_holds_and_never_gives_zero() {
        let tight = LengthDist::Normal {
            mean: 100.0,
            std: 1000.0,
            min: 50,
            max: 60,
        };
        assert!(
            draws(&tight, 10_000)
                .iter()
                .all(|&x| (50..=60).contains(&x))
        );
        // min = 0 still means at least one token.
        let low = LengthDist::Normal {
            mean: 0.0,
            std: 5.0,
            min: 0,
            max: 10,
        };
        let xs = draws(&low, 10_000);
        assert!(xs.iter().all(|&x| (1..=10).contains(&x)));
        assert!(xs.contains(&1));
        let log = LengthDist::LogNormal {
            mean: 2.0,
            std: 10.0,
            min: 0,
            max: 5,
        };
        assert!(draws(&log, 10_000).iter().all(|&x| (1..=5).contains(&x)));
    }

    #[test]
    fn sample_function_matches_the_prepared_sampler() {
        let dist = LengthDist::LogNormal {
            mean: 300.0,
            std: 50.0,
            min: 1,
            max: 4096,
        };
        let mut a = stream(3, Stream::InputLengths);
        let mut b = stream(3, Stream::InputLengths);
        let sampler = LengthSampler::new(&dist);
        for _ in 0..1000 {
            assert_eq!(sample(&dist, &mut a), sampler.sample(&mut b));
        }
    }

    fn random(input_len: u32, output_len: u32, range_ratio: f64, prefix_len: u32) -> Dataset {
        Dataset::Random {
            input_len,
            output_len,
            range_ratio,
            prefix_len,
        }
    }

    #[test]
    fn random_dataset_bounds_follow_vllm() {
        // 1024 × 0.9 = 921.6 → floor 921; 1024 × 1.1 = 1126.4 → ceil 1127.
        // 128 × 0.9 = 115.2 → 115; 128 × 1.1 = 140.8 → 141. Prefix 16 is added to the input.
        let lengths = sample_lengths(&random(1024, 128, 0.1, 16), N as u32, 5);
        let (inputs, outputs): (Vec<u32>, Vec<u32>) = lengths.into_iter().unzip();
        assert_eq!(*inputs.iter().min().unwrap(), 921 + 16);
        assert_eq!(*inputs.iter().max().unwrap(), 1127 + 16);
        assert_eq!(*outputs.iter().min().unwrap(), 115);
        assert_eq!(*outputs.iter().max().unwrap(), 141);
        assert_close(
            "random input mean",
            mean_std(&inputs).0,
            (921.0 + 1127.0) / 2.0 + 16.0,
            0.01,
        );
    }

    #[test]
    fn random_dataset_with_zero_ratio_is_exact_and_never_empty() {
        let lengths = sample_lengths(&random(200, 30, 0.0, 0), 1000, 9);
        assert!(lengths.iter().all(|&l| l == (200, 30)));
        // A wide ratio on a short length would reach 0; the floor is one token.
        let lengths = sample_lengths(&random(2, 1, 0.99, 0), 10_000, 9);
        assert!(
            lengths
                .iter()
                .all(|&(i, o)| (1..=4).contains(&i) && (1..=2).contains(&o))
        );
        assert!(lengths.iter().any(|&(i, o)| i == 1 && o == 1));
    }

    #[test]
    fn sonnet_input_is_fixed_output_varies() {
        let dataset = Dataset::Sonnet {
            input_len: 550,
            prefix_len: 200,
            output: LengthDist::Uniform { min: 1, max: 150 },
        };
        let lengths = sample_lengths(&dataset, 10_000, 1);
        assert!(
            lengths
                .iter()
                .all(|&(i, o)| i == 550 && (1..=150).contains(&o))
        );
        assert!(lengths.iter().any(|&(_, o)| o != lengths[0].1));
    }

    #[test]
    fn fixed_and_trace_datasets() {
        let lengths = sample_lengths(
            &Dataset::Fixed {
                input_len: 1024,
                output_len: 128,
            },
            5,
            0,
        );
        assert_eq!(lengths, vec![(1024, 128); 5]);
        let rows = vec![
            TraceRow {
                arrival_s: 0.0,
                input_tokens: 3,
                output_tokens: 4,
                    ..TraceRow::default()
            },
            TraceRow {
                arrival_s: 1.0,
                input_tokens: 5,
                output_tokens: 6,
                    ..TraceRow::default()
            },
            TraceRow {
                arrival_s: 2.0,
                input_tokens: 7,
                output_tokens: 8,
                    ..TraceRow::default()
            },
        ];
        let trace = Dataset::Trace {
            path: PathBuf::from("t.csv"),
            rows,
        };
        assert_eq!(sample_lengths(&trace, 2, 0), vec![(3, 4), (5, 6)]);
    }

    fn share_gpt(output_mean: f64) -> Dataset {
        Dataset::ShareGpt {
            input: LengthDist::LogNormal {
                mean: 300.0,
                std: 250.0,
                min: 4,
                max: 4096,
            },
            output: LengthDist::LogNormal {
                mean: output_mean,
                std: 200.0,
                min: 4,
                max: 4096,
            },
        }
    }

    #[test]
    fn deterministic_in_the_seed() {
        let a = sample_lengths(&share_gpt(250.0), 1000, 42);
        assert_eq!(a, sample_lengths(&share_gpt(250.0), 1000, 42));
        assert_ne!(a, sample_lengths(&share_gpt(250.0), 1000, 43));
    }

    #[test]
    fn changing_the_output_distribution_keeps_the_inputs() {
        let a = sample_lengths(&share_gpt(250.0), 1000, 42);
        let b = sample_lengths(&share_gpt(600.0), 1000, 42);
        assert!(a.iter().zip(&b).all(|(x, y)| x.0 == y.0), "inputs changed");
        assert_ne!(
            a.iter().map(|x| x.1).collect::<Vec<_>>(),
            b.iter().map(|x| x.1).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_smaller_sweep_point_is_a_prefix_of_a_larger_one() {
        let small = sample_lengths(&share_gpt(250.0), 100, 7);
        let large = sample_lengths(&share_gpt(250.0), 1000, 7);
        assert_eq!(small[..], large[..100]);
    }
}

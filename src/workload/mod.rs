//! Workloads: the requests a benchmark client sends, with their lengths and arrival times.
//!
//! ```text
//!   WorkloadConfig ──► datasets::sample_lengths ──► (input, output) tokens ─┐
//!        │  seed                                                           ├─► Vec<RequestSpec>
//!        └──────────► arrivals::arrival_times_ns ──► send times (ns) ───────┘   sorted by arrival
//! ```
//!
//! Randomness comes from one master seed split into independent ChaCha streams, one per purpose
//! ([`rng::Stream`]), so changing how output lengths are drawn never perturbs arrival times.
//! Trace files are read and validated when the scenario is loaded
//! ([`crate::scenario::trace::read_trace`]); a trace dataset arrives here as rows.

pub mod arrivals;
pub mod datasets;
pub mod prefixes;
pub mod rng;
pub mod sessions;
pub mod sharegpt;
pub mod totals;

use crate::scenario::{SweepPoint, WorkloadConfig};
pub use prefixes::SharedPrefix;

/// One request as the client will issue it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestSpec {
    /// When the client wants to send it, nanoseconds since the benchmark started (before any
    /// concurrency gate delays it).
    pub arrival_ns: u64,
    pub input_tokens: u32,
    /// Tokens the request generates before it stops.
    pub output_tokens: u32,
    /// The client's `max_tokens`: the most it may generate (≥ `output_tokens`). Engines that
    /// reserve KV up front (TGI) reserve for this many.
    pub max_tokens: u32,
    /// The text it shares with other prompts, for prefix caching.
    pub prefix: SharedPrefix,
    /// A chat session's later turn: sent when the turn before it ends, not at `arrival_ns`.
    pub follows: Option<sessions::FollowUp>,
}

/// `num_prompts` requests at the workload's first request rate: for clients that send at one
/// rate (`bench`, `validate --engine`).
pub fn generate(cfg: &WorkloadConfig, num_prompts: u32) -> Vec<RequestSpec> {
    let rate = cfg.request_rate.first().copied().unwrap_or(f64::INFINITY);
    generate_point(cfg, &SweepPoint::new(num_prompts, rate))
}

/// The `num_prompts` requests of one sweep point, sent at its `request_rate`, with lengths scaled
/// to the point's token totals if given; sorted by arrival time (ties keep dataset order).
/// Deterministic in (`cfg`, `point`).
///
/// # Panics
///
/// On a configuration that scenario validation must reject first; see
/// [`arrivals::arrival_times_ns`] and [`datasets::sample_lengths`].
pub fn generate_point(cfg: &WorkloadConfig, point: &SweepPoint) -> Vec<RequestSpec> {
    let num_prompts = point.num_prompts;
    let mut lengths = datasets::sample_lengths(&cfg.dataset, num_prompts, cfg.seed);
    // Each request's system prompt, if any; else all share the dataset's prefix (not copied per
    // request: 16 bytes of fresh memory each, issue 14).
    let system_prompts = cfg.system_prompts.as_ref().map(|prompts| {
        let drawn = prefixes::draw_system_prompts(prompts, num_prompts, cfg.seed);
        lengths.iter_mut().for_each(|l| l.0 = l.0.saturating_add(prompts.tokens));
        drawn
    });
    let dataset_prefix = prefixes::dataset_prefix(&cfg.dataset);
    // A trace's rows name their own shared text, if its file has the prefix columns.
    let trace_rows = match &cfg.dataset {
        crate::scenario::Dataset::Trace { rows, .. } => Some(rows.as_slice()),
        _ => None,
    };
    let prefix_of = |i: usize| match (trace_rows, &system_prompts) {
        (Some(rows), _) if rows[i].prefix_tokens > 0 => prefixes::trace_prefix(rows[i].prefix_id, rows[i].prefix_tokens),
        (_, Some(drawn)) => drawn[i],
        _ => dataset_prefix,
    };
    let max_tokens = cfg.dataset.max_tokens();
    if let Some(total) = point.input_tokens_total {
        let mut inputs: Vec<u32> = lengths.iter().map(|l| l.0).collect();
        totals::scale_to_total(&mut inputs, total, u32::MAX);
        lengths.iter_mut().zip(inputs).for_each(|(l, input)| l.0 = input);
    }
    if let Some(total) = point.output_tokens_total {
        let mut outputs: Vec<u32> = lengths.iter().map(|l| l.1).collect();
        totals::scale_to_total(&mut outputs, total, max_tokens.unwrap_or(u32::MAX));
        lengths.iter_mut().zip(outputs).for_each(|(l, output)| l.1 = output);
    }
    if let Some(sessions) = &cfg.sessions {
        let starts_ns = arrivals::arrival_times_ns(cfg, point.request_rate, sessions::count(sessions, num_prompts));
        return sessions::chain(sessions, &lengths, &starts_ns, max_tokens, cfg.seed);
    }
    let arrivals_ns = arrivals::arrival_times_ns(cfg, point.request_rate, num_prompts);
    assert_eq!(lengths.len(), arrivals_ns.len());
    // Arrivals are non-decreasing by construction (gaps are ≥ 0; trace files are validated as
    // sorted), but trace rows built in code bypass that check, so the requests are sorted if
    // needed. Checked here, on 8 bytes a request rather than the specs' 64.
    let sorted = arrivals_ns.is_sorted();
    let mut requests: Vec<RequestSpec> = lengths
        .into_iter()
        .zip(arrivals_ns)
        .enumerate()
        .map(|(i, ((input_tokens, output_tokens), arrival_ns))| {
            let prefix = prefix_of(i);
            RequestSpec {
                arrival_ns,
                input_tokens,
                output_tokens,
                max_tokens: max_tokens.unwrap_or(output_tokens).max(output_tokens),
                // Scaled to a recorded total, a prompt may be shorter than its prefix.
                prefix: SharedPrefix { tokens: prefix.tokens.min(input_tokens), ..prefix },
                follows: None,
            }
        })
        .collect();
    // Stable: ties keep dataset order.
    if !sorted {
        requests.sort_by_key(|r| r.arrival_ns);
    }
    requests
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Dataset, LengthDist, TraceRow};
    use std::path::PathBuf;
    use std::time::Instant;

    fn share_gpt_config(request_rate: f64, seed: u64) -> WorkloadConfig {
        WorkloadConfig {
            num_prompts: vec![1000],
            request_rate: vec![request_rate],
            burstiness: 1.0,
            max_concurrency: None,
            dataset: Dataset::ShareGpt {
                input: LengthDist::LogNormal {
                    mean: 300.0,
                    std: 250.0,
                    min: 4,
                    max: 4096,
                },
                output: LengthDist::LogNormal {
                    mean: 250.0,
                    std: 200.0,
                    min: 4,
                    max: 4096,
                },
            },
            seed,
            input_tokens_total: None,
            output_tokens_total: None,
            system_prompts: None,
            sessions: None,
        }
    }

    #[test]
    fn generate_is_sorted_and_deterministic() {
        let cfg = share_gpt_config(20.0, 5);
        let requests = generate(&cfg, 1000);
        assert_eq!(requests.len(), 1000);
        assert!(requests.is_sorted_by_key(|r| r.arrival_ns));
        assert_eq!(requests[0].arrival_ns, 0);
        assert!(
            requests
                .iter()
                .all(|r| r.input_tokens >= 4 && r.output_tokens >= 4)
        );
        assert_eq!(requests, generate(&cfg, 1000));
        assert_ne!(requests, generate(&share_gpt_config(20.0, 6), 1000));
    }

    #[test]
    fn trace_rows_name_their_shared_prefix() {
        let mut cfg = share_gpt_config(1.0, 0);
        let row = |arrival_s, input_tokens, prefix_id, prefix_tokens| TraceRow { arrival_s, input_tokens, output_tokens: 3, prefix_id, prefix_tokens };
        cfg.dataset = Dataset::Trace {
            path: PathBuf::from("t.csv"),
            rows: vec![row(0.0, 100, 4, 64), row(1.0, 200, 4, 200), row(2.0, 50, 9, 48), row(3.0, 30, 4, 0)],
        };
        let requests = generate(&cfg, 4);
        let prefixes: Vec<SharedPrefix> = requests.iter().map(|r| r.prefix).collect();
        assert_eq!(prefixes[0].stream, prefixes[1].stream);
        assert_ne!(prefixes[0].stream, prefixes[2].stream);
        assert_eq!(prefixes.iter().map(|p| p.tokens).collect::<Vec<_>>(), vec![64, 200, 48, 0]);
        // Not a system prompt's, a session's or another dataset's stream.
        assert_eq!(prefixes[0], prefixes::trace_prefix(4, 64));
    }

    #[test]
    fn generate_sorts_unsorted_trace_rows_stably() {
        let row = |arrival_s, input_tokens| TraceRow { arrival_s, input_tokens, output_tokens: 1, ..TraceRow::default() };
        let cfg = WorkloadConfig {
            dataset: Dataset::Trace {
                path: PathBuf::from("t.csv"),
                rows: vec![row(2.0, 1), row(1.0, 2), row(2.0, 3), row(0.5, 4)],
            },
            ..share_gpt_config(1.0, 0)
        };
        let inputs: Vec<u32> = generate(&cfg, 4).iter().map(|r| r.input_tokens).collect();
        assert_eq!(inputs, vec![4, 2, 1, 3]);
    }

    /// Speed check: `cargo test --release --lib workload::tests::million -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn million_requests_speed() {
        let cfg = share_gpt_config(100.0, 1);
        let start = Instant::now();
        let requests = generate(&cfg, 1_000_000);
        let elapsed = start.elapsed();
        println!("generated {} requests in {elapsed:?}", requests.len());
        assert_eq!(requests.len(), 1_000_000);
    }
}

//! `/metrics` in Prometheus' text format, under the names vLLM serves, so that dashboards and
//! autoscalers built for vLLM read the server as they read vLLM.
//!
//! Names, label names and bucket bounds are vLLM 0.19.0's (`vllm/v1/metrics/loggers.py`,
//! `PrometheusStatLogger`), with the two names of vLLM 0.8.5's V1 logger that later releases
//! renamed and older dashboards still read: `vllm:gpu_cache_usage_perc` (now
//! `vllm:kv_cache_usage_perc`) and `vllm:time_per_output_token_seconds` (now
//! `vllm:inter_token_latency_seconds`); each pair holds the same values. Every series carries
//! `model_name` (the served name) and `engine="0"`, as vLLM's does.
//!
//! As in vLLM V1, the request counts and timings are taken where the tokens reach the HTTP front
//! end (vLLM's output processor): a request's clock starts when it is queued in the engine, after
//! its prompt is rendered and tokenized; its prompt counts when its first token arrives; a token
//! after its stop string does not count. Running and waiting requests and the KV cache are the
//! engine's own. The older `servesim_*` names follow, counted by the engine, because tests and
//! docs outside the server read them.

use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::engine::{EngineStats, STEP_TIME_BUCKETS_S};

/// vLLM's `vllm:time_to_first_token_seconds` buckets.
const TTFT_BUCKETS_S: [f64; 22] =
    [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0];
/// vLLM's buckets of `vllm:inter_token_latency_seconds` and `vllm:request_time_per_output_token_seconds`.
const TOKEN_GAP_BUCKETS_S: [f64; 19] = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
/// vLLM's `request_latency_buckets`: end-to-end latency, and the queue, prefill, decode and
/// inference time of a request.
const E2E_BUCKETS_S: [f64; 21] =
    [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0];

/// Why a request ended, as vLLM's `finished_reason` label names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Stop,
    Length,
    /// The client left before the end.
    Abort,
    /// The engine failed the request.
    Error,
}

/// vLLM V1's `FinishReason`s, in its order: every label is served from the start, as
/// prometheus_client does for labels created up front.
const ENDED_LABELS: [&str; 5] = ["stop", "length", "abort", "error", "repetition"];

impl Ended {
    fn index(self) -> usize {
        self as usize
    }
}

/// Counts into buckets with upper bounds `bounds` (`+Inf` implied).
#[derive(Clone, Debug)]
struct Histogram {
    bounds: Vec<f64>,
    counts: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    fn new(bounds: &[f64]) -> Histogram {
        Histogram { bounds: bounds.to_vec(), counts: vec![0; bounds.len()], count: 0, sum: 0.0 }
    }

    fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            self.counts[i] += 1;
        }
        self.count += 1;
        self.sum += v;
    }
}

/// vLLM's `build_1_2_5_buckets(max)`: 1, 2, 5, 10, 20, 50, ... up to `max`.
fn one_two_five(max: u32) -> Vec<f64> {
    let mut out = Vec::new();
    let mut scale = 1u64;
    loop {
        for m in [1u64, 2, 5] {
            let v = m * scale;
            if v > u64::from(max) {
                return out;
            }
            out.push(v as f64);
        }
        scale *= 10;
    }
}

#[derive(Clone, Debug)]
struct Counts {
    prompt_tokens: u64,
    generation_tokens: u64,
    ended: [u64; ENDED_LABELS.len()],
    ttft: Histogram,
    inter_token: Histogram,
    request_tpot: Histogram,
    e2e: Histogram,
    queue: Histogram,
    prefill: Histogram,
    decode: Histogram,
    inference: Histogram,
    request_prompt_tokens: Histogram,
    request_generation_tokens: Histogram,
    request_max_tokens: Histogram,
}

/// What the front end has seen of every request, for `/metrics`.
#[derive(Debug)]
pub struct FrontMetrics {
    counts: Mutex<Counts>,
}

impl FrontMetrics {
    /// Empty counts; token-count buckets go up to `context_len`, as vLLM's to `max_model_len`.
    pub fn new(context_len: u32) -> FrontMetrics {
        let tokens = one_two_five(context_len);
        FrontMetrics {
            counts: Mutex::new(Counts {
                prompt_tokens: 0,
                generation_tokens: 0,
                ended: [0; ENDED_LABELS.len()],
                ttft: Histogram::new(&TTFT_BUCKETS_S),
                inter_token: Histogram::new(&TOKEN_GAP_BUCKETS_S),
                request_tpot: Histogram::new(&TOKEN_GAP_BUCKETS_S),
                e2e: Histogram::new(&E2E_BUCKETS_S),
                queue: Histogram::new(&E2E_BUCKETS_S),
                prefill: Histogram::new(&E2E_BUCKETS_S),
                decode: Histogram::new(&E2E_BUCKETS_S),
                inference: Histogram::new(&E2E_BUCKETS_S),
                request_prompt_tokens: Histogram::new(&tokens),
                request_generation_tokens: Histogram::new(&tokens),
                request_max_tokens: Histogram::new(&tokens),
            }),
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One request's timing and tokens, from its queueing to its end. Dropped before its end (the
/// client left), it counts as aborted.
pub struct RequestRecord {
    metrics: Arc<FrontMetrics>,
    queued: Instant,
    /// When a step first ran it, as the engine says with its tokens.
    scheduled: Option<Instant>,
    first: Option<Instant>,
    last: Option<Instant>,
    prompt_tokens: u32,
    max_tokens: u32,
    generated: u32,
    ended: bool,
}

impl RequestRecord {
    /// A request queued at `queued` with `prompt_tokens` and a limit of `max_tokens`.
    pub fn new(metrics: Arc<FrontMetrics>, prompt_tokens: u32, max_tokens: u32, queued: Instant) -> RequestRecord {
        RequestRecord { metrics, queued, scheduled: None, first: None, last: None, prompt_tokens, max_tokens, generated: 0, ended: false }
    }

    /// `n` tokens of the request reached the front end together, now; the engine first ran it at
    /// `scheduled`.
    pub fn tokens(&mut self, n: u32, scheduled: Option<Instant>) {
        if self.scheduled.is_none() {
            self.scheduled = scheduled;
        }
        if n == 0 {
            return;
        }
        let now = Instant::now();
        let mut c = self.metrics.counts();
        match (self.first, self.last) {
            (None, _) => {
                c.prompt_tokens += u64::from(self.prompt_tokens);
                c.ttft.observe(now.duration_since(self.queued).as_secs_f64());
                self.first = Some(now);
            }
            // One gap a delivery, as vLLM observes one a engine output (a multi-step window's or
            // a speculative step's tokens arrive together).
            (Some(_), Some(last)) => c.inter_token.observe(now.duration_since(last).as_secs_f64()),
            (Some(_), None) => {}
        }
        self.last = Some(now);
        self.generated += n;
        c.generation_tokens += u64::from(n);
    }

    /// The request ended (stop or length, or an engine error).
    pub fn end(&mut self, how: Ended) {
        if self.ended {
            return;
        }
        self.ended = true;
        let mut c = self.metrics.counts();
        c.ended[how.index()] += 1;
        if how == Ended::Stop || how == Ended::Length {
            c.e2e.observe(self.queued.elapsed().as_secs_f64());
            c.request_prompt_tokens.observe(f64::from(self.prompt_tokens));
            c.request_generation_tokens.observe(f64::from(self.generated));
            c.request_max_tokens.observe(f64::from(self.max_tokens));
            // vLLM: the decode time over the tokens after the first, 0 for a one-token request.
            let tpot = match (self.first, self.last) {
                (Some(first), Some(last)) if self.generated > 1 => last.duration_since(first).as_secs_f64() / f64::from(self.generated - 1),
                _ => 0.0,
            };
            c.request_tpot.observe(tpot);
            // vLLM's intervals (`update_from_finished_request`): queued to scheduled, scheduled
            // to the first token, first to last token, scheduled to the last token.
            if let (Some(scheduled), Some(first), Some(last)) = (self.scheduled, self.first, self.last) {
                let secs = |from: Instant, to: Instant| to.saturating_duration_since(from).as_secs_f64();
                c.queue.observe(secs(self.queued, scheduled));
                c.prefill.observe(secs(scheduled, first));
                c.decode.observe(secs(first, last));
                c.inference.observe(secs(scheduled, last));
            }
        }
    }
}

impl Drop for RequestRecord {
    fn drop(&mut self) {
        self.end(Ended::Abort);
    }
}

/// A label value in the text format: backslash, quote and newline escaped.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A bucket bound as prometheus_client writes it (`1.0`, `0.025`, `+Inf`), so `le` labels match
/// vLLM's series exactly.
fn bound(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.1}") } else { format!("{v}") }
}

/// The whole `/metrics` page: vLLM's names first, then servesim's own.
pub fn render(stats: &EngineStats, front: &FrontMetrics, model_name: &str) -> String {
    let c = front.counts().clone();
    let labels = format!("model_name=\"{}\",engine=\"0\"", label_value(model_name));
    let mut out = String::new();
    let gauge = |out: &mut String, name: &str, help: &str, v: f64| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {v}\n");
    };
    gauge(&mut out, "vllm:num_requests_running", "Requests in the engine's running batch.", f64::from(stats.running));
    gauge(&mut out, "vllm:num_requests_waiting", "Requests waiting to be scheduled.", f64::from(stats.waiting));
    let usage = if stats.kv_blocks_total == 0 { 0.0 } else { f64::from(stats.kv_blocks_used) / f64::from(stats.kv_blocks_total) };
    gauge(&mut out, "vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 is all).", usage);
    gauge(&mut out, "vllm:gpu_cache_usage_perc", "vLLM 0.8's name of vllm:kv_cache_usage_perc.", usage);
    let counter = |out: &mut String, name: &str, help: &str, v: u64| {
        let _ = write!(out, "# HELP {name}_total {help}\n# TYPE {name}_total counter\n{name}_total{{{labels}}} {v}\n");
    };
    counter(&mut out, "vllm:prompt_tokens", "Prompt tokens of requests that produced a first token.", c.prompt_tokens);
    counter(&mut out, "vllm:generation_tokens", "Generated tokens delivered to clients.", c.generation_tokens);
    let _ = write!(out, "# HELP vllm:request_success_total Requests finished, by reason.\n# TYPE vllm:request_success_total counter\n");
    for (label, count) in ENDED_LABELS.iter().zip(c.ended) {
        let _ = writeln!(out, "vllm:request_success_total{{{labels},finished_reason=\"{label}\"}} {count}");
    }
    if let Some(prefix) = stats.prefix_cache {
        counter(&mut out, "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", prefix.prompt_tokens);
        counter(&mut out, "vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", prefix.hit_tokens);
    }
    if let Some(spec) = &stats.spec_decode {
        counter(&mut out, "vllm:spec_decode_num_drafts", "Sequence-steps that verified draft tokens.", spec.drafts);
        counter(&mut out, "vllm:spec_decode_num_draft_tokens", "Draft tokens verified.", spec.draft_tokens);
        counter(&mut out, "vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.", spec.accepted_tokens);
        let name = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
        let _ = write!(out, "# HELP {name} Accepted draft tokens by position.\n# TYPE {name} counter\n");
        for (position, count) in spec.accepted_by_position.iter().enumerate() {
            let _ = writeln!(out, "{name}{{{labels},position=\"{position}\"}} {count}");
        }
    }
    let histogram = |out: &mut String, name: &str, help: &str, h: &Histogram| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} histogram\n");
        let mut cumulative = 0;
        for (b, n) in h.bounds.iter().zip(&h.counts) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{}\"}} {cumulative}", bound(*b));
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    };
    histogram(&mut out, "vllm:time_to_first_token_seconds", "Time from queueing to the first token.", &c.ttft);
    histogram(&mut out, "vllm:inter_token_latency_seconds", "Time between a request's deliveries of tokens.", &c.inter_token);
    histogram(&mut out, "vllm:time_per_output_token_seconds", "vLLM 0.8's name of vllm:inter_token_latency_seconds.", &c.inter_token);
    histogram(&mut out, "vllm:request_time_per_output_token_seconds", "A finished request's decode time per token after the first.", &c.request_tpot);
    histogram(&mut out, "vllm:e2e_request_latency_seconds", "Time from queueing to the last token of a finished request.", &c.e2e);
    histogram(&mut out, "vllm:request_queue_time_seconds", "A finished request's time waiting, from queueing to its first step.", &c.queue);
    histogram(&mut out, "vllm:request_inference_time_seconds", "A finished request's time running, from its first step to its last token.", &c.inference);
    histogram(&mut out, "vllm:request_prefill_time_seconds", "A finished request's time from its first step to its first token.", &c.prefill);
    histogram(&mut out, "vllm:request_decode_time_seconds", "A finished request's time from its first token to its last.", &c.decode);
    histogram(&mut out, "vllm:request_prompt_tokens", "Prompt tokens of a finished request.", &c.request_prompt_tokens);
    histogram(&mut out, "vllm:request_generation_tokens", "Tokens a finished request generated.", &c.request_generation_tokens);
    histogram(&mut out, "vllm:request_params_max_tokens", "The max_tokens of a finished request.", &c.request_max_tokens);
    servesim_metrics(&mut out, stats);
    out
}

/// servesim's own names, counted by the engine (its token counts include tokens generated past a
/// stop string before the front end cancelled the request).
fn servesim_metrics(out: &mut String, s: &EngineStats) {
    let gauge = |out: &mut String, name: &str, help: &str, v: f64| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}\n");
    };
    gauge(out, "servesim_num_requests_running", "Sequences in the running batch.", f64::from(s.running));
    gauge(out, "servesim_num_requests_waiting", "Sequences waiting to be scheduled.", f64::from(s.waiting));
    gauge(out, "servesim_kv_cache_blocks_used", "KV-cache blocks allocated.", f64::from(s.kv_blocks_used));
    gauge(out, "servesim_kv_cache_blocks_total", "KV-cache blocks in the pool.", f64::from(s.kv_blocks_total));
    let usage = if s.kv_blocks_total == 0 { 0.0 } else { f64::from(s.kv_blocks_used) / f64::from(s.kv_blocks_total) };
    gauge(out, "servesim_kv_cache_usage_ratio", "Fraction of KV-cache blocks allocated (0 to 1).", usage);
    let counter = |out: &mut String, name: &str, help: &str, v: u64| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n");
    };
    counter(out, "servesim_requests_finished_total", "Requests that finished (length or stop).", s.requests_finished_total);
    counter(out, "servesim_requests_cancelled_total", "Requests cancelled (client gone, or past a stop string).", s.requests_cancelled_total);
    counter(out, "servesim_requests_rejected_total", "Requests refused on arrival.", s.requests_rejected_total);
    counter(out, "servesim_prompt_tokens_total", "Prompt tokens admitted.", s.prompt_tokens_total);
    counter(out, "servesim_generation_tokens_total", "Tokens generated.", s.generation_tokens_total);
    if let Some(spec) = &s.spec_decode {
        counter(out, "servesim_spec_decode_num_drafts_total", "Sequence-steps that verified draft tokens.", spec.drafts);
        counter(out, "servesim_spec_decode_num_draft_tokens_total", "Draft tokens verified.", spec.draft_tokens);
        counter(out, "servesim_spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", spec.accepted_tokens);
    }
    if let Some(prefix) = s.prefix_cache {
        counter(out, "servesim_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", prefix.prompt_tokens);
        counter(out, "servesim_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", prefix.hit_tokens);
        gauge(out, "servesim_prefix_cache_hit_rate", "Prompt tokens found over looked up (0 to 1).", prefix.hit_rate());
    }
    if let Some(spec) = &s.spec_decode {
        let name = "servesim_spec_decode_num_accepted_tokens_per_pos_total";
        let _ = write!(out, "# HELP {name} Steps whose draft at this position was accepted.\n# TYPE {name} counter\n");
        for (position, count) in spec.accepted_by_position.iter().enumerate() {
            let _ = writeln!(out, "{name}{{position=\"{position}\"}} {count}");
        }
    }
    let name = "servesim_step_time_seconds";
    let _ = write!(out, "# HELP {name} Wall time of one engine step.\n# TYPE {name} histogram\n");
    let mut cumulative = 0;
    for (b, count) in STEP_TIME_BUCKETS_S.iter().zip(s.step_time_bucket_counts) {
        cumulative += count;
        let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", s.steps_total);
    let _ = writeln!(out, "{name}_sum {}", s.step_time_sum_s);
    let _ = writeln!(out, "{name}_count {}", s.steps_total);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_bounds_are_vllms() {
        assert_eq!(one_two_five(100), [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        assert_eq!(one_two_five(1024).last(), Some(&1000.0));
        assert_eq!((bound(1.0), bound(0.025), bound(2560.0)), ("1.0".into(), "0.025".into(), "2560.0".into()));
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn a_request_is_counted_once_its_first_token_arrives_and_aborts_on_drop() {
        let m = Arc::new(FrontMetrics::new(64));
        let queued = Instant::now();
        let mut r = RequestRecord::new(m.clone(), 7, 10, queued);
        assert_eq!(m.counts().prompt_tokens, 0);
        r.tokens(1, Some(queued + std::time::Duration::from_millis(400)));
        r.tokens(3, Some(queued));
        r.end(Ended::Length);
        r.end(Ended::Stop);
        drop(r);
        let c = m.counts().clone();
        assert_eq!((c.prompt_tokens, c.generation_tokens, c.ended), (7, 4, [0, 1, 0, 0, 0]));
        assert_eq!((c.ttft.count, c.inter_token.count, c.e2e.count, c.request_generation_tokens.sum), (1, 1, 1, 4.0));
        // Queued 0.4 s before its first step (the first delivery says when; later ones do not
        // move it), in vLLM's 0.3–0.5 s bucket; each interval observed once.
        assert_eq!((c.queue.count, c.queue.counts[..2].to_vec(), c.queue.sum), (1, vec![0, 1], 0.4));
        assert_eq!((c.prefill.count, c.decode.count, c.inference.count), (1, 1, 1));
        drop(RequestRecord::new(m.clone(), 3, 5, Instant::now()));
        assert_eq!(m.counts().ended, [0, 1, 1, 0, 0]);
        assert_eq!(m.counts().prompt_tokens, 7, "an aborted request that produced nothing counts no prompt");
    }
}

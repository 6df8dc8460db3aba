//! Per-request records → benchmark summary, with vLLM `benchmark_serving.py`'s definitions, and
//! its text and JSON formats; SGLang `bench_serving`'s too (`sglang`). Knows nothing of where
//! records came from (simulator or client).

pub mod format;
mod radix;
pub mod recorded;
pub mod samples;
pub mod sglang;
pub mod summary;

pub use samples::{RunChunks, TokenBuckets, WeightedSamples};
pub use summary::{Stat, Summary};

/// What the client saw of one request. Times are nanoseconds since the benchmark started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// When the client issued the request (after any concurrency gate).
    pub send_ns: u64,
    /// When the first token (chunk) arrived; `None` if none did.
    pub first_token_ns: Option<u64>,
    /// When the last token arrived, or when the request failed.
    pub end_ns: u64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub success: bool,
}

impl RequestRecord {
    /// First token − send in ns. vLLM leaves `ttft = 0.0` on a successful request that
    /// streamed no token, so a missing first token counts as 0 here too.
    pub fn ttft_ns(&self) -> u64 {
        self.first_token_ns.map_or(0, |first_ns| first_ns.saturating_sub(self.send_ns))
    }

    /// End − send in ns.
    pub fn e2el_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.send_ns)
    }

    /// (E2EL − TTFT)/(output tokens − 1) in ns, only for requests with more than one output
    /// token (vLLM leaves the others out of the TPOT statistics).
    pub fn tpot_ns(&self) -> Option<f64> {
        if self.output_tokens <= 1 {
            return None;
        }
        let decode_ns = self.e2el_ns().saturating_sub(self.ttft_ns());
        Some(decode_ns as f64 / f64::from(self.output_tokens - 1))
    }
}

/// Everything the summary needs from one benchmark run.
#[derive(Clone, Debug, Default)]
pub struct RunRecords {
    pub requests: Vec<RequestRecord>,
    /// Every gap between consecutive tokens of a request, pooled over all requests.
    pub itl_ns: WeightedSamples,
    /// Output tokens per 1-second bucket since the earliest send (for the peak-throughput line).
    pub tokens_per_second: TokenBuckets,
    /// Benchmark duration: last completion − benchmark start.
    pub duration_ns: u64,
}

/// Latency metrics that can be summarised with percentiles (vLLM's `--percentile-metrics`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LatencyMetric {
    Ttft,
    Tpot,
    Itl,
    E2el,
}

impl LatencyMetric {
    pub const ALL: [LatencyMetric; 4] =
        [LatencyMetric::Ttft, LatencyMetric::Tpot, LatencyMetric::Itl, LatencyMetric::E2el];

    /// The key used on vLLM's command line and in its JSON (`ttft`, `tpot`, `itl`, `e2el`).
    pub fn key(self) -> &'static str {
        match self {
            LatencyMetric::Ttft => "ttft",
            LatencyMetric::Tpot => "tpot",
            LatencyMetric::Itl => "itl",
            LatencyMetric::E2el => "e2el",
        }
    }

    pub fn parse(key: &str) -> Option<LatencyMetric> {
        LatencyMetric::ALL.into_iter().find(|m| m.key() == key)
    }
}

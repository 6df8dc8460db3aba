//! What a calibration backend (CPU or CUDA) provides: prepared kernel invocations that the
//! harness times, plus the facts about the device that go into a profile's provenance.
//!
//! The harness owns the timing policy (warm-up, repeats until the median is stable, statistics);
//! a backend only knows how to run its kernels once and how long that took.

pub use crate::engine::DeviceError;
use crate::scenario::Dtype;

// The host sampler is every backend's by default (`Backend::prepare_sampling`), so its op lives
// under the trait that names it rather than beside it: a sibling would import the trait back.
pub mod sampling;
pub use sampling::SamplingOp;

/// A GEMM `[m × k] · [k × n]`, as the engine runs its projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GemmShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub dtype: Dtype,
}

/// Which attention kernel a shape exercises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AttentionPhase {
    /// Causal attention of whole prompts (no cached context), one-pass (flash) style.
    Prefill,
    /// One new token per sequence over a paged KV cache.
    Decode,
    /// Prefill chunks that also attend to `context_len` cached tokens (chunked prefill).
    Mixed,
}

/// One attention invocation over a batch of equal-shaped sequences (or, with `uneven`, decode
/// contexts spread evenly over `1..=2 × context_len`, whose mean is `context_len`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttentionShape {
    pub phase: AttentionPhase,
    pub batch: u32,
    /// New tokens per sequence (1 for decode).
    pub query_len: u32,
    /// Cached tokens per sequence before this step (0 for prefill).
    pub context_len: u32,
    pub num_heads: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
    pub uneven: bool,
    pub dtype: Dtype,
}

impl AttentionShape {
    /// Cached tokens of each sequence before the step: all `context_len`, or with `uneven`,
    /// sequence i of b gets round((2i + 1) · c / b) (at least 1), which averages c. Prefill
    /// shapes have none. Every backend lays out its KV cache from this, so profiles agree.
    pub fn cached_lens(&self) -> Vec<usize> {
        let b = self.batch as usize;
        let c = self.context_len as usize;
        if self.phase == AttentionPhase::Prefill {
            return vec![0; b];
        }
        if !self.uneven || b <= 1 || c == 0 {
            return vec![c; b];
        }
        (0..b).map(|i| (((2 * i + 1) * c) as f64 / b as f64).round().max(1.0) as usize).collect()
    }

    /// A shape no backend can run: no sequences or no query tokens, or a decode of more than
    /// one token per sequence.
    pub fn check(&self) -> Result<(), DeviceError> {
        if self.batch == 0 || self.query_len == 0 {
            return Err(DeviceError::Failed(format!("empty attention shape {self:?}")));
        }
        if self.phase == AttentionPhase::Decode && self.query_len != 1 {
            return Err(DeviceError::Failed(format!("decode shapes have query_len 1: {self:?}")));
        }
        Ok(())
    }
}

/// The GEMMs a transformer step runs around one GEMM shape, in the step's order, all at the
/// shape's m and dtype: one layer's projections (QKV, O, gate+up, down), followed by the LM head
/// when the LM head is the shape timed. A GEMM that streams its weights from memory takes a
/// different time after its layer's other GEMMs than after copies of itself, so a backend may
/// time it among them (see [`Backend::prepare_gemm_in_step`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepGemms {
    /// `(n, k)` of each GEMM, in order.
    pub sequence: Vec<(u32, u32)>,
    /// Index in `sequence` of the shape being timed.
    pub timed: usize,
}

/// KV-cache block size (tokens) of every backend's attention calibration, as vLLM's default.
pub const CALIBRATION_BLOCK_SIZE: usize = 16;

/// An all-reduce of `bytes` over `gpus` devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AllReduceShape {
    pub bytes: u64,
    pub gpus: u32,
}

/// An all-to-all over `gpus` devices, sized as nccl-tests sizes `alltoall_perf`: `bytes` is the
/// whole buffer each GPU sends, one `bytes / gpus` slice to every GPU (its own slice included,
/// which never leaves it), so `(gpus − 1)/gpus · bytes` crosses the links per GPU. Expert
/// parallelism's dispatch (and combine) of a step is one such all-to-all per layer; servesim's
/// own calibration cannot time one, so these rows come only from imported measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AllToAllShape {
    pub bytes: u64,
    pub gpus: u32,
}

/// How the engine's sampler draws a row's token (`engine::model::sampling`): each kind costs a
/// different number of passes over the vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SamplingMethod {
    /// The argmax (temperature 0): what vLLM's and servesim's benchmark clients ask for.
    Greedy,
    /// Temperature 1, every token kept.
    Temperature,
    /// Temperature 1, top-p 0.9.
    TopP,
    /// Temperature 1, top-k 50.
    TopK,
}

impl SamplingMethod {
    pub const ALL: [SamplingMethod; 4] = [SamplingMethod::Greedy, SamplingMethod::Temperature, SamplingMethod::TopP, SamplingMethod::TopK];

    /// Its name in a profile's `phase` column.
    pub fn name(self) -> &'static str {
        match self {
            SamplingMethod::Greedy => "greedy",
            SamplingMethod::Temperature => "temperature",
            SamplingMethod::TopP => "top_p",
            SamplingMethod::TopK => "top_k",
        }
    }

    pub fn parse(name: &str) -> Option<SamplingMethod> {
        SamplingMethod::ALL.into_iter().find(|m| m.name() == name)
    }

    /// What it does, for a reader: "greedy", "temperature 1", "top-p 0.9", "top-k 50".
    pub fn label(self) -> String {
        let p = self.params();
        match self {
            SamplingMethod::Greedy => "greedy".to_string(),
            SamplingMethod::Temperature => format!("temperature {}", p.temperature),
            SamplingMethod::TopP => format!("top-p {}", p.top_p),
            SamplingMethod::TopK => format!("top-k {}", p.top_k),
        }
    }

    /// The request fields that make the engine sample this way.
    pub fn params(self) -> crate::engine::model::SamplingParams {
        use crate::engine::model::SamplingParams;
        let sampled = |top_p, top_k| SamplingParams { temperature: 1.0, top_p, top_k, seed: None };
        match self {
            SamplingMethod::Greedy => SamplingParams::GREEDY,
            SamplingMethod::Temperature => sampled(1.0, 0),
            SamplingMethod::TopP => sampled(0.9, 0),
            SamplingMethod::TopK => sampled(1.0, 50),
        }
    }
}

/// The engine's sampler over `rows` rows of `vocab` logits, on the host (where both of
/// servesim's engines sample).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SamplingShape {
    pub method: SamplingMethod,
    pub rows: u32,
    pub vocab: u32,
}

/// Facts about the device for a profile's provenance. Unknown items are `None`, not guessed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceInfo {
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// E.g. "NVIDIA H100 80GB HBM3" or the CPU model name.
    pub name: String,
    pub driver_version: Option<String>,
    pub runtime_version: Option<String>,
    pub clocks: Option<String>,
    /// Worker threads (CPU) or streaming multiprocessors (GPU).
    pub parallelism: Option<u32>,
}

/// The nominal peaks that utilisation is measured against: achieved ÷ roofline, where the
/// roofline uses these figures. For a GPU the datasheet's; for a CPU, measured once at start-up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peak {
    /// Dense FLOP/s for 16-bit (or, on a CPU, f32) math.
    pub flops_per_s: f64,
    pub memory_bytes_per_s: f64,
}

/// How each timed repeat of a shape runs; the profile's provenance names it (`timing.method`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimingMethod {
    /// One launch (or one call on a CPU) after a cache flush, so weights and KV come from memory.
    /// The method of every profile made before issue 37, kept as the default of
    /// `calibrate --device cpu`.
    #[default]
    Flush,
    /// The op replayed `replays` times back to back (in one CUDA graph on a GPU), the repeat's
    /// time divided by `replays`: no launch gaps, and operands that fit in L2 stay there from one
    /// replay to the next, as an engine's captured decode step finds the small weights it just
    /// read and as aiconfigurator times its ops (a CUDA graph of repeated launches).
    Graph,
}

impl TimingMethod {
    pub const ALL: [TimingMethod; 2] = [TimingMethod::Flush, TimingMethod::Graph];

    /// Its name in a profile's provenance and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TimingMethod::Flush => "flush",
            TimingMethod::Graph => "graph",
        }
    }

    pub fn parse(name: &str) -> Option<TimingMethod> {
        TimingMethod::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The cheapest a kernel launch can be on a GPU: an empty-work kernel timed back to back, launched
/// one by one from the host and replayed in a CUDA graph. A step of many small kernels costs at
/// least its launches times this, whatever their work.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LaunchFloor {
    /// The kernel timed.
    pub kernel: String,
    /// Per launch, eager (host launches in a row) and in a graph.
    pub eager_ns: f64,
    pub graph_ns: f64,
}

/// One elementwise kernel of a decoder layer (norms, rotary, the KV-cache write, SiLU·mul) timed
/// at one model's shapes and a token count, by the graph method: what the cost model's roofline
/// prices in nanoseconds and a GPU runs in microseconds.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ElementwiseTiming {
    pub model: String,
    pub kernel: String,
    pub tokens: u32,
    pub ns: f64,
}

/// One prepared kernel invocation: inputs allocated and filled, ready to run repeatedly.
pub trait PreparedOp {
    /// Runs the op once; returns its duration in nanoseconds as the backend measures it (CUDA
    /// events around the launch on a GPU, a monotonic clock on a CPU).
    fn run_once(&mut self) -> Result<f64, DeviceError>;
    /// Evicts caches between repeats where that matters (a GPU's L2 for memory-bound ops), so
    /// each repeat reads its operands from memory as in a real step.
    fn flush_cache(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
    /// Runs the op `replays` times back to back and returns the mean duration of one run, in
    /// nanoseconds ([`TimingMethod::Graph`]). The CUDA
    /// backend captures the runs in one CUDA graph and times its replay with events; by default
    /// the runs are [`PreparedOp::run_once`] in a row, without flushing.
    fn run_replayed(&mut self, replays: u32) -> Result<f64, DeviceError> {
        let replays = replays.max(1);
        let mut total = 0.0;
        for _ in 0..replays {
            total += self.run_once()?;
        }
        Ok(total / f64::from(replays))
    }
}

/// A device whose kernels can be calibrated.
pub trait Backend {
    fn device_info(&self) -> DeviceInfo;
    fn peak(&self) -> Peak;
    /// The timing methods this backend runs as they are meant ([`TimingMethod`]); the first is its
    /// default. Only the flush
    /// method by default: replaying calls back to back on a CPU is not what an engine's step does.
    fn timing_methods(&self) -> Vec<TimingMethod> {
        vec![TimingMethod::Flush]
    }
    /// The elementwise kernels of each of `models`' layers at `tp` ([`ElementwiseTiming`]), where
    /// the backend has them apart from its GEMMs and attention; none by default (the CPU engine's
    /// are timed inside its step trace).
    fn elementwise(
        &mut self,
        _models: &[crate::scenario::ModelSpec],
        _tp: u32,
    ) -> Result<Vec<ElementwiseTiming>, DeviceError> {
        Ok(Vec::new())
    }
    /// The per-launch floor ([`LaunchFloor`]), where the backend launches kernels.
    fn launch_floor(&mut self) -> Result<Option<LaunchFloor>, DeviceError> {
        Ok(None)
    }
    /// Whether GEMMs (and attention) in `dtype` can run here.
    fn supports(&self, dtype: Dtype) -> bool;
    /// (kernel name, hash of its source) for every kernel the backend runs, for provenance.
    fn kernel_hashes(&self) -> Vec<(String, String)>;
    /// GEMM row counts on either side of a jump in the backend's GEMM time (a kernel switch, or
    /// a kernel whose cost grows in steps of rows), which a grid should measure besides its
    /// sweep ([`GridOptions::extra_m`](super::grid::GridOptions::extra_m)): interpolation
    /// between sweep points would smooth the step away. None by default.
    fn gemm_m_breakpoints(&self) -> Vec<u32> {
        Vec::new()
    }
    fn prepare_gemm(&mut self, shape: &GemmShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError>;
    /// `shape` timed among the GEMMs a step runs around it. The default times it alone, as
    /// [`Backend::prepare_gemm`] does: the CUDA backend keeps it (its neighbours' effect is not
    /// measured); the CPU backend, whose memory-bound GEMMs depend on what streamed before
    /// them, overrides it.
    fn prepare_gemm_in_step(
        &mut self,
        shape: &GemmShape,
        _step: &StepGemms,
    ) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        self.prepare_gemm(shape)
    }
    fn prepare_attention(&mut self, shape: &AttentionShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError>;
    /// `None` when the backend has no collective (one device, or a CPU).
    fn prepare_allreduce(&mut self, _shape: &AllReduceShape) -> Result<Option<Box<dyn PreparedOp + '_>>, DeviceError> {
        Ok(None)
    }
    /// The engine's sampler, which runs on the host whatever the device: by default on the
    /// calling thread's rayon pool, as the CUDA engine samples; the CPU backend samples on its
    /// own pool, as the CPU engine does. `None` where the backend cannot time it.
    fn prepare_sampling(&mut self, shape: &SamplingShape) -> Result<Option<Box<dyn PreparedOp + '_>>, DeviceError> {
        Ok(Some(Box::new(SamplingOp::new(shape, None)?)))
    }
}

//! Pricing the families a GEMM-and-attention profile has no rows for from measured whole-module
//! rows ([`crate::calibrate::families`]): MLA and DeepSeek sparse attention from the module
//! tables, a mixture of experts' routed experts from the fused-MoE tables, Gated DeltaNet's
//! kernels from its tables.
//!
//! ```text
//!  step = roofline with those parts at zero (PricedElsewhere)      what has no rows, said
//!       + layers × module(sequences, length)                       MLA / DSA: attention
//!       + expert layers × moe(tokens)                              routed experts: GEMM time
//!       + linear layers × (gdn_context(prompts, tokens) + gdn_generation(decodes))   attention
//! ```
//!
//! A step's decodes are one batch of the generation table at their mean length (with the new
//! token); its prompts one batch of the context table at their mean new tokens. A prompt chunk
//! over `c` cached tokens is priced as a prompt of `q + c` tokens scaled by `q / (q + c)`: its
//! projections exactly (they scale with new tokens), its attention within 2× low (the tables
//! time no cached prefix). Each key must match the model exactly (its dimensions, the
//! projections' and the cache's dtypes, heads per GPU, the expert sharding); a missing one
//! leaves that part to the roofline, with a note.

use super::moe::ExpertRouting;
use super::roofline::{PricedElsewhere, Roofline};
use super::{CostModel, StepCost, overlap_cpu, to_ns};
use crate::calibrate::families::{Families, FamilyOp, RowSurface, key_field};
use crate::scenario::model::{Dtype, MlaSpec, MoeSpec, QuantScheme};
use crate::scenario::{CostParams, GpuSpec, ModelSpec};
use crate::sched::batch::Batch;

/// The dimensions aiconfigurator's MLA and DSA module tables were timed with: DeepSeek-V3's
/// (collection README, 1b.5), which DeepSeek-R1, V3.1, V3.2 and Kimi-K2 share.
const TIMED_MLA: MlaSpec = MlaSpec { q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128 };
const TIMED_MLA_HIDDEN: u32 = 7168;

/// Which of a model's weights a table's dtype describes.
#[derive(Clone, Copy)]
enum Weights {
    Attention,
    Experts,
}

/// The table's name for the dtype `model`'s `part` multiplies in, where the tables have one.
fn table_dtype(model: &ModelSpec, part: Weights) -> Option<&'static str> {
    let quant = model.weight_quant.filter(|q| match part {
        Weights::Attention => q.scope.attention,
        Weights::Experts => q.scope.experts,
    });
    match quant.map(|q| q.scheme) {
        Some(QuantScheme::Fp8Block { .. }) => Some("fp8_block"),
        Some(QuantScheme::IntWeightOnly { bits: 4, .. }) => Some("int4_wo"),
        Some(QuantScheme::Mxfp4) => Some("w4a16_mxfp4"),
        Some(QuantScheme::Nvfp4) => Some("nvfp4"),
        Some(_) => None,
        None => match model.weight_dtype {
            Dtype::Bf16 | Dtype::Fp16 => Some("bfloat16"),
            Dtype::Fp8 => Some("fp8"),
            Dtype::Fp32 => None,
        },
    }
}

/// The dtype whose rows stand in for `dtype` where it has none: per-tensor and block-scaled FP8
/// both multiply on the FP8 tensor cores and read a byte per weight.
fn stand_in(dtype: &str) -> Option<&'static str> {
    match dtype {
        "fp8" => Some("fp8_block"),
        "fp8_block" => Some("fp8"),
        _ => None,
    }
}

fn kv_name(dtype: Dtype) -> &'static str {
    if dtype == Dtype::Fp8 { "fp8" } else { "bfloat16" }
}

/// A latent-attention module's tables at one key.
#[derive(Clone, Debug, PartialEq)]
enum ModuleRows {
    /// vLLM's rows: the whole module, projections, attention and o_proj.
    Whole { context: RowSurface, generation: RowSurface },
    /// SGLang's rows: the attention kernel alone, and the absorbed multiplies around a decode's
    /// (`w_kc` before it, `w_vc` after); the projections stay the roofline's, as every GEMM
    /// without module rows does.
    Kernel { context: RowSurface, generation: RowSurface, bmm: [RowSurface; 2] },
}

impl ModuleRows {
    fn phases(&self) -> (&RowSurface, &RowSurface) {
        match self {
            ModuleRows::Whole { context, generation } | ModuleRows::Kernel { context, generation, .. } => (context, generation),
        }
    }
}

/// Gated DeltaNet's tables at one key, and the layers that run it.
#[derive(Clone, Debug, PartialEq)]
struct GdnRows {
    context: RowSurface,
    generation: RowSurface,
    layers: f64,
}

/// The cost model of a model some of whose parts are priced from whole-module rows.
#[derive(Clone, Debug, PartialEq)]
pub struct RowPriced {
    base: Roofline,
    num_layers: f64,
    module: Option<ModuleRows>,
    /// The fused-MoE table, the layers with routed experts, and how the experts route (evenly,
    /// as the table's rows did).
    moe: Option<(RowSurface, f64, ExpertRouting)>,
    gdn: Option<GdnRows>,
}

/// Per-phase sums of a step's sequences.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    prompts: f64,
    prompt_tokens: f64,
    prompt_context: f64,
    decodes: f64,
    decode_tokens: f64,
    /// Σ the decodes' lengths with their new tokens.
    decode_length: f64,
}

impl RowPriced {
    /// The model priced from `families` where they have its parts (`None` where they have none
    /// of them), with a note for each part: from which rows, or flagged as roofline. `measured`
    /// names the rows' GPU and engine.
    pub fn new(
        families: &Families,
        measured: &str,
        model: &ModelSpec,
        gpu: &GpuSpec,
        tensor_parallel: u32,
        params: &CostParams,
    ) -> (Option<RowPriced>, Vec<String>) {
        let mut notes = Vec::new();
        let module = model.mla.and_then(|mla| module_rows(families, measured, model, &mla, tensor_parallel, &mut notes));
        let moe = model.moe.and_then(|_| moe_rows(families, measured, model, tensor_parallel, &mut notes));
        let gdn = model.attention.linear.and_then(|_| gdn_rows(families, measured, model, tensor_parallel, &mut notes));
        if module.is_none() && moe.is_none() && gdn.is_none() {
            return (None, notes);
        }
        let mix = &model.attention;
        if mix.sliding_layers > 0 || mix.chunked_layers > 0 {
            notes.push(format!(
                "cost.profile: {}'s sliding-window or chunked attention layers are priced by the roofline (the profile's attention rows are dense ones)",
                model.name
            ));
        }
        notes.push(
            "cost.profile: beside those rows, the other GEMMs (shared experts, leading dense layers, router, LM head, \
             projections of other layers), other attention, elementwise work and communication are priced by the roofline"
                .into(),
        );
        let parts = PricedElsewhere {
            latent_attention: matches!(module, Some(ModuleRows::Whole { .. })),
            latent_attention_kernel: matches!(module, Some(ModuleRows::Kernel { .. })),
            routed_experts: moe.is_some(),
            linear_attention_core: gdn.is_some(),
        };
        let base = Roofline::new(model, gpu, tensor_parallel, params).without(parts);
        let expert_layers = f64::from(model.expert_layers());
        let routing = model.moe.map(|m| ExpertRouting::new(&MoeSpec { routing_skew: 0.0, ..m }, tensor_parallel));
        let moe = moe.zip(routing).map(|(s, r)| (s, expert_layers, r));
        let priced = RowPriced { base, num_layers: f64::from(model.num_layers), module, moe, gdn };
        (Some(priced), notes)
    }

    fn sums(batch: &Batch) -> Sums {
        let mut s = Sums::default();
        for work in &batch.seqs {
            let (q, c) = (f64::from(work.new_tokens), f64::from(work.context_tokens));
            if work.new_tokens == 0 {
                continue;
            }
            if work.is_decode() {
                s.decodes += 1.0;
                s.decode_tokens += q;
                s.decode_length += c + q;
            } else {
                s.prompts += 1.0;
                s.prompt_tokens += q;
                s.prompt_context += c;
            }
        }
        let cohort = &batch.cohort;
        let n = f64::from(cohort.seqs);
        s.decodes += n;
        s.decode_tokens += n;
        s.decode_length += cohort.context_tokens as f64 + n;
        s
    }

    /// The prompts' time in a context table, nanoseconds: one batch at their mean new tokens
    /// over their mean cached ones, as the module doc says.
    fn context_ns(table: &RowSurface, s: &Sums) -> f64 {
        if s.prompts == 0.0 {
            return 0.0;
        }
        let (q, c) = (s.prompt_tokens / s.prompts, s.prompt_context / s.prompts);
        table.eval_ns(s.prompts, q + c) * q / (q + c)
    }
}

impl CostModel for RowPriced {
    fn predict(&self, batch: &Batch) -> StepCost {
        if batch.is_empty() {
            return StepCost::default();
        }
        let serial = self.base.predict_serial(batch);
        let s = Self::sums(batch);
        let (mut attention_ns, mut gemm_ns) = (0.0, 0.0);
        if let Some(module) = &self.module {
            let (context, generation) = module.phases();
            let mut layer = Self::context_ns(context, &s);
            if s.decodes > 0.0 {
                layer += generation.eval_ns(s.decode_tokens, s.decode_length / s.decodes);
                if let ModuleRows::Kernel { bmm, .. } = module {
                    // A graph replays them at its padded size, as the collector timed them.
                    let rows = batch.graph_size.map_or(s.decode_tokens, f64::from);
                    gemm_ns += self.num_layers * bmm.iter().map(|t| t.eval_ns(rows, 0.0)).sum::<f64>();
                }
            }
            attention_ns += self.num_layers * layer;
        }
        if let Some(gdn) = &self.gdn {
            // A prompt's state starts from its cached one: the kernels' work is its new tokens.
            let mut layer = if s.prompts > 0.0 { gdn.context.eval_ns(s.prompts, s.prompt_tokens / s.prompts) } else { 0.0 };
            if s.decodes > 0.0 {
                layer += gdn.generation.eval_ns(s.decode_tokens, 0.0);
            }
            attention_ns += gdn.layers * layer;
        }
        if let Some((table, layers, routing)) = &self.moe {
            let tokens = s.prompt_tokens + s.decode_tokens;
            let rows = batch.graph_size.map_or(tokens, f64::from);
            gemm_ns += layers * routing.fused_layer_s(table, rows) * 1e9;
        }
        let (gemm_ns, attention_ns) = (to_ns(gemm_ns * 1e-9), to_ns(attention_ns * 1e-9));
        let cost = StepCost {
            total_ns: serial.total_ns + gemm_ns + attention_ns,
            gemm_ns: serial.gemm_ns + gemm_ns,
            attention_ns: serial.attention_ns + attention_ns,
            ..serial
        };
        overlap_cpu(cost, self.base.cpu_overlap())
    }

    fn source(&self) -> &'static str {
        "calibrated profile rows"
    }

    fn prices_each_sequence(&self) -> bool {
        self.base.prices_each_sequence()
    }
}

/// `want` where `keys` has it, else the key equal to it but for `heads`, with the heads nearest
/// in ratio.
fn key_at_heads<'a>(keys: &std::collections::BTreeSet<&'a str>, want: &str, heads: u64) -> Option<&'a str> {
    keys.get(want).copied().or_else(|| nearest_heads(keys.iter().copied(), want, heads))
}

/// The key among `keys` equal to `want` but for `heads`, with the heads nearest in ratio.
fn nearest_heads<'a>(keys: impl Iterator<Item = &'a str>, want: &str, heads: u64) -> Option<&'a str> {
    let stem = |k: &str| k.rsplit_once(" heads=").map(|(s, _)| s.to_string());
    let want_stem = stem(want)?;
    keys.filter(|k| stem(k).as_deref() == Some(want_stem.as_str()))
        .filter_map(|k| Some((k, key_field(k, "heads")?.parse::<u64>().ok()?)))
        .min_by(|a, b| {
            let d = |h: u64| (h.max(1) as f64 / heads.max(1) as f64).ln().abs();
            d(a.1).total_cmp(&d(b.1))
        })
        .map(|(k, _)| k)
}

fn module_rows(
    families: &Families,
    measured: &str,
    model: &ModelSpec,
    mla: &MlaSpec,
    tensor_parallel: u32,
    notes: &mut Vec<String>,
) -> Option<ModuleRows> {
    if model.dsa.is_none() && families.keys(FamilyOp::MlaGeneration).is_empty() && !families.keys(FamilyOp::MlaKernelGeneration).is_empty() {
        return kernel_rows(families, measured, model, mla, tensor_parallel, notes);
    }
    let (what, context_op, generation_op, timed) = match model.dsa {
        Some(_) => ("DeepSeek sparse attention", FamilyOp::DsaContext, FamilyOp::DsaGeneration, "DeepSeek-V3.2"),
        None => ("multi-head latent attention", FamilyOp::MlaContext, FamilyOp::MlaGeneration, "DeepSeek-V3"),
    };
    let flagged = |why: String| format!("cost.profile: {why}, so {}'s {what} is flagged as roofline", model.name);
    let dsa_timed = model.dsa.is_none_or(|d| d.index_topk == 2048 && d.index_n_heads == 64 && d.index_head_dim == 128);
    if *mla != TIMED_MLA || model.hidden_size != TIMED_MLA_HIDDEN || !dsa_timed {
        notes.push(flagged(format!("the {what} module rows ({measured}) time {timed}'s dimensions only")));
        return None;
    }
    let Some(gemm) = table_dtype(model, Weights::Attention) else {
        notes.push(flagged(format!("no {what} module rows ({measured}) have its projections' weight format")));
        return None;
    };
    let heads = model.shard(tensor_parallel).heads;
    let kv = kv_name(model.kv_dtype);
    let keys = families.keys(generation_op);
    let key_of = |g: &str| format!("model={timed} gemm={g} kv={kv} heads={heads}");
    let mut chosen = None;
    for g in std::iter::once(gemm).chain(stand_in(gemm)) {
        let want = key_of(g);
        if let Some(k) = key_at_heads(&keys, &want, heads) {
            chosen = Some((g, k));
            break;
        }
    }
    let Some((g, key)) = chosen else {
        notes.push(flagged(format!("no {what} module rows ({measured}) with {gemm} projections and a {kv} latent cache")));
        return None;
    };
    let (Some(context), Some(generation)) = (families.surface(context_op, key), families.surface(generation_op, key)) else {
        notes.push(flagged(format!("the {what} module rows ({measured}) at {key} lack a phase")));
        return None;
    };
    if g != gemm {
        notes.push(format!("cost.profile: no {what} module rows with {gemm} projections; using its {g} measurements"));
    }
    if key_field(key, "heads") != Some(heads.to_string().as_str()) {
        notes.push(format!("cost.profile: no {what} module rows for {heads} heads per GPU; using the nearest measured ({key})"));
    }
    notes.push(format!(
        "cost.profile: {}'s {what} is priced from the measured whole-module rows ({measured}: {key}; projections, attention and \
         o_proj of one layer); a prompt chunk over a cached prefix is priced as a prompt of its whole length scaled to its new tokens",
        model.name
    ));
    Some(ModuleRows::Whole { context, generation })
}

/// SGLang's MLA rows for `model`: its attention kernel (FA3 on Hopper) at the heads per GPU
/// and the cache's dtype, and the absorbed multiplies in the dtype SGLang runs them, with a
/// note for each choice.
fn kernel_rows(
    families: &Families,
    measured: &str,
    model: &ModelSpec,
    mla: &MlaSpec,
    tensor_parallel: u32,
    notes: &mut Vec<String>,
) -> Option<ModuleRows> {
    let flagged = |why: String| format!("cost.profile: {why}, so {}'s multi-head latent attention is flagged as roofline", model.name);
    // The query latent's rank changes only q_a and q_b, which the roofline prices.
    if *mla != (MlaSpec { q_lora_rank: mla.q_lora_rank, ..TIMED_MLA }) {
        notes.push(flagged(format!("the MLA kernel rows ({measured}) time DeepSeek-V3's latent and head widths only")));
        return None;
    }
    let heads = model.shard(tensor_parallel).heads;
    let kv = kv_name(model.kv_dtype);
    // SGLang's `post_load_weights` splits kv_b_proj into w_kc and w_vc: 128 × 128 block-FP8
    // weights are dequantized to bf16 (unless SGL_USE_DEEPGEMM_BMM), other FP8 ones requantized
    // per tensor and multiplied by `bmm_fp8`.
    let block_128 = model.weight_quant.is_some_and(|q| q.scope.attention && q.scheme == QuantScheme::Fp8Block { block_n: 128, block_k: 128 });
    let bmm_dtype = match table_dtype(model, Weights::Attention) {
        Some("fp8" | "fp8_block") if !block_128 => "fp8",
        _ => "bfloat16",
    };
    let nearest = |op: FamilyOp, want: String| key_at_heads(&families.keys(op), &want, heads).map(str::to_string);
    let Some(key) = nearest(FamilyOp::MlaKernelGeneration, format!("kv={kv} heads={heads}")) else {
        notes.push(flagged(format!("no MLA kernel rows ({measured}) with a {kv} latent cache")));
        return None;
    };
    let Some(bmm_key) = nearest(FamilyOp::MlaBmmPre, format!("dtype={bmm_dtype} heads={heads}")) else {
        notes.push(flagged(format!("no absorbed-BMM rows ({measured}) in {bmm_dtype}")));
        return None;
    };
    let surfaces = (
        families.surface(FamilyOp::MlaKernelContext, &key),
        families.surface(FamilyOp::MlaKernelGeneration, &key),
        families.surface(FamilyOp::MlaBmmPre, &bmm_key),
        families.surface(FamilyOp::MlaBmmPost, &bmm_key),
    );
    let (Some(context), Some(generation), Some(pre), Some(post)) = surfaces else {
        notes.push(flagged(format!("the MLA kernel rows ({measured}) at {key} and {bmm_key} lack a phase or a multiply")));
        return None;
    };
    for chosen in [&key, &bmm_key] {
        if key_field(chosen, "heads") != Some(heads.to_string().as_str()) {
            notes.push(format!("cost.profile: no MLA rows for {heads} heads per GPU; using the nearest measured ({chosen})"));
        }
    }
    notes.push(format!(
        "cost.profile: {}'s multi-head latent attention is priced from the measured attention-kernel rows ({measured}: {key}) and, \
         in decodes, the absorbed multiplies' rows ({bmm_key}); its projections (q_a and kv_a, q_b, kv_b in prefill, o_proj) by the \
         roofline; a prompt chunk over a cached prefix is priced as a prompt of its whole length scaled to its new tokens",
        model.name
    ));
    Some(ModuleRows::Kernel { context, generation, bmm: [pre, post] })
}

/// The fused-MoE rows of `model`'s routed experts at `tensor_parallel` (a `tp` slice of every
/// expert, or whole experts over `tp` GPUs under expert parallelism), with a note saying which,
/// or why none. A model whose experts route no token (a data-parallel rank's own layers) has
/// none to price, and no note.
pub(crate) fn moe_rows(
    families: &Families,
    measured: &str,
    model: &ModelSpec,
    tensor_parallel: u32,
    notes: &mut Vec<String>,
) -> Option<RowSurface> {
    let moe = model.moe.filter(|m| m.experts_per_token > 0)?;
    let (tp, ep) = if moe.expert_parallel && tensor_parallel > 1 { (1, tensor_parallel) } else { (tensor_parallel, 1) };
    let flagged = |why: String| format!("cost.profile: {why}, so {}'s routed experts are flagged as roofline", model.name);
    let Some(dtype) = table_dtype(model, Weights::Experts) else {
        notes.push(flagged(format!("no fused-MoE rows ({measured}) have its experts' weight format")));
        return None;
    };
    let shape = format!(
        "hidden={} inter={} topk={} experts={} tp={tp} ep={ep}",
        model.hidden_size, moe.expert_ffn_size, moe.experts_per_token, moe.num_experts
    );
    let keys = families.keys(FamilyOp::Moe);
    // The tables' per-tensor `fp8` MoE rows time ModelOpt's static FP8 through FlashInfer's
    // CUTLASS kernel, which vLLM runs for ModelOpt checkpoints alone; the FP8 checkpoints
    // people serve (compressed-tensors FP8-dynamic, block-scaled DeepSeek and Qwen3) run the
    // Triton or DeepGEMM kernels the `fp8_block` rows time. On Llama-4-Scout's experts at EP 2
    // the `fp8` rows take 1.8 ms at 16 tokens, `fp8_block` 0.37 ms and bf16 0.70 ms.
    let candidates: &[&str] = if dtype == "fp8" || dtype == "fp8_block" { &["fp8_block"] } else { std::slice::from_ref(&dtype) };
    let Some((d, key)) = candidates.iter().copied().find_map(|d| {
        let want = format!("dtype={d} {shape}");
        keys.get(want.as_str()).map(|k| (d, *k))
    }) else {
        notes.push(flagged(format!("no fused-MoE rows ({measured}) for {dtype} experts of {shape}")));
        return None;
    };
    if d != dtype {
        notes.push(format!(
            "cost.profile: {dtype} experts are priced from the {d} fused-MoE rows (its {dtype} rows time ModelOpt's static FP8 kernel only)"
        ));
    }
    let skew = if moe.routing_skew > 0.0 { "; the rows route evenly, so the model's routing skew is not applied" } else { "" };
    notes.push(format!(
        "cost.profile: {}'s routed experts are priced from the measured fused-MoE rows ({measured}: {key}, balanced routing){skew}",
        model.name
    ));
    families.surface(FamilyOp::Moe, key)
}

fn gdn_rows(families: &Families, measured: &str, model: &ModelSpec, tensor_parallel: u32, notes: &mut Vec<String>) -> Option<GdnRows> {
    let linear = model.attention.linear?;
    let t = tensor_parallel.max(1);
    let key = format!(
        "k_heads={} k_dim={} v_heads={} v_dim={}",
        linear.num_k_heads.div_ceil(t),
        linear.head_k_dim,
        linear.num_v_heads.div_ceil(t),
        linear.head_v_dim
    );
    let rows = (linear.conv_kernel == 4)
        .then(|| Some((families.surface(FamilyOp::GdnContext, &key)?, families.surface(FamilyOp::GdnGeneration, &key)?)))
        .flatten();
    let Some((context, generation)) = rows else {
        notes.push(format!(
            "cost.profile: no Gated DeltaNet rows ({measured}) for {key} with a convolution of 4, so {}'s linear-attention layers are flagged as roofline",
            model.name
        ));
        return None;
    };
    notes.push(format!(
        "cost.profile: {}'s linear-attention kernels are priced from the measured Gated DeltaNet rows ({measured}: {key}; convolution and delta rule, projections by the roofline)",
        model.name
    ));
    Some(GdnRows { context, generation, layers: f64::from(linear.layers) })
}

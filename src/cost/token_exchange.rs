//! How data-parallel ranks send a mixture of experts' tokens to their experts and back, per
//! vLLM's `--all2all-backend`, priced per expert layer from the tokens each rank runs:
//!
//! | backend | dispatch | combine | bytes each GPU receives, per direction |
//! | --- | --- | --- | --- |
//! | `allgather_reducescatter` | all-gather over the `d` ranks | reduce-scatter | `(d−1) × T × h × b` |
//! | `naive` | every rank broadcasts its tokens | all-reduce | `(d−1) T h b`; the all-reduce twice that |
//! | `pplx`, `deepep_*` | all-to-all over the `d × t` GPUs | all-to-all back | `T/t × k × h × b × (g−1)/g` |
//!
//! (`T` tokens per rank, `h` hidden size, `b` bytes per activation, `k` experts per token,
//! `g = d × t` GPUs), each over the GPU's link at `collective_bandwidth_efficiency` plus
//! `collective_latency_us` per collective, as the roofline prices its all-reduces.
//!
//! The default backend's all-gather and reduce-scatter are NCCL's, priced from nccl-tests'
//! timings where they exist for the GPU and rank count, one GPU per rank
//! (`calibration/nccl/allgather_reducescatter.csv`: the RTX PRO 6000 Server Edition on 2, 4 and
//! 8 GPUs over PCIe, where they run at about half the link's 64 GB/s), interpolated as DeepEP's.
//!
//! DeepEP's kernels are priced from measurement where it exists: aiconfigurator's DeepEP tables
//! (`calibration/deepep/deepep.csv`, from DeepEP's own harness on one 8-GPU node) give dispatch
//! and combine by tokens per rank for H100, H200 and B200 and the model's (hidden, experts,
//! top-k), on exactly 8 GPUs. Between measured token counts the time is interpolated in
//! (ln tokens, ln time); below the smallest it is held (the latency floor), above the largest
//! it grows linearly with the tokens. Elsewhere the formula prices them, and says so.

use crate::calibrate::profile::index::collective_time_s;
use crate::calibrate::profile::interpolate::Curve;
use crate::scenario::model::ModelSpec;
use crate::scenario::parallel::{All2AllBackend, DataParallel, GPUS_PER_NODE};
use crate::scenario::{CostParams, GpuSpec};

/// The DeepEP measurements, as `scripts/deepep_table.py` writes them.
const DEEPEP_CSV: &str = include_str!("../../calibration/deepep/deepep.csv");
/// NCCL's all-gather and reduce-scatter, as `scripts/nccl_table.py` writes them.
const NCCL_CSV: &str = include_str!("../../calibration/nccl/allgather_reducescatter.csv");
/// The GPUs DeepEP's tables were measured on: EP 8 within one node.
const DEEPEP_GPUS: u32 = 8;
/// Dispatch and combine: two exchanges per expert layer.
const EXCHANGES_PER_LAYER: f64 = 2.0;
const S_PER_US: f64 = 1e-6;

/// One step's token exchange over every expert layer.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenExchange {
    expert_layers: f64,
    /// Tokens each GPU dispatches per token of its rank (`1/t` for a true all-to-all).
    tokens_per_gpu_per_rank_token: f64,
    how: Price,
}

#[derive(Clone, Debug, PartialEq)]
enum Price {
    /// Measured dispatch and combine, (ln tokens per GPU, ln seconds).
    Measured { dispatch: Curve, combine: Curve },
    /// Seconds per token of a rank and fixed seconds, per layer.
    Formula { s_per_token: f64, latency_s: f64 },
}

impl TokenExchange {
    /// The exchange of `model` over `dp.ranks` ranks of `tensor_parallel` GPUs of `gpu`, and a
    /// line that says how it is priced.
    pub fn new(model: &ModelSpec, gpu: &GpuSpec, tensor_parallel: u32, dp: &DataParallel, params: &CostParams) -> (TokenExchange, String) {
        let moe = model.moe.expect("data-parallel ranks exchange tokens only for experts");
        let t = f64::from(tensor_parallel.max(1));
        let d = f64::from(dp.ranks);
        let g = t * d;
        let token_bytes = model.hidden_size as f64 * model.activation_bytes() as f64;
        let k = f64::from(moe.experts_per_token.min(moe.num_experts));
        let expert_layers = f64::from(model.expert_layers());
        let backend = dp.all2all;
        let tokens_per_gpu_per_rank_token = if backend.is_all_to_all() { 1.0 / t } else { 1.0 };
        let shape = format!("hidden {}, {} experts, top-{}", model.hidden_size, moe.num_experts, moe.experts_per_token);
        let kernels = match backend {
            All2AllBackend::DeepepLowLatency => Some("low_latency"),
            All2AllBackend::DeepepHighThroughput => Some("high_throughput"),
            _ => None,
        };
        let gpus = tensor_parallel * dp.ranks;
        let measured = kernels
            .filter(|_| gpus == DEEPEP_GPUS)
            .and_then(|kernels| measured_curves(&gpu.name, kernels, model.hidden_size, moe.num_experts, moe.experts_per_token));
        let exchange = |how| TokenExchange { expert_layers, tokens_per_gpu_per_rank_token, how };
        if let Some((dispatch, combine, table_gpu)) = measured {
            let note = format!(
                "data parallel: {}'s dispatch and combine from DeepEP's measured {table_gpu} table (EP {DEEPEP_GPUS}, {shape}; calibration/deepep/deepep.csv)",
                backend.name()
            );
            return (exchange(Price::Measured { dispatch, combine }), note);
        }
        // The default backend's collectives are NCCL's own over the ranks' GPUs: measured where
        // nccl-tests timed them on this GPU and GPU count (one GPU per rank).
        let gathered = (backend == All2AllBackend::AllgatherReducescatter && tensor_parallel <= 1)
            .then(|| nccl_curves(&gpu.name, dp.ranks, token_bytes))
            .flatten();
        if let Some((gather, scatter, table_gpu)) = gathered {
            let note = format!(
                "data parallel: {}'s dispatch and combine from NCCL's measured all-gather and reduce-scatter on {} {table_gpu} GPUs (calibration/nccl/allgather_reducescatter.csv)",
                backend.name(),
                dp.ranks
            );
            return (exchange(Price::Measured { dispatch: gather, combine: scatter }), note);
        }
        let link = params.collective_bandwidth_efficiency
            * if backend.is_all_to_all() { gpu.all_to_all_bandwidth_bytes_per_s(gpus) } else { gpu.ring_bandwidth_bytes_per_s(gpus) };
        // Bytes each GPU receives in the dispatch, per token of a rank (the combine mirrors it).
        let (dispatch_bytes, combine_bytes) = match backend {
            All2AllBackend::AllgatherReducescatter => ((d - 1.0) * token_bytes, (d - 1.0) * token_bytes),
            All2AllBackend::Naive => ((d - 1.0) * token_bytes, 2.0 * (d - 1.0) * token_bytes),
            _ => {
                let one_way = k * token_bytes * (g - 1.0) / g;
                (one_way, one_way)
            }
        };
        let why = match kernels {
            Some(_) if gpus != DEEPEP_GPUS => format!("DeepEP was measured on {DEEPEP_GPUS} GPUs, not {gpus}"),
            Some(_) => format!("no DeepEP measurement on {} with {shape}", gpu.name),
            None => "no measurement of it is bundled".into(),
        };
        let mut note = format!(
            "data parallel: {}'s dispatch and combine priced by the link-bandwidth formula (roofline): {why}",
            backend.name()
        );
        if gpus > GPUS_PER_NODE {
            note += &match gpu.scale_out_bandwidth_bytes_per_s {
                Some(network) => format!(
                    "; the {gpus} GPUs span nodes of {GPUS_PER_NODE}, whose network carries {:.0} GB/s a GPU ({} reference server)",
                    network / 1e9,
                    gpu.name
                ),
                None => format!(
                    "; all {gpus} GPUs are taken to share {}'s GPU-to-GPU link, where past {GPUS_PER_NODE} a deployment spans nodes and crosses their network (no reference server gives {}'s: set hardware.scale_out_gbps)",
                    gpu.name, gpu.name
                ),
            };
        }
        let price = Price::Formula {
            s_per_token: tokens_per_gpu_per_rank_token * (dispatch_bytes + combine_bytes) / link,
            latency_s: EXCHANGES_PER_LAYER * params.collective_latency_us * S_PER_US,
        };
        (exchange(price), note)
    }

    /// The exchange over every expert layer, seconds, for a step whose ranks each run
    /// `tokens_per_rank` token rows.
    pub fn time_s(&self, tokens_per_rank: f64) -> f64 {
        if tokens_per_rank <= 0.0 {
            return 0.0;
        }
        let per_layer = match &self.how {
            Price::Measured { dispatch, combine } => {
                let tokens = tokens_per_rank * self.tokens_per_gpu_per_rank_token;
                collective_time_s(dispatch, tokens) + collective_time_s(combine, tokens)
            }
            Price::Formula { s_per_token, latency_s } => tokens_per_rank * s_per_token + latency_s,
        };
        self.expert_layers * per_layer
    }
}

/// The table's name for a GPU of servesim's presets, where it measured one.
fn table_gpu(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_uppercase();
    ["H100", "H200", "B200"].into_iter().find(|g| name.starts_with(g))
}

/// Dispatch and combine curves of `kernels` on `gpu` for the shape, and the table's GPU.
fn measured_curves(gpu: &str, kernels: &str, hidden: u32, experts: u32, top_k: u32) -> Option<(Curve, Curve, &'static str)> {
    let table = table_gpu(gpu)?;
    let key = format!("{},{kernels},{hidden},{experts},{top_k},", table.to_ascii_lowercase());
    let (mut dispatch, mut combine) = (Vec::new(), Vec::new());
    for line in DEEPEP_CSV.lines().filter(|l| l.starts_with(&key)) {
        let fields: Vec<f64> = line[key.len()..].split(',').filter_map(|f| f.parse().ok()).collect();
        let [tokens, dispatch_us, combine_us] = fields[..] else { continue };
        let x = crate::calibrate::profile::interpolate::ln1(tokens);
        dispatch.push((x, (dispatch_us * S_PER_US).ln()));
        combine.push((x, (combine_us * S_PER_US).ln()));
    }
    Some((Curve::new(dispatch)?, Curve::new(combine)?, table))
}

/// NCCL's all-gather (dispatch) and reduce-scatter (combine) curves over `gpus` GPUs of `gpu`,
/// by tokens per rank of `token_bytes` each, and the table's GPU; `None` where none was timed.
fn nccl_curves(gpu: &str, gpus: u32, token_bytes: f64) -> Option<(Curve, Curve, &'static str)> {
    let name = gpu.to_ascii_uppercase().replace(' ', "-");
    let table = ["RTX-PRO-6000"].into_iter().find(|g| name.starts_with(g))?;
    let key = format!("{},{gpus},", table.to_ascii_lowercase());
    let (mut gather, mut scatter) = (Vec::new(), Vec::new());
    for line in NCCL_CSV.lines().filter(|l| l.starts_with(&key)) {
        let fields: Vec<f64> = line[key.len()..].split(',').filter_map(|f| f.parse().ok()).collect();
        let [bytes_per_rank, gather_us, scatter_us] = fields[..] else { continue };
        let x = crate::calibrate::profile::interpolate::ln1(bytes_per_rank / token_bytes);
        gather.push((x, (gather_us * S_PER_US).ln()));
        scatter.push((x, (scatter_us * S_PER_US).ln()));
    }
    Some((Curve::new(gather)?, Curve::new(scatter)?, table))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RTX PRO 6000's 2-GPU rows (calibration/nccl/allgather_reducescatter.csv): a rank's
    /// 4 MiB is 1,024 tokens of Qwen3-30B-A3B (hidden 2,048, bf16), 145.5 µs to gather and
    /// 153.6 µs to scatter; no table for 3 GPUs or another GPU.
    #[test]
    fn nccl_rows_price_the_default_exchange_by_tokens_per_rank() {
        let (gather, scatter, gpu) = nccl_curves("RTX-PRO-6000", 2, 4096.0).expect("2 RTX PRO 6000s");
        assert_eq!(gpu, "RTX-PRO-6000");
        let us = |curve: &Curve, tokens: f64| collective_time_s(curve, tokens) / S_PER_US;
        assert!((us(&gather, 1024.0) - 145.54).abs() < 1e-6 && (us(&scatter, 1024.0) - 153.61).abs() < 1e-6);
        assert!(nccl_curves("RTX-PRO-6000", 3, 4096.0).is_none() && nccl_curves("H100-SXM", 2, 4096.0).is_none());
    }

    /// DeepSeek-V3's low-latency rows on the H200 (calibration/deepep/deepep.csv): the measured
    /// point itself, log-log between two, held below the first, linear above the last.
    #[test]
    fn measured_rows_are_interpolated_log_log() {
        let (dispatch, combine, gpu) = measured_curves("H200", "low_latency", 7168, 256, 8).expect("DeepSeek-V3's shape");
        assert_eq!(gpu, "H200");
        let us = |curve: &Curve, tokens: f64| collective_time_s(curve, tokens) / S_PER_US;
        assert!((us(&dispatch, 64.0) - 22.994).abs() < 1e-9 && (us(&combine, 64.0) - 38.757).abs() < 1e-9);
        // Half-way between 64 and 128 tokens in ln: the geometric mean of the two times.
        let between = us(&dispatch, (64.0f64 * 128.0).sqrt());
        assert!((between - (22.994f64 * 35.119).sqrt()).abs() < 1e-9, "{between}");
        assert!((us(&dispatch, 0.5) - 11.905).abs() < 1e-9);
        assert!((us(&combine, 2048.0) - 2.0 * 480.969).abs() < 1e-6);
        // High-throughput rows are vLLM's 20 SMs' (26.990 µs at one token, not 4 SMs' 26.068).
        let (dispatch, _, _) = measured_curves("h200-sxm", "high_throughput", 7168, 256, 8).unwrap();
        assert!((us(&dispatch, 1.0) - 26.990).abs() < 1e-9);
        // No table for an A100, nor for a shape nobody measured.
        assert!(measured_curves("A100-80G-SXM", "low_latency", 7168, 256, 8).is_none());
        assert!(measured_curves("H200", "low_latency", 7168, 257, 8).is_none());
    }

    /// DeepSeek-V3 over 16 H200 ranks (two nodes) with DeepEP: measured on 8 GPUs only, so the
    /// formula prices it, and 8/15 of each GPU's bytes cross the network at 50 GB/s: 4.8 times
    /// NVLink's time per token (450 / 93.75), the latency the same.
    #[test]
    fn an_exchange_past_one_node_crosses_the_network() {
        let model = ModelSpec::preset("DeepSeek-V3").expect("preset");
        let h200 = GpuSpec::preset("H200").expect("preset");
        let nvlink_only = GpuSpec { scale_out_bandwidth_bytes_per_s: None, ..h200.clone() };
        let dp = DataParallel { ranks: 16, all2all: All2AllBackend::DeepepLowLatency, lockstep: true };
        let params = CostParams::default();
        let (across, note) = TokenExchange::new(&model, &h200, 1, &dp, &params);
        let (within, old_note) = TokenExchange::new(&model, &nvlink_only, 1, &dp, &params);
        let per_token = |x: &TokenExchange| x.time_s(2.0) - x.time_s(1.0);
        assert!((per_token(&across) / per_token(&within) - 4.8).abs() < 1e-9, "{} {}", per_token(&across), per_token(&within));
        assert!(note.contains("span nodes") && note.contains("50 GB/s"), "{note}");
        assert!(old_note.contains("hardware.scale_out_gbps"), "{old_note}");
    }

}

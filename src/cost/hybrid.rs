//! The roofline's attention for models whose layers attend differently
//! ([`AttentionMix`](crate::scenario::model::AttentionMix)): full layers as every layer of a
//! plain model, sliding-window and chunked layers over the keys they see, and linear-attention
//! layers over their per-sequence state.
//!
//! ```text
//!  kind      keys new token p sees      cache read for a sequence of c cached, q new tokens
//!  full      p + 1                      c + q
//!  sliding   min(p + 1, W)              c + q − max(0, c + 1 − W)
//!  chunked   (p mod C) + 1              c + q − ⌊c / C⌋·C
//!  linear    none: a state of H_v·d_k·d_v per sequence, read and written once a step,
//!            updated and read by every token (`LinearAttention::state_macs_per_token`)
//! ```
//!
//! A sliding or chunked layer's keys are priced at the attention kernel's efficiency, a
//! prefill's cached keys too (the prefix kernel's rate applies to full layers only). Each
//! sequence is priced by its own context, so the simulator lists every decode rather than
//! keeping them as a cohort of totals ([`super::CostModel::prices_each_sequence`]).

use crate::rounding::count_to_f64;
use crate::scenario::model::{AttentionMix, LinearAttention};
use crate::sched::batch::Batch;

/// FLOPs per multiply-accumulate.
const FLOPS_PER_MAC: f64 = 2.0;
/// A state is read at the step's start and written at its end.
const STATE_PASSES: f64 = 2.0;
/// Per token a linear layer reads q, k, v and the gate z and writes its output: the widths of
/// `in_proj_qkvz` and one value width.
const LINEAR_OUTPUT_VECTORS: f64 = 1.0;

/// Per-key, per-cached-token and per-query prices of one attention layer, seconds: the
/// roofline's full-attention rates, which sliding and chunked layers share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AttentionRates {
    pub s_per_key: f64,
    pub s_per_kv_token: f64,
    pub s_per_query: f64,
}

/// What the layers that are not full attention cost, beside the full ones.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HybridAttention {
    full_layers: f64,
    sliding_layers: f64,
    window: u64,
    chunked_layers: f64,
    chunk: u64,
    linear: Option<LinearLayers>,
    rates: AttentionRates,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct LinearLayers {
    layers: f64,
    /// Compute per token: the state's update and readout at the attention kernels' rate.
    compute_s_per_token: f64,
    /// Memory per sequence in the step: its state read and written.
    state_s_per_seq: f64,
    /// Memory per token: its projections' outputs read, its output written.
    memory_s_per_token: f64,
}

impl HybridAttention {
    /// `None` for a model whose every layer is full attention. `attention_flops_per_s` and
    /// `bytes_per_s` are effective rates; `act_bytes` the activations' width.
    pub(crate) fn new(
        mix: &AttentionMix,
        num_layers: u32,
        tensor_parallel: u32,
        rates: AttentionRates,
        attention_flops_per_s: f64,
        bytes_per_s: f64,
        act_bytes: u64,
    ) -> Option<HybridAttention> {
        if !mix.is_mixed() {
            return None;
        }
        let linear = mix.linear.map(|l: LinearAttention| {
            let [(_, qkvz), _, (value_width, _)] = l.projections(0, tensor_parallel as u64);
            LinearLayers {
                layers: l.layers as f64,
                compute_s_per_token: FLOPS_PER_MAC * l.state_macs_per_token(tensor_parallel) / attention_flops_per_s,
                state_s_per_seq: STATE_PASSES * l.state_bytes_per_gpu(tensor_parallel, act_bytes) as f64 / bytes_per_s,
                memory_s_per_token: (qkvz as f64 + LINEAR_OUTPUT_VECTORS * value_width as f64) * act_bytes as f64 / bytes_per_s,
            }
        });
        Some(HybridAttention {
            full_layers: mix.full_layers(num_layers) as f64,
            sliding_layers: mix.sliding_layers as f64,
            window: u64::from(mix.sliding_window.max(1)),
            chunked_layers: mix.chunked_layers as f64,
            chunk: u64::from(mix.attention_chunk.max(1)),
            linear,
            rates,
        })
    }

    /// Prices the linear layers' kernels at zero (their time priced elsewhere).
    pub(crate) fn without_linear_core(&mut self) {
        if let Some(linear) = &mut self.linear {
            (linear.compute_s_per_token, linear.state_s_per_seq, linear.memory_s_per_token) = (0.0, 0.0, 0.0);
        }
    }

    /// The step's attention in every layer, seconds: the full layers at `full_layer_s` each (the
    /// roofline's price of one full layer for this batch), the others from the batch.
    pub(crate) fn time_s(&self, batch: &Batch, full_layer_s: f64) -> f64 {
        let (mut sliding_keys, mut sliding_kv, mut chunked_keys, mut chunked_kv) = (0u64, 0u64, 0u64, 0u64);
        let (mut tokens, mut seqs) = (0u64, 0u64);
        for work in &batch.seqs {
            let (c, q) = (u64::from(work.context_tokens), u64::from(work.new_tokens));
            if q == 0 {
                continue;
            }
            tokens += q;
            seqs += 1;
            if self.sliding_layers > 0.0 {
                sliding_keys += capped_sum(c + 1, c + q, self.window);
                sliding_kv += c + q - (c + 1).saturating_sub(self.window);
            }
            if self.chunked_layers > 0.0 {
                chunked_keys += chunk_positions_sum(c + q, self.chunk) - chunk_positions_sum(c, self.chunk);
                chunked_kv += c + q - c / self.chunk * self.chunk;
            }
        }
        debug_assert_eq!(batch.cohort.seqs, 0, "a hybrid model prices each sequence: no cohort");
        let queries_s = count_to_f64(tokens) * self.rates.s_per_query;
        let layer_s = |keys: u64, kv: u64| {
            let compute_s = count_to_f64(keys) * self.rates.s_per_key;
            let memory_s = count_to_f64(kv) * self.rates.s_per_kv_token + queries_s;
            compute_s.max(memory_s)
        };
        let mut total_s = self.full_layers * full_layer_s;
        if self.sliding_layers > 0.0 {
            total_s += self.sliding_layers * layer_s(sliding_keys, sliding_kv);
        }
        if self.chunked_layers > 0.0 {
            total_s += self.chunked_layers * layer_s(chunked_keys, chunked_kv);
        }
        if let Some(linear) = &self.linear {
            let tokens = count_to_f64(tokens);
            let compute_s = tokens * linear.compute_s_per_token;
            let memory_s = count_to_f64(seqs) * linear.state_s_per_seq + tokens * linear.memory_s_per_token;
            total_s += linear.layers * compute_s.max(memory_s);
        }
        total_s
    }
}

/// Σ min(k, cap) for k = a..=b (a ≥ 1): the keys a sliding window of `cap` lets tokens see.
pub(crate) fn capped_sum(a: u64, b: u64, cap: u64) -> u64 {
    let ramp_end = b.min(cap);
    let ramp = if a <= ramp_end { (a + ramp_end) * (ramp_end - a + 1) / 2 } else { 0 };
    ramp + cap * (b - ramp_end.max(a - 1))
}

/// Σ ((p mod chunk) + 1) for p = 0..n: the keys the first `n` tokens see under chunked local
/// attention.
fn chunk_positions_sum(n: u64, chunk: u64) -> u64 {
    let (whole, rest) = (n / chunk, n % chunk);
    whole * chunk * (chunk + 1) / 2 + rest * (rest + 1) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute(c: u64, q: u64, key: impl Fn(u64) -> u64) -> u64 {
        (c..c + q).map(key).sum()
    }

    #[test]
    fn key_counts_match_counting_one_by_one() {
        for c in [0, 1, 5, 127, 128, 129, 300, 8191, 8192, 9000] {
            for q in [1, 2, 7, 128, 200, 5000] {
                assert_eq!(capped_sum(c + 1, c + q, 128), brute(c, q, |p| (p + 1).min(128)), "c {c} q {q}");
                let chunked = chunk_positions_sum(c + q, 8192) - chunk_positions_sum(c, 8192);
                assert_eq!(chunked, brute(c, q, |p| p % 8192 + 1), "c {c} q {q}");
            }
        }
    }
}

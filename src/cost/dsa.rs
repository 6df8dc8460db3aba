//! DeepSeek sparse attention's work in one layer of a step, for the roofline to price beside
//! MLA's ([`crate::scenario::model::DsaSpec`] describes the indexer).
//!
//! ```text
//!  per query token t of a sequence           keys it touches
//!  indexer: q(t) · k(s), ReLU, Σ heads       every key s ≤ t (fp8, at the FP8 peak where there is one)
//!  top-k over those scores                   reads the scores back
//!  MLA, absorbed form                        the min(t + 1, index_topk) keys chosen
//! ```
//!
//! vLLM's sparse MLA backends (`SparseMLAAttentionImpl`, `vllm/v1/attention/backends/mla/
//! flashmla_sparse.py`) run every query in MLA's absorbed form, prefill included: each query
//! gathers its own chosen latents, so nothing is decompressed and kv_b runs once per token. So
//! a query's MLA work is a decode's on its chosen keys, which cap it as a sliding window of
//! `index_topk` would (same count, other keys). The indexer reads each cached key once per
//! sequence and step (its logits kernel tiles the queries), writes one fp32 score per (query,
//! key) and the top-k reads it back, then writes `index_topk` int32 indices per query
//! (`sparse_attn_indexer` in `vllm/model_executor/layers/sparse_attn_indexer.py`: DeepGEMM's
//! fp8 MQA logits into an fp32 matrix, then a top-k kernel).

use super::hybrid::capped_sum;
use super::mla::AttentionCounts;
use crate::rounding::count_to_f64;
use crate::scenario::model::DsaSpec;
use crate::sched::batch::Batch;

/// FLOPs per multiply-accumulate.
const FLOPS_PER_MAC: f64 = 2.0;
/// Bytes of one indexer score: fp32.
const SCORE_BYTES: f64 = 4.0;
/// Each score is written by the logits kernel and read by the top-k.
const SCORE_PASSES: f64 = 2.0;
/// Bytes of an indexer query value (fp8) and of a head weight (fp32), per query token.
const QUERY_VALUE_BYTES: f64 = 1.0;
const HEAD_WEIGHT_BYTES: f64 = 4.0;
/// Bytes of one chosen key's index, per query (int32), which MLA's kernel reads.
const INDEX_BYTES: f64 = 4.0;

/// The indexer's prices on one GPU, and the cap it puts on MLA's keys.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct DsaIndexer {
    topk: u64,
    /// Compute per (query, visible key): the heads' dot products at the indexer's rate.
    s_per_key: f64,
    /// Memory per cached key read (its fp8 values and scale) and per score written and read.
    s_per_kv_token: f64,
    s_per_score: f64,
    /// Memory per query: its fp8 heads, their weights and its chosen indices.
    s_per_query: f64,
}

/// One layer's DSA counts for a step: MLA's (every query in the absorbed form over its chosen
/// keys) and the indexer's (every visible key).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct DsaCounts {
    pub mla: AttentionCounts,
    /// (query, key) pairs the indexer scores: every key each query sees.
    pub visible_keys: u64,
    /// Cached tokens whose indexer keys are read: each sequence's context and new tokens.
    pub kv_tokens: u64,
    pub queries: u64,
}

impl DsaIndexer {
    /// `flops_per_s`: the effective rate of the indexer's fp8 dot products (the FP8 peak where
    /// the GPU has one); `bytes_per_s`: the effective memory bandwidth.
    pub(crate) fn new(dsa: &DsaSpec, flops_per_s: f64, bytes_per_s: f64) -> DsaIndexer {
        let (heads, d) = (dsa.index_n_heads as f64, dsa.index_head_dim as f64);
        DsaIndexer {
            topk: u64::from(dsa.index_topk.max(1)),
            s_per_key: FLOPS_PER_MAC * heads * d / flops_per_s,
            s_per_kv_token: dsa.cache_bytes_per_token() as f64 / bytes_per_s,
            s_per_score: SCORE_PASSES * SCORE_BYTES / bytes_per_s,
            s_per_query: (heads * (d * QUERY_VALUE_BYTES + HEAD_WEIGHT_BYTES) + dsa.index_topk as f64 * INDEX_BYTES) / bytes_per_s,
        }
    }

    /// This indexer at no cost (its time priced elsewhere); its counts are unchanged.
    pub(crate) fn free(self) -> DsaIndexer {
        DsaIndexer { s_per_key: 0.0, s_per_kv_token: 0.0, s_per_score: 0.0, s_per_query: 0.0, ..self }
    }

    /// The step's counts, sequence by sequence: query `p` (0-based position) of a sequence sees
    /// `p + 1` keys and MLA attends to `min(p + 1, index_topk)` of them.
    pub(crate) fn counts(&self, batch: &Batch) -> DsaCounts {
        let mut n = DsaCounts::default();
        let mut chosen = 0u64;
        for work in &batch.seqs {
            let (c, q) = (u64::from(work.context_tokens), u64::from(work.new_tokens));
            if q == 0 {
                continue;
            }
            n.visible_keys += q * c + q * (q + 1) / 2;
            chosen += capped_sum(c + 1, c + q, self.topk);
            n.kv_tokens += c + q;
            n.queries += q;
        }
        // A cohort keeps only its total context (a model that prices each sequence has none):
        // its decodes are capped together, exact when all or none see more than the top-k.
        let cohort = &batch.cohort;
        let seqs = u64::from(cohort.seqs);
        n.visible_keys += cohort.context_tokens + seqs;
        chosen += (cohort.context_tokens + seqs).min(seqs * self.topk);
        n.kv_tokens += cohort.context_tokens + seqs;
        n.queries += seqs;
        // Each query gathers its own chosen latents: one read per (query, chosen key).
        n.mla = AttentionCounts {
            decode_keys: count_to_f64(chosen),
            decode_kv_tokens: count_to_f64(chosen),
            decode_queries: count_to_f64(n.queries),
            ..AttentionCounts::default()
        };
        n
    }

    /// The indexer's time in one layer over `counts`, seconds: its scores' compute or its
    /// memory traffic, whichever is longer.
    pub(crate) fn time_s(&self, counts: &DsaCounts) -> f64 {
        let compute_s = count_to_f64(counts.visible_keys) * self.s_per_key;
        let memory_s = count_to_f64(counts.kv_tokens) * self.s_per_kv_token
            + count_to_f64(counts.visible_keys) * self.s_per_score
            + count_to_f64(counts.queries) * self.s_per_query;
        if compute_s >= memory_s { compute_s } else { memory_s }
    }
}

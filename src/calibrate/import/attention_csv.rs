//! The attention CSVs of vidur and the simulators derived from it (LLMServingSim, Frontier): one
//! row per timed attention call, columns `n_embd, n_q_head, n_kv_head,
//! num_tensor_parallel_workers, batch_size, prefill_chunk_size, kv_cache_size, is_prefill,
//! attention_backend` and `time_stats.attn_{prefill,decode}.{min,max,mean,median,std}` in
//! milliseconds of kernel time. The sources agree on the columns and differ on what
//! `kv_cache_size` counts ([`KvMeaning`]).
//!
//! → servesim attention rows, per GPU (heads ÷ TP, head dim = n_embd ÷ n_q_head):
//! - a prefill row over no earlier tokens: `prefill`, batch 1, `query_len` = the chunk;
//! - a prefill row over a cached prefix: `mixed` (a chunk of a prompt attending to the chunk
//!   and `context_len` cached tokens), the case aiconfigurator's tables never measured;
//! - a decode row: `decode`, one new token per sequence over `context_len` cached tokens.
//!
//! Each row's time is the `median` column of its phase's kernel, plus the KV-cache write where
//! the source times it apart (`attn_kv_cache_save`: aiconfigurator's vLLM rows include it).

use super::ImportError;
use super::build::{Accumulator, DIM_MAX, dim};
use super::table::Table;
use crate::calibrate::backend::{AttentionPhase, AttentionShape};
use crate::calibrate::grid::Shape;
use crate::scenario::Dtype;

/// What a row's `prefill_chunk_size` and `kv_cache_size` count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvMeaning {
    /// vidur and Frontier: a prefill row's chunk attends to itself and `kv_cache_size` tokens
    /// cached before it; each decode sequence has `kv_cache_size` cached tokens.
    CachedPerSequence,
    /// LLMServingSim: a prefill row's key length *includes* the chunk (kv ≥ chunk), and a
    /// decode row's `kv_cache_size` is the batch's keys in all, split evenly (each sequence
    /// attends to `kv_cache_size / batch_size` keys, its own new one among them; rows where it
    /// does not divide are left out).
    KeysInAll,
}

/// How a source's attention CSV is read.
#[derive(Clone, Copy, Debug)]
pub struct AttentionCsv {
    pub kv: KvMeaning,
    /// The dtype when the file has no `profiling_precision` column.
    pub dtype: Dtype,
    /// Timings behind each row's median (the source's repeats).
    pub repeats: u32,
}

const PREFILL_MS: &str = "time_stats.attn_prefill.median";
const DECODE_MS: &str = "time_stats.attn_decode.median";
const KV_SAVE_MS: &str = "time_stats.attn_kv_cache_save.median";

/// Adds `table`'s rows to `acc`.
pub fn read(table: &Table, format: &AttentionCsv, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [embd, q_heads, kv_heads, tp, batch, chunk, kv, is_prefill, backend, prefill_ms, decode_ms] = table.columns([
        "n_embd",
        "n_q_head",
        "n_kv_head",
        "num_tensor_parallel_workers",
        "batch_size",
        "prefill_chunk_size",
        "kv_cache_size",
        "is_prefill",
        "attention_backend",
        PREFILL_MS,
        DECODE_MS,
    ])?;
    let optional = |name: &str| table.has_column(name).then(|| table.columns([name])).transpose().map(|c| c.map(|[c]| c));
    let kv_save_ms = optional(KV_SAVE_MS)?;
    let mixed_batch = optional("is_mixed_batch")?;
    let precision = optional("profiling_precision")?;
    for row in table.rows() {
        if let Some(col) = mixed_batch
            && row.flag(col)?
        {
            acc.skip("attention over a batch mixing prefill and decode (servesim prices the two apart)".into());
            continue;
        }
        let dtype = match precision {
            None => format.dtype,
            Some(col) => match row.text(col)? {
                p if p.eq_ignore_ascii_case("bf16") => Dtype::Bf16,
                p if p.eq_ignore_ascii_case("fp16") => Dtype::Fp16,
                other => {
                    acc.skip(format!("attention in {other}"));
                    continue;
                }
            },
        };
        let tp_degree = row.count(tp, 1024)?;
        let (embd_v, heads_v, kv_heads_v) = (row.count(embd, DIM_MAX)?, row.count(q_heads, DIM_MAX)?, row.count(kv_heads, DIM_MAX)?);
        let per_gpu = |col: usize, total: u64| {
            if total.is_multiple_of(tp_degree) {
                Ok(total / tp_degree)
            } else if total < tp_degree {
                // KV heads replicate once TP exceeds them.
                Ok(1)
            } else {
                Err(row.invalid(col, &format!("{total} heads do not split over {tp_degree} GPUs")))
            }
        };
        if embd_v % heads_v != 0 {
            return Err(row.invalid(embd, &format!("not a multiple of n_q_head {heads_v}")));
        }
        let prefill = row.flag(is_prefill)?;
        let batch_v = row.count(batch, DIM_MAX)?;
        let kv_v = row.whole(kv, DIM_MAX)?;
        let (phase, batch_n, query_len, context_len) = if prefill {
            let chunk_v = row.count(chunk, DIM_MAX)?;
            let cached = match format.kv {
                KvMeaning::CachedPerSequence => kv_v,
                KvMeaning::KeysInAll => kv_v
                    .checked_sub(chunk_v)
                    .ok_or_else(|| row.invalid(kv, &format!("fewer keys than the chunk's {chunk_v} tokens")))?,
            };
            let phase = if cached == 0 { AttentionPhase::Prefill } else { AttentionPhase::Mixed };
            (phase, batch_v, chunk_v, cached)
        } else {
            let cached = match format.kv {
                KvMeaning::CachedPerSequence => kv_v,
                // Keys that do not split evenly give each sequence a floored share: those rows
                // are left out, the evenly split ones kept (3,412 of 21,371 in the H100 file; their
                // 907 context lengths keep the surface a size whose leave-one-out can run).
                KvMeaning::KeysInAll if !kv_v.is_multiple_of(batch_v) => {
                    acc.skip("decode whose keys do not split evenly over its sequences".into());
                    continue;
                }
                // One key per sequence (no cached token) is left out too: servesim's surfaces
                // are in ln(max(context, 1)), where 0 and 1 cached tokens coincide.
                KvMeaning::KeysInAll if kv_v / batch_v < 2 => {
                    acc.skip("decode over fewer than 2 keys per sequence".into());
                    continue;
                }
                KvMeaning::KeysInAll => kv_v / batch_v - 1,
            };
            (AttentionPhase::Decode, batch_v, 1, cached)
        };
        let mut ms = row.positive(if prefill { prefill_ms } else { decode_ms })?;
        if let Some(col) = kv_save_ms
            && !row.is_null(col)
        {
            ms += row.nonnegative(col)?;
        }
        let shape = AttentionShape {
            phase,
            batch: dim(batch_n),
            query_len: dim(query_len),
            context_len: dim(context_len),
            num_heads: dim(per_gpu(q_heads, heads_v)?),
            num_kv_heads: dim(per_gpu(kv_heads, kv_heads_v)?),
            head_dim: dim(embd_v / heads_v),
            uneven: false,
            dtype,
        };
        let kernel = row.text(backend)?;
        acc.add(Shape::Attention(shape), ms, kernel.strip_prefix("AttentionBackend.").unwrap_or(kernel), format.repeats);
    }
    Ok(())
}

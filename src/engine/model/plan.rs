//! A step's indexing, shared by the CPU and CUDA executors: which row of the step's activations
//! each new token occupies, its position and KV-cache slot, how the rows group into the two
//! attention kernels (multi-token chunks and one-token decodes), and which rows are sampled.
//!
//! ```text
//!  Batch (seqs in scheduler order) + token ids + block tables
//!        │  validate (block size, token count, vocabulary, positions, table coverage)
//!        ▼
//!  rows:  [ group A: seq, seq, … | group B: seq, … ]      RowOrder picks which group comes first
//!          tokens / positions / slots per row
//!          prefill, decode: cu_q (row offsets within the group), block tables, sequence lengths
//!          sample_rows: each sampling sequence's last row, in batch order
//! ```
//!
//! The groups are contiguous runs of rows so that each attention kernel reads one run of
//! queries. The CPU executor puts chunks first; the CUDA executor puts decodes first, because the
//! decode kernel reads its queries from row 0 of the buffer it is given while the prefill kernel
//! takes row offsets (`cu_seqlens_q`) and can start anywhere.

use crate::sched::batch::Batch;
use crate::sched::kv::KvCacheManager;

use super::{LlamaConfig, ModelError};

/// Where a step's block tables come from: the scheduler's KV manager (by sequence), or the
/// per-step inputs the engine loop hands over (by position in the batch).
pub trait BlockTables {
    /// Tokens per KV block.
    fn block_size(&self) -> u32;
    /// The block table of the `index`-th sequence of the batch, which is sequence `seq`.
    fn table(&self, index: usize, seq: u32) -> &[u32];
}

impl BlockTables for KvCacheManager {
    fn block_size(&self) -> u32 {
        KvCacheManager::block_size(self)
    }
    fn table(&self, _index: usize, seq: u32) -> &[u32] {
        self.block_table(seq)
    }
}

/// Which attention group takes the first rows of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOrder {
    /// Multi-token chunks, then one-token steps (the CPU executor).
    PrefillFirst,
    /// One-token steps, then multi-token chunks (the CUDA executor).
    DecodeFirst,
}

/// The paged-attention view of one group of sequences, in row order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeqGroup {
    /// `[seqs + 1]`: offsets of each sequence's new tokens *within the group* (start at 0).
    pub cu_q: Vec<usize>,
    /// Every sequence's block table, trimmed to the blocks its `seq_lens` entry covers,
    /// concatenated.
    pub blocks: Vec<u32>,
    /// `[seqs + 1]`: offsets into `blocks`.
    pub cu_blocks: Vec<usize>,
    /// `[seqs]`: tokens of each sequence after this step (cached context + new tokens).
    pub seq_lens: Vec<usize>,
}

impl SeqGroup {
    fn clear(&mut self) {
        self.cu_q.clear();
        self.cu_q.push(0);
        self.blocks.clear();
        self.cu_blocks.clear();
        self.cu_blocks.push(0);
        self.seq_lens.clear();
    }

    /// New tokens of the whole group.
    pub fn tokens(&self) -> usize {
        self.cu_q.last().copied().unwrap_or(0)
    }

    /// Sequences in the group.
    pub fn num_seqs(&self) -> usize {
        self.seq_lens.len()
    }

    /// New tokens of sequence `i` of the group.
    pub fn new_tokens(&self, i: usize) -> usize {
        self.cu_q[i + 1] - self.cu_q[i]
    }

    /// Tokens of sequence `i` already in the cache before this step.
    pub fn context_tokens(&self, i: usize) -> usize {
        self.seq_lens[i] - self.new_tokens(i)
    }

    /// The block table of sequence `i` (covering `seq_lens[i]` tokens).
    pub fn table(&self, i: usize) -> &[u32] {
        &self.blocks[self.cu_blocks[i]..self.cu_blocks[i + 1]]
    }
}

/// One step's indexing, rebuilt each step into reused vectors.
#[derive(Clone, Debug, Default)]
pub struct StepPlan {
    /// Batch index → first row of its tokens.
    pub row_start: Vec<usize>,
    /// Batch index → offset of its tokens in the caller's `token_ids`.
    pub input_start: Vec<usize>,
    /// Per row: token id, position, cache slot (block · block_size + offset).
    pub tokens: Vec<u32>,
    pub positions: Vec<usize>,
    pub slots: Vec<usize>,
    /// Sequences with more than one new token (prompts and chunks).
    pub prefill: SeqGroup,
    /// Sequences with exactly one new token (decode attention covers any single query over its
    /// whole history, a one-token prompt included).
    pub decode: SeqGroup,
    pub order: Option<RowOrder>,
    /// Row of each sampling sequence's last token, in batch order.
    pub sample_rows: Vec<usize>,
}

impl StepPlan {
    /// First row of the prefill group.
    pub fn prefill_row0(&self) -> usize {
        match self.order {
            Some(RowOrder::DecodeFirst) => self.decode.tokens(),
            _ => 0,
        }
    }

    /// First row of the decode group.
    pub fn decode_row0(&self) -> usize {
        match self.order {
            Some(RowOrder::PrefillFirst) => self.prefill.tokens(),
            _ => 0,
        }
    }

    /// Checks the step's inputs and builds its indexing. `num_blocks` is the cache's size: every
    /// block a table names must be below it. Inconsistent inputs are a [`ModelError::Step`].
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        &mut self,
        config: &LlamaConfig,
        block_size: usize,
        num_blocks: usize,
        batch: &Batch,
        token_ids: &[u32],
        kv: &dyn BlockTables,
        order: RowOrder,
    ) -> Result<(), ModelError> {
        let err = |m: String| Err(ModelError::Step(m));
        let (c, bs) = (config, block_size);
        if kv.block_size() as usize != bs {
            return err(format!("the KV manager's block size {} is not the executor's {bs}", kv.block_size()));
        }
        let total: usize = batch.seqs.iter().map(|w| w.new_tokens as usize).sum();
        if token_ids.len() != total {
            return err(format!("{} token ids for a batch of {total} new tokens", token_ids.len()));
        }
        let m = self;
        m.order = Some(order);
        m.row_start.clear();
        m.row_start.resize(batch.seqs.len(), 0);
        m.input_start.clear();
        let mut off = 0;
        for w in &batch.seqs {
            m.input_start.push(off);
            off += w.new_tokens as usize;
        }
        m.tokens.clear();
        m.positions.clear();
        m.slots.clear();
        m.prefill.clear();
        m.decode.clear();
        m.sample_rows.clear();
        let passes = match order {
            RowOrder::PrefillFirst => [false, true],
            RowOrder::DecodeFirst => [true, false],
        };
        for decode_pass in passes {
            for (i, w) in batch.seqs.iter().enumerate() {
                if (w.new_tokens == 1) != decode_pass {
                    continue;
                }
                let (ctx, new) = (w.context_tokens as usize, w.new_tokens as usize);
                let len = ctx + new;
                if new == 0 {
                    return err(format!("sequence {} is scheduled with no new tokens", w.seq));
                }
                if len > c.max_position_embeddings {
                    return err(format!(
                        "sequence {} reaches {len} tokens, beyond the model's {} positions",
                        w.seq, c.max_position_embeddings
                    ));
                }
                let table = kv.table(i, w.seq);
                let needed = len.div_ceil(bs);
                if table.len() < needed {
                    return err(format!(
                        "sequence {} needs {needed} KV blocks for {len} tokens but its table has {}",
                        w.seq,
                        table.len()
                    ));
                }
                let table = &table[..needed];
                if let Some(&b) = table.iter().find(|&&b| b as usize >= num_blocks) {
                    return err(format!("sequence {} uses KV block {b}, but the cache has {num_blocks}", w.seq));
                }
                let ids = &token_ids[m.input_start[i]..m.input_start[i] + new];
                if let Some(&bad) = ids.iter().find(|&&id| id as usize >= c.vocab_size) {
                    return err(format!("token id {bad} is outside the vocabulary of {}", c.vocab_size));
                }
                m.row_start[i] = m.tokens.len();
                m.tokens.extend_from_slice(ids);
                for pos in ctx..len {
                    m.positions.push(pos);
                    m.slots.push(table[pos / bs] as usize * bs + pos % bs);
                }
                let g = if decode_pass { &mut m.decode } else { &mut m.prefill };
                g.cu_q.push(g.tokens() + new);
                g.blocks.extend_from_slice(table);
                g.cu_blocks.push(g.blocks.len());
                g.seq_lens.push(len);
            }
        }
        for (i, w) in batch.seqs.iter().enumerate() {
            // The last row, and with drafts to verify the rows before it that hold them.
            let first = w.new_tokens as usize - w.sampled_rows() as usize;
            m.sample_rows.extend((first..w.new_tokens as usize).map(|r| m.row_start[i] + r));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::batch::SeqWork;

    struct Tables(Vec<Vec<u32>>);

    impl BlockTables for Tables {
        fn block_size(&self) -> u32 {
            4
        }
        fn table(&self, index: usize, _seq: u32) -> &[u32] {
            &self.0[index]
        }
    }

    fn work(seq: u32, context: u32, new: u32, samples: bool) -> SeqWork {
        SeqWork { seq, context_tokens: context, new_tokens: new, samples_token: samples, draft_tokens: 0 }
    }

    #[test]
    fn both_orders_index_the_same_tokens() {
        let config = LlamaConfig::tiny();
        // A 3-token chunk of a fresh prompt, a decode at position 5, a 2-token chunk after 4
        // cached tokens (not sampled: mid-prompt).
        let batch = Batch { seqs: vec![work(0, 0, 3, true), work(1, 5, 1, true), work(2, 4, 2, false)], ..Default::default() };
        let tables = Tables(vec![vec![7], vec![2, 9], vec![3, 4]]);
        let ids = [10, 11, 12, 20, 30, 31];
        let mut pre = StepPlan::default();
        pre.build(&config, 4, 16, &batch, &ids, &tables, RowOrder::PrefillFirst).unwrap();
        assert_eq!(pre.tokens, [10, 11, 12, 30, 31, 20]);
        assert_eq!(pre.positions, [0, 1, 2, 4, 5, 5]);
        assert_eq!(pre.slots, [28, 29, 30, 16, 17, 37]);
        assert_eq!(pre.sample_rows, [2, 5]);
        assert_eq!((pre.prefill_row0(), pre.decode_row0()), (0, 5));
        let mut dec = StepPlan::default();
        dec.build(&config, 4, 16, &batch, &ids, &tables, RowOrder::DecodeFirst).unwrap();
        assert_eq!(dec.tokens, [20, 10, 11, 12, 30, 31]);
        assert_eq!(dec.positions, [5, 0, 1, 2, 4, 5]);
        assert_eq!(dec.sample_rows, [3, 0]);
        assert_eq!((dec.prefill_row0(), dec.decode_row0()), (1, 0));
        for p in [&pre, &dec] {
            assert_eq!(p.prefill.cu_q, [0, 3, 5]);
            assert_eq!(p.prefill.seq_lens, [3, 6]);
            assert_eq!((p.prefill.context_tokens(0), p.prefill.context_tokens(1)), (0, 4));
            assert_eq!(p.prefill.table(1), [3, 4]);
            assert_eq!(p.decode.seq_lens, [6]);
            assert_eq!(p.decode.table(0), [2, 9]);
        }
    }

    #[test]
    fn inconsistent_inputs_are_errors() {
        let config = LlamaConfig::tiny();
        let batch = Batch { seqs: vec![work(0, 4, 2, true)], ..Default::default() };
        let mut plan = StepPlan::default();
        let short = Tables(vec![vec![1]]);
        let e = plan.build(&config, 4, 16, &batch, &[1, 2], &short, RowOrder::DecodeFirst).unwrap_err();
        assert!(e.to_string().contains("needs 2 KV blocks"), "{e}");
        let outside = Tables(vec![vec![1, 16]]);
        let e = plan.build(&config, 4, 16, &batch, &[1, 2], &outside, RowOrder::DecodeFirst).unwrap_err();
        assert!(e.to_string().contains("KV block 16"), "{e}");
        let e = plan.build(&config, 4, 16, &batch, &[1, 999], &Tables(vec![vec![1, 2]]), RowOrder::DecodeFirst).unwrap_err();
        assert!(e.to_string().contains("token id 999"), "{e}");
    }
}

//! A step's int32 indexing as the CUDA kernels take it, built on the host from a decodes-first
//! [`StepPlan`]: token ids, positions, cache slots, sampled rows, block tables and context
//! lengths of the decode and the prefill groups.

use crate::engine::model::StepPlan;

/// `[rows, cols]` int32 block tables of a group: each sequence's table padded with block 0 to the
/// longest (the kernels read only the entries their context lengths cover).
pub fn pad_block_tables(tables: impl Iterator<Item = impl AsRef<[u32]>> + Clone, out: &mut Vec<i32>) -> usize {
    let cols = tables.clone().map(|t| t.as_ref().len()).max().unwrap_or(0).max(1);
    out.clear();
    for t in tables {
        let t = t.as_ref();
        out.extend(t.iter().map(|&b| b as i32));
        out.extend(std::iter::repeat_n(0, cols - t.len()));
    }
    cols
}

/// A step's indexing as the kernels take it, int32 on the host (built from a decodes-first
/// [`StepPlan`]; the values were range-checked against int32 when the executor was made, and
/// against the cache and vocabulary by the plan).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostIndex {
    /// Per row: token id (gather_rows), position (rotary), cache slot (reshape_and_cache).
    pub token_ids: Vec<i32>,
    pub positions: Vec<i32>,
    pub slots: Vec<i32>,
    /// Row of each sampling sequence's last token, in batch order (gather_rows).
    pub sample_rows: Vec<i32>,
    /// `[decode seqs, decode_max_blocks]` (attention_decode).
    pub decode_tables: Vec<i32>,
    /// Tokens in the cache *including* the one being decoded (attention_decode.cu).
    pub decode_lens: Vec<i32>,
    /// `[prefill seqs, prefill_max_blocks]` (attention_prefill).
    pub prefill_tables: Vec<i32>,
    /// Tokens cached *before* this step (attention_prefill.cu).
    pub prefill_lens: Vec<i32>,
    /// `[prefill seqs + 1]` absolute row offsets of each chunk's new tokens (`cu_seqlens_q`).
    pub prefill_cu: Vec<i32>,
    pub layout: IndexLayout,
}

/// The shapes of a step's attention indexing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexLayout {
    pub decode_max_blocks: usize,
    /// The longest decode context (tokens, including the decoded one): sizes the decode grid.
    pub decode_max_len: usize,
    pub prefill_max_blocks: usize,
    /// The most new tokens of one chunk: sizes the prefill grid.
    pub prefill_max_new: usize,
}

impl HostIndex {
    /// Rebuilds the indexing of `plan` into the reused vectors.
    pub fn build(&mut self, plan: &StepPlan) {
        let as_i32 = |dst: &mut Vec<i32>, src: &[usize]| {
            dst.clear();
            dst.extend(src.iter().map(|&x| x as i32));
        };
        self.token_ids.clear();
        self.token_ids.extend(plan.tokens.iter().map(|&x| x as i32));
        as_i32(&mut self.positions, &plan.positions);
        as_i32(&mut self.slots, &plan.slots);
        as_i32(&mut self.sample_rows, &plan.sample_rows);
        let (d, p) = (&plan.decode, &plan.prefill);
        let decode_max_blocks = pad_block_tables((0..d.num_seqs()).map(|i| d.table(i)), &mut self.decode_tables);
        as_i32(&mut self.decode_lens, &d.seq_lens);
        let prefill_max_blocks = pad_block_tables((0..p.num_seqs()).map(|i| p.table(i)), &mut self.prefill_tables);
        self.prefill_lens.clear();
        self.prefill_lens.extend((0..p.num_seqs()).map(|i| p.context_tokens(i) as i32));
        let row0 = plan.prefill_row0();
        self.prefill_cu.clear();
        self.prefill_cu.extend(p.cu_q.iter().map(|&x| (row0 + x) as i32));
        self.layout = IndexLayout {
            decode_max_blocks,
            decode_max_len: d.seq_lens.iter().copied().max().unwrap_or(0),
            prefill_max_blocks,
            prefill_max_new: (0..p.num_seqs()).map(|i| p.new_tokens(i)).max().unwrap_or(0),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::{BlockTables, LlamaConfig, RowOrder};
    use crate::sched::batch::Batch;

    #[test]
    fn block_tables_are_padded_to_the_longest() {
        let mut out = Vec::new();
        let tables = [vec![3u32], vec![4, 5, 6], vec![]];
        assert_eq!(pad_block_tables(tables.iter(), &mut out), 3);
        assert_eq!(out, [3, 0, 0, 4, 5, 6, 0, 0, 0]);
        assert_eq!(pad_block_tables(std::iter::empty::<Vec<u32>>(), &mut out), 1);
        assert!(out.is_empty());
    }

    #[test]
    fn step_index_follows_the_kernels_contracts() {
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
        let work = |seq, context_tokens, new_tokens, samples_token| SeqWork { seq, context_tokens, new_tokens, samples_token, draft_tokens: 0 };
        // Batch order: a 3-token prompt, a decode at position 5, a one-token prompt, a 2-token
        // chunk after 4 cached tokens (mid-prompt: not sampled).
        let batch = Batch {
            seqs: vec![work(0, 0, 3, true), work(1, 5, 1, true), work(2, 0, 1, true), work(3, 4, 2, false)],
            ..Default::default()
        };
        let tables = Tables(vec![vec![7], vec![2, 9], vec![5], vec![3, 4]]);
        let mut plan = StepPlan::default();
        plan.build(&LlamaConfig::tiny(), 4, 16, &batch, &[10, 11, 12, 20, 30, 40, 41], &tables, RowOrder::DecodeFirst).unwrap();
        let mut index = HostIndex::default();
        index.build(&plan);
        // Rows: the two one-token sequences first (decode kernel, from row 0), then the chunks.
        assert_eq!(index.token_ids, [20, 30, 10, 11, 12, 40, 41]);
        assert_eq!(index.positions, [5, 0, 0, 1, 2, 4, 5]);
        assert_eq!(index.slots, [9 * 4 + 1, 5 * 4, 28, 29, 30, 16, 17]);
        // Sampled rows in batch order: the prompt's last row, the decode, the one-token prompt.
        assert_eq!(index.sample_rows, [4, 0, 1]);
        // Decode context lengths count the decoded token; tables padded to the longest.
        assert_eq!(index.decode_lens, [6, 1]);
        assert_eq!(index.decode_tables, [2, 9, 5, 0]);
        // Prefill context lengths count only cached tokens; offsets are absolute rows.
        assert_eq!(index.prefill_lens, [0, 4]);
        assert_eq!(index.prefill_cu, [2, 5, 7]);
        assert_eq!(index.prefill_tables, [7, 0, 3, 4]);
        assert_eq!(
            index.layout,
            IndexLayout { decode_max_blocks: 2, decode_max_len: 6, prefill_max_blocks: 2, prefill_max_new: 3 }
        );
    }

}

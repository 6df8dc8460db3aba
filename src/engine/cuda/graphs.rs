//! Decode steps as CUDA graphs, as vLLM runs them: a pure-decode step of `b` sequences is padded
//! to the next capture size and replayed from a graph captured once per size, so its ~12
//! kernels a layer cost one launch instead of one each.
//!
//! ```text
//!  decode step, b seqs ─► size = the capture size ≥ b ─► graph of that size captured?
//!        │ no: capture the forward pass with this graph's own index buffers (padded rows:
//!        │     slot −1, context 1, token 0), at a context bound rounded up to a power of two
//!        ▼
//!  upload the padded index ─► replay ─► copy the first rows' logits
//! ```
//!
//! What a graph captured stays fixed: every buffer's address (activations, decode scratch, its
//! index buffers, the KV cache), the grid of each kernel (the decode kernel's is sized by the
//! context bound), and the GEMM plans. So the executor drops every graph whenever it reallocates
//! a buffer they captured, and recaptures a size whose steps outgrow its context bound.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::{CudaGraph, CudaSlice, CudaStream};

use super::device::driver_error;
use super::step_index::HostIndex;
use super::parts::PartTimer;
use crate::engine::DeviceError;

/// The largest batch captured (vLLM's default `max_cudagraph_capture_size`).
pub const MAX_CAPTURE_SIZE: usize = 512;

/// vLLM's default capture sizes (v1 engine, `set_cudagraph_sizes` in vllm/config, the versions
/// these docs compare with: 0.19, 0.24): 1, 2, 4, then multiples of 8 below 256, then multiples
/// of 16 up to `min(2 · max_num_seqs, 512)`. The executor does not know `max_num_seqs`, so it
/// takes the whole list; a size is captured only when a step first needs it.
pub fn capture_sizes() -> Vec<usize> {
    let mut sizes = vec![1, 2, 4];
    sizes.extend((8..256).step_by(8));
    sizes.extend((256..=MAX_CAPTURE_SIZE).step_by(16));
    sizes
}

/// The capture size a decode step of `seqs` sequences is padded to; `None` above the largest
/// (such steps run eagerly).
pub fn capture_size(seqs: usize) -> Option<usize> {
    capture_sizes().into_iter().find(|&s| s >= seqs.max(1))
}

/// A graph's inputs on the host, padded to its size and its block-table width.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PaddedIndex {
    pub token_ids: Vec<i32>,
    pub positions: Vec<i32>,
    pub slots: Vec<i32>,
    pub sample_rows: Vec<i32>,
    pub tables: Vec<i32>,
    pub lens: Vec<i32>,
}

impl PaddedIndex {
    /// `index` (a pure-decode step's, `index.decode_max_blocks` wide) padded to `size` rows and
    /// `width` blocks a row. Padding rows decode token 0 at position 0 over a one-token context
    /// in block 0, and write nothing to the cache (slot −1); their outputs are never read.
    pub fn build(&mut self, index: &HostIndex, size: usize, width: usize) {
        let rows = index.token_ids.len();
        debug_assert!(rows <= size && index.layout.decode_max_blocks <= width);
        let pad = |dst: &mut Vec<i32>, src: &[i32], fill: i32| {
            dst.clear();
            dst.extend_from_slice(src);
            dst.resize(size, fill);
        };
        pad(&mut self.token_ids, &index.token_ids, 0);
        pad(&mut self.positions, &index.positions, 0);
        pad(&mut self.slots, &index.slots, -1);
        pad(&mut self.sample_rows, &index.sample_rows, 0);
        pad(&mut self.lens, &index.decode_lens, 1);
        let old = index.layout.decode_max_blocks.max(1);
        self.tables.clear();
        self.tables.resize(size * width, 0);
        for (r, row) in index.decode_tables.chunks(old).enumerate() {
            self.tables[r * width..r * width + row.len()].copy_from_slice(row);
        }
    }
}

/// A graph's index buffers on the device (fixed addresses the graph reads).
pub struct GraphIndex {
    pub token_ids: CudaSlice<i32>,
    pub positions: CudaSlice<i32>,
    pub slots: CudaSlice<i32>,
    pub sample_rows: CudaSlice<i32>,
    pub tables: CudaSlice<i32>,
    pub lens: CudaSlice<i32>,
}

impl GraphIndex {
    pub fn new(stream: &Arc<CudaStream>, size: usize, width: usize) -> Result<GraphIndex, DeviceError> {
        let alloc = |n: usize| stream.alloc_zeros::<i32>(n.max(1)).map_err(|e| driver_error("allocating a graph's index", e));
        Ok(GraphIndex {
            token_ids: alloc(size)?,
            positions: alloc(size)?,
            slots: alloc(size)?,
            sample_rows: alloc(size)?,
            tables: alloc(size * width)?,
            lens: alloc(size)?,
        })
    }

    /// Copies `padded` in, ordered before the next replay on `stream`.
    pub fn upload(&mut self, stream: &Arc<CudaStream>, padded: &PaddedIndex) -> Result<(), DeviceError> {
        let put = |dst: &mut CudaSlice<i32>, src: &[i32]| {
            stream.memcpy_htod(src, dst).map_err(|e| driver_error("uploading a graph's index", e))
        };
        put(&mut self.token_ids, &padded.token_ids)?;
        put(&mut self.positions, &padded.positions)?;
        put(&mut self.slots, &padded.slots)?;
        put(&mut self.sample_rows, &padded.sample_rows)?;
        put(&mut self.tables, &padded.tables)?;
        put(&mut self.lens, &padded.lens)
    }
}

/// One captured decode step.
pub struct DecodeGraph {
    pub graph: CudaGraph,
    pub index: GraphIndex,
    /// Longest context (tokens, the decoded one included) its decode grid covers.
    pub context: usize,
    /// Block-table width.
    pub width: usize,
    /// Its part events (empty when captured without part timing).
    pub timer: PartTimer,
    pub timed: bool,
}

// SAFETY: a CUDA graph may be used from any thread as long as no two use it at once (CUDA's
// graph thread-safety rules); a DecodeGraph is reached only through its executor's `&mut self`,
// and every launch binds the executor's context first (cudarc's `CudaGraph::launch`).
unsafe impl Send for DecodeGraph {}

/// The captured graphs by size.
#[derive(Default)]
pub struct DecodeGraphs {
    pub by_size: BTreeMap<usize, DecodeGraph>,
    /// Steps replayed and graphs captured, for the engine's log and tests.
    pub replays: u64,
    pub captures: u64,
}

impl DecodeGraphs {
    /// Drops every graph: a buffer they captured is about to move.
    pub fn clear(&mut self) {
        self.by_size.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::cuda::step_index::IndexLayout;

    #[test]
    fn capture_sizes_are_vllms() {
        let sizes = capture_sizes();
        assert_eq!(&sizes[..6], &[1, 2, 4, 8, 16, 24]);
        assert!(sizes.contains(&248) && !sizes.contains(&252) && sizes.contains(&256) && sizes.contains(&272));
        assert_eq!(*sizes.last().unwrap(), 512);
        assert_eq!(sizes.len(), 3 + 31 + 17);
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(capture_size(3), Some(4));
        assert_eq!(capture_size(9), Some(16));
        assert_eq!(capture_size(257), Some(272));
        assert_eq!(capture_size(512), Some(512));
        assert_eq!(capture_size(513), None);
    }

    #[test]
    fn padding_rows_write_nothing_and_tables_widen() {
        let index = HostIndex {
            token_ids: vec![5, 6, 7],
            positions: vec![10, 3, 40],
            slots: vec![100, 200, 300],
            sample_rows: vec![1, 0, 2],
            decode_tables: vec![1, 2, 3, 0, 4, 5],
            decode_lens: vec![11, 4, 41],
            layout: IndexLayout { decode_max_blocks: 2, decode_max_len: 41, ..IndexLayout::default() },
            ..HostIndex::default()
        };
        let mut p = PaddedIndex::default();
        p.build(&index, 4, 3);
        assert_eq!(p.token_ids, [5, 6, 7, 0]);
        assert_eq!(p.slots, [100, 200, 300, -1]);
        assert_eq!(p.sample_rows, [1, 0, 2, 0]);
        assert_eq!(p.lens, [11, 4, 41, 1]);
        assert_eq!(p.tables, [1, 2, 0, 3, 0, 0, 4, 5, 0, 0, 0, 0]);
    }
}

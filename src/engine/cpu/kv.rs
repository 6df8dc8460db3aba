//! Where attention reads keys and values from: contiguous per-sequence rows ([`PackedKv`], what a
//! QKV projection of a prompt produces) or a paged KV cache ([`PagedKv`], vLLM's layout).
//!
//! Both expose the same [`KvSource`] view: for a sequence, the keys and values of its positions
//! `0..seq_len`, one `head_dim` row per (position, KV head). The attention kernels are generic
//! over it, so one kernel serves both layouts with no indirection left after monomorphisation.
//!
//! ```text
//! PackedKv: k, v = [total_tokens, num_kv_heads, head_dim]; sequence s = rows cu_seqlens[s]..cu_seqlens[s+1]
//! PagedKv:  k, v = [num_blocks, block_size, num_kv_heads, head_dim];
//!           position p of sequence s = block blocks[cu_blocks[s] + p / block_size], slot p % block_size
//! ```

/// Keys and values of a batch of sequences, by (sequence, position, KV head).
pub trait KvSource: Sync {
    fn num_seqs(&self) -> usize;
    /// Tokens stored for `seq`: its cached context plus this step's new tokens.
    fn seq_len(&self, seq: usize) -> usize;
    fn num_kv_heads(&self) -> usize;
    fn head_dim(&self) -> usize;
    /// The key row (`head_dim` floats) of `seq` at `pos < seq_len(seq)` for `kv_head`.
    fn key(&self, seq: usize, pos: usize, kv_head: usize) -> &[f32];
    /// The value row (`head_dim` floats) of `seq` at `pos < seq_len(seq)` for `kv_head`.
    fn value(&self, seq: usize, pos: usize, kv_head: usize) -> &[f32];
}

/// Keys and values stored contiguously per sequence, packed like varlen flash attention's input.
#[derive(Clone, Copy, Debug)]
pub struct PackedKv<'a> {
    k: &'a [f32],
    v: &'a [f32],
    cu_seqlens: &'a [usize],
    num_kv_heads: usize,
    head_dim: usize,
}

impl<'a> PackedKv<'a> {
    /// `k`, `v`: `[cu_seqlens[last], num_kv_heads, head_dim]`; `cu_seqlens`: `num_seqs + 1`
    /// non-decreasing offsets starting at 0.
    ///
    /// # Panics
    /// If the lengths disagree.
    pub fn new(k: &'a [f32], v: &'a [f32], cu_seqlens: &'a [usize], num_kv_heads: usize, head_dim: usize) -> Self {
        assert!(num_kv_heads > 0 && head_dim > 0, "PackedKv: num_kv_heads and head_dim must be positive");
        assert!(!cu_seqlens.is_empty() && cu_seqlens[0] == 0, "PackedKv: cu_seqlens must start at 0");
        assert!(cu_seqlens.windows(2).all(|w| w[0] <= w[1]), "PackedKv: cu_seqlens must be non-decreasing");
        let rows = cu_seqlens[cu_seqlens.len() - 1];
        let len = rows * num_kv_heads * head_dim;
        assert!(
            k.len() == len && v.len() == len,
            "PackedKv: k and v must hold {rows} tokens × {num_kv_heads} heads × {head_dim} = {len} floats, got {} and {}",
            k.len(),
            v.len()
        );
        PackedKv { k, v, cu_seqlens, num_kv_heads, head_dim }
    }

    #[inline(always)]
    fn offset(&self, seq: usize, pos: usize, kv_head: usize) -> usize {
        debug_assert!(pos < self.seq_len(seq));
        ((self.cu_seqlens[seq] + pos) * self.num_kv_heads + kv_head) * self.head_dim
    }
}

impl KvSource for PackedKv<'_> {
    fn num_seqs(&self) -> usize {
        self.cu_seqlens.len() - 1
    }
    #[inline(always)]
    fn seq_len(&self, seq: usize) -> usize {
        self.cu_seqlens[seq + 1] - self.cu_seqlens[seq]
    }
    fn num_kv_heads(&self) -> usize {
        self.num_kv_heads
    }
    fn head_dim(&self) -> usize {
        self.head_dim
    }
    #[inline(always)]
    fn key(&self, seq: usize, pos: usize, kv_head: usize) -> &[f32] {
        let o = self.offset(seq, pos, kv_head);
        &self.k[o..o + self.head_dim]
    }
    #[inline(always)]
    fn value(&self, seq: usize, pos: usize, kv_head: usize) -> &[f32] {
        let o = self.offset(seq, pos, kv_head);
        &self.v[o..o + self.head_dim]
    }
}

/// The memory of a paged KV cache: `k` and `v` are `[num_blocks, block_size, num_kv_heads,
/// head_dim]` (vLLM's layout: a block holds `block_size` consecutive positions of one sequence).
#[derive(Clone, Copy, Debug)]
pub struct PagedCache<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
    /// Positions per block; a power of two.
    pub block_size: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

/// A paged KV cache (vLLM's layout) with a block table and a length per sequence.
///
/// The block tables are concatenated, with offsets like `cu_seqlens`: sequence `s`'s blocks are
/// `blocks[cu_blocks[s]..cu_blocks[s + 1]]`, in position order. An engine builds them each step
/// by appending every scheduled sequence's table to two reused buffers, with no allocation.
#[derive(Clone, Copy, Debug)]
pub struct PagedKv<'a> {
    k_cache: &'a [f32],
    v_cache: &'a [f32],
    blocks: &'a [u32],
    cu_blocks: &'a [usize],
    seq_lens: &'a [usize],
    block_shift: u32,
    num_kv_heads: usize,
    head_dim: usize,
}

impl<'a> PagedKv<'a> {
    /// `blocks`, `cu_blocks`: the concatenated block tables (`num_seqs + 1` offsets from 0);
    /// sequence `s` needs at least `⌈seq_lens[s] / block_size⌉` blocks. `seq_lens[s]`: tokens
    /// stored for `s`, this step's new ones included (already written, see [`write_paged`]).
    ///
    /// # Panics
    /// If `block_size` is not a power of two (positions are split with a shift, not a division,
    /// in the innermost loop), or if lengths, tables and block ids disagree. The checks read
    /// every table once: cheap next to the attention that reads every block.
    pub fn new(cache: PagedCache<'a>, blocks: &'a [u32], cu_blocks: &'a [usize], seq_lens: &'a [usize]) -> Self {
        let PagedCache { k: k_cache, v: v_cache, block_size, num_kv_heads, head_dim } = cache;
        assert!(block_size.is_power_of_two(), "PagedKv: block_size {block_size} must be a power of two");
        assert!(num_kv_heads > 0 && head_dim > 0, "PagedKv: num_kv_heads and head_dim must be positive");
        let block_len = block_size * num_kv_heads * head_dim;
        assert!(
            k_cache.len() == v_cache.len() && k_cache.len() % block_len == 0,
            "PagedKv: caches must be whole blocks of {block_size} × {num_kv_heads} × {head_dim} floats, got {} and {}",
            k_cache.len(),
            v_cache.len()
        );
        let num_blocks = k_cache.len() / block_len;
        assert!(
            cu_blocks.len() == seq_lens.len() + 1 && cu_blocks[0] == 0,
            "PagedKv: cu_blocks must hold num_seqs + 1 offsets starting at 0"
        );
        assert!(
            cu_blocks.windows(2).all(|w| w[0] <= w[1]) && cu_blocks[seq_lens.len()] <= blocks.len(),
            "PagedKv: cu_blocks must be non-decreasing and within blocks"
        );
        for (s, &len) in seq_lens.iter().enumerate() {
            let table = &blocks[cu_blocks[s]..cu_blocks[s + 1]];
            let needed = len.div_ceil(block_size);
            assert!(
                table.len() >= needed,
                "PagedKv: sequence {s} has {len} tokens, needing {needed} blocks of {block_size}, but its table has {}",
                table.len()
            );
            if let Some(&bad) = table[..needed].iter().find(|&&b| b as usize >= num_blocks) {
                panic!("PagedKv: sequence {s} refers to block {bad}, but the cache has {num_blocks}");
            }
        }
        PagedKv {
            k_cache,
            v_cache,
            blocks,
            cu_blocks,
            seq_lens,
            block_shift: block_size.trailing_zeros(),
            num_kv_heads,
            head_dim,
        }
    }

    pub fn block_size(&self) -> usize {
        1 << self.block_shift
    }

    #[inline(always)]
    fn offset(&self, seq: usize, pos: usize, kv_head: usize) -> usize {
        debug_assert!(pos < self.seq_lens[seq]);
        let block = self.blocks[self.cu_blocks[seq] + (pos >> self.block_shift)] as usize;
        let slot = (block << self.block_shift) | (pos & ((1 << self.block_shift) - 1));
        (slot * self.num_kv_heads + kv_head) * self.head_dim
    }
}

impl KvSource for PagedKv<'_> {
    fn num_seqs(&self) -> usize {
        self.seq_lens.len()
    }
    #[inline(always)]
    fn seq_len(&self, seq: usize) -> usize {
        self.seq_lens[seq]
    }
    fn num_kv_heads(&self) -> usize {
        self.num_kv_heads
    }
    fn head_dim(&self) -> usize {
        self.head_dim
    }
    #[inline(always)]
    fn key(&self, seq: usize, pos: usize, kv_head: usize) -> &[f32] {
        let o = self.offset(seq, pos, kv_head);
        &self.k_cache[o..o + self.head_dim]
    }
    #[inline(always)]
    fn value(&self, seq: usize, pos: usize, kv_head: usize) -> &[f32] {
        let o = self.offset(seq, pos, kv_head);
        &self.v_cache[o..o + self.head_dim]
    }
}

/// Writes this step's new keys and values into a paged cache (vLLM's `reshape_and_cache`):
/// token `t`'s rows go to cache slot `slots[t]` (= block id × block size + offset in block).
///
/// `k`, `v`: `[slots.len(), num_kv_heads, head_dim]`; caches:
/// `[num_blocks, block_size, num_kv_heads, head_dim]`.
///
/// # Panics
/// If a slot lies outside the cache or the lengths disagree.
pub fn write_paged(
    k_cache: &mut [f32],
    v_cache: &mut [f32],
    k: &[f32],
    v: &[f32],
    slots: &[usize],
    num_kv_heads: usize,
    head_dim: usize,
) {
    let row = num_kv_heads * head_dim;
    assert!(
        k.len() == slots.len() * row && v.len() == k.len(),
        "write_paged: k and v must hold {} tokens × {row} floats",
        slots.len()
    );
    assert_eq!(k_cache.len(), v_cache.len(), "write_paged: caches must have equal sizes");
    // Memory-bound and small (a step's new tokens): a sequential copy is as fast as threads.
    for (t, &slot) in slots.iter().enumerate() {
        let dst = slot * row..(slot + 1) * row;
        assert!(dst.end <= k_cache.len(), "write_paged: slot {slot} is outside the cache");
        k_cache[dst.clone()].copy_from_slice(&k[t * row..(t + 1) * row]);
        v_cache[dst].copy_from_slice(&v[t * row..(t + 1) * row]);
    }
}

//! Prefix caching, as vLLM V1's KV cache manager does it (`vllm/v1/core/kv_cache_utils.py`,
//! `block_pool.py`, docs "Automatic Prefix Caching").
//!
//! ```text
//!   prompt ─► full blocks ─► hash_j = H(hash_{j−1}, content_j) ─► longest run of hashes cached
//!                                                                   = blocks a request reuses
//!   refcount 0 ─► free queue (least recently freed first) ─► allocation evicts from its head
//! ```
//!
//! A block's hash chains its parent's, so equal hashes mean equal prefixes, not just equal
//! blocks. Only full blocks are hashed. vLLM V1 hashes every full block of a request, its output
//! included, as it is computed; servesim hashes the blocks other requests can hold (shared
//! prompt text, a chat answer the next turn repeats) as they are computed, and a request's own
//! blocks only when it is preempted ([`extend_with_own_blocks`]): before that nobody could hit
//! them, after it the request itself does when admitted again.
//!
//! The content of a block is given in one of two ways, hashed by the same chain: real token ids
//! ([`token_block_hashes`], the engine), or a place in a shared token stream
//! ([`stream_block_hashes`], the simulator, which knows which prompts share text but not the
//! text itself). Where blocks are kept as counts, without ids, nothing is shared, and the free
//! queue's order is kept as runs instead (`sched::runs`).

use std::collections::HashMap;

/// Hash of a full block and of every block before it.
pub type BlockHash = u64;

/// `PrefixCache::hash` of a block that holds no cached content.
const NO_HASH: BlockHash = 0;
/// End of the free queue's links.
const NIL: u32 = u32::MAX;
/// Tags that keep stream contents and token contents from ever hashing alike.
const TAG_TOKENS: u64 = 0x746f_6b65_6e73;
const TAG_STREAM: u64 = 0x7374_7265_616d;
const TAG_OWN: u64 = 0x6f77_6e00;

/// SplitMix64's finaliser: every input bit moves about half the output bits, which a chain of
/// 64-bit hashes needs (a collision would share KV between different prompts). A fixed function,
/// not std's `DefaultHasher`, whose algorithm may change between Rust releases.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The chained hash of a block whose content is `words`, after a block hashed `parent`.
fn chain(parent: BlockHash, words: impl IntoIterator<Item = u64>) -> BlockHash {
    let mut h = mix(parent ^ 0x9e37_79b9_7f4a_7c15);
    for w in words {
        h = mix(h ^ w).rotate_left(17);
    }
    // NO_HASH marks an empty block; a real hash of 0 becomes 1 (one value in 2⁶⁴ lost).
    h.max(1)
}

/// The hash of every full block of a prompt given by its token ids (the engine).
pub fn token_block_hashes(token_ids: &[u32], block_size: u32) -> Vec<BlockHash> {
    let mut parent = NO_HASH;
    token_ids
        .chunks_exact(block_size as usize)
        .map(|block| {
            parent = chain(parent, std::iter::once(TAG_TOKENS).chain(block.iter().map(|&t| u64::from(t))));
            parent
        })
        .collect()
}

/// The hash of every full block within the first `shared_tokens` tokens of token stream
/// `stream` (the simulator: a prompt that begins with those tokens of the stream). Two prompts
/// that share a stream's first tokens share these hashes; the rest of a prompt is its own and
/// is never hashed, since no other prompt can hit it.
pub fn stream_block_hashes(stream: u64, shared_tokens: u32, block_size: u32) -> Vec<BlockHash> {
    // Most prompts share nothing: an empty list without the iterator's set-up (every admission
    // with prefix caching on asks, issue 33).
    if shared_tokens < block_size {
        return Vec::new();
    }
    let mut parent = NO_HASH;
    (0..u64::from(shared_tokens / block_size))
        .map(|j| {
            parent = chain(parent, [TAG_STREAM, stream, j]);
            parent
        })
        .collect()
}

/// Extends a request's block hashes (`hashes`, from its first block) to `blocks_total` with
/// blocks of text no other request holds: the rest of its prompt, where the simulator knows it
/// shares nothing, and its output. Each chains the one before, so a lookup walks on into them;
/// `serial`, unique to this extension, keeps them from ever hashing like another request's.
pub fn extend_with_own_blocks(hashes: &mut Vec<BlockHash>, blocks_total: usize, serial: u64) {
    let mut parent = hashes.last().copied().unwrap_or(NO_HASH);
    for j in hashes.len()..blocks_total {
        parent = chain(parent, [TAG_OWN, serial, j as u64]);
        hashes.push(parent);
    }
}

/// The blocks a prompt of `tokens_known` tokens may take from the cache, of `hashes_len` hashed:
/// vLLM V1 recomputes at least the last token to get its logits (`get_computed_blocks`:
/// `max_cache_hit_length = num_tokens - 1`), so a prompt cached whole recomputes its last block.
pub fn hit_blocks_max(tokens_known: u32, hashes_len: usize, block_size: u32) -> usize {
    (tokens_known.saturating_sub(1) / block_size).min(hashes_len as u32) as usize
}

/// Block metadata and the cache of computed blocks by hash, beside a [`super::kv::BlockPool`]
/// whose free blocks are kept in [`FreeQueue`] order.
#[derive(Clone, Debug, Default)]
pub struct PrefixCache {
    /// Tables holding each block, by block id (blocks handed out so far).
    refs: Vec<u32>,
    /// Each block's content hash, or [`NO_HASH`].
    hash: Vec<BlockHash>,
    by_hash: HashMap<BlockHash, u32>,
}

impl PrefixCache {
    /// Blocks cached with content, in use or not.
    pub fn blocks_cached(&self) -> usize {
        self.by_hash.len()
    }

    /// The block holding `hash`, if cached.
    pub(super) fn lookup(&self, hash: BlockHash) -> Option<u32> {
        self.by_hash.get(&hash).copied()
    }

    /// How many of `hashes`, from the first, are cached.
    pub fn longest_hit(&self, hashes: &[BlockHash]) -> usize {
        hashes.iter().take_while(|h| self.by_hash.contains_key(h)).count()
    }

    pub(super) fn refs(&self, block: u32) -> u32 {
        self.refs[block as usize]
    }

    /// `block` was just taken from the free blocks for a table: if it held cached content, that
    /// content is evicted now.
    pub(super) fn on_allocated(&mut self, block: u32) {
        let b = block as usize;
        if self.refs.len() <= b {
            self.refs.resize(b + 1, 0);
            self.hash.resize(b + 1, NO_HASH);
        }
        debug_assert_eq!(self.refs[b], 0, "allocated a block in use");
        self.refs[b] = 1;
        let old = std::mem::replace(&mut self.hash[b], NO_HASH);
        if old != NO_HASH && self.by_hash.get(&old) == Some(&block) {
            self.by_hash.remove(&old);
        }
    }

    /// One more table holds `block`; returns whether it was free (refcount 0) before.
    pub(super) fn acquire(&mut self, block: u32) -> bool {
        let r = &mut self.refs[block as usize];
        *r += 1;
        *r == 1
    }

    /// One table fewer holds `block`; returns whether it is free now.
    pub(super) fn release(&mut self, block: u32) -> bool {
        let r = &mut self.refs[block as usize];
        debug_assert!(*r > 0, "released a free block");
        *r -= 1;
        *r == 0
    }

    /// Records that `block` holds the content `hash`, unless another block already does (the
    /// same prefix computed twice at once: the later copy stays uncached and is freed as plain).
    pub(super) fn insert(&mut self, block: u32, hash: BlockHash) {
        let b = block as usize;
        if self.hash[b] != NO_HASH || self.by_hash.contains_key(&hash) {
            return;
        }
        self.hash[b] = hash;
        self.by_hash.insert(hash, block);
    }

    /// Debug check: every cached hash names a block that carries it.
    #[cfg(debug_assertions)]
    pub(super) fn check(&self) {
        for (&h, &b) in &self.by_hash {
            assert_eq!(self.hash[b as usize], h, "cached block {b} lost its hash");
        }
    }

    /// Debug check: each block's refcount is the number of `tables` that hold it; returns the
    /// blocks with references.
    #[cfg(debug_assertions)]
    pub(super) fn check_refs<'a>(&self, tables: impl Iterator<Item = &'a [u32]>) -> u64 {
        let mut counted = vec![0u32; self.refs.len()];
        for &b in tables.flatten() {
            counted[b as usize] += 1;
        }
        for (b, (&r, &c)) in self.refs.iter().zip(&counted).enumerate() {
            assert_eq!(r, c, "block {b}: refcount {r}, held by {c} tables");
        }
        self.refs.iter().filter(|&&r| r > 0).count() as u64
    }
}

/// The free blocks in the order vLLM V1's `FreeKVCacheBlockQueue` keeps them: freed blocks join
/// the tail, allocation takes the head, and a cache hit takes a block out of the middle. A
/// doubly linked list over block ids, so each of these is O(1).
#[derive(Clone, Debug)]
pub struct FreeQueue {
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    len: u32,
}

impl Default for FreeQueue {
    fn default() -> Self {
        FreeQueue { prev: Vec::new(), next: Vec::new(), head: NIL, tail: NIL, len: 0 }
    }
}

impl FreeQueue {
    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push_back(&mut self, block: u32) {
        let b = block as usize;
        if self.prev.len() <= b {
            self.prev.resize(b + 1, NIL);
            self.next.resize(b + 1, NIL);
        }
        self.prev[b] = self.tail;
        self.next[b] = NIL;
        match self.tail {
            NIL => self.head = block,
            t => self.next[t as usize] = block,
        }
        self.tail = block;
        self.len += 1;
    }

    pub fn pop_front(&mut self) -> Option<u32> {
        let block = self.head;
        if block == NIL {
            return None;
        }
        self.remove(block);
        Some(block)
    }

    /// Takes `block`, which must be in the queue, out of it.
    pub fn remove(&mut self, block: u32) {
        let (p, n) = (self.prev[block as usize], self.next[block as usize]);
        match p {
            NIL => self.head = n,
            p => self.next[p as usize] = n,
        }
        match n {
            NIL => self.tail = p,
            n => self.prev[n as usize] = p,
        }
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_prefixes_hash_alike_and_a_different_block_changes_every_later_hash() {
        let a: Vec<u32> = (0..64).collect();
        let mut b = a.clone();
        b[20] = 999;
        let (ha, hb) = (token_block_hashes(&a, 16), token_block_hashes(&b, 16));
        assert_eq!(ha.len(), 4);
        assert_eq!(ha[0], hb[0]);
        assert!(ha[1..].iter().zip(&hb[1..]).all(|(x, y)| x != y));
        // A partial block is not hashed.
        assert_eq!(token_block_hashes(&a[..47], 16).len(), 2);
        // Streams: the shared tokens' full blocks only, the same for any prompt of the stream.
        assert_eq!(stream_block_hashes(7, 47, 16), stream_block_hashes(7, 40, 16));
        assert_ne!(stream_block_hashes(7, 32, 16), stream_block_hashes(8, 32, 16));
    }

    #[test]
    fn own_blocks_chain_after_the_shared_ones_and_differ_between_requests() {
        let shared = stream_block_hashes(7, 40, 16);
        let (mut a, mut b) = (shared.clone(), shared.clone());
        extend_with_own_blocks(&mut a, 5, 0);
        extend_with_own_blocks(&mut b, 5, 1);
        assert_eq!((a.len(), &a[..2]), (5, &shared[..]));
        assert!(a[2..].iter().all(|h| !b.contains(h)));
        // A later extension keeps the blocks hashed before it.
        let before = a.clone();
        extend_with_own_blocks(&mut a, 7, 2);
        assert_eq!(&a[..5], &before[..]);
        extend_with_own_blocks(&mut a, 3, 3);
        assert_eq!(a.len(), 7);
    }

    #[test]
    fn a_prompt_cached_whole_recomputes_its_last_block() {
        assert_eq!(hit_blocks_max(64, 4, 16), 3);
        assert_eq!(hit_blocks_max(65, 4, 16), 4);
        assert_eq!(hit_blocks_max(65, 2, 16), 2);
        assert_eq!(hit_blocks_max(1, 0, 16), 0);
    }

    #[test]
    fn free_queue_is_fifo_with_removal_from_the_middle() {
        let mut q = FreeQueue::default();
        for b in [5, 1, 9, 3] {
            q.push_back(b);
        }
        q.remove(9);
        q.remove(5);
        q.push_back(5);
        assert_eq!(q.len(), 3);
        let order: Vec<u32> = std::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(order, vec![1, 3, 5]);
        assert!(q.is_empty());
    }
}

#[cfg(test)]
#[path = "prefix_tests.rs"]
pub(super) mod scheduler_tests;

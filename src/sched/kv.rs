//! Paged KV-cache memory: a pool of fixed-size blocks and per-sequence block tables.
//!
//! The split follows vLLM v1 and mistral.rs: [`BlockPool`] hands out block ids from an O(1) free
//! list and knows nothing of sequences; [`KvCacheManager`] keeps each sequence's block table and
//! allocates all-or-nothing, so a failed allocation never leaves a sequence half-grown.
//!
//! With prefix caching on (`sched::prefix`), blocks are shared between tables by reference count,
//! and a block whose count drops to 0 keeps its content until it is evicted: free blocks then
//! wait in vLLM V1's queue order instead of the stack.

use super::prefix::{BlockHash, FreeQueue, PrefixCache};
use super::runs::FreeRuns;

/// Fixed-size KV blocks, identified by index. The free blocks are a stack: the most recently
/// freed block is reused first, which is deterministic and cache-friendly for a real engine.
/// Blocks never handed out yet lie at the bottom of the stack in ascending order, so they are
/// only counted, not listed: memory follows the blocks in use, not the pool's size (a scenario
/// may give a pool of billions of blocks).
#[derive(Clone, Debug)]
pub struct BlockPool {
    /// Freed blocks, the last freed on top (without prefix caching).
    freed: Vec<u32>,
    /// With prefix caching, the freed blocks instead, least recently freed first: vLLM V1 evicts
    /// the content that has waited longest, so `freed` stays empty.
    queue: Option<FreeQueue>,
    /// Blocks `next_unused..blocks_total` have never been handed out.
    next_unused: u32,
    blocks_total: u32,
    /// Blocks counted as used but given no id yet: those the decode cohort's sequences grew
    /// into (see `sched::cohort`). They get ids only if their sequence leaves the cohort alive.
    reserved: u32,
    /// Blocks held by tables kept as counts, without ids ([`KvCacheManager::keep_counts_only`]).
    counted: u32,
    /// Kept as counts with prefix caching: the order in which free blocks are evicted, beside
    /// the counts (`sched::runs`).
    runs: Option<FreeRuns>,
}

impl BlockPool {
    pub fn new(blocks_total: u32) -> BlockPool {
        BlockPool { freed: Vec::new(), queue: None, next_unused: 0, blocks_total, reserved: 0, counted: 0, runs: None }
    }

    pub fn blocks_total(&self) -> u32 {
        self.blocks_total
    }

    pub fn blocks_free(&self) -> u32 {
        let queued = self.queue.as_ref().map_or(0, FreeQueue::len);
        self.freed.len() as u32 + queued + (self.blocks_total - self.next_unused) - self.reserved - self.counted
    }

    /// Blocks counted as used without an id (see [`BlockPool::reserved`]).
    pub fn blocks_reserved(&self) -> u32 {
        self.reserved
    }

    pub fn blocks_used(&self) -> u32 {
        self.blocks_total - self.blocks_free()
    }

    /// Moves `count` blocks into `table`, top of the stack first, or none at all if fewer are
    /// free.
    fn allocate_into(&mut self, count: u32, table: &mut Vec<u32>) -> bool {
        if count > self.blocks_free() {
            return false;
        }
        if let Some(queue) = self.queue.as_mut() {
            // vLLM V1's queue starts with every block in id order and appends freed ones, so
            // blocks never used go first and cached content is evicted only when none are left.
            let fresh = count.min(self.blocks_total - self.next_unused);
            table.extend(self.next_unused..self.next_unused + fresh);
            self.next_unused += fresh;
            table.extend((fresh..count).map(|_| queue.pop_front().expect("counted as free")));
            return true;
        }
        let from_freed = (count as usize).min(self.freed.len());
        let split_at = self.freed.len() - from_freed;
        table.extend(self.freed.drain(split_at..).rev());
        let fresh = count - from_freed as u32;
        table.extend(self.next_unused..self.next_unused + fresh);
        self.next_unused += fresh;
        true
    }

    fn release(&mut self, table: &mut Vec<u32>) {
        self.freed.extend(table.drain(..).rev());
        debug_assert!(self.blocks_free() <= self.blocks_total);
    }
}

/// Per-sequence block tables over one [`BlockPool`]. Sequences are identified by their slot in
/// the scheduler's slab; a table is kept (empty) when its slot is free so its allocation is reused.
#[derive(Clone, Debug)]
pub struct KvCacheManager {
    pool: BlockPool,
    tables: Vec<Vec<u32>>,
    /// Without block ids ([`KvCacheManager::keep_counts_only`]): the blocks each slot holds,
    /// and `tables` stay empty.
    counts: Option<Vec<u32>>,
    block_size: u32,
    /// `Some` with prefix caching on.
    prefix: Option<PrefixCache>,
    /// Blocks a sequence holds beside its tokens' from its first allocation to its release (a
    /// hybrid model's sliding windows and linear-attention states: `scenario::model::KvLayout`).
    /// They are in no table, so block `i` of a table is still its tokens' `i`-th block.
    own_per_seq: u32,
    /// With ids, the ids of each slot's own blocks.
    own: Vec<Vec<u32>>,
    /// Without ids, how many own blocks all slots hold.
    own_counted: u64,
}

impl KvCacheManager {
    pub fn new(blocks_total: u32, block_size: u32) -> KvCacheManager {
        assert!(block_size > 0, "block_size must be positive");
        KvCacheManager {
            pool: BlockPool::new(blocks_total),
            tables: Vec::new(),
            counts: None,
            block_size,
            prefix: None,
            own_per_seq: 0,
            own: Vec::new(),
            own_counted: 0,
        }
    }

    /// The same manager where each sequence also holds `blocks` blocks of its own while it holds
    /// any (see [`KvCacheManager::own_per_seq`]).
    pub fn with_blocks_per_seq(mut self, blocks: u32) -> KvCacheManager {
        debug_assert_eq!(self.pool.blocks_used(), 0, "set before any allocation");
        self.own_per_seq = blocks;
        self
    }

    /// Blocks `seq` must take beside its tokens' if it is allocated now: its own, when it holds
    /// nothing yet.
    #[inline]
    fn own_needed(&self, seq: u32) -> u32 {
        if self.own_per_seq > 0 && self.blocks_of(seq) == 0 { self.own_per_seq } else { 0 }
    }

    /// Takes `count` free blocks as `seq`'s own (counted as free by the caller).
    fn take_own(&mut self, seq: u32, count: u32) {
        if count == 0 {
            return;
        }
        if self.counts.is_some() {
            if let Some(runs) = self.pool.runs.as_mut() {
                runs.take(count);
            }
            self.pool.counted += count;
            self.own_counted += u64::from(count);
            return;
        }
        let slot = seq as usize;
        if self.own.len() <= slot {
            self.own.resize_with(slot + 1, Vec::new);
        }
        let taken = self.pool.allocate_into(count, &mut self.own[slot]);
        debug_assert!(taken, "counted as free by the caller");
        if let Some(prefix) = self.prefix.as_mut() {
            self.own[slot].iter().for_each(|&b| prefix.on_allocated(b));
        }
    }

    /// Returns `seq`'s own blocks, if it holds any (`held`: whether it held token blocks).
    fn release_own(&mut self, seq: u32, held: bool) {
        if !held || self.own_per_seq == 0 {
            return;
        }
        if self.counts.is_some() {
            self.pool.counted -= self.own_per_seq;
            self.own_counted -= u64::from(self.own_per_seq);
            if let Some(runs) = self.pool.runs.as_mut() {
                runs.push_plain(self.own_per_seq);
            }
            return;
        }
        let Some(own) = self.own.get_mut(seq as usize) else { return };
        match (self.prefix.as_mut(), self.pool.queue.as_mut()) {
            (Some(prefix), Some(queue)) => {
                for b in own.drain(..).rev() {
                    if prefix.release(b) {
                        queue.push_back(b);
                    }
                }
            }
            _ => self.pool.release(own),
        }
    }

    /// Blocks sequences hold as their own ([`KvCacheManager::with_blocks_per_seq`]).
    pub fn blocks_held_as_own(&self) -> u64 {
        match &self.counts {
            Some(_) => self.own_counted,
            None => self.own.iter().map(|o| o.len() as u64).sum(),
        }
    }

    /// Keeps only how many blocks each sequence holds, not which: for the simulator, which never
    /// reads a block's id without prefix caching. Admitting and releasing a sequence is then
    /// O(1), not a push per block (the simulation of the 100k bench went from 29 to 24 ms,
    /// issue 14); every count, and so every scheduling decision, is the same. Switched on
    /// before any allocation, through [`super::Scheduler::without_block_ids`].
    ///
    /// With prefix caching, only where no request shares text (blocks are shared by id): the
    /// one content a request can then find is its own, after a preemption, and the free blocks'
    /// order, which says what was evicted meanwhile, is kept as runs (`sched::runs`).
    pub(super) fn keep_counts_only(&mut self) {
        debug_assert_eq!(self.pool.blocks_used(), 0, "switched off before any allocation");
        self.counts = Some(Vec::new());
        if self.prefix.is_some() {
            self.pool.runs = Some(FreeRuns::new(self.pool.blocks_total));
        }
    }

    /// Whether tables are counts, without ids.
    pub(super) fn counts_only(&self) -> bool {
        self.counts.is_some()
    }

    /// Whether tables share blocks by id and count references (prefix caching with ids): what
    /// the debug invariants check them against.
    #[cfg(debug_assertions)]
    pub(super) fn shares_blocks(&self) -> bool {
        self.prefix.is_some() && self.counts.is_none()
    }

    /// The same manager with prefix caching: computed prompt blocks are kept by hash and shared.
    pub fn with_prefix_caching(mut self) -> KvCacheManager {
        debug_assert_eq!(self.pool.blocks_used(), 0, "switched on before any allocation");
        self.pool.queue = Some(FreeQueue::default());
        self.prefix = Some(PrefixCache::default());
        self
    }

    /// The prefix cache, if caching is on.
    pub fn prefix_cache(&self) -> Option<&PrefixCache> {
        self.prefix.as_ref()
    }

    /// Tokens of a prompt hashed `hashes` whose KV this cache holds (whole blocks, from the
    /// first); 0 without prefix caching. What the prefix-aware router compares between replicas.
    pub fn cached_prefix_tokens(&self, hashes: &[BlockHash]) -> u32 {
        self.prefix.as_ref().map_or(0, |p| p.longest_hit(hashes) as u32 * self.block_size)
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for_tokens(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.block_size)
    }

    /// The block ids holding `seq`'s KV, in token order (none kept
    /// [`KvCacheManager::keep_counts_only`]).
    pub fn block_table(&self, seq: u32) -> &[u32] {
        self.tables.get(seq as usize).map_or(&[], |t| t.as_slice())
    }

    /// How many blocks hold `seq`'s KV.
    #[inline]
    pub fn blocks_of(&self, seq: u32) -> u32 {
        match &self.counts {
            Some(counts) => counts.get(seq as usize).copied().unwrap_or(0),
            None => self.block_table(seq).len() as u32,
        }
    }

    /// Additional blocks `seq` needs so that `tokens_total` tokens fit.
    pub fn blocks_missing(&self, seq: u32, tokens_total: u32) -> u32 {
        let held = self.blocks_of(seq);
        self.blocks_for_tokens(tokens_total).saturating_sub(held)
    }

    /// Grows `seq`'s table so `tokens_total` tokens fit, keeping `blocks_reserved` blocks free
    /// afterwards (the admission watermark). All or nothing.
    #[inline]
    pub fn allocate(&mut self, seq: u32, tokens_total: u32, blocks_reserved: u32) -> bool {
        // Most calls are a decode step inside a block it holds already: a multiplication
        // answers them, where counting the blocks needed takes a division per sequence per step.
        let held = u64::from(self.blocks_of(seq));
        if u64::from(tokens_total) <= held * u64::from(self.block_size) {
            return true;
        }
        self.allocate_missing(seq, tokens_total, blocks_reserved)
    }

    fn allocate_missing(&mut self, seq: u32, tokens_total: u32, blocks_reserved: u32) -> bool {
        let missing = self.blocks_missing(seq, tokens_total);
        if missing == 0 {
            return true;
        }
        let own = self.own_needed(seq);
        if u64::from(self.pool.blocks_free()) < u64::from(missing) + u64::from(own) + u64::from(blocks_reserved) {
            return false;
        }
        let allocated = self.grow_table(seq, missing);
        debug_assert!(allocated);
        self.take_own(seq, own);
        allocated
    }

    /// Moves `count` free blocks into `seq`'s table (made on first use), or none if fewer are free.
    fn grow_table(&mut self, seq: u32, count: u32) -> bool {
        if self.counts.is_some() {
            if count > self.pool.blocks_free() {
                return false;
            }
            if let Some(runs) = self.pool.runs.as_mut() {
                runs.take(count);
            }
            self.count_blocks(seq, count);
            return true;
        }
        let table = self.table_mut(seq);
        let from = table.len();
        if !self.pool.allocate_into(count, &mut self.tables[seq as usize]) {
            return false;
        }
        if let Some(prefix) = self.prefix.as_mut() {
            self.tables[seq as usize][from..].iter().for_each(|&b| prefix.on_allocated(b));
        }
        true
    }

    /// Adds `count` blocks, already taken from the free ones, to `seq`'s count.
    #[inline]
    fn count_blocks(&mut self, seq: u32, count: u32) {
        let counts = self.counts.as_mut().expect("tables kept as counts");
        let slot = seq as usize;
        if counts.len() <= slot {
            counts.resize(slot + 1, 0);
        }
        counts[slot] += count;
        self.pool.counted += count;
    }

    fn table_mut(&mut self, seq: u32) -> &mut Vec<u32> {
        let slot = seq as usize;
        if self.tables.len() <= slot {
            self.tables.resize_with(slot + 1, Vec::new);
        }
        &mut self.tables[slot]
    }

    /// Starts `seq`'s empty table with the cached blocks of `hits` (hashes all cached, from the
    /// prompt's first block), then grows it so `tokens_total` tokens fit, keeping
    /// `blocks_reserved` free. All or nothing. A hit on a block no table holds takes it out of
    /// the free blocks, so it counts against them as a new block does (vLLM V1's
    /// `allocate_slots`: `num_evictable_computed_blocks`).
    pub fn allocate_with_hits(&mut self, seq: u32, hits: &[BlockHash], tokens_total: u32, blocks_reserved: u32) -> bool {
        debug_assert!(self.block_table(seq).is_empty(), "hits start a table");
        let Some(prefix) = self.prefix.as_ref() else { return self.allocate(seq, tokens_total, blocks_reserved) };
        let blocks: Vec<u32> = hits.iter().map(|&h| prefix.lookup(h).expect("hits are cached")).collect();
        let evictable = blocks.iter().filter(|&&b| prefix.refs(b) == 0).count() as u32;
        let missing = self.blocks_for_tokens(tokens_total).saturating_sub(blocks.len() as u32);
        let own = self.own_needed(seq);
        let needed = u64::from(missing) + u64::from(evictable) + u64::from(own) + u64::from(blocks_reserved);
        if u64::from(self.pool.blocks_free()) < needed {
            return false;
        }
        let prefix = self.prefix.as_mut().expect("checked above");
        let queue = self.pool.queue.as_mut().expect("prefix caching keeps a queue");
        for &b in &blocks {
            if prefix.acquire(b) {
                queue.remove(b);
            }
        }
        self.table_mut(seq).extend_from_slice(&blocks);
        let grown = self.grow_table(seq, missing);
        debug_assert!(grown, "counted as free above");
        self.take_own(seq, own);
        grown
    }

    /// Records that block `index` of `seq`'s table now holds computed content `hash`, so later
    /// prompts may share it.
    pub fn cache_block(&mut self, seq: u32, index: usize, hash: BlockHash) {
        let Some(prefix) = self.prefix.as_mut() else { return };
        prefix.insert(self.tables[seq as usize][index], hash);
    }

    /// Counts `count` more blocks as used, without ids, if that many are free.
    #[inline]
    pub(super) fn reserve(&mut self, count: u32) -> bool {
        if count > self.pool.blocks_free() {
            return false;
        }
        // Without ids, a block counted as used is taken from the free order at once, as a table
        // growing into it would take it.
        if let Some(runs) = self.pool.runs.as_mut() {
            runs.take(count);
        }
        self.pool.reserved += count;
        true
    }

    /// Returns `count` reserved blocks to the free blocks: those a sequence that finished grew
    /// into (its table is freed next).
    #[inline]
    pub(super) fn release_reserved(&mut self, count: u32) {
        debug_assert!(count <= self.pool.reserved);
        self.pool.reserved -= count;
        if let Some(runs) = self.pool.runs.as_mut() {
            runs.push_plain(count);
        }
    }

    /// Gives `count` reserved blocks ids, appended to `seq`'s table (without ids: adds them to
    /// its count, as they were taken from the free ones when reserved).
    pub(super) fn assign_reserved(&mut self, seq: u32, count: u32) {
        debug_assert!(count <= self.pool.reserved);
        self.pool.reserved -= count;
        if self.counts.is_some() {
            self.count_blocks(seq, count);
            return;
        }
        let assigned = self.grow_table(seq, count);
        debug_assert!(assigned, "reserved blocks are free once released");
    }

    /// Returns all of `seq`'s blocks to the pool.
    pub fn free(&mut self, seq: u32) {
        let held = self.blocks_of(seq) > 0;
        self.release_own(seq, held);
        if self.counts.is_some() {
            let count = self.take_count(seq);
            if let Some(runs) = self.pool.runs.as_mut() {
                runs.forget(seq);
                runs.push_plain(count);
            }
            return;
        }
        let Some(table) = self.tables.get_mut(seq as usize) else { return };
        let (Some(prefix), Some(queue)) = (self.prefix.as_mut(), self.pool.queue.as_mut()) else {
            self.pool.release(table);
            return;
        };
        // The tail first, as vLLM V1 frees: a prompt's last blocks are the least likely to be
        // shared, so they are evicted before its first ones.
        for b in table.drain(..).rev() {
            if prefix.release(b) {
                queue.push_back(b);
            }
        }
    }

    /// SGLang's radix cache (`sched::radix_state`): starts `seq`'s empty table with `pages` the
    /// radix cache owns, which stay out of the pool's accounting (the cache counts them).
    pub(super) fn adopt_pages(&mut self, seq: u32, pages: &[u32]) {
        debug_assert!(self.counts.is_none() && self.prefix.is_none(), "the radix cache keeps block ids, no hashes");
        let table = self.table_mut(seq);
        debug_assert!(table.is_empty(), "adopted pages start a table");
        table.extend_from_slice(pages);
    }

    /// The radix cache: page `index` of `seq`'s table becomes `page`, which the cache holds; the
    /// page it replaces (the same content computed twice) goes back to the pool.
    pub(super) fn replace_page(&mut self, seq: u32, index: usize, page: u32) {
        let old = std::mem::replace(&mut self.tables[seq as usize][index], page);
        if old != page {
            self.pool.freed.push(old);
        }
    }

    /// The radix cache: returns `seq`'s pages from `from` on to the pool and empties its table;
    /// the first `from` pages belong to the cache, which keeps them.
    pub(super) fn free_from(&mut self, seq: u32, from: usize) {
        let Some(table) = self.tables.get_mut(seq as usize) else { return };
        let mut own = table.split_off(from.min(table.len()));
        table.clear();
        self.pool.release(&mut own);
    }

    /// The radix cache evicted `pages`: back to the pool.
    pub(super) fn release_pages(&mut self, pages: &mut Vec<u32>) {
        self.pool.release(pages);
    }

    /// Takes `seq`'s blocks out of its count; returns how many.
    #[inline]
    fn take_count(&mut self, seq: u32) -> u32 {
        let counts = self.counts.as_mut().expect("tables kept as counts");
        let count = counts.get_mut(seq as usize).map_or(0, std::mem::take);
        self.pool.counted -= count;
        count
    }

    /// Returns `seq`'s blocks to the pool as a preemption does with prefix caching on (vLLM V1):
    /// its first `full_blocks` blocks, computed in full, keep their content and are found again
    /// when it is admitted, unless evicted first. With ids, their hashes (`hashes`, at least
    /// `full_blocks` of them) are cached; without, the free blocks' runs keep them.
    pub(super) fn free_keeping_computed(&mut self, seq: u32, full_blocks: u32, hashes: &[BlockHash]) {
        if self.counts.is_some() {
            let held = self.blocks_of(seq) > 0;
            self.release_own(seq, held);
            let count = self.take_count(seq);
            let kept = full_blocks.min(count);
            if let Some(runs) = self.pool.runs.as_mut() {
                runs.push_kept(seq, kept, count - kept);
            }
            return;
        }
        if let (Some(prefix), Some(table)) = (self.prefix.as_mut(), self.tables.get(seq as usize)) {
            for (&block, &hash) in table.iter().zip(hashes).take(full_blocks as usize) {
                prefix.insert(block, hash);
            }
        }
        self.free(seq);
    }

    /// Without ids: how many of waiting `seq`'s first blocks are free with their content still
    /// (see [`KvCacheManager::free_keeping_computed`]); `None` with ids, where the prefix cache
    /// answers by hash.
    pub(super) fn kept_blocks(&self, seq: u32) -> Option<u32> {
        self.pool.runs.as_ref().map(|runs| runs.kept(seq))
    }

    /// Without ids: admits `seq` with its first `kept` blocks found again (see
    /// [`KvCacheManager::kept_blocks`]) and KV for `tokens_total` tokens, keeping
    /// `blocks_reserved` free. All or nothing; the kept blocks count against the free ones, as
    /// any hit on a block no table holds does ([`KvCacheManager::allocate_with_hits`]).
    pub(super) fn allocate_with_kept(&mut self, seq: u32, kept: u32, tokens_total: u32, blocks_reserved: u32) -> bool {
        debug_assert_eq!(self.blocks_of(seq), 0, "kept blocks start a table");
        let missing = self.blocks_for_tokens(tokens_total).saturating_sub(kept);
        let own = self.own_needed(seq);
        let needed = u64::from(missing) + u64::from(kept) + u64::from(own) + u64::from(blocks_reserved);
        if u64::from(self.pool.blocks_free()) < needed {
            return false;
        }
        self.pool.runs.as_mut().expect("kept blocks are counted in runs").take_kept(seq, kept);
        self.count_blocks(seq, kept);
        let grown = self.grow_table(seq, missing);
        debug_assert!(grown, "counted as free above");
        self.take_own(seq, own);
        grown
    }

    /// Blocks held by all tables; must equal the pool's used count without prefix caching
    /// (with it, a shared block is counted once per table).
    pub fn blocks_in_tables(&self) -> u64 {
        match &self.counts {
            Some(counts) => counts.iter().map(|&c| u64::from(c)).sum(),
            None => self.tables.iter().map(|t| t.len() as u64).sum(),
        }
    }

    /// Blocks in use, each counted once: the used count when no block is shared.
    pub fn blocks_held(&self) -> u64 {
        u64::from(self.pool.blocks_used() - self.pool.blocks_reserved())
    }

    /// Debug check of the reference counts: each block's count is the number of tables that
    /// hold it, the blocks counted as used are those with a count, and every cached hash names a
    /// block that carries it. Without ids, that the free blocks' runs are the free blocks.
    #[cfg(debug_assertions)]
    pub fn check_refcounts(&self) {
        if let Some(runs) = &self.pool.runs {
            assert_eq!(runs.len(), self.pool.blocks_free(), "the free blocks' runs hold the free blocks");
        }
        let Some(prefix) = self.prefix.as_ref().filter(|_| self.counts.is_none()) else { return };
        prefix.check();
        let held = prefix.check_refs(self.tables.iter().chain(&self.own).map(Vec::as_slice));
        assert_eq!(held, self.blocks_held(), "blocks in use differ from blocks with references");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hybrid model's own blocks come with a sequence's first blocks and go with its last,
    /// in every mode of the manager, and count against admission like any.
    #[test]
    fn own_blocks_are_held_from_first_allocation_to_release() {
        let modes: [fn(KvCacheManager) -> KvCacheManager; 3] = [
            |kv| kv,
            |mut kv| {
                kv.keep_counts_only();
                kv
            },
            |kv| kv.with_prefix_caching(),
        ];
        for mode in modes {
            let mut kv = mode(KvCacheManager::new(8, 16).with_blocks_per_seq(2));
            assert!(kv.allocate(0, 33, 0)); // 3 token blocks and 2 of its own
            assert_eq!((kv.pool().blocks_free(), kv.blocks_of(0), kv.blocks_held_as_own()), (3, 3, 2));
            assert!(kv.allocate(0, 48, 0), "growing within its blocks takes none");
            assert!(kv.allocate(0, 49, 0), "a fourth token block, no more of its own");
            assert_eq!(kv.pool().blocks_free(), 2);
            assert!(!kv.allocate(1, 1, 0), "one token block and two of its own do not fit in 2");
            assert_eq!((kv.pool().blocks_free(), kv.blocks_of(1)), (2, 0));
            kv.free(0);
            assert_eq!((kv.pool().blocks_free(), kv.blocks_held_as_own()), (8, 0));
            assert!(kv.allocate(1, 1, 0));
            assert_eq!(kv.pool().blocks_free(), 5);
            // Compiled in debug builds only, so `cargo test --release --lib` builds too.
            #[cfg(debug_assertions)]
            kv.check_refcounts();
        }
    }

    #[test]
    fn allocation_is_all_or_nothing() {
        let mut kv = KvCacheManager::new(4, 16);
        assert!(kv.allocate(0, 33, 0)); // 3 blocks
        assert_eq!(kv.pool().blocks_free(), 1);
        assert!(!kv.allocate(1, 17, 0)); // needs 2, 1 free: nothing taken
        assert_eq!(kv.pool().blocks_free(), 1);
        assert_eq!(kv.block_table(1).len(), 0);
        assert!(kv.allocate(1, 16, 0));
        assert_eq!(kv.pool().blocks_free(), 0);
    }

    #[test]
    fn growing_only_takes_missing_blocks_and_free_returns_all() {
        let mut kv = KvCacheManager::new(10, 16);
        assert!(kv.allocate(2, 16, 0));
        assert!(kv.allocate(2, 16, 0));
        assert_eq!(kv.block_table(2).len(), 1);
        assert!(kv.allocate(2, 17, 0));
        assert_eq!(kv.block_table(2).len(), 2);
        kv.free(2);
        assert_eq!(kv.pool().blocks_free(), 10);
        assert_eq!(kv.blocks_in_tables(), 0);
    }

    #[test]
    fn watermark_is_kept_free() {
        let mut kv = KvCacheManager::new(10, 1);
        assert!(!kv.allocate(0, 10, 1));
        assert!(kv.allocate(0, 9, 1));
        assert_eq!(kv.pool().blocks_free(), 1);
    }

    /// Blocks come back in the order a full stack of every block would give: the freed ones
    /// (last freed first), then the never-used ones in ascending order.
    #[test]
    fn blocks_are_reused_last_freed_first_then_fresh_in_order() {
        let mut kv = KvCacheManager::new(10, 1);
        assert!(kv.allocate(0, 3, 0));
        assert!(kv.allocate(1, 2, 0));
        assert_eq!((kv.block_table(0), kv.block_table(1)), (&[0, 1, 2][..], &[3, 4][..]));
        kv.free(0);
        assert!(kv.allocate(2, 5, 0));
        assert_eq!(kv.block_table(2), &[0, 1, 2, 5, 6]);
        // A pool of billions of blocks holds only what is in use.
        let mut huge = KvCacheManager::new(u32::MAX, 16);
        assert!(huge.allocate(0, 64, 0));
        assert_eq!((huge.block_table(0), huge.pool().blocks_used()), (&[0, 1, 2, 3][..], 4));
    }

    #[test]
    fn without_ids_every_count_is_what_it_is_with_them() {
        use proptest::prelude::*;
        use proptest::test_runner::TestRunner;
        // (sequence, tokens to hold, watermark), or a sequence to free.
        let op = prop_oneof![(0u32..6, 0u32..90, 0u32..3).prop_map(Ok), (0u32..6).prop_map(Err)];
        TestRunner::default()
            .run(&prop::collection::vec(op, 1..60), |ops| {
                let mut with_ids = KvCacheManager::new(20, 8);
                let mut counts = KvCacheManager::new(20, 8);
                counts.keep_counts_only();
                for op in ops {
                    match op {
                        Ok((seq, tokens, watermark)) => {
                            prop_assert_eq!(with_ids.allocate(seq, tokens, watermark), counts.allocate(seq, tokens, watermark));
                        }
                        Err(seq) => {
                            with_ids.free(seq);
                            counts.free(seq);
                        }
                    }
                    prop_assert_eq!(with_ids.pool().blocks_free(), counts.pool().blocks_free());
                    prop_assert_eq!(with_ids.blocks_in_tables(), counts.blocks_in_tables());
                    for seq in 0..6 {
                        prop_assert_eq!(with_ids.blocks_of(seq), counts.blocks_of(seq));
                        prop_assert!(counts.block_table(seq).is_empty());
                    }
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn block_ids_are_distinct() {
        let mut kv = KvCacheManager::new(8, 2);
        assert!(kv.allocate(0, 6, 0));
        assert!(kv.allocate(1, 10, 0));
        let mut all: Vec<u32> = kv.block_table(0).iter().chain(kv.block_table(1)).copied().collect();
        all.sort();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
    }
}

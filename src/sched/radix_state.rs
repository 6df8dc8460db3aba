//! SGLang 0.4.9's token pool beside its radix cache: what the scheduler state does with a
//! sequence's pages as it is admitted, computed, finished or retracted
//! (`mem_cache/radix_cache.py`: `match_prefix`, `cache_unfinished_req`, `cache_finished_req`;
//! `schedule_batch.py`: `retract_decode`, `alloc_token_slots`).
//!
//! ```text
//!  table of a sequence:  [ pages the radix cache holds (locked) | its own pages ]
//!                          ▲ radix_pages                          ▲ prefill chunks not yet
//!                          admission: the matched prefix            cached, decode tokens
//!  prefill chunk computed ──► inserted: its own prompt pages join the cache, duplicates freed
//!  finished ──► everything but the last token inserted, the lock dropped (evictable now)
//!  retracted ──► its own pages freed, the lock dropped; its cached prompt stays
//! ```
//!
//! The pool is the scheduler's [`super::kv::BlockPool`] of `num_gpu_blocks` pages of
//! `page_size` (= `block_size`) tokens; a page is free, held by the radix cache, or a running
//! sequence's own. Free + evictable is what admission counts on, as SGLang's `PrefillAdder` does.
//!
//! Keys: a sequence's page keys are its block hashes (`prompt_hashes`: the shared text's, then
//! its own text's, made when first needed), so the engine's token ids and the simulator's shared
//! streams key the tree alike.

use super::prefix::extend_with_own_blocks;
use super::radix::{NodeId, ROOT, RadixCache};
use super::state::SchedulerState;

impl SchedulerState {
    fn radix(&mut self) -> &mut RadixCache {
        self.radix.as_mut().expect("policy sglang with its radix cache")
    }

    /// Makes sure `seq` has keys for its first `pages` pages: its own text's past the shared.
    fn extend_keys(&mut self, seq: u32, pages: usize) {
        let serial = self.own_text_serial_next;
        let keys = self.hashes_mut(seq);
        if keys.len() < pages {
            extend_with_own_blocks(keys, pages, serial);
            self.own_text_serial_next += 1;
        }
    }

    /// The longest cached prefix of waiting `seq`: its node and length in pages. SGLang matches
    /// all but the last token (`adjust_max_prefix_ids`: "need at least one token to compute
    /// logits"), in whole pages. The walk marks the path as used now and may split an edge.
    pub(super) fn radix_match(&mut self, seq: u32) -> (NodeId, u32) {
        let s = &self.seqs[seq as usize];
        let pages = (s.tokens_known().saturating_sub(1) / self.config.block_size) as usize;
        self.extend_keys(seq, pages);
        let keys = &self.prompt_hashes[seq as usize][..pages];
        let (node, matched) = self.radix.as_mut().expect("radix cache").match_prefix(keys);
        (node, matched as u32)
    }

    /// The keys of waiting `seq`'s prefix as [`SchedulerState::radix_match`] looks it up.
    pub(super) fn radix_lookup_keys(&mut self, seq: u32) -> &[u64] {
        let s = &self.seqs[seq as usize];
        let pages = (s.tokens_known().saturating_sub(1) / self.config.block_size) as usize;
        self.extend_keys(seq, pages);
        &self.prompt_hashes[seq as usize][..pages]
    }

    /// Admits `seq` with the `pages` of its matched prefix (locked at `node` by the caller):
    /// its table starts with the cache's pages, and those tokens are computed.
    pub(super) fn radix_adopt(&mut self, seq: u32, node: NodeId, pages: u32) {
        let mut path = Vec::with_capacity(pages as usize);
        self.radix.as_ref().expect("radix cache").path_pages(node, &mut path);
        debug_assert_eq!(path.len(), pages as usize);
        self.kv.adopt_pages(seq, &path);
        let s = &mut self.seqs[seq as usize];
        s.radix_node = node;
        s.radix_pages = pages;
        let hit_tokens = pages * self.config.block_size;
        self.record_admission(seq, hit_tokens);
    }

    /// Grows `seq`'s own pages to hold `tokens_total` tokens, evicting from the cache first when
    /// the free pages are short (`alloc_token_slots`: it asks the cache for as many pages as it
    /// needs, not for the difference). All or nothing.
    pub(super) fn radix_allocate(&mut self, seq: u32, tokens_total: u32) -> bool {
        let missing = self.kv.blocks_missing(seq, tokens_total);
        if missing > self.kv.pool().blocks_free() {
            self.radix_evict(u64::from(missing));
        }
        self.kv.allocate(seq, tokens_total, 0)
    }

    /// Evicts at least `pages` pages from the cache (if it holds that many unlocked) into the pool.
    pub(super) fn radix_evict(&mut self, pages: u64) {
        let mut freed = Vec::new();
        self.radix().evict(pages, &mut freed);
        self.kv.release_pages(&mut freed);
    }

    /// Inserts `seq`'s computed whole pages into the cache; its pages that duplicate the cache's
    /// go back to the pool and its table takes the cache's. Returns the node of its last page.
    fn radix_insert_computed(&mut self, seq: u32) -> (NodeId, u32) {
        let pages = (self.seqs[seq as usize].computed / self.config.block_size) as usize;
        self.extend_keys(seq, pages);
        let table: Vec<u32> = self.kv.block_table(seq)[..pages].to_vec();
        let keys = &self.prompt_hashes[seq as usize][..pages];
        let radix = self.radix.as_mut().expect("radix cache");
        radix.insert(keys, &table);
        let (node, matched) = radix.match_prefix(keys);
        debug_assert_eq!(matched, pages);
        let mut path = Vec::with_capacity(pages);
        radix.path_pages(node, &mut path);
        let own_from = self.seqs[seq as usize].radix_pages as usize;
        for (i, &page) in path.iter().enumerate().skip(own_from) {
            self.kv.replace_page(seq, i, page);
        }
        (node, pages as u32)
    }

    /// After a prefill chunk (`cache_unfinished_req`): the computed prompt joins the cache, and
    /// `seq` now locks it whole.
    pub(super) fn radix_cache_unfinished(&mut self, seq: u32) {
        let (node, pages) = self.radix_insert_computed(seq);
        let old = self.seqs[seq as usize].radix_node;
        let radix = self.radix();
        radix.dec_lock(old);
        radix.inc_lock(node);
        let s = &mut self.seqs[seq as usize];
        s.radix_node = node;
        s.radix_pages = pages;
    }

    /// `seq` ends (`cache_finished_req`): all of it with KV, in whole pages, joins the cache,
    /// unlocked; the partial last page goes back to the pool.
    pub(super) fn radix_cache_finished(&mut self, seq: u32) {
        let (_, pages) = self.radix_insert_computed(seq);
        let old = self.seqs[seq as usize].radix_node;
        self.radix().dec_lock(old);
        self.kv.free_from(seq, pages as usize);
        let s = &mut self.seqs[seq as usize];
        s.radix_node = ROOT;
        s.radix_pages = 0;
    }

    /// `seq` is retracted (`retract_decode`): its own pages are freed, its lock dropped, and what
    /// it had in the cache stays there, evictable, for its readmission to find.
    pub(super) fn radix_retract(&mut self, seq: u32) {
        let s = self.seqs[seq as usize];
        self.kv.free_from(seq, s.radix_pages as usize);
        self.radix().dec_lock(s.radix_node);
        let s = &mut self.seqs[seq as usize];
        s.radix_node = ROOT;
        s.radix_pages = 0;
        s.computed = 0;
        s.preemptions += 1;
    }

    /// Debug check: pages held by the cache and by running sequences' own tables are the pool's
    /// used pages, and each running table starts with its locked path.
    #[cfg(debug_assertions)]
    pub(super) fn check_radix(&self) {
        let radix = self.radix.as_ref().expect("radix cache");
        radix.check();
        let mut own = 0u64;
        let mut path = Vec::new();
        for &seq in &self.running {
            let s = &self.seqs[seq as usize];
            own += u64::from(self.kv.blocks_of(seq) - s.radix_pages);
            path.clear();
            radix.path_pages(s.radix_node, &mut path);
            assert_eq!(&self.kv.block_table(seq)[..s.radix_pages as usize], &path[..], "sequence {seq}'s table left its cached path");
        }
        assert_eq!(radix.total_pages() + own, u64::from(self.kv.pool().blocks_used()), "pages leaked between the pool and the radix cache");
    }
}

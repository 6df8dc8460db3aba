//! RadixAttention's cache: a radix tree over token sequences whose nodes own the KV pages of
//! their tokens, as SGLang 0.4.9 keeps it (`python/sglang/srt/mem_cache/radix_cache.py`).
//!
//! ```text
//!   root ─┬─ [system prompt A ……] ─┬─ [user 1 …] ─ [answer 1 …]      each edge: page keys and
//!         │                        └─ [user 2 …]                     the page ids holding them
//!         └─ [system prompt B ……] ─ [user 3 …]
//!
//!   match_prefix: walk from the root, splitting the edge where the match ends
//!   insert:       walk, split, hang the rest as a new leaf; returns what was already there
//!   lock_ref:     a running request locks the path to its last node (root included, never evicted)
//!   evict:        least recently used unlocked leaves first; a parent left childless joins them
//! ```
//!
//! Keys are one `u64` per page (SGLang's `page_size`, 1 by default: a key per token). They are
//! chained hashes (`sched::prefix`): equal keys at a depth mean equal text up to it, which is all
//! a walk compares, so the engine's token ids and the simulator's shared streams both fit.
//! SGLang compares a page's token tuple; with a key per page the tree matches whole pages alike.
//!
//! Sizes are in pages. `evictable` counts pages in nodes no request locks, `protected` those a
//! request does: SGLang's `evictable_size_` and `protected_size_`, which admission adds to the
//! free pages (`PrefillAdder.rem_total_tokens`).
//!
//! Access times are a counter, not a clock (the scheduler has no time source): every node a walk
//! touches gets the next tick, so the order of accesses is SGLang's `time.monotonic()` order.
//! Eviction breaks ties in access time by node id, which SGLang's heap leaves to chance.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// A node of the tree, by index.
pub type NodeId = u32;
/// The root: empty key, always locked.
pub const ROOT: NodeId = 0;

#[derive(Clone, Debug, Default)]
struct Node {
    parent: NodeId,
    /// Children by the key of their first page.
    children: BTreeMap<u64, NodeId>,
    keys: Vec<u64>,
    /// Page ids holding `keys`' KV, one per key; empty in a tree without pages (the waiting
    /// queue's scratch tree, the router's approximate trees).
    pages: Vec<u32>,
    lock_ref: u32,
    last_access: u64,
    live: bool,
}

/// The radix cache (see the module documentation).
#[derive(Clone, Debug)]
pub struct RadixCache {
    nodes: Vec<Node>,
    free_nodes: Vec<NodeId>,
    evictable: u64,
    protected: u64,
    clock: u64,
    with_pages: bool,
}

impl Default for RadixCache {
    fn default() -> Self {
        RadixCache::new()
    }
}

impl RadixCache {
    /// An empty tree whose nodes own page ids.
    pub fn new() -> RadixCache {
        let root = Node { lock_ref: 1, live: true, ..Node::default() };
        RadixCache { nodes: vec![root], free_nodes: Vec::new(), evictable: 0, protected: 0, clock: 0, with_pages: true }
    }

    /// An empty tree of keys only: SGLang's in-batch prefix check over the waiting queue, and the
    /// router's approximate trees, which hold no KV.
    pub fn keys_only() -> RadixCache {
        RadixCache { with_pages: false, ..RadixCache::new() }
    }

    /// Pages in nodes no request locks: what eviction can free.
    pub fn evictable_pages(&self) -> u64 {
        self.evictable
    }

    /// Pages in nodes some request locks.
    pub fn protected_pages(&self) -> u64 {
        self.protected
    }

    /// Every page the tree holds.
    pub fn total_pages(&self) -> u64 {
        self.evictable + self.protected
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Pages of `keys` (from the first) the tree holds, without touching it: what a router or a
    /// report asks. [`RadixCache::match_prefix`] is the scheduler's walk.
    pub fn peek_prefix(&self, keys: &[u64]) -> usize {
        let (mut node, mut matched) = (ROOT, 0);
        while matched < keys.len() {
            let Some(&child) = self.nodes[node as usize].children.get(&keys[matched]) else { break };
            let common = common_len(&self.nodes[child as usize].keys, &keys[matched..]);
            matched += common;
            if common < self.nodes[child as usize].keys.len() {
                break;
            }
            node = child;
        }
        matched
    }

    /// The longest prefix of `keys` in the tree: its last node and its length in pages. A match
    /// that ends inside an edge splits it there, so the node ends exactly at the match
    /// (`_match_prefix_helper`); every node on the way is marked as used now.
    pub fn match_prefix(&mut self, keys: &[u64]) -> (NodeId, usize) {
        let now = self.tick();
        self.nodes[ROOT as usize].last_access = now;
        let (mut node, mut matched) = (ROOT, 0);
        while matched < keys.len() {
            let Some(&child) = self.nodes[node as usize].children.get(&keys[matched]) else { break };
            let now = self.tick();
            self.nodes[child as usize].last_access = now;
            let common = common_len(&self.nodes[child as usize].keys, &keys[matched..]);
            matched += common;
            if common < self.nodes[child as usize].keys.len() {
                node = self.split(child, common);
                break;
            }
            node = child;
        }
        (node, matched)
    }

    /// Appends the page ids from the root down to `node` to `out`.
    pub fn path_pages(&self, node: NodeId, out: &mut Vec<u32>) {
        let start = out.len();
        let mut n = node;
        while n != ROOT {
            out.extend(self.nodes[n as usize].pages.iter().rev());
            n = self.nodes[n as usize].parent;
        }
        out[start..].reverse();
    }

    /// Pages from the root down to `node`.
    pub fn depth(&self, node: NodeId) -> usize {
        let mut n = node;
        let mut depth = 0;
        while n != ROOT {
            depth += self.nodes[n as usize].keys.len();
            n = self.nodes[n as usize].parent;
        }
        depth
    }

    /// Cuts `child`'s edge after `at` pages: a new node takes the first part and becomes
    /// `child`'s parent (`_split_node`). Returns the new node.
    fn split(&mut self, child: NodeId, at: usize) -> NodeId {
        let c = &mut self.nodes[child as usize];
        debug_assert!(at > 0 && at < c.keys.len());
        let keys_tail = c.keys.split_off(at);
        let pages_tail = if c.pages.is_empty() { Vec::new() } else { c.pages.split_off(at) };
        let head_keys = std::mem::replace(&mut c.keys, keys_tail);
        let head_pages = std::mem::replace(&mut c.pages, pages_tail);
        let (parent, lock_ref, first_tail) = (c.parent, c.lock_ref, c.keys[0]);
        let now = self.tick();
        let new = self.alloc(Node {
            parent,
            children: BTreeMap::from([(first_tail, child)]),
            keys: head_keys,
            pages: head_pages,
            lock_ref,
            last_access: now,
            live: true,
        });
        self.nodes[child as usize].parent = new;
        let first = self.nodes[new as usize].keys[0];
        self.nodes[parent as usize].children.insert(first, new);
        new
    }

    fn alloc(&mut self, node: Node) -> NodeId {
        match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as NodeId
            }
        }
    }

    /// Inserts `keys` held in `pages` (one per key; empty for a tree without pages). Returns how
    /// many of them, from the first, the tree held already (`_insert_helper`'s
    /// `total_prefix_length`): the caller's pages for those are duplicates, and it frees them.
    /// The rest hang as a new leaf, unlocked.
    pub fn insert(&mut self, keys: &[u64], pages: &[u32]) -> usize {
        debug_assert!(!self.with_pages || pages.len() == keys.len());
        // SGLang's insert walks as its match does: a match that ends inside an edge splits it,
        // and the new leaf hangs from the split node.
        let (node, matched) = self.match_prefix(keys);
        if matched < keys.len() {
            let now = self.tick();
            let leaf = self.alloc(Node {
                parent: node,
                children: BTreeMap::new(),
                keys: keys[matched..].to_vec(),
                pages: if self.with_pages { pages[matched..].to_vec() } else { Vec::new() },
                lock_ref: 0,
                last_access: now,
                live: true,
            });
            self.nodes[node as usize].children.insert(keys[matched], leaf);
            self.evictable += (keys.len() - matched) as u64;
        }
        matched
    }

    /// A request now holds the path to `node`: none of it may be evicted.
    pub fn inc_lock(&mut self, node: NodeId) {
        let mut n = node;
        while n != ROOT {
            let x = &mut self.nodes[n as usize];
            if x.lock_ref == 0 {
                self.evictable -= x.keys.len() as u64;
                self.protected += x.keys.len() as u64;
            }
            x.lock_ref += 1;
            n = x.parent;
        }
    }

    /// A request no longer holds the path to `node`.
    pub fn dec_lock(&mut self, node: NodeId) {
        let mut n = node;
        while n != ROOT {
            let x = &mut self.nodes[n as usize];
            assert!(x.lock_ref > 0, "radix node {n} unlocked more often than locked");
            if x.lock_ref == 1 {
                self.evictable += x.keys.len() as u64;
                self.protected -= x.keys.len() as u64;
            }
            x.lock_ref -= 1;
            n = x.parent;
        }
    }

    /// Evicts unlocked leaves, least recently used first, until at least `pages_wanted` pages
    /// are freed or none is left (`evict`: whole leaves, so it may free more). The freed page ids
    /// are appended to `freed`; returns how many pages were evicted.
    pub fn evict(&mut self, pages_wanted: u64, freed: &mut Vec<u32>) -> u64 {
        if pages_wanted == 0 || self.evictable == 0 {
            return 0;
        }
        let mut heap: BinaryHeap<Reverse<(u64, NodeId)>> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| n.live && *i != ROOT as usize && n.children.is_empty() && n.lock_ref == 0)
            .map(|(i, n)| Reverse((n.last_access, i as NodeId)))
            .collect();
        let mut evicted = 0;
        while evicted < pages_wanted {
            let Some(Reverse((_, id))) = heap.pop() else { break };
            let node = std::mem::take(&mut self.nodes[id as usize]);
            evicted += node.keys.len() as u64;
            self.evictable -= node.keys.len() as u64;
            freed.extend_from_slice(&node.pages);
            self.free_nodes.push(id);
            let parent = &mut self.nodes[node.parent as usize];
            parent.children.remove(&node.keys[0]);
            if node.parent != ROOT && parent.children.is_empty() && parent.lock_ref == 0 {
                heap.push(Reverse((parent.last_access, node.parent)));
            }
        }
        evicted
    }

    /// Debug check: the sizes are the nodes' pages by lock, every child hangs under its first
    /// key, and each lock count is at least its children's.
    #[cfg(any(test, debug_assertions))]
    pub fn check(&self) {
        let (mut evictable, mut protected) = (0u64, 0u64);
        for (i, n) in self.nodes.iter().enumerate().filter(|(_, n)| n.live) {
            if i != ROOT as usize {
                assert!(!n.keys.is_empty(), "radix node {i} has an empty key");
                assert!(!self.with_pages || n.pages.len() == n.keys.len(), "radix node {i}: pages and keys differ in length");
                if n.lock_ref == 0 { evictable += n.keys.len() as u64 } else { protected += n.keys.len() as u64 }
            }
            let children_locks: u32 = n.children.values().map(|&c| self.nodes[c as usize].lock_ref).sum();
            assert!(i == ROOT as usize || n.lock_ref >= children_locks, "radix node {i} holds fewer locks than its children");
            for (&k, &c) in &n.children {
                let child = &self.nodes[c as usize];
                assert!(child.live && child.parent == i as NodeId && child.keys[0] == k, "radix node {c} misplaced under {i}");
            }
        }
        assert_eq!((evictable, protected), (self.evictable, self.protected), "radix sizes drifted");
    }

    /// Every page id the tree holds (debug checks).
    #[cfg(any(test, debug_assertions))]
    pub fn all_pages(&self) -> Vec<u32> {
        self.nodes.iter().filter(|n| n.live).flat_map(|n| n.pages.iter().copied()).collect()
    }
}

/// How many keys, from the first, `a` and `b` share.
fn common_len(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
#[path = "radix_tests.rs"]
mod tests;

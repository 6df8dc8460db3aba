//! The radix cache's unit tests: match, insert, split, locks and LRU eviction, each checked by
//! hand against SGLang 0.4.9's `radix_cache.py`.

use super::*;

fn keys(range: std::ops::Range<u64>) -> Vec<u64> {
    range.collect()
}

/// Page ids equal to 1000 + key, so a path's pages show which keys they hold.
fn pages(k: &[u64]) -> Vec<u32> {
    k.iter().map(|&k| 1000 + k as u32).collect()
}

fn insert(t: &mut RadixCache, k: &[u64]) -> usize {
    let done = t.insert(k, &pages(k));
    t.check();
    done
}

#[test]
fn match_walks_whole_edges_and_splits_where_the_match_ends() {
    let mut t = RadixCache::new();
    assert_eq!(insert(&mut t, &keys(0..10)), 0);
    assert_eq!(t.total_pages(), 10);
    // A shorter query ends inside the edge: the edge is split there, nothing is added.
    let (node, len) = t.match_prefix(&keys(0..4));
    assert_eq!((len, t.depth(node), t.total_pages()), (4, 4, 10));
    let mut p = Vec::new();
    t.path_pages(node, &mut p);
    assert_eq!(p, pages(&keys(0..4)));
    t.check();
    // A query that leaves the tree stops where it does.
    let mut diverging = keys(0..6);
    diverging.push(99);
    assert_eq!(t.match_prefix(&diverging).1, 6);
    assert_eq!(t.peek_prefix(&keys(0..20)), 10);
    assert_eq!(t.peek_prefix(&[7, 8]), 0);
}

#[test]
fn insert_returns_what_was_there_and_hangs_the_rest_as_a_leaf() {
    let mut t = RadixCache::new();
    insert(&mut t, &keys(0..8));
    let mut branch = keys(0..5);
    branch.extend([50, 51, 52]);
    // The first 5 pages were there (the caller frees its copies); 3 new ones hang off a split.
    assert_eq!(insert(&mut t, &branch), 5);
    assert_eq!(t.total_pages(), 11);
    assert_eq!(t.peek_prefix(&branch), 8);
    assert_eq!(t.peek_prefix(&keys(0..8)), 8);
    // Inserting a prefix of what is there adds nothing.
    assert_eq!(insert(&mut t, &keys(0..3)), 3);
    assert_eq!(t.total_pages(), 11);
}

#[test]
fn locked_paths_are_protected_and_unlocking_makes_them_evictable_again() {
    let mut t = RadixCache::new();
    insert(&mut t, &keys(0..6));
    let (node, _) = t.match_prefix(&keys(0..4));
    t.inc_lock(node);
    t.check();
    // The split head (4 pages) is locked; its tail (2 pages) is not.
    assert_eq!((t.protected_pages(), t.evictable_pages()), (4, 2));
    let mut freed = Vec::new();
    assert_eq!(t.evict(100, &mut freed), 2, "only the unlocked leaf goes");
    assert_eq!(freed, pages(&keys(4..6)));
    t.dec_lock(node);
    t.check();
    assert_eq!((t.protected_pages(), t.evictable_pages()), (0, 4));
}

#[test]
fn eviction_takes_the_least_recently_used_leaves_and_then_their_parents() {
    let mut t = RadixCache::new();
    // Two branches under a shared head: [0..4] then [10..13] or [20..22].
    let a: Vec<u64> = keys(0..4).into_iter().chain(10..13).collect();
    let b: Vec<u64> = keys(0..4).into_iter().chain(20..22).collect();
    insert(&mut t, &a);
    insert(&mut t, &b);
    // Use branch a after b: b's leaf is now the least recently used.
    t.match_prefix(&a);
    let mut freed = Vec::new();
    assert_eq!(t.evict(1, &mut freed), 2, "a whole leaf goes, even when fewer pages are wanted");
    assert_eq!(freed, vec![1020, 1021]);
    t.check();
    // Next: a's leaf, then the shared head, once it is a leaf itself.
    freed.clear();
    assert_eq!(t.evict(4, &mut freed), 7);
    assert_eq!(freed, vec![1010, 1011, 1012, 1000, 1001, 1002, 1003]);
    assert_eq!(t.total_pages(), 0);
    t.check();
    // The tree is whole again after emptying: nodes are reused.
    insert(&mut t, &a);
    assert_eq!(t.peek_prefix(&a), 7);
}

#[test]
fn a_tree_of_keys_only_holds_no_pages() {
    let mut t = RadixCache::keys_only();
    assert_eq!(t.insert(&keys(0..5), &[]), 0);
    assert_eq!(t.insert(&keys(0..7), &[]), 5);
    t.check();
    let mut freed = Vec::new();
    assert_eq!(t.evict(10, &mut freed), 7);
    assert!(freed.is_empty());
}

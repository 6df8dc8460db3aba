//! SGLang's router, `sgl-router` (as shipped beside SGLang 0.4.9), policy `cache_aware`: it keeps
//! an approximate radix tree of the prompts it sent to each worker, since it cannot see their
//! caches, and balances it against their loads.
//!
//! ```text
//!   loads imbalanced? (max − min > balance_abs_threshold and max > min × balance_rel_threshold)
//!     yes ─► the least loaded worker
//!     no  ─► the worker whose tree matches the longest prefix, if it matches more than
//!            cache_threshold of the prompt; else the worker whose tree is smallest
//!   then the prompt is inserted into the chosen worker's tree
//! ```
//!
//! The defaults are sgl-router's: `cache_threshold` 0.5, `balance_abs_threshold` 32,
//! `balance_rel_threshold` 1.0001. Loads are the requests each worker has in flight. sgl-router
//! matches characters of the request's text; here the tree holds the prompt's tokens (one key per
//! token of text shared with other prompts; a prompt's own text, which nothing can match, only
//! counts toward its tree's size). Ties go to the lowest index, where sgl-router's are arbitrary.
//! Not modelled: its periodic eviction of each tree down to `max_tree_size` (2^24 characters),
//! which a simulation rarely reaches.

use crate::sched::radix::RadixCache;

pub const CACHE_THRESHOLD: f64 = 0.5;
pub const BALANCE_ABS_THRESHOLD: u32 = 32;
pub const BALANCE_REL_THRESHOLD: f64 = 1.0001;

/// One approximate tree per worker of a router group.
#[derive(Clone, Debug)]
pub struct CacheAwareTrees {
    trees: Vec<RadixCache>,
    /// Tokens each tree holds, its own text's included.
    sizes: Vec<u64>,
}

impl CacheAwareTrees {
    pub fn new(workers: usize) -> CacheAwareTrees {
        CacheAwareTrees { trees: vec![RadixCache::keys_only(); workers], sizes: vec![0; workers] }
    }

    /// The worker (an index into `loads`) for a prompt of `prompt_tokens` whose shared text has
    /// one key per token, `keys`; the prompt joins that worker's tree.
    pub fn pick(&mut self, loads: &[u32], keys: &[u64], prompt_tokens: u32) -> usize {
        let (min_i, &min_load) = loads.iter().enumerate().min_by_key(|&(i, &l)| (l, i)).expect("a router has workers");
        let max_load = loads.iter().copied().max().unwrap_or(0);
        let imbalanced =
            max_load.saturating_sub(min_load) > BALANCE_ABS_THRESHOLD && f64::from(max_load) > f64::from(min_load) * BALANCE_REL_THRESHOLD;
        let chosen = if imbalanced {
            min_i
        } else {
            let (best, matched) = (0..self.trees.len())
                .map(|i| (i, self.trees[i].peek_prefix(keys)))
                .fold((0, 0), |acc, (i, m)| if m > acc.1 { (i, m) } else { acc });
            let rate = matched as f64 / f64::from(prompt_tokens.max(1));
            if rate > CACHE_THRESHOLD { best } else { (0..self.sizes.len()).min_by_key(|&i| (self.sizes[i], i)).expect("workers") }
        };
        let present = self.trees[chosen].insert(keys, &[]);
        self.sizes[chosen] += (keys.len() - present) as u64 + u64::from(prompt_tokens).saturating_sub(keys.len() as u64);
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_prefix_follows_its_worker_until_loads_drift_apart() {
        let mut t = CacheAwareTrees::new(2);
        let keys: Vec<u64> = (0..80).collect();
        // Empty trees: the smallest (ties: the first) takes it.
        assert_eq!(t.pick(&[0, 0], &keys, 100), 0);
        // 80 of 100 tokens match worker 0's tree: rate 0.8 > 0.5, even though it is busier.
        assert_eq!(t.pick(&[5, 0], &keys, 100), 0);
        // A prompt sharing nothing goes to the smaller tree.
        assert_eq!(t.pick(&[5, 0], &[], 100), 1);
        // Loads 40 apart (> 32): the least loaded, whatever the cache says.
        assert_eq!(t.pick(&[40, 0], &keys, 100), 1);
        // Matching no more than half the prompt is not enough: the smaller tree (120 tokens
        // against worker 1's 200) takes it.
        assert_eq!(t.pick(&[0, 0], &keys[..50], 100), 0);
    }
}

//! The order of the free blocks of a pool kept as counts (`KvCacheManager::keep_counts_only`)
//! with prefix caching on, where no request shares text with another.
//!
//! With block ids, prefix caching keeps the free blocks in vLLM V1's queue (`sched::prefix`):
//! never-used blocks first, then freed blocks least recently freed first, each table's tail
//! first. Without ids, the simulator's fast path still needs that order for one thing: when a
//! preempted request is admitted again, which of its computed blocks were evicted meanwhile. The
//! blocks a table frees at once lie together in the queue, so the queue is a list of *runs*:
//!
//! ```text
//!   head ─► [loose blocks] [run: a finished request's blocks] [run: preempted r's blocks] … ◄─ tail
//!           allocation takes the head                        a run of r: its tail block(s) first
//!                                                            (plain: never hit), then its full
//!                                                            computed blocks, last one first
//! ```
//!
//! Allocation evicts from the head, so a preempted request loses its blocks from its last one
//! back, and keeps a run of its first ones: what it finds again when admitted (vLLM V1's hit on
//! its own block hashes). No other request can hit them, since none shares its text, so every
//! other run is plain and adjacent plain runs merge; and while no preempted request keeps a run,
//! the order of the free blocks does not matter at all, and they are a count. Each operation is
//! O(1), or amortized O(1) for allocation (a run is popped once).

use std::collections::VecDeque;

/// `Run::owner` of a run nobody can hit.
const NO_OWNER: u32 = u32::MAX;
/// A slot's `kept_run` when it keeps no run.
const NO_RUN: u64 = u64::MAX;

/// Blocks freed together, in queue order: `plain` ones (evicted first), then `kept` ones.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// The slot whose computed blocks `kept` counts, or [`NO_OWNER`].
    owner: u32,
    /// Blocks of content the owner finds again, its first ones: evicted last.
    kept: u32,
    /// Blocks nobody finds again (a finished request's, a partial block).
    plain: u32,
}

/// The free blocks as runs, in the order [`super::prefix::FreeQueue`] keeps them with ids.
#[derive(Clone, Debug)]
pub(super) struct FreeRuns {
    /// Blocks taken before any run: those never handed out, and those freed while no run was
    /// kept (with nothing to find in them, their order no longer matters).
    loose: u32,
    /// Empty unless some run is kept (`owned > 0`).
    runs: VecDeque<Run>,
    /// The index of `runs[0]` among every run ever pushed.
    first: u64,
    /// Blocks in `runs`.
    queued: u32,
    /// Runs in `runs` with an owner.
    owned: u32,
    /// By slot: the index of the run of its kept blocks, or [`NO_RUN`].
    kept_run: Vec<u64>,
}

impl FreeRuns {
    pub(super) fn new(blocks_total: u32) -> FreeRuns {
        FreeRuns { loose: blocks_total, runs: VecDeque::new(), first: 0, queued: 0, owned: 0, kept_run: Vec::new() }
    }

    /// Free blocks: the pool's free count, which the debug invariants compare.
    pub(super) fn len(&self) -> u32 {
        self.loose + self.queued
    }

    /// Takes `count` blocks for a table: loose ones first, then from the head, evicting what
    /// they held.
    #[inline]
    pub(super) fn take(&mut self, count: u32) {
        debug_assert!(count <= self.len(), "took more blocks than are free");
        if count <= self.loose {
            self.loose -= count;
            return;
        }
        self.evict(count);
    }

    /// [`FreeRuns::take`] past the loose blocks.
    fn evict(&mut self, count: u32) {
        let mut left = count - std::mem::take(&mut self.loose);
        while left > 0 && self.owned > 0 {
            let run = self.runs.front_mut().expect("an owned run is queued");
            let plain = left.min(run.plain);
            run.plain -= plain;
            let kept = (left - plain).min(run.kept);
            run.kept -= kept;
            left -= plain + kept;
            self.queued -= plain + kept;
            if run.plain + run.kept == 0 {
                let owned = run.owner != NO_OWNER;
                self.runs.pop_front();
                self.first += 1;
                self.owned -= u32::from(owned);
            }
        }
        if self.owned == 0 {
            self.loosen();
        }
        self.loose -= left;
    }

    /// No run is kept any more: every queued block becomes loose.
    fn loosen(&mut self) {
        self.loose += std::mem::take(&mut self.queued);
        self.first += self.runs.len() as u64;
        self.runs.clear();
    }

    /// A table's `count` blocks return, none of them to be found again.
    #[inline]
    pub(super) fn push_plain(&mut self, count: u32) {
        if self.owned == 0 {
            self.loose += count;
            return;
        }
        self.queued += count;
        if let Some(tail) = self.runs.back_mut().filter(|run| run.owner == NO_OWNER) {
            tail.plain += count;
            return;
        }
        self.runs.push_back(Run { owner: NO_OWNER, kept: 0, plain: count });
    }

    /// Preempted `slot`'s blocks return: its first `kept` hold computed content it finds again
    /// if they are not evicted first; `plain` more after them do not.
    pub(super) fn push_kept(&mut self, slot: u32, kept: u32, plain: u32) {
        self.forget(slot);
        if kept == 0 {
            self.push_plain(plain);
            return;
        }
        self.queued += kept + plain;
        self.owned += 1;
        let s = slot as usize;
        if self.kept_run.len() <= s {
            self.kept_run.resize(s + 1, NO_RUN);
        }
        self.kept_run[s] = self.first + self.runs.len() as u64;
        self.runs.push_back(Run { owner: slot, kept, plain });
    }

    /// The run of `slot`'s kept blocks, if it is still in the queue.
    fn kept_index(&self, slot: u32) -> Option<usize> {
        let index = *self.kept_run.get(slot as usize)?;
        let i = index.checked_sub(self.first)? as usize;
        self.runs.get(i).filter(|run| run.owner == slot).map(|_| i)
    }

    /// How many of `slot`'s first blocks are still free with their content.
    #[inline]
    pub(super) fn kept(&self, slot: u32) -> u32 {
        if self.owned == 0 {
            return 0;
        }
        self.kept_index(slot).map_or(0, |i| self.runs[i].kept)
    }

    /// `slot` is admitted again with its first `count` kept blocks: they leave the queue (from
    /// its middle), and the rest of its run is plain from now on.
    pub(super) fn take_kept(&mut self, slot: u32, count: u32) {
        let Some(i) = self.kept_index(slot) else {
            debug_assert_eq!(count, 0, "took kept blocks that were evicted");
            return;
        };
        let run = &mut self.runs[i];
        debug_assert!(count <= run.kept);
        run.kept -= count;
        self.queued -= count;
        self.forget(slot);
    }

    /// `slot` will never look for its kept blocks (admitted again, or gone): they become plain.
    #[inline]
    pub(super) fn forget(&mut self, slot: u32) {
        if self.owned > 0 {
            self.disown(slot);
        }
    }

    fn disown(&mut self, slot: u32) {
        if let Some(i) = self.kept_index(slot) {
            let run = &mut self.runs[i];
            run.plain += std::mem::take(&mut run.kept);
            run.owner = NO_OWNER;
            self.owned -= 1;
            if self.owned == 0 {
                self.loosen();
            }
        }
        if let Some(index) = self.kept_run.get_mut(slot as usize) {
            *index = NO_RUN;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_takes_loose_blocks_then_evicts_a_runs_tail_before_its_kept_blocks() {
        let mut q = FreeRuns::new(10);
        q.take(10);
        q.push_plain(2);
        q.push_kept(7, 3, 1);
        q.push_plain(4);
        assert_eq!((q.len(), q.kept(7)), (10, 3));
        // The plain run, then slot 7's partial block, then its last kept block.
        q.take(4);
        assert_eq!(q.kept(7), 2);
        q.take_kept(7, 2);
        assert_eq!((q.len(), q.kept(7)), (4, 0));
        q.take(4);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn blocks_freed_before_a_kept_run_go_before_it_and_those_freed_after_it_after() {
        let mut q = FreeRuns::new(6);
        q.take(6);
        q.push_plain(1);
        q.push_kept(3, 2, 0);
        q.push_plain(3);
        q.take(1);
        assert_eq!(q.kept(3), 2);
        q.take(1);
        assert_eq!((q.kept(3), q.len()), (1, 4));
        q.take(4);
        assert_eq!((q.kept(3), q.len()), (0, 0));
    }

    #[test]
    fn a_run_evicted_whole_is_found_no_more_and_a_forgotten_one_turns_plain() {
        let mut q = FreeRuns::new(4);
        q.take(4);
        q.push_kept(1, 2, 0);
        q.push_kept(2, 2, 0);
        q.take(2);
        assert_eq!((q.kept(1), q.kept(2)), (0, 2));
        q.forget(2);
        assert_eq!((q.kept(2), q.len()), (0, 2));
        // A new request in slot 2 finds nothing of the old one's.
        q.push_plain(0);
        assert_eq!(q.kept(2), 0);
        q.take(2);
        assert_eq!(q.len(), 0);
    }
}

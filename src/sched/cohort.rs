//! The decode cohort (issue 14): running sequences that decode one token in every step they
//! run, kept as totals so that a step of a thousand decodes costs the simulator what a step of
//! one does.
//!
//! A decoding sequence does the same thing every step: its context grows by one token, it needs
//! a new KV block every `block_size` tokens, and it finishes at a step known when it starts
//! decoding. So the cohort keeps, instead of each member's state:
//!
//! ```text
//!   epoch                 steps the cohort has decoded together
//!   member offset o       context (computed tokens) − epoch, fixed while it is a member
//!   Σc, Σc²               the members' contexts, summed: a step adds n and 2·Σc + n, a join
//!                         or a leave its member's c and c²
//!   crossing[r]           members whose context is a multiple of block_size when epoch ≡ r
//!                         (they need a block this step): r = −o mod block_size
//!   finishes              the epoch at which each member's last token is out: buckets for
//!                         the next FINISH_RING epochs, a min-heap beyond
//!   longest               the member with the largest o, where anything reads the longest
//!                         context (V0's graph check, a cost model that says it does)
//!   newest                the member admitted last (whether running sequences outside the
//!                         cohort come after every member in the running order)
//! ```
//!
//! Per-member work happens only when a sequence joins, finishes or leaves. A member's
//! `Seq::computed` and `Seq::generated` are those it joined with; [`Cohort::materialize`] gives
//! its state now. Its KV table keeps the blocks it joined with; the blocks it grew into since are
//! counted in the pool as reserved, and get ids only if it leaves alive.
//!
//! The scheduler falls back to its per-sequence path (the reference) whenever a step is not a
//! plain "every member decodes": it dissolves the cohort, schedules sequence by sequence, and
//! the sequences that sampled in that step form the next cohort.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::seq::{NOT_MEMBER, Seq};

/// Largest block size the cohort keeps a counter per residue for. Larger blocks leave every
/// sequence to the per-sequence path: exact, only slower, and memory stays bounded.
pub(super) const BLOCK_SIZE_MAX: u32 = 4096;

/// Epochs ahead that finishes are kept in buckets (most outputs are shorter); later ones wait
/// in a heap until they come this close.
const FINISH_RING: u64 = 1024;

/// Bound on Σ context² (and so on every other total) for a step the cohort runs: below it, a
/// cost model's f64 sum of per-sequence terms is a sum of exact integers, so it equals the
/// totals whatever the order. A step over it goes through the per-sequence path.
pub(super) const EXACT_TOTAL_MAX: u128 = 1 << 52;

/// Whether the entry `(serial, slot)` of a [`LazyMax`] or [`NewestMax`] is of a member still in.
fn is_live(members: &[Member], seqs: &[Seq], serial: u64, slot: u32) -> bool {
    let index = seqs[slot as usize].cohort_index;
    members.get(index as usize).is_some_and(|m| m.slot == slot && m.serial == serial)
}

/// The largest key among the members, in a max-heap whose entries of members since gone are
/// dropped when they reach the top.
#[derive(Clone, Debug, Default)]
struct LazyMax<K: Ord> {
    heap: BinaryHeap<(K, u64, u32)>,
}

impl<K: Ord + Copy> LazyMax<K> {
    fn push(&mut self, key: K, member: &Member) {
        self.heap.push((key, member.serial, member.slot));
    }

    /// The largest key of a live member; `key` recomputes a member's key to rebuild the heap
    /// when stale entries outnumber live ones.
    fn max(&mut self, members: &[Member], seqs: &[Seq], key: impl Fn(&Member) -> K) -> Option<K> {
        while let Some(&(_, serial, slot)) = self.heap.peek() {
            if is_live(members, seqs, serial, slot) {
                break;
            }
            self.heap.pop();
        }
        if self.heap.len() > 2 * members.len() + 64 {
            self.heap = members.iter().map(|m| (key(m), m.serial, m.slot)).collect();
        }
        self.heap.peek().map(|&(k, _, _)| k)
    }

    fn clear(&mut self) {
        self.heap.clear();
    }
}

/// The latest admission among the members. It is asked only in steps with sequences running
/// beside the cohort, so it keeps one entry, updated on join: the latest admission that joined,
/// which is the answer while that member is still in. Only when it has left do the members get
/// scanned, and a finish of the newest member before such a step is rare (a sorted list of
/// every join cost its upkeep on every join, about 4% of the bench).
#[derive(Clone, Copy, Debug, Default)]
struct NewestMax {
    /// `(admitted, serial, slot)`: no member admitted later ever joined since.
    entry: Option<(u64, u64, u32)>,
}

impl NewestMax {
    fn push(&mut self, admitted: u64, member: &Member) {
        if self.entry.is_none_or(|(latest, _, _)| admitted > latest) {
            self.entry = Some((admitted, member.serial, member.slot));
        }
    }

    fn max(&mut self, members: &[Member], seqs: &[Seq]) -> Option<u64> {
        match self.entry {
            Some((admitted, serial, slot)) if is_live(members, seqs, serial, slot) => Some(admitted),
            _ => {
                self.entry = members.iter().map(|m| (seqs[m.slot as usize].admitted, m.serial, m.slot)).max();
                self.entry.map(|(admitted, _, _)| admitted)
            }
        }
    }

    fn clear(&mut self) {
        self.entry = None;
    }
}

#[derive(Clone, Copy, Debug)]
struct Member {
    slot: u32,
    /// Context minus epoch.
    offset: i64,
    /// Unique per join, to tell a live [`LazyMax`] entry from one of a member since gone.
    serial: u64,
}

#[derive(Clone, Debug)]
pub(super) struct Cohort {
    epoch: u64,
    block_size: u32,
    /// `block_size − 1` where it is a power of two (a mask takes the residue); worked out once,
    /// as a population count is a dozen instructions on baseline x86-64.
    block_mask: Option<i64>,
    members: Vec<Member>,
    /// Σ context and Σ context² over the members, now.
    context_sum: u128,
    context_squares: u128,
    crossing: Vec<u32>,
    /// `finish_ring[e % FINISH_RING]`: members finishing at epoch `e`, for `e` within
    /// FINISH_RING of the epoch.
    finish_ring: Vec<Vec<u32>>,
    /// Members finishing later, as (epoch, slot).
    finish_later: BinaryHeap<Reverse<(u64, u32)>>,
    /// Members finishing at this epoch, not yet taken out.
    finishing: Vec<u32>,
    /// Kept only where something reads it ([`Cohort::new`]).
    longest: Option<LazyMax<i64>>,
    newest: NewestMax,
    serial_next: u64,
}

/// A member's totals at one epoch.
pub(super) struct Totals {
    pub context_tokens: u128,
    pub context_token_squares: u128,
    /// `None` where the cohort does not keep it.
    pub max_context_tokens: Option<u32>,
}

impl Cohort {
    /// `keep_longest`: whether anything reads the members' longest context (V0's graph check, a
    /// cost model that says so); kept, it costs a heap push per join and a check per step.
    pub(super) fn new(block_size: u32, keep_longest: bool) -> Cohort {
        debug_assert!(block_size > 0 && block_size <= BLOCK_SIZE_MAX);
        Cohort {
            epoch: 0,
            block_size,
            block_mask: block_size.is_power_of_two().then(|| i64::from(block_size) - 1),
            members: Vec::new(),
            context_sum: 0,
            context_squares: 0,
            crossing: vec![0; block_size as usize],
            finish_ring: vec![Vec::new(); FINISH_RING as usize],
            finish_later: BinaryHeap::new(),
            finishing: Vec::new(),
            longest: keep_longest.then(LazyMax::default),
            newest: NewestMax::default(),
            serial_next: 1,
        }
    }

    pub(super) fn len(&self) -> u32 {
        self.members.len() as u32
    }

    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Slots of the members, in no particular order.
    pub(super) fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.members.iter().map(|m| m.slot)
    }

    /// `value` mod the block size, for the counters by residue: a mask for the usual powers of
    /// two (a division per join and per step, otherwise).
    fn modulo_block(&self, value: i64) -> usize {
        match self.block_mask {
            Some(mask) => (value & mask) as usize,
            None => value.rem_euclid(i64::from(self.block_size)) as usize,
        }
    }

    fn residue(&self, offset: i64) -> usize {
        self.modulo_block(-offset)
    }

    /// Adds `seq` (in slot `slot`), which has just sampled a token and decodes next.
    pub(super) fn join(&mut self, seqs: &mut [Seq], slot: u32) {
        let seq = &mut seqs[slot as usize];
        debug_assert_eq!(seq.cohort_index, NOT_MEMBER);
        debug_assert!(!seq.in_prefill() && seq.generated < seq.max_output_tokens);
        let offset = seq.computed as i64 - self.epoch as i64;
        let serial = self.serial_next;
        self.serial_next += 1;
        seq.cohort_index = self.members.len() as u32;
        let member = Member { slot, offset, serial };
        self.members.push(member);
        if let Some(longest) = &mut self.longest {
            longest.push(offset, &member);
        }
        self.newest.push(seq.admitted, &member);
        let finish_epoch = self.epoch + u64::from(seq.max_output_tokens - seq.generated);
        let context = u64::from(seq.computed);
        self.context_sum += u128::from(context);
        self.context_squares += u128::from(context * context);
        let residue = self.residue(offset);
        self.crossing[residue] += 1;
        if finish_epoch - self.epoch < FINISH_RING {
            self.finish_ring[(finish_epoch % FINISH_RING) as usize].push(slot);
        } else {
            self.finish_later.push(Reverse((finish_epoch, slot)));
        }
    }

    /// `(computed, generated)` of member `seq` now.
    pub(super) fn materialize(&self, seq: &Seq) -> (u32, u32) {
        let member = self.members[seq.cohort_index as usize];
        let computed = (member.offset + self.epoch as i64) as u32;
        (computed, seq.generated + (computed - seq.computed))
    }

    /// Takes member `slot` out, writing its state now into its `Seq`.
    pub(super) fn remove(&mut self, seqs: &mut [Seq], slot: u32) {
        let index = seqs[slot as usize].cohort_index as usize;
        let (computed, generated) = self.materialize(&seqs[slot as usize]);
        let member = self.members.swap_remove(index);
        debug_assert_eq!(member.slot, slot);
        if let Some(moved) = self.members.get(index) {
            seqs[moved.slot as usize].cohort_index = index as u32;
        }
        let seq = &mut seqs[slot as usize];
        seq.computed = computed;
        seq.generated = generated;
        seq.cohort_index = NOT_MEMBER;
        let context = u64::from(computed);
        self.context_sum -= u128::from(context);
        self.context_squares -= u128::from(context * context);
        let residue = self.residue(member.offset);
        self.crossing[residue] -= 1;
    }

    /// Takes every member out (their state written back) and returns their slots.
    pub(super) fn dissolve(&mut self, seqs: &mut [Seq]) -> Vec<u32> {
        let slots: Vec<u32> = self.slots().collect();
        for &slot in &slots {
            let (computed, generated) = self.materialize(&seqs[slot as usize]);
            let seq = &mut seqs[slot as usize];
            seq.computed = computed;
            seq.generated = generated;
            seq.cohort_index = NOT_MEMBER;
        }
        self.members.clear();
        self.context_sum = 0;
        self.context_squares = 0;
        self.crossing.fill(0);
        self.finish_ring.iter_mut().for_each(Vec::clear);
        self.finish_later.clear();
        self.finishing.clear();
        if let Some(longest) = &mut self.longest {
            longest.clear();
        }
        self.newest.clear();
        slots
    }

    /// Members that need a new KV block before this step's decode.
    pub(super) fn crossers(&self) -> u32 {
        self.crossing[self.modulo_block(self.epoch as i64)]
    }

    /// The members' contexts before this step's decode, as totals.
    pub(super) fn totals(&mut self, seqs: &[Seq]) -> Totals {
        let epoch = self.epoch as i64;
        let max_context_tokens = self.longest.as_mut().map(|longest| {
            let offset = longest.max(&self.members, seqs, |m| m.offset);
            offset.map_or(0, |offset| (offset + epoch) as u32)
        });
        Totals { context_tokens: self.context_sum, context_token_squares: self.context_squares, max_context_tokens }
    }

    /// When the member admitted last was admitted (`Seq::admitted`); `None` without members.
    pub(super) fn newest_admitted(&mut self, seqs: &[Seq]) -> Option<u64> {
        self.newest.max(&self.members, seqs)
    }

    /// Every member decoded one token.
    pub(super) fn advance(&mut self) {
        self.epoch += 1;
        // Every context c became c + 1: Σc grows by n, and Σc² by 2·Σc + n.
        let n = self.members.len() as u128;
        self.context_squares += 2 * self.context_sum + n;
        self.context_sum += n;
        while let Some(&Reverse((epoch, slot))) = self.finish_later.peek() {
            if epoch - self.epoch >= FINISH_RING {
                break;
            }
            self.finish_later.pop();
            self.finish_ring[(epoch % FINISH_RING) as usize].push(slot);
        }
        debug_assert!(self.finishing.is_empty());
        std::mem::swap(&mut self.finishing, &mut self.finish_ring[(self.epoch % FINISH_RING) as usize]);
    }

    /// A member whose last token this step was, taken out with its state written back.
    pub(super) fn pop_finished(&mut self, seqs: &mut [Seq]) -> Option<u32> {
        let slot = self.finishing.pop()?;
        self.remove(seqs, slot);
        Some(slot)
    }

    /// Debug check: the totals are those of the members.
    #[cfg(debug_assertions)]
    pub(super) fn check(&self, seqs: &[Seq]) {
        let contexts = self.members.iter().map(|m| (m.offset + self.epoch as i64) as u128);
        assert_eq!(contexts.clone().sum::<u128>(), self.context_sum, "cohort context sum");
        assert_eq!(contexts.map(|c| c * c).sum::<u128>(), self.context_squares, "cohort context squares");
        let crossing: u64 = self.crossing.iter().map(|&c| c as u64).sum();
        assert_eq!(crossing, self.members.len() as u64, "cohort crossing counters");
        for (i, m) in self.members.iter().enumerate() {
            assert_eq!(seqs[m.slot as usize].cohort_index as usize, i, "cohort index");
        }
        // Summing the ring's 1,024 buckets cost more than the rest of the check at usual batch
        // sizes (over half of a debug-build plan's time), so it runs every 32nd epoch: a finish
        // lost or doubled is still caught, within 32 steps of the fault.
        if self.epoch % 32 == 0 {
            let finishes = self.finish_ring.iter().map(Vec::len).sum::<usize>() + self.finish_later.len() + self.finishing.len();
            assert_eq!(finishes, self.members.len(), "one finish per member");
        }
    }
}

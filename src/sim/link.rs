//! A link that moves bytes between pools (a KV cache from a prefill replica to a decode
//! replica): a bandwidth that concurrent transfers share fairly, and a latency each pays once.
//!
//! Sharing is processor sharing: with `n` transfers in flight each moves at `bandwidth / n`.
//! It is kept exact without touching every transfer on every change by *virtual time*: the
//! link-seconds of service one transfer has received since the link was last idle. It grows at
//! `1 / n` per real second, so a transfer that needs `s` seconds alone and starts at virtual time
//! `v` is done when virtual time reaches `v + s`, whatever arrives meanwhile. Transfers wait in a
//! heap by that finish tag; only the earliest is ever looked at.
//!
//! Times are integer nanoseconds, as everywhere in the simulation. A transfer's last byte leaves
//! at the first whole nanosecond at which its service is complete, and it arrives `latency_ns`
//! later: the latency is the wire's and the endpoints', paid in parallel with other transfers,
//! not a share of the bandwidth.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A link's capacity: what one transfer gets alone.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSpec {
    pub bandwidth_bytes_per_s: f64,
    pub latency_ns: u64,
}

impl LinkSpec {
    /// Seconds of the whole link that `bytes` need.
    fn service_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.bandwidth_bytes_per_s
    }

    /// When `bytes` sent alone at time 0 arrive: bytes / bandwidth (rounded up to whole
    /// nanoseconds) + latency.
    pub fn alone_ns(&self, bytes: u64) -> u64 {
        ceil_ns(self.service_s(bytes)).saturating_add(self.latency_ns)
    }
}

/// Seconds to whole nanoseconds, rounded up; absurd values saturate rather than wrap.
fn ceil_ns(seconds: f64) -> u64 {
    let ns = (seconds * 1e9).ceil();
    if ns >= u64::MAX as f64 { u64::MAX } else { ns.max(0.0) as u64 }
}

/// A transfer in flight: done when the link's virtual time reaches `finish_s`.
struct InFlight<T> {
    finish_s: f64,
    /// Start order, for ties: equal tags finish in the order they started.
    seq: u64,
    item: T,
}

impl<T> PartialEq for InFlight<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T> Eq for InFlight<T> {}
impl<T> PartialOrd for InFlight<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for InFlight<T> {
    /// Reversed: `BinaryHeap` pops the smallest tag, then the first started.
    fn cmp(&self, other: &Self) -> Ordering {
        other.finish_s.total_cmp(&self.finish_s).then(other.seq.cmp(&self.seq))
    }
}

/// The transfers on one link. Drive it in time order: at each instant, first
/// [`finish_until`](Self::finish_until), then [`start`](Self::start) what begins then.
pub struct SharedLink<T> {
    spec: LinkSpec,
    /// Service each transfer in flight has received since the link was last idle, seconds.
    virtual_s: f64,
    /// The real time `virtual_s` is for.
    updated_ns: u64,
    in_flight: BinaryHeap<InFlight<T>>,
    started: u64,
}

impl<T> SharedLink<T> {
    pub fn new(spec: LinkSpec) -> Self {
        SharedLink { spec, virtual_s: 0.0, updated_ns: 0, in_flight: BinaryHeap::new(), started: 0 }
    }

    pub fn spec(&self) -> LinkSpec {
        self.spec
    }

    /// Transfers whose bytes are still moving.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Starts moving `bytes` at `now_ns`. Every transfer done by then must have been taken out
    /// with [`finish_until`](Self::finish_until) first.
    pub fn start(&mut self, now_ns: u64, bytes: u64, item: T) {
        debug_assert!(self.next_done_ns().is_none_or(|done| done >= now_ns), "finish_until({now_ns}) first");
        self.advance(now_ns);
        let finish_s = self.virtual_s + self.spec.service_s(bytes);
        self.in_flight.push(InFlight { finish_s, seq: self.started, item });
        self.started += 1;
    }

    /// When the next transfer's last byte leaves (not when it arrives: add the latency), if one
    /// is in flight.
    pub fn next_done_ns(&self) -> Option<u64> {
        let head = self.in_flight.peek()?;
        let remaining_s = (head.finish_s - self.virtual_s).max(0.0) * self.in_flight.len() as f64;
        Some(self.updated_ns.saturating_add(ceil_ns(remaining_s)))
    }

    /// Takes out every transfer whose last byte has left by `now_ns`, in the order they were
    /// done, each with the time it arrives (done + latency).
    pub fn finish_until(&mut self, now_ns: u64) -> Vec<(u64, T)> {
        let mut arrived = Vec::new();
        // One transfer at a time: each one done changes the share of the rest.
        while let Some(done_ns) = self.next_done_ns().filter(|&done| done <= now_ns) {
            self.advance(done_ns);
            let head = self.in_flight.pop().expect("next_done_ns saw a transfer");
            arrived.push((done_ns.saturating_add(self.spec.latency_ns), head.item));
            // Rounding to whole nanoseconds may finish the head a hair early: what is left of the
            // rest is theirs, so the virtual clock never runs ahead of the head's tag.
            self.virtual_s = self.virtual_s.max(head.finish_s);
            if self.in_flight.is_empty() {
                // Idle: restart the clock, so tags stay small and keep their precision.
                self.virtual_s = 0.0;
            }
        }
        self.advance(now_ns);
        arrived
    }

    /// Brings the virtual clock to `now_ns` at the current share.
    fn advance(&mut self, now_ns: u64) {
        if let Some(n) = std::num::NonZeroUsize::new(self.in_flight.len()) {
            let elapsed_s = now_ns.saturating_sub(self.updated_ns) as f64 * 1e-9;
            self.virtual_s += elapsed_s / n.get() as f64;
        }
        self.updated_ns = self.updated_ns.max(now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100 GB/s and 5 µs: 1 GB takes 10 ms alone.
    const SPEC: LinkSpec = LinkSpec { bandwidth_bytes_per_s: 100e9, latency_ns: 5_000 };
    const GB: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    /// Runs `starts` (time, bytes, id) through a link, returning (arrival, id) in arrival order.
    fn run(spec: LinkSpec, starts: &[(u64, u64, u32)]) -> Vec<(u64, u32)> {
        let mut link = SharedLink::new(spec);
        let mut out = Vec::new();
        for &(at, bytes, id) in starts {
            out.extend(link.finish_until(at));
            link.start(at, bytes, id);
        }
        while let Some(done) = link.next_done_ns() {
            out.extend(link.finish_until(done));
        }
        out
    }

    #[test]
    fn a_transfer_alone_takes_bytes_over_bandwidth_plus_latency() {
        assert_eq!(SPEC.alone_ns(GB), 10 * MS + 5_000);
        assert_eq!(run(SPEC, &[(7 * MS, GB, 1)]), vec![(17 * MS + 5_000, 1)]);
        // A byte is a whole nanosecond (10 ps, rounded up), and nothing is free of latency.
        assert_eq!(run(SPEC, &[(0, 1, 1)]), vec![(5_001, 1)]);
        assert_eq!(run(SPEC, &[(0, 0, 1)]), vec![(5_000, 1)]);
    }

    #[test]
    fn transfers_started_together_share_the_bandwidth_equally() {
        // Two of 1 GB: each at 50 GB/s, both done at 20 ms.
        assert_eq!(run(SPEC, &[(0, GB, 1), (0, GB, 2)]), vec![(20 * MS + 5_000, 1), (20 * MS + 5_000, 2)]);
        // 1 GB and 3 GB: both at half until the small one is done (2 GB moved, 20 ms), then the
        // large one's last 2 GB alone: 20 ms more.
        assert_eq!(run(SPEC, &[(0, 3 * GB, 1), (0, GB, 2)]), vec![(20 * MS + 5_000, 2), (40 * MS + 5_000, 1)]);
    }

    #[test]
    fn a_later_transfer_slows_the_earlier_one_from_when_it_starts() {
        // A (1 GB) alone for 5 ms moves 0.5 GB; then A and B (1 GB) share: A's last 0.5 GB
        // takes 10 ms (done at 15 ms), while B moves 0.5 GB; B's last 0.5 GB alone takes 5 ms.
        assert_eq!(run(SPEC, &[(0, GB, 1), (5 * MS, GB, 2)]), vec![(15 * MS + 5_000, 1), (20 * MS + 5_000, 2)]);
    }

    #[test]
    fn the_link_is_work_conserving_and_fair_over_many_transfers() {
        // 200 transfers of 1–64 MB arriving every 0.1 ms on a 10 GB/s link: it is never idle
        // from the first start to the last finish, so the last byte leaves exactly when the
        // link has moved them all; and two transfers started together of equal size finish
        // together.
        let spec = LinkSpec { bandwidth_bytes_per_s: 10e9, latency_ns: 0 };
        let mut state = 12345u64;
        let starts: Vec<(u64, u64, u32)> = (0..200u32)
            .map(|i| {
                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                (u64::from(i) * 100_000, ((state >> 33) % 64 + 1) << 20, i)
            })
            .collect();
        let total: u64 = starts.iter().map(|s| s.1).sum();
        let arrived = run(spec, &starts);
        assert_eq!(arrived.len(), 200);
        let last = arrived.iter().map(|a| a.0).max().unwrap();
        let busy_ns = (total as f64 / 10e9 * 1e9) as u64;
        // The first transfer alone outruns the 0.1 ms gaps, so the link is never idle.
        assert!(last.abs_diff(busy_ns) <= 200, "last {last}, busy {busy_ns}");
        // Arrival times never go back.
        assert!(arrived.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(arrived, run(spec, &starts), "the same transfers, the same times");
    }

    #[test]
    fn absurd_sizes_saturate_instead_of_wrapping() {
        let slow = LinkSpec { bandwidth_bytes_per_s: 1.0, latency_ns: u64::MAX };
        assert_eq!(slow.alone_ns(u64::MAX), u64::MAX);
        assert_eq!(run(slow, &[(0, u64::MAX, 1)]), vec![(u64::MAX, 1)]);
    }
}

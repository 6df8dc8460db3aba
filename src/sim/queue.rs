//! The event queue: a min-heap by `(time_ns, seq)`.
//!
//! `seq` is a global insertion counter, so events at the same instant run in the order they
//! were scheduled. This is the one place where ties are broken, and it is what makes a run
//! reproducible: nothing depends on heap internals or on the events' contents.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<E> {
    time_ns: u64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.time_ns, self.seq) == (other.time_ns, other.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed so that `BinaryHeap` (a max-heap) pops the earliest, then first-inserted, event.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time_ns, other.seq).cmp(&(self.time_ns, self.seq))
    }
}

/// Future events with integer nanosecond times.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq_next: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { heap: BinaryHeap::new(), seq_next: 0 }
    }
}

impl<E> EventQueue<E> {
    pub fn push(&mut self, time_ns: u64, event: E) {
        self.heap.push(Entry { time_ns, seq: self.seq_next, event });
        self.seq_next += 1;
    }

    /// The earliest event and its time; ties in insertion order.
    pub fn pop(&mut self) -> Option<(u64, E)> {
        self.heap.pop().map(|e| (e.time_ns, e.event))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut q = EventQueue::default();
        q.push(5, 'a');
        q.push(1, 'b');
        q.push(5, 'c');
        q.push(1, 'd');
        q.push(0, 'e');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, vec!['e', 'b', 'd', 'a', 'c']);
    }
}

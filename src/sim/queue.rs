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
///
/// One event may wait beside the heap ([`EventQueue::push_single`]): a kind of which at most one
/// is ever pending, such as the next arrival. It is ordered with the others exactly as if it were
/// in the heap, and spares the heap a push and a pop per arrival (issue 14).
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    single: Option<Entry<E>>,
    seq_next: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { heap: BinaryHeap::new(), single: None, seq_next: 0 }
    }
}

impl<E> EventQueue<E> {
    pub fn push(&mut self, time_ns: u64, event: E) {
        let entry = self.entry(time_ns, event);
        self.heap.push(entry);
    }

    /// [`EventQueue::push`] for the one event that waits beside the heap: the caller never has
    /// two of it pending.
    pub fn push_single(&mut self, time_ns: u64, event: E) {
        assert!(self.single.is_none(), "a second event beside the heap");
        self.single = Some(self.entry(time_ns, event));
    }

    fn entry(&mut self, time_ns: u64, event: E) -> Entry<E> {
        let seq = self.seq_next;
        self.seq_next += 1;
        Entry { time_ns, seq, event }
    }

    /// The earliest event and its time; ties in insertion order.
    pub fn pop(&mut self) -> Option<(u64, E)> {
        // `Entry`'s order is reversed: the greater entry is the earlier event.
        let entry = match (&self.single, self.heap.peek()) {
            (Some(single), Some(top)) if top > single => self.heap.pop(),
            (Some(_), _) => self.single.take(),
            (None, _) => self.heap.pop(),
        };
        entry.map(|e| (e.time_ns, e.event))
    }

    pub fn len(&self) -> usize {
        self.heap.len() + usize::from(self.single.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    proptest::proptest! {
        /// The event beside the heap comes out exactly where it would from the heap: by time,
        /// then by when it was pushed.
        #[test]
        fn the_single_event_is_ordered_as_if_in_the_heap(
            steps in proptest::collection::vec((0u64..6, proptest::bool::ANY, proptest::bool::ANY), 1..60),
        ) {
            let (mut with_single, mut heap_only) = (EventQueue::default(), EventQueue::default());
            let (mut popped, mut expected) = (Vec::new(), Vec::new());
            let mut now = 0;
            for (i, &(delay, single, pop)) in steps.iter().enumerate() {
                if single && with_single.single.is_none() {
                    with_single.push_single(now + delay, i);
                } else {
                    with_single.push(now + delay, i);
                }
                heap_only.push(now + delay, i);
                if pop {
                    let (time, event) = with_single.pop().unwrap();
                    now = time;
                    popped.push(event);
                    expected.push(heap_only.pop().unwrap().1);
                }
            }
            popped.extend(std::iter::from_fn(|| with_single.pop().map(|(_, e)| e)));
            expected.extend(std::iter::from_fn(|| heap_only.pop().map(|(_, e)| e)));
            proptest::prop_assert_eq!(popped, expected);
        }
    }
}

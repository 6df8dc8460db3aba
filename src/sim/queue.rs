//! The event queue: a min-heap by `(time_ns, seq)`.
//!
//! `seq` is a global insertion counter, so events at the same instant run in the order they
//! were scheduled. This is the one place where ties are broken, and it is what makes a run
//! reproducible: nothing depends on heap internals or on the events' contents.

struct Entry<E> {
    time_ns: u64,
    seq: u64,
    event: E,
}

impl<E> Entry<E> {
    /// Whether this event runs before `other`: the earlier, then the first inserted.
    #[inline]
    fn before(&self, other: &Entry<E>) -> bool {
        (self.time_ns, self.seq) < (other.time_ns, other.seq)
    }
}

/// Future events with integer nanosecond times.
///
/// A binary min-heap of its own rather than `std`'s `BinaryHeap`: a run holds a handful of
/// events (a step end per replica, the front end's admissions), and the standard heap's pop, a
/// call with a sift to the bottom and back up, cost about 40 instructions a step (issue 14).
///
/// One event may wait beside the heap ([`EventQueue::push_single`]): a kind of which at most one
/// is ever pending, such as the next arrival. It is ordered with the others exactly as if it were
/// in the heap, and spares the heap a push and a pop per arrival (issue 14).
pub struct EventQueue<E> {
    /// `heap[i]` runs before its children `heap[2i + 1]` and `heap[2i + 2]`.
    heap: Vec<Entry<E>>,
    single: Option<Entry<E>>,
    seq_next: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue { heap: Vec::new(), single: None, seq_next: 0 }
    }
}

impl<E> EventQueue<E> {
    #[inline(always)]
    pub fn push(&mut self, time_ns: u64, event: E) {
        let entry = self.entry(time_ns, event);
        self.heap.push(entry);
        let mut i = self.heap.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.heap[i].before(&self.heap[parent]) {
                break;
            }
            self.heap.swap(i, parent);
            i = parent;
        }
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
        let entry = match (&self.single, self.heap.first()) {
            (Some(single), Some(top)) if top.before(single) => self.pop_heap(),
            (Some(_), _) => self.single.take(),
            (None, _) => self.pop_heap(),
        };
        entry.map(|e| (e.time_ns, e.event))
    }

    /// Takes the heap's earliest entry out and restores the heap order.
    fn pop_heap(&mut self) -> Option<Entry<E>> {
        let last = self.heap.pop()?;
        if self.heap.is_empty() {
            return Some(last);
        }
        let top = std::mem::replace(&mut self.heap[0], last);
        let mut i = 0;
        loop {
            let left = 2 * i + 1;
            if left >= self.heap.len() {
                break;
            }
            let right = left + 1;
            let child = if right < self.heap.len() && self.heap[right].before(&self.heap[left]) { right } else { left };
            if !self.heap[child].before(&self.heap[i]) {
                break;
            }
            self.heap.swap(i, child);
            i = child;
        }
        Some(top)
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
        /// The heap pops what a plain list, searched for its earliest entry by (time, push
        /// order), would: through any interleaving of pushes and pops, with many ties.
        #[test]
        fn pops_as_a_searched_list_would(steps in proptest::collection::vec((0u64..8, 0usize..3), 1..200)) {
            let mut queue = EventQueue::default();
            let mut list: Vec<(u64, usize)> = Vec::new();
            let mut now = 0;
            for (i, &(delay, pops)) in steps.iter().enumerate() {
                queue.push(now + delay, i);
                list.push((now + delay, i));
                for _ in 0..pops {
                    let earliest = list.iter().enumerate().min_by_key(|&(_, &entry)| entry).map(|(at, _)| at);
                    let expected = earliest.map(|at| list.remove(at));
                    let popped = queue.pop();
                    proptest::prop_assert_eq!(popped, expected);
                    if let Some((time, _)) = popped {
                        now = time;
                    }
                }
                proptest::prop_assert_eq!(queue.len(), list.len());
            }
        }

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

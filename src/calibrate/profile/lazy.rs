//! A map whose values are built on first read: a bundled profile's index holds thousands of
//! GEMM curves and attention surfaces, and a scenario reads a few dozen of them. Building every
//! one cost more than simulating 100,000 requests, so only the keys are read at start-up.
//!
//! Every key's value depends on that key's data alone (see [`ProfileIndex`](super::ProfileIndex)),
//! so building on demand gives the values an eager build gives, bit for bit.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// One entry: its value, built or not yet, and the bytes it is built from.
struct Slot<V> {
    value: OnceLock<V>,
    packed: &'static [u8],
}

/// Keys known up front, values built once on first read and shared by every clone (a plan's
/// workers price candidates from one bundled index, so each surface is built once per process).
pub(crate) struct LazyMap<K, V> {
    slots: Arc<BTreeMap<K, Slot<V>>>,
    unpack: fn(&[u8]) -> V,
}

impl<K: Ord, V> LazyMap<K, V> {
    /// A map of values already built.
    pub(crate) fn built(values: BTreeMap<K, V>) -> LazyMap<K, V> {
        let slots = values.into_iter().map(|(k, v)| (k, Slot { value: OnceLock::from(v), packed: &[] })).collect();
        LazyMap { slots: Arc::new(slots), unpack: |_| unreachable!("a built map's values are all set") }
    }

    /// A map of values to build from `packed` slices by `unpack` when first read.
    pub(crate) fn packed(entries: impl IntoIterator<Item = (K, &'static [u8])>, unpack: fn(&[u8]) -> V) -> LazyMap<K, V> {
        let slots = entries.into_iter().map(|(k, packed)| (k, Slot { value: OnceLock::new(), packed })).collect();
        LazyMap { slots: Arc::new(slots), unpack }
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.slots.get(key).map(|slot| self.value(slot))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.slots.keys()
    }

    /// Every entry, building what is not built yet.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots.iter().map(|(k, slot)| (k, self.value(slot)))
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// This map's entries where `from_other` does not hold, and `other`'s where it does (built
    /// now): one table's values for a kind of key in place of another's.
    pub(crate) fn spliced(&self, other: &LazyMap<K, V>, from_other: impl Fn(&K) -> bool) -> LazyMap<K, V>
    where
        K: Clone,
        V: Clone,
    {
        let own = self.slots.iter().filter(|(k, _)| !from_other(k));
        let mut slots: BTreeMap<K, Slot<V>> =
            own.map(|(k, slot)| (k.clone(), Slot { value: slot.value.clone(), packed: slot.packed })).collect();
        let theirs = other.iter().filter(|(k, _)| from_other(k));
        slots.extend(theirs.map(|(k, v)| (k.clone(), Slot { value: OnceLock::from(v.clone()), packed: &[] })));
        LazyMap { slots: Arc::new(slots), unpack: self.unpack }
    }

    fn value<'a>(&self, slot: &'a Slot<V>) -> &'a V {
        slot.value.get_or_init(|| (self.unpack)(slot.packed))
    }
}

impl<K, V> Clone for LazyMap<K, V> {
    fn clone(&self) -> Self {
        LazyMap { slots: Arc::clone(&self.slots), unpack: self.unpack }
    }
}

impl<K: Ord, V: PartialEq> PartialEq for LazyMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().zip(other.iter()).all(|(a, b)| a == b)
    }
}

impl<K: Ord + fmt::Debug, V: fmt::Debug> fmt::Debug for LazyMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.slots.iter().map(|(k, slot)| (k, slot.value.get()))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_value_is_built_once_on_first_read_and_shared_by_clones() {
        static BYTES: [u8; 3] = [1, 2, 3];
        let map = LazyMap::packed([(7u32, &BYTES[..2]), (9, &BYTES[..])], |b: &[u8]| b.iter().map(|&x| x as u32).sum::<u32>());
        let clone = map.clone();
        assert_eq!(map.keys().copied().collect::<Vec<_>>(), [7, 9]);
        assert!(format!("{map:?}").contains("None"), "nothing is built before a read");
        assert_eq!(map.get(&9), Some(&6));
        assert_eq!(map.get(&8), None);
        assert!(format!("{clone:?}").contains("Some(6)"), "a clone shares what was built");
        assert_eq!(map, LazyMap::built([(7, 3), (9, 6)].into_iter().collect()));
        assert_ne!(map, LazyMap::built([(7, 3), (9, 5)].into_iter().collect()));
    }

    #[test]
    fn a_splice_takes_the_other_maps_values_for_its_keys_and_keeps_the_rest_unbuilt() {
        static BYTES: [u8; 3] = [1, 2, 3];
        let map = LazyMap::packed([(7u32, &BYTES[..2]), (9, &BYTES[..])], |b: &[u8]| b.iter().map(|&x| x as u32).sum::<u32>());
        let other = LazyMap::built([(8, 80), (9, 90), (10, 100)].into_iter().collect());
        let spliced = map.spliced(&other, |&k| k >= 9);
        assert!(format!("{spliced:?}").contains("7: None"), "its own values are still built on first read");
        assert_eq!(spliced, LazyMap::built([(7, 3), (9, 90), (10, 100)].into_iter().collect()));
    }
}

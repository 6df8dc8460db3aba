//! Compact sample containers.

/// A multiset of nanosecond values stored as (value, count) runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeightedSamples {
    pub runs: Vec<(u64, u64)>,
}

/// Counts of output tokens per 1-second bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenBuckets {
    pub counts: Vec<u64>,
}

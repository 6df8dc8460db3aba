//! What the two attention kernels share: head counts and the checks on them.

use super::kv::KvSource;

/// Head layout of an attention call. Query head `h` reads KV head `h / (num_heads / num_kv_heads)`
/// (grouped-query attention; `num_kv_heads == num_heads` is multi-head, `1` multi-query).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionDims {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

impl AttentionDims {
    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }

    /// The usual softmax scale, `1 / √head_dim`.
    pub fn default_scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// # Panics
    /// If the heads do not group evenly or disagree with `kv`.
    pub(crate) fn check(&self, kv: &impl KvSource, kernel: &str) {
        assert!(
            self.num_heads > 0 && self.num_kv_heads > 0 && self.head_dim > 0,
            "{kernel}: heads and head_dim must be positive: {self:?}"
        );
        assert!(
            self.num_heads.is_multiple_of(self.num_kv_heads),
            "{kernel}: num_heads {} is not a multiple of num_kv_heads {}",
            self.num_heads,
            self.num_kv_heads
        );
        assert!(
            kv.num_kv_heads() == self.num_kv_heads && kv.head_dim() == self.head_dim,
            "{kernel}: the KV source has {} heads of {}, the call says {} of {}",
            kv.num_kv_heads(),
            kv.head_dim(),
            self.num_kv_heads,
            self.head_dim
        );
    }
}

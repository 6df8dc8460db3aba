//! The fast attention kernels behind `CudaKernels::attention_prefill` and `attention_decode`
//! (`kernels.rs`, which launches them): tensor-core prefill (`kernels/attention_prefill_tc.cu`)
//! and split-KV decode (`kernels/attention_decode_split.cu`), and the host's half of their
//! contracts (entry point by head-dimension bucket and group, shared-memory opt-in, partition
//! size).
//!
//! The launchers pick these where the device and the shape allow, and the CUDA-core kernels
//! (`attention_prefill.cu`, `attention_decode.cu`) otherwise: compute capability below 8.0 (no
//! bf16 `mma.sync`), a head dimension that is not a multiple of 8 (16-byte row copies) or above
//! 128 (prefill) / 256 (decode), a stride or offset off 16 bytes, or too little opt-in shared
//! memory. [`AttentionKernels::Reference`] forces the CUDA-core ones, to check these against.

use std::collections::BTreeMap;

use cudarc::driver::CudaFunction;
use cudarc::driver::sys::CUfunction_attribute;

use super::device::{CudaDevice, driver_error};
use crate::engine::DeviceError;

/// Which attention kernels [`CudaKernels`] launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKernels {
    /// Tensor-core prefill and split-KV decode wherever a shape allows (the default).
    Fast,
    /// The CUDA-core kernels always: the reference the fast ones are checked against.
    Reference,
}

/// Query rows per tensor-core prefill block (`TC_BM`).
pub const TC_BLOCK_ROWS: usize = 128;
/// Threads per tensor-core prefill block (`TC_THREADS`).
pub const TC_THREADS: u32 = 128;
/// Threads per split-KV decode block (`DS_THREADS`) and per reduce block (`DS_RED_THREADS`).
pub const SPLIT_THREADS: u32 = 128;
pub const SPLIT_REDUCE_THREADS: u32 = 256;
/// Partition sizes the split-KV decode picks from (`DS_MAX_PART` the largest).
pub const SPLIT_PARTITION_MIN: usize = 64;
pub const SPLIT_PARTITION_MAX: usize = 512;

/// The kernel files of the fast path.
const FAST_KERNELS: [&str; 2] = ["attention_prefill_tc", "attention_decode_split"];

/// Whether `name` (a [`KernelSource`](super::compile::KernelSource) name) is a fast kernel.
pub fn is_fast(name: &str) -> bool {
    FAST_KERNELS.contains(&name)
}

/// Whether PTX for `arch` runs the fast kernels: `mma.sync` on bf16, `ldmatrix` and `cp.async`
/// need sm_80.
pub fn runs_on(arch: &str) -> bool {
    matches!(arch, "compute_80" | "compute_89" | "compute_90")
}

/// Dynamic shared memory of the default tensor-core prefill entry for bucket `d`
/// (`TC_SMEM_BYTES(D)`: a 2-stage ring of 64-key K and V tiles, plus Q, rows padded by 8).
pub fn tc_smem_bytes(d: usize) -> usize {
    let row = (d + 8) * 2;
    2 * 2 * 64 * row + TC_BLOCK_ROWS * row
}

/// The tensor-core prefill's head-dimension bucket for `head_dim`.
pub fn tc_bucket(head_dim: usize) -> Option<usize> {
    [64, 128].into_iter().find(|&b| head_dim <= b)
}

/// The split-KV decode's head-dimension bucket (`D`) and heads per block (`G`) for a shape.
pub fn split_entry_shape(head_dim: usize, group: usize) -> Option<(usize, usize)> {
    let d = [64, 128, 256].into_iter().find(|&b| head_dim <= b)?;
    Some((d, group.max(1).next_power_of_two().min(8)))
}

/// The largest power of two in [64, 512] whose grid of `batch · kv_blocks · ⌈ctx / size⌉`
/// blocks still fills 80% of one wave (`wave` resident blocks over all SMs); 64 when none does.
/// Longer partitions cost less per token (block start-up, partial writes, the reduce), but a
/// grid short of a wave leaves bandwidth idle. The rule `scripts/gpu/attn_bench.cu` measured.
pub fn auto_partition(batch: usize, kv_blocks: usize, ctx: usize, wave: usize) -> usize {
    let mut size = SPLIT_PARTITION_MAX;
    while size >= SPLIT_PARTITION_MIN {
        if batch * kv_blocks * ctx.div_ceil(size) * 10 >= wave * 8 {
            return size;
        }
        size /= 2;
    }
    SPLIT_PARTITION_MIN
}

/// Launch facts of the fast kernels on one device, settled at load.
pub struct FastAttention {
    /// Tensor-core prefill buckets whose shared memory the device allows (opted in).
    prefill_buckets: Vec<usize>,
    sm_count: usize,
    /// Resident blocks per SM of each split-KV decode entry (the occupancy API).
    split_blocks_per_sm: BTreeMap<&'static str, usize>,
}

/// Opts the tensor-core prefill entries into the shared memory they need and records the split
/// decode entries' occupancy. `None` when the fast kernels were not loaded.
pub(super) fn prepare(
    functions: &BTreeMap<&'static str, CudaFunction>,
    device: &CudaDevice,
    max_smem_optin: usize,
) -> Result<Option<FastAttention>, DeviceError> {
    let mut prefill_buckets = Vec::new();
    let mut split_blocks_per_sm = BTreeMap::new();
    for (&name, f) in functions {
        if let Some(rest) = name.strip_prefix("attention_prefill_tc_") {
            let d: usize = rest.rsplit("_d").next().and_then(|x| x.parse().ok()).unwrap_or(usize::MAX);
            let need = tc_smem_bytes(d);
            if need <= max_smem_optin {
                f.set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, need as i32)
                    .map_err(|e| driver_error(&format!("raising the shared-memory limit of {name}"), e))?;
                if !prefill_buckets.contains(&d) {
                    prefill_buckets.push(d);
                }
            }
        } else if name.starts_with("attention_decode_split_") && name.contains("_g") {
            let blocks = f
                .occupancy_max_active_blocks_per_multiprocessor(SPLIT_THREADS, 0, None)
                .map_err(|e| driver_error(&format!("occupancy of {name}"), e))?;
            split_blocks_per_sm.insert(name, (blocks as usize).max(1));
        }
    }
    if prefill_buckets.is_empty() && split_blocks_per_sm.is_empty() {
        return Ok(None);
    }
    Ok(Some(FastAttention { prefill_buckets, sm_count: device.sm_count().max(1) as usize, split_blocks_per_sm }))
}

impl FastAttention {
    /// Whether the tensor-core prefill takes this shape: its bucket loaded, rows (strides) of
    /// 16-byte multiples, tensors (element offsets) on 16-byte boundaries.
    pub fn prefill_fits(&self, head_dim: usize, strides: [usize; 2], offsets: [usize; 3]) -> bool {
        head_dim.is_multiple_of(8)
            && tc_bucket(head_dim).is_some_and(|b| self.prefill_buckets.contains(&b))
            && strides.iter().chain(&offsets).all(|x| x.is_multiple_of(8))
    }

    /// Whether some tensor-core prefill bucket was opted into its shared memory.
    pub fn prefill_loaded(&self) -> bool {
        !self.prefill_buckets.is_empty()
    }

    /// Whether the split-KV decode takes this head dimension.
    pub fn decode_fits(&self, head_dim: usize) -> bool {
        head_dim.is_multiple_of(8) && head_dim <= 256 && !self.split_blocks_per_sm.is_empty()
    }

    /// (partition size, partitions) the split-KV decode picks for a call.
    pub fn decode_partitions(
        &self,
        num_seqs: usize,
        num_heads: usize,
        num_kv_heads: usize,
        head_dim: usize,
        max_context: usize,
    ) -> (usize, usize) {
        let group = num_heads / num_kv_heads.max(1);
        let Some((d, g)) = split_entry_shape(head_dim, group) else {
            return (SPLIT_PARTITION_MAX, max_context.div_ceil(SPLIT_PARTITION_MAX).max(1));
        };
        let blocks_per_sm =
            self.split_blocks_per_sm.get(format!("attention_decode_split_bf16_d{d}_g{g}").as_str()).copied().unwrap_or(1);
        let kv_blocks = num_kv_heads * group.div_ceil(g);
        let size = auto_partition(num_seqs.max(1), kv_blocks.max(1), max_context.max(1), blocks_per_sm * self.sm_count);
        (size, max_context.div_ceil(size).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_the_kernel_sources() {
        let tc = include_str!("../../../kernels/attention_prefill_tc.cu");
        assert!(tc.contains("#define TC_WARPS 4\n") && tc.contains("#define TC_MT 2\n"), "TC_BM = 4 · 2 · 16 = {TC_BLOCK_ROWS}");
        assert!(tc.contains("#define TC_BN 64\n") && tc.contains("#define TC_STAGES 2\n") && tc.contains("#define TC_PAD 8\n"));
        // The header's figures for TC_SMEM_BYTES(D).
        assert_eq!(tc_smem_bytes(64), 55_296);
        assert_eq!(tc_smem_bytes(128), 104_448);
        assert!(tc.contains("55,296") && tc.contains("104,448"));
        let ds = include_str!("../../../kernels/attention_decode_split.cu");
        assert!(ds.contains(&format!("#define DS_THREADS {SPLIT_THREADS}\n")));
        assert!(ds.contains(&format!("#define DS_RED_THREADS {SPLIT_REDUCE_THREADS}\n")));
        assert!(ds.contains(&format!("#define DS_MAX_PART {SPLIT_PARTITION_MAX}\n")));
    }

    #[test]
    fn entry_shapes_follow_the_kernels_rules() {
        assert_eq!(split_entry_shape(128, 4), Some((128, 4)));
        assert_eq!(split_entry_shape(80, 7), Some((128, 8)));
        assert_eq!(split_entry_shape(64, 3), Some((64, 4)));
        assert_eq!(split_entry_shape(256, 12), Some((256, 8)));
        assert_eq!(split_entry_shape(264, 1), None);
        assert_eq!(tc_bucket(96), Some(128));
        assert_eq!(tc_bucket(256), None);
        assert!(runs_on("compute_90") && runs_on("compute_80") && !runs_on("compute_75"));
        assert!(is_fast("attention_decode_split") && !is_fast("attention_decode"));
    }

    #[test]
    fn partitions_fill_a_wave_and_grow_with_the_batch() {
        // H100: 132 SMs, 4 blocks each; Llama-3.1-8B decode (8 KV heads, g4: 8 KV blocks).
        let wave = 132 * 4;
        // One sequence at 32k: 64 partitions of 512 give 512 blocks ≥ 80% of 528.
        assert_eq!(auto_partition(1, 8, 32_768, wave), 512);
        // One sequence at 4k: needs the shortest partitions to approach a wave.
        assert_eq!(auto_partition(1, 8, 4_096, wave), 64);
        // At 8 sequences and 4k the grid fills with 128-token partitions: 8·8·32 = 2048 ≥ 422;
        // with 512 it would be 8·8·8 = 512 ≥ 422 already.
        assert_eq!(auto_partition(8, 8, 4_096, wave), 512);
        assert_eq!(auto_partition(2, 8, 4_096, wave), 128);
        // Nothing fills it: the shortest.
        assert_eq!(auto_partition(1, 1, 100, wave), 64);
    }
}

//! GPU presets with datasheet numbers, and explicit hardware.
//!
//! Compute figures are peak *dense* tensor-core FLOP/s (datasheets often print the 2:4-sparsity
//! figure, twice as large; we halve it). Interconnect figures are per GPU per direction
//! (datasheets print NVLink as bidirectional totals; we halve them).
//!
//! Memory capacity convention: the bytes the device actually reports as its total
//! (`nvidia-smi --query-gpu=memory.total`, `rocm-smi --showmeminfo vram`) where known, since
//! that, not the marketing figure, is what an engine sizes its KV cache from; otherwise the
//! decimal datasheet figure. For example an "80 GB" H100 reports 81,559 MiB = 85.52e9 B
//! (79.6 GiB). vLLM reads the total from `torch.cuda.mem_get_info()`, which can be a few hundred
//! MiB lower still (driver reservations); that remainder is absorbed by the fixed runtime part
//! of the activation reserve (see `resolve/hardware.rs`).

use super::parallel::GPUS_PER_NODE;

/// One accelerator's datasheet figures.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSpec {
    pub name: String,
    /// Peak dense (no sparsity) BF16/FP16 tensor FLOP/s.
    pub peak_flops_16bit: f64,
    /// Peak dense FP8 tensor FLOP/s; `None` where the GPU has no FP8 tensor cores.
    pub peak_flops_fp8: Option<f64>,
    /// Peak dense FP4 (NVFP4, MXFP4) tensor FLOP/s; `None` where the GPU has no FP4 tensor
    /// cores (every GPU before Blackwell).
    pub peak_flops_fp4: Option<f64>,
    /// HBM (or GDDR) capacity, bytes.
    pub memory_bytes: u64,
    /// Peak memory bandwidth, bytes per second.
    pub memory_bandwidth_bytes_per_s: f64,
    /// GPU-to-GPU bandwidth per GPU per direction (NVLink, Infinity Fabric or PCIe), bytes/s.
    pub interconnect_bandwidth_bytes_per_s: f64,
    /// The network between nodes, per GPU per direction (a NIC per GPU, as NVIDIA's DGX and
    /// Azure's ND servers have): what a collective over more than one node's GPUs crosses.
    /// `None` where no reference server says; such a collective is then priced on the
    /// GPU-to-GPU link, and says so.
    pub scale_out_bandwidth_bytes_per_s: Option<f64>,
}

/// The GPUs of a deployment: one kind, `count` of them.
#[derive(Clone, Debug, PartialEq)]
pub struct Hardware {
    pub gpu: GpuSpec,
    pub count: u32,
}

const MIB: u64 = 1 << 20;

impl GpuSpec {
    /// A preset by name, case-insensitively (`-`, `_` and spaces are interchangeable, so
    /// `h100_sxm` and `H100 SXM` find `H100-SXM`).
    pub fn preset(name: &str) -> Option<GpuSpec> {
        let norm = |s: &str| s.trim().to_ascii_lowercase().replace(['_', ' '], "-");
        let want = norm(name);
        PRESETS
            .iter()
            .find(|p| norm(p.name) == want || p.aliases.iter().any(|a| norm(a) == want))
            .map(|p| p.spec())
    }

    /// The names of all GPU presets, in the order they are listed in errors.
    pub fn preset_names() -> Vec<&'static str> {
        PRESETS.iter().map(|p| p.name).collect()
    }

    /// Bandwidth per GPU of a ring collective (all-reduce, all-gather, reduce-scatter) over
    /// `gpus` GPUs: a ring runs at its slowest link, which past one node is the network.
    pub fn ring_bandwidth_bytes_per_s(&self, gpus: u32) -> f64 {
        match self.scale_out_bandwidth_bytes_per_s {
            Some(network) if gpus > GPUS_PER_NODE => network.min(self.interconnect_bandwidth_bytes_per_s),
            _ => self.interconnect_bandwidth_bytes_per_s,
        }
    }

    /// Bandwidth per GPU of an all-to-all over `gpus` GPUs, for the bytes each GPU sends to the
    /// others: past one node, (gpus − node)/(gpus − 1) of them cross the network while the rest
    /// use the GPU-to-GPU link at the same time, so the slower share sets the time.
    pub fn all_to_all_bandwidth_bytes_per_s(&self, gpus: u32) -> f64 {
        match self.scale_out_bandwidth_bytes_per_s {
            Some(network) if gpus > GPUS_PER_NODE => {
                let others = f64::from(gpus - 1);
                let off_node = f64::from(gpus - GPUS_PER_NODE) / others;
                let on_node = f64::from(GPUS_PER_NODE - 1) / others;
                (network / off_node).min(self.interconnect_bandwidth_bytes_per_s / on_node)
            }
            _ => self.interconnect_bandwidth_bytes_per_s,
        }
    }

    /// Peak dense tensor FLOP/s for GEMMs whose operands are `dtype`. FP8 on a GPU without FP8
    /// tensor cores runs at the 16-bit rate (weights are upcast, as vLLM's Marlin/weight-only
    /// FP8 path does on Ampere); fp32 is counted at the 16-bit tensor rate too (TF32/BF16
    /// kernels), which only matters for fp32 models, none of the presets.
    pub fn peak_flops(&self, dtype: super::Dtype) -> f64 {
        match dtype {
            super::Dtype::Fp8 => self.peak_flops_fp8.unwrap_or(self.peak_flops_16bit),
            _ => self.peak_flops_16bit,
        }
    }
}

struct Preset {
    name: &'static str,
    aliases: &'static [&'static str],
    tflops_16bit: f64,
    tflops_fp8: Option<f64>,
    tflops_fp4: Option<f64>,
    memory_bytes: u64,
    /// TB/s (decimal)
    memory_tb_per_s: f64,
    /// GB/s per direction (decimal)
    interconnect_gb_per_s: f64,
    scale_out_gb_per_s: Option<f64>,
}

impl Preset {
    fn spec(&self) -> GpuSpec {
        GpuSpec {
            name: self.name.to_string(),
            peak_flops_16bit: self.tflops_16bit * 1e12,
            peak_flops_fp8: self.tflops_fp8.map(|t| t * 1e12),
            peak_flops_fp4: self.tflops_fp4.map(|t| t * 1e12),
            memory_bytes: self.memory_bytes,
            memory_bandwidth_bytes_per_s: self.memory_tb_per_s * 1e12,
            interconnect_bandwidth_bytes_per_s: self.interconnect_gb_per_s * 1e9,
            scale_out_bandwidth_bytes_per_s: self.scale_out_gb_per_s.map(|g| g * 1e9),
        }
    }
}

const PRESETS: &[Preset] = &[
    // NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): BF16 1,979 TFLOPS and FP8 3,958
    // TFLOPS *with sparsity* → 989.4 / 1978.9 dense; 80 GB HBM3 at 3.35 TB/s; NVLink 900 GB/s
    // (bidirectional) → 450 GB/s per direction. Capacity: nvidia-smi reports 81,559 MiB.
    Preset {
        name: "H100-SXM",
        aliases: &["H100", "H100-SXM5", "H100-80G", "H100-SXM-80GB"],
        tflops_16bit: 989.4,
        tflops_fp8: Some(1978.9),
        tflops_fp4: None,
        memory_bytes: 81_559 * MIB,
        memory_tb_per_s: 3.35,
        interconnect_gb_per_s: 450.0,
        // NVIDIA DGX H100 datasheet: eight single-port ConnectX-7 at 400 Gb/s, one per GPU.
        scale_out_gb_per_s: Some(50.0),
    },
    // NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column): same compute as H100 SXM (BF16
    // 1,979 / FP8 3,958 TFLOPS with sparsity); 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s →
    // 450 GB/s per direction. Capacity: nvidia-smi reports 143,771 MiB.
    Preset {
        name: "H200",
        aliases: &["H200-SXM"],
        tflops_16bit: 989.4,
        tflops_fp8: Some(1978.9),
        tflops_fp4: None,
        memory_bytes: 143_771 * MIB,
        memory_tb_per_s: 4.8,
        interconnect_gb_per_s: 450.0,
        // NVIDIA DGX H200 datasheet: eight single-port ConnectX-7 at 400 Gb/s, one per GPU.
        scale_out_gb_per_s: Some(50.0),
    },
    // NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column): BF16 312 TFLOPS dense (624
    // with sparsity), no FP8; 80 GB HBM2e at 2,039 GB/s; NVLink 600 GB/s → 300 GB/s per
    // direction. Capacity: nvidia-smi reports 81,920 MiB.
    Preset {
        name: "A100-80G-SXM",
        aliases: &["A100", "A100-80G", "A100-SXM", "A100-SXM4-80GB"],
        tflops_16bit: 312.0,
        tflops_fp8: None,
        tflops_fp4: None,
        memory_bytes: 81_920 * MIB,
        memory_tb_per_s: 2.039,
        interconnect_gb_per_s: 300.0,
        // NVIDIA DGX A100 datasheet: eight single-port ConnectX-6 at 200 Gb/s (HDR), one per GPU.
        scale_out_gb_per_s: Some(25.0),
    },
    // AMD Instinct MI300X data sheet: peak BF16 1,307.4 TFLOPS and FP8 2,614.9 TFLOPS dense (the
    // sheet prints 2,614.9 / 5,229.8 with sparsity); 192 GB HBM3 at 5.3 TB/s; 7 Infinity Fabric
    // links × 64 GB/s = 448 GB/s per direction to the 7 peers. Capacity: rocm-smi reports
    // 205,822,885,888 B of VRAM.
    Preset {
        name: "MI300X",
        aliases: &["MI300", "Instinct-MI300X"],
        tflops_16bit: 1307.4,
        tflops_fp8: Some(2614.9),
        tflops_fp4: None,
        memory_bytes: 205_822_885_888,
        memory_tb_per_s: 5.3,
        interconnect_gb_per_s: 448.0,
        // Azure ND MI300X v5: eight 400 Gb/s InfiniBand links per eight-GPU VM, one per GPU.
        scale_out_gb_per_s: Some(50.0),
    },
    // NVIDIA L40S datasheet: BF16 362.05 TFLOPS and FP8 733 TFLOPS dense (733 / 1,466 with
    // sparsity); 48 GB GDDR6 with ECC at 864 GB/s; no NVLink: PCIe Gen4 x16, 64 GB/s
    // bidirectional → 32 GB/s per direction. Capacity: nvidia-smi reports 46,068 MiB (ECC on).
    Preset {
        name: "L40S",
        aliases: &[],
        tflops_16bit: 362.05,
        tflops_fp8: Some(733.0),
        tflops_fp4: None,
        memory_bytes: 46_068 * MIB,
        memory_tb_per_s: 0.864,
        interconnect_gb_per_s: 32.0,
        // A PCIe card: no reference server fixes its network.
        scale_out_gb_per_s: None,
    },
    // NVIDIA DGX B200 datasheet (8 GPUs: 72 PFLOPS FP8 training, 1,440 GB HBM3e, 64 TB/s, NVLink 5
    // 14.4 TB/s aggregate) → per GPU: FP8 4,500 TFLOPS and BF16 2,250 TFLOPS dense, 180 GB at
    // 8 TB/s, NVLink 1.8 TB/s → 900 GB/s per direction. Capacity: the decimal datasheet figure
    // (180e9 B), as the device-reported total was not confirmed here. FP4: the same datasheet's
    // 144 PFLOPS FP4 inference (with sparsity) for 8 GPUs → 18 per GPU → 9,000 TFLOPS dense.
    Preset {
        name: "B200",
        aliases: &["B200-SXM", "DGX-B200"],
        tflops_16bit: 2250.0,
        tflops_fp8: Some(4500.0),
        tflops_fp4: Some(9000.0),
        memory_bytes: 180_000_000_000,
        memory_tb_per_s: 8.0,
        interconnect_gb_per_s: 900.0,
        // NVIDIA DGX B200 datasheet: eight single-port ConnectX-7 at 400 Gb/s, one per GPU.
        scale_out_gb_per_s: Some(50.0),
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Dtype;

    #[test]
    fn presets_case_insensitive_and_aliases() {
        assert_eq!(GpuSpec::preset("h100-sxm").unwrap().name, "H100-SXM");
        assert_eq!(GpuSpec::preset("H100_SXM").unwrap().name, "H100-SXM");
        assert_eq!(GpuSpec::preset("mi300x").unwrap().name, "MI300X");
        assert!(GpuSpec::preset("TPU-v5").is_none());
        assert_eq!(
            GpuSpec::preset_names(),
            ["H100-SXM", "H200", "A100-80G-SXM", "MI300X", "L40S", "B200"]
        );
    }

    #[test]
    fn preset_numbers() {
        let h100 = GpuSpec::preset("H100-SXM").unwrap();
        assert_eq!(h100.memory_bytes, 85_520_809_984);
        assert_eq!(h100.interconnect_bandwidth_bytes_per_s, 450e9);
        assert_eq!(h100.peak_flops(Dtype::Fp8), 1978.9e12);
        let a100 = GpuSpec::preset("A100-80G-SXM").unwrap();
        assert_eq!(a100.peak_flops_fp8, None);
        assert_eq!(a100.peak_flops(Dtype::Fp8), 312e12);
    }

    /// A ring over two nodes runs at the network's 50 GB/s; an all-to-all over 16 GPUs sends
    /// 8/15 of its bytes over the network and 7/15 over NVLink at once, so the network's share
    /// sets it: 50 / (8/15) = 93.75 GB/s. One node, or a GPU with no reference network, keeps
    /// the GPU-to-GPU link.
    #[test]
    fn collectives_past_one_node_cross_the_network() {
        let h200 = GpuSpec::preset("H200").unwrap();
        assert_eq!(h200.ring_bandwidth_bytes_per_s(8), 450e9);
        assert_eq!(h200.all_to_all_bandwidth_bytes_per_s(8), 450e9);
        assert_eq!(h200.ring_bandwidth_bytes_per_s(16), 50e9);
        assert!((h200.all_to_all_bandwidth_bytes_per_s(16) - 93.75e9).abs() < 1.0);
        assert!(h200.all_to_all_bandwidth_bytes_per_s(64) < h200.all_to_all_bandwidth_bytes_per_s(16));
        assert_eq!(GpuSpec::preset("A100").unwrap().ring_bandwidth_bytes_per_s(16), 25e9);
        let l40s = GpuSpec::preset("L40S").unwrap();
        assert_eq!(l40s.ring_bandwidth_bytes_per_s(16), l40s.interconnect_bandwidth_bytes_per_s);
    }

}

//! A measured profile against the bundled one of the same GPU model, on the GEMM shapes both
//! hold exactly: how servesim's timing of cuBLASLt compares with the published measurements of
//! the engine's kernels (aiconfigurator's, for vLLM).

use std::collections::BTreeMap;

use super::bundled;
use super::grid::Shape;
use super::profile::Profile;
use super::timing::percentile_sorted;
use crate::scenario::GpuSpec;
use crate::scenario::model::Dtype;

/// The hardware preset whose bundled profile was measured on the GPU the driver names, e.g.
/// "NVIDIA H100 80GB HBM3" → H100-SXM; `None` for a variant the bundled profiles do not cover
/// (NVL, PCIe) or another GPU.
pub fn bundled_preset(device_name: &str) -> Option<&'static str> {
    let name = device_name.to_ascii_uppercase();
    let variant = name.contains("NVL") || name.contains("PCIE");
    match () {
        _ if variant => None,
        _ if name.contains("H200") => Some("H200"),
        _ if name.contains("H100") => Some("H100-SXM"),
        _ if name.contains("B200") => Some("B200"),
        _ if name.contains("A100") && name.contains("80G") => Some("A100-80G-SXM"),
        _ => None,
    }
}

/// `ours / theirs` median time of every GEMM shape (m, n, k, dtype) both profiles hold, by dtype.
pub fn gemm_ratios(ours: &Profile, theirs: &Profile) -> BTreeMap<Dtype, Vec<(u32, f64)>> {
    let theirs: BTreeMap<Shape, f64> = theirs
        .rows
        .iter()
        .filter(|r| matches!(r.shape, Shape::Gemm(_)))
        .map(|r| (r.shape, r.measurement.median_ns))
        .collect();
    let mut out: BTreeMap<Dtype, Vec<(u32, f64)>> = BTreeMap::new();
    for row in &ours.rows {
        if let (Shape::Gemm(g), Some(&t)) = (row.shape, theirs.get(&row.shape))
            && t > 0.0
        {
            out.entry(g.dtype).or_default().push((g.m, row.measurement.median_ns / t));
        }
    }
    out
}

/// One line per dtype: the median ratio (p10, p90) over the shared shapes, and over small
/// (m ≤ 16) and large (m > 4096) ones, where the timing methods differ most and least.
pub fn summary(ratios: &BTreeMap<Dtype, Vec<(u32, f64)>>) -> Vec<String> {
    let stats = |v: Vec<f64>| {
        let mut v = v;
        v.sort_by(f64::total_cmp);
        (percentile_sorted(&v, 50.0), percentile_sorted(&v, 10.0), percentile_sorted(&v, 90.0), v.len())
    };
    let part = |name: &str, v: Vec<f64>| {
        if v.is_empty() {
            return format!("{name} –");
        }
        let (median, _, _, n) = stats(v);
        format!("{name} {median:.2} ({n})")
    };
    ratios
        .iter()
        .map(|(dtype, points)| {
            let all: Vec<f64> = points.iter().map(|p| p.1).collect();
            let (median, p10, p90, n) = stats(all);
            let small = points.iter().filter(|p| p.0 <= 16).map(|p| p.1).collect();
            let large = points.iter().filter(|p| p.0 > 4096).map(|p| p.1).collect();
            format!(
                "{}: median {median:.2} (p10 {p10:.2}, p90 {p90:.2}) over {n} shapes; {}, {}",
                dtype.name(),
                part("m ≤ 16", small),
                part("m > 4096", large)
            )
        })
        .collect()
}

/// What `calibrate` prints after a GPU run: the comparison with the bundled profile of the GPU
/// it ran on, or why there is none.
pub fn against_bundled(ours: &Profile) -> String {
    let device = &ours.provenance.device.name;
    let Some(bundled) = bundled_preset(device).and_then(GpuSpec::preset).and_then(|g| bundled::for_gpu(&g)) else {
        return format!("no bundled profile of {device} to compare with");
    };
    let ratios = gemm_ratios(ours, bundled.profile());
    if ratios.is_empty() {
        return format!("no GEMM shape shared with the bundled profile {}", bundled.name);
    }
    let mut out = format!(
        "GEMM time against the bundled profile {} (ours ÷ theirs, {} timing), on the shapes both hold:",
        bundled.name, ours.provenance.timing.method
    );
    for line in summary(&ratios) {
        out.push_str("\n  ");
        out.push_str(&line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::backend::{GemmShape, Peak};
    use crate::calibrate::grid::{Grid, GridOptions, GridScale};
    use crate::calibrate::profile::ProfileRow;
    use crate::calibrate::run::{RunOptions, SyntheticBackend, calibrate};
    use crate::calibrate::timing::Measurement;

    fn profile(rows: &[(u32, f64)]) -> Profile {
        let peak = Peak { flops_per_s: 1e15, memory_bytes_per_s: 3e12 };
        let model = crate::scenario::ModelSpec::preset("Llama-3.2-1B").unwrap();
        let options = GridOptions::for_model(model, vec![1], vec![Dtype::Bf16], GridScale::Tiny);
        let empty = Grid { options, gemms: vec![], attention: vec![], allreduce: vec![], sampling: vec![] };
        let mut backend = SyntheticBackend::new(peak, vec![Dtype::Bf16]);
        let mut p = calibrate(&mut backend, &empty, &RunOptions::default()).unwrap();
        for &(m, ns) in rows {
            let shape = Shape::Gemm(GemmShape { m, n: 4096, k: 4096, dtype: Dtype::Bf16 });
            p.rows.push(ProfileRow::new(shape, Measurement::from_samples(&[ns]), &peak));
        }
        p
    }

    #[test]
    fn ratios_cover_the_shared_shapes_only() {
        let ours = profile(&[(1, 20.0), (8, 30.0), (8192, 1000.0), (64, 5.0)]);
        let theirs = profile(&[(1, 10.0), (8, 20.0), (8192, 1000.0), (128, 7.0)]);
        let r = gemm_ratios(&ours, &theirs);
        assert_eq!(r[&Dtype::Bf16], vec![(1, 2.0), (8, 1.5), (8192, 1.0)]);
        let lines = summary(&r);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("bf16: median 1.50 (p10 1.10, p90 1.90) over 3 shapes; m ≤ 16 1.75 (2), m > 4096 1.00 (1)"), "{}", lines[0]);
    }

    #[test]
    fn gpus_map_to_their_bundled_presets() {
        assert_eq!(bundled_preset("NVIDIA H100 80GB HBM3"), Some("H100-SXM"));
        assert_eq!(bundled_preset("NVIDIA H200"), Some("H200"));
        assert_eq!(bundled_preset("NVIDIA H100 PCIe"), None);
        assert_eq!(bundled_preset("NVIDIA A100-SXM4-80GB"), Some("A100-80G-SXM"));
        assert_eq!(bundled_preset("NVIDIA GeForce RTX 4090"), None);
        for preset in ["H100-SXM", "H200", "B200", "A100-80G-SXM"] {
            let gpu = GpuSpec::preset(preset).unwrap();
            assert!(bundled::for_gpu(&gpu).is_some(), "{preset} has no bundled profile");
        }
    }
}

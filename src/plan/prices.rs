//! Default GPU prices: what a plan charges for a GPU whose `[[search.gpu]]` table gives no
//! `price_per_gpu_hour` of its own (and `--prices FILE` none either).
//!
//! One provider and one offer for every GPU, so the table ranks GPUs against each other on the
//! same footing: RunPod's Secure Cloud on-demand price per GPU-hour (its own data centres,
//! per-second billing, no commitment), as runpod.io/pricing listed it on the date given, read
//! through the dated public transcriptions each entry names. Prices differ between providers by
//! 2–3× (hyperscalers list the same H100 at several times a GPU cloud's price), change within
//! weeks (RunPod's H100 SXM read $3.49 on 2026-10-07 and $3.99 on 2026-11-09), and reserved or
//! spot capacity costs less: a plan that decides a purchase should give its own quotes.

use std::path::Path;

use serde::Deserialize;

use crate::scenario::{GpuSpec, ScenarioError};

/// One GPU's default price and where it comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuPrice {
    /// The hardware preset's canonical name.
    pub gpu: &'static str,
    pub price_per_gpu_hour: f64,
    /// Who lists it, and for what offer.
    pub source: &'static str,
    /// When the price was read off the source.
    pub as_of: &'static str,
}

/// Every hardware preset's default price.
pub const GPU_PRICES: [GpuPrice; 6] = [
    GpuPrice {
        gpu: "H100-SXM",
        price_per_gpu_hour: 3.99,
        source: "RunPod Secure Cloud on-demand, H100 SXM 80GB (runpod.io/pricing, as transcribed in datareceipts/data-receipts 109-gpu-pricing/vendors.json)",
        as_of: "2026-11-09",
    },
    GpuPrice {
        gpu: "A100-80G-SXM",
        price_per_gpu_hour: 1.79,
        source: "RunPod Secure Cloud on-demand, A100 SXM 80GB (runpod.io/pricing, as transcribed in datareceipts/data-receipts 109-gpu-pricing/vendors.json)",
        as_of: "2026-11-09",
    },
    GpuPrice {
        gpu: "B200",
        price_per_gpu_hour: 6.79,
        source: "RunPod Secure Cloud on-demand pod, B200 180GB (runpod.io/pricing, as transcribed in api-evangelist/runpod plans/runpod-plans-pricing.yml)",
        as_of: "2026-10-07",
    },
    GpuPrice {
        gpu: "H200",
        price_per_gpu_hour: 4.59,
        source: "RunPod Secure Cloud on-demand pod, H200 141GB (runpod.io/pricing, as transcribed in api-evangelist/runpod plans/runpod-plans-pricing.yml)",
        as_of: "2026-10-07",
    },
    GpuPrice {
        gpu: "MI300X",
        price_per_gpu_hour: 2.49,
        source: "RunPod Secure Cloud on-demand, MI300X 192GB (runpod.io/pricing; read in 2025, no dated reading found since)",
        as_of: "2025",
    },
    GpuPrice {
        gpu: "L40S",
        price_per_gpu_hour: 0.86,
        source: "RunPod Secure Cloud on-demand, L40S 48GB (runpod.io/pricing; read in 2025, no dated reading found since)",
        as_of: "2025",
    },
];

/// The default price of the GPU a plan names, by any name its hardware preset accepts
/// (`h100-sxm`, `H100_SXM`, …); `None` for a GPU with no preset or no listed price.
pub fn default_price(gpu: &str) -> Option<&'static GpuPrice> {
    let preset = GpuSpec::preset(gpu)?;
    GPU_PRICES.iter().find(|p| p.gpu == preset.name)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPriceFile {
    price: Vec<RawPrice>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrice {
    gpu: String,
    price_per_gpu_hour: f64,
    source: String,
}

/// A GPU's name as prices and offers match it: its preset's canonical name, else the name in
/// lower case.
pub fn price_key(gpu: &str) -> String {
    GpuSpec::preset(gpu).map_or_else(|| gpu.trim().to_ascii_lowercase(), |p| p.name.to_string())
}

/// `plan_text` with the prices of `prices_file` (`servesim plan --prices FILE`) written into every
/// `[[search.gpu]]` that gives none of its own, each with the file's source for it. A price file
/// is a list of `[[price]]` tables: `gpu`, `price_per_gpu_hour`, `source`. The plan's own prices
/// win; GPUs the file does not name keep servesim's defaults. The result is the plan text that
/// shards and `--resume` logs carry, so a merge prices as the run did.
pub fn apply_price_file(plan_text: &str, prices_file: &Path) -> Result<String, ScenarioError> {
    let file = prices_file.to_path_buf();
    let invalid = |field: String, value: &dyn std::fmt::Display, reason: &str| ScenarioError::Invalid {
        file: file.clone(),
        field,
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let text = std::fs::read_to_string(prices_file).map_err(|source| ScenarioError::Io { file: file.clone(), source })?;
    let raw: RawPriceFile = toml::from_str(&text).map_err(|e| ScenarioError::Parse { file: file.clone(), message: e.to_string() })?;
    let mut prices: Vec<(String, f64, String)> = Vec::new();
    for (i, p) in raw.price.iter().enumerate() {
        if !(p.price_per_gpu_hour.is_finite() && p.price_per_gpu_hour >= 0.0) {
            return Err(invalid(format!("price[{i}].price_per_gpu_hour"), &p.price_per_gpu_hour, "must be a price ≥ 0"));
        }
        if p.source.trim().is_empty() {
            return Err(invalid(format!("price[{i}].source"), &"\"\"", "say where the price comes from (provider, offer, date)"));
        }
        let key = price_key(&p.gpu);
        if prices.iter().any(|(k, _, _)| *k == key) {
            return Err(invalid(format!("price[{i}].gpu"), &p.gpu, "is priced twice"));
        }
        prices.push((key, p.price_per_gpu_hour, p.source.clone()));
    }
    // A plan that does not parse is the plan parser's to report, with the plan's name.
    let Ok(mut plan) = plan_text.parse::<toml::Table>() else { return Ok(plan_text.to_string()) };
    let Some(gpus) = plan.get_mut("search").and_then(|s| s.get_mut("gpu")).and_then(|g| g.as_array_mut()) else {
        return Ok(plan_text.to_string());
    };
    for gpu in gpus.iter_mut().filter_map(|g| g.as_table_mut()) {
        if gpu.contains_key("price_per_gpu_hour") {
            continue;
        }
        let Some(name) = gpu.get("name").and_then(|n| n.as_str()) else { continue };
        if let Some((_, price, source)) = prices.iter().find(|(k, _, _)| *k == price_key(name)) {
            gpu.insert("price_per_gpu_hour".into(), (*price).into());
            gpu.insert("price_source".into(), format!("{source} (--prices {})", prices_file.display()).into());
        }
    }
    Ok(toml::to_string(&plan).expect("a parsed table serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_price_file_prices_the_gpus_the_plan_leaves_open() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prices.toml");
        std::fs::write(&file, "[[price]]\ngpu = \"h100_sxm\"\nprice_per_gpu_hour = 2.25\nsource = \"our quote, 2026-10-02\"\n[[price]]\ngpu = \"H200\"\nprice_per_gpu_hour = 9.0\nsource = \"s\"\n").unwrap();
        let plan = "[search]\n[[search.gpu]]\nname = \"H100-SXM\"\n[[search.gpu]]\nname = \"H200\"\nprice_per_gpu_hour = 3.0\n[[search.gpu]]\nname = \"B200\"\n";
        let out: toml::Table = apply_price_file(plan, &file).unwrap().parse().unwrap();
        let gpus = out["search"]["gpu"].as_array().unwrap();
        assert_eq!(gpus[0]["price_per_gpu_hour"].as_float(), Some(2.25));
        assert!(gpus[0]["price_source"].as_str().unwrap().starts_with("our quote, 2026-10-02 (--prices "));
        assert_eq!(gpus[1]["price_per_gpu_hour"].as_float(), Some(3.0), "the plan's own price wins");
        assert!(gpus[2].get("price_per_gpu_hour").is_none(), "unnamed GPUs keep the default");
        for (bad, field) in [
            ("[[price]]\ngpu = \"H200\"\nprice_per_gpu_hour = -1.0\nsource = \"s\"\n", "price[0].price_per_gpu_hour"),
            ("[[price]]\ngpu = \"H200\"\nprice_per_gpu_hour = 1.0\nsource = \" \"\n", "price[0].source"),
            ("[[price]]\ngpu = \"H200\"\nprice_per_gpu_hour = 1.0\nsource = \"s\"\n[[price]]\ngpu = \"h200\"\nprice_per_gpu_hour = 2.0\nsource = \"s\"\n", "price[1].gpu"),
        ] {
            std::fs::write(&file, bad).unwrap();
            let err = apply_price_file(plan, &file).unwrap_err().to_string();
            assert!(err.contains(field) && err.contains("prices.toml"), "{err}");
        }
        std::fs::write(&file, "[[price]]\ngpu = \"H200\"\ncost = 1.0\n").unwrap();
        assert!(apply_price_file(plan, &file).unwrap_err().to_string().contains("cost"));
    }

    #[test]
    fn every_preset_has_one_price() {
        let mut presets = GpuSpec::preset_names();
        presets.sort_unstable();
        let mut priced: Vec<&str> = GPU_PRICES.iter().map(|p| p.gpu).collect();
        priced.sort_unstable();
        assert_eq!(priced, presets);
        for p in GPU_PRICES {
            assert!(p.price_per_gpu_hour > 0.0 && p.price_per_gpu_hour < 100.0, "{p:?}");
            // One provider and offer for all; a day where the reading has one, else the year.
            assert!(p.source.starts_with("RunPod Secure Cloud on-demand"), "{p:?}");
            assert!(p.as_of.len() == 10 || p.as_of.len() == 4, "{p:?}");
        }
    }

    #[test]
    fn found_by_any_preset_alias() {
        assert_eq!(default_price("h100_sxm").map(|p| p.price_per_gpu_hour), Some(3.99));
        assert_eq!(default_price("TPU-v5e"), None);
    }
}

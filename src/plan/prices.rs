//! Default GPU prices: what a plan charges for a GPU whose `[[search.gpu]]` table gives no
//! `price_per_gpu_hour` of its own.
//!
//! Each figure is one provider's on-demand list price per GPU-hour for that GPU in an 8-GPU
//! instance, as the provider's public price page showed it on the date given. Prices differ
//! between providers by 2–3× (hyperscalers list the same H100 at several times a GPU cloud's
//! price) and fall over time, and reserved or spot capacity costs less: a plan that decides a
//! purchase should give its own quotes. One kind of provider (GPU clouds, on-demand) is used
//! throughout, so that the table ranks GPUs against each other consistently.

use crate::scenario::GpuSpec;

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
        price_per_gpu_hour: 2.99,
        source: "Lambda on-demand, 8x H100 SXM 80GB instance (lambda.ai/pricing)",
        as_of: "2025",
    },
    GpuPrice {
        gpu: "A100-80G-SXM",
        price_per_gpu_hour: 1.79,
        source: "Lambda on-demand, 8x A100 SXM 80GB instance (lambda.ai/pricing)",
        as_of: "2025",
    },
    GpuPrice {
        gpu: "B200",
        price_per_gpu_hour: 4.99,
        source: "Lambda on-demand, 8x B200 SXM instance (lambda.ai/pricing)",
        as_of: "2025",
    },
    GpuPrice {
        gpu: "H200",
        price_per_gpu_hour: 3.99,
        source: "RunPod on-demand (Secure Cloud), H200 SXM 141GB (runpod.io/pricing)",
        as_of: "2025",
    },
    GpuPrice {
        gpu: "MI300X",
        price_per_gpu_hour: 2.49,
        source: "RunPod on-demand (Secure Cloud), MI300X 192GB (runpod.io/pricing)",
        as_of: "2025",
    },
    GpuPrice {
        gpu: "L40S",
        price_per_gpu_hour: 0.86,
        source: "RunPod on-demand (Secure Cloud), L40S 48GB (runpod.io/pricing)",
        as_of: "2025",
    },
];

/// The default price of the GPU a plan names, by any name its hardware preset accepts
/// (`h100-sxm`, `H100_SXM`, …); `None` for a GPU with no preset or no listed price.
pub fn default_price(gpu: &str) -> Option<&'static GpuPrice> {
    let preset = GpuSpec::preset(gpu)?;
    GPU_PRICES.iter().find(|p| p.gpu == preset.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_has_one_price() {
        let mut presets = GpuSpec::preset_names();
        presets.sort_unstable();
        let mut priced: Vec<&str> = GPU_PRICES.iter().map(|p| p.gpu).collect();
        priced.sort_unstable();
        assert_eq!(priced, presets);
        for p in GPU_PRICES {
            assert!(p.price_per_gpu_hour > 0.0 && p.price_per_gpu_hour < 100.0, "{p:?}");
            assert!(!p.source.is_empty() && p.as_of.len() == 4, "{p:?}");
        }
    }

    #[test]
    fn found_by_any_preset_alias() {
        assert_eq!(default_price("h100_sxm").map(|p| p.price_per_gpu_hour), Some(2.99));
        assert_eq!(default_price("TPU-v5e"), None);
    }
}

//! Mixture-of-experts layers: how many of a layer's experts a step's tokens reach, and how many
//! rows each runs, so that a cost model prices the routed experts with its own GEMM times.
//!
//! A step of `T` tokens, each routed to `k` of `E` experts: expert `i` receives a token with
//! probability `pᵢ = min(1, k · shareᵢ)` (balanced: `k / E`). It is launched at all with
//! probability `1 − (1 − pᵢ)^T`, and then runs `T · pᵢ / (1 − (1 − pᵢ)^T)` rows on average. Its
//! weights are read once per launch, which is why decode is bound by weight bandwidth and grows
//! with the batch: one token reads `k` experts, a large batch all `E`. A cost model prices the
//! expected experts launched on a GPU, with their rows, as one grouped GEMM, on the GPU that
//! finishes last:
//!
//! - tensor parallel (vLLM's default): every GPU holds a slice of every expert, so every GPU
//!   runs all `E` (sliced) and they finish together;
//! - expert parallel: GPU `g` holds experts `g·E/t … (g+1)·E/t − 1` whole; with skewed routing
//!   the GPU holding the most popular experts (expert 0 first) sets the pace.

use crate::calibrate::families::RowSurface;
use crate::scenario::model::MoeSpec;

#[derive(Clone, Debug, PartialEq)]
pub struct ExpertRouting {
    /// `pᵢ` of each expert, in expert order.
    probability: Vec<f64>,
    /// GPUs the experts are spread over whole (expert parallel), else 1.
    groups: usize,
    /// Every `pᵢ` equal: priced in closed form, one expert for all.
    balanced: bool,
}

impl ExpertRouting {
    pub fn new(moe: &MoeSpec, tensor_parallel: u32) -> ExpertRouting {
        let experts = moe.num_experts.max(1) as usize;
        let k = moe.experts_per_token.min(moe.num_experts) as f64;
        let balanced = moe.routing_skew == 0.0;
        let weights: Vec<f64> = (0..experts).map(|i| ((i + 1) as f64).powf(-moe.routing_skew)).collect();
        let total: f64 = weights.iter().sum();
        let probability = weights.iter().map(|w| (k * w / total).min(1.0)).collect();
        let groups = if moe.expert_parallel { tensor_parallel.max(1) as usize } else { 1 };
        ExpertRouting { probability, groups, balanced }
    }

    /// The routed experts' time for a step of `tokens` tokens, seconds, on the GPU that
    /// finishes last: `experts_s(launched, rows)` prices `launched` experts (expected, so
    /// fractional) of `rows` rows each on one GPU, as one grouped launch (vLLM's fused MoE
    /// kernel runs every expert of a layer in one kernel). With skewed routing a GPU's experts
    /// run different rows; their mean, weighted by launches, stands for all.
    pub fn experts_s(&self, tokens: f64, experts_s: impl Fn(f64, f64) -> f64) -> f64 {
        if tokens <= 0.0 {
            return 0.0;
        }
        let per_group = self.probability.len().div_ceil(self.groups);
        if self.balanced {
            let (launched, rows) = launch(self.probability[0], tokens);
            return experts_s(per_group as f64 * launched, rows);
        }
        self.probability
            .chunks(per_group)
            .map(|group| {
                let launched: f64 = group.iter().map(|&p| launch(p, tokens).0).sum();
                let rows: f64 = group.iter().map(|&p| tokens * p).sum();
                if launched > 0.0 { experts_s(launched, rows / launched) } else { 0.0 }
            })
            .fold(0.0, f64::max)
    }

    /// Experts a step of `tokens` tokens is expected to launch, over all GPUs.
    pub fn experts_launched(&self, tokens: f64) -> f64 {
        self.probability.iter().map(|&p| launch(p, tokens).0).sum()
    }

    /// One layer's routed experts for `tokens` tokens, seconds, from a measured fused-MoE layer
    /// (`table`: nanoseconds by tokens). The rows route round-robin (aiconfigurator's
    /// `balanced`), which launches `min(E, T·k)` experts: every one of them once `T·k ≥ E`.
    /// Routed as this model routes, `T` tokens launch fewer at small batches (top-1 of 16 at 24
    /// decodes: 12.6 of 16, not 16), and a decode step is bound by the weights of those it
    /// launches. So the table is read at `T`, scaled by its own launch-bound curve: its value at
    /// the tokens whose round-robin routing launches that many experts, over its value at those
    /// that launch round-robin's; 1 once every expert runs (prefill), or at one token.
    pub fn fused_layer_s(&self, table: &RowSurface, tokens: f64) -> f64 {
        if tokens <= 0.0 {
            return 0.0;
        }
        let at = |t: f64| table.eval_ns(t, 0.0) * 1e-9;
        let k: f64 = self.probability.iter().sum();
        let experts = self.probability.len() as f64;
        let launched = self.experts_launched(tokens);
        let round_robin = (tokens * k).min(experts);
        if k <= 0.0 || launched >= round_robin {
            return at(tokens);
        }
        at(tokens) * at(launched / k) / at(round_robin / k)
    }
}

/// `(P(launched), rows when launched)` of an expert that each of `tokens` tokens reaches with
/// probability `p`.
fn launch(p: f64, tokens: f64) -> (f64, f64) {
    if p <= 0.0 {
        return (0.0, 0.0);
    }
    let launched = 1.0 - (1.0 - p).powf(tokens);
    (launched, tokens * p / launched)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moe(experts: u32, k: u32, skew: f64, expert_parallel: bool) -> MoeSpec {
        MoeSpec { num_experts: experts, experts_per_token: k, expert_ffn_size: 1024, routing_skew: skew, expert_parallel, dense_layers: 0, dense_ffn_size: 0 }
    }

    #[test]
    fn one_token_launches_its_k_experts_and_many_launch_all() {
        let routing = ExpertRouting::new(&moe(128, 8, 0.0, false), 1);
        assert!((routing.experts_launched(1.0) - 8.0).abs() < 1e-9);
        assert!(routing.experts_launched(4096.0) > 127.99);
        // Rows are conserved: Σ launched × rows = tokens × k.
        for tokens in [1.0, 3.0, 64.0, 1000.0] {
            let rows = routing.experts_s(tokens, |launched, rows| launched * rows);
            assert!((rows - tokens * 8.0).abs() < 1e-6 * tokens * 8.0, "{tokens}: {rows}");
        }
    }

    /// A table of 50 µs per launched expert (round-robin: min(16, T) experts for top-1 of 16).
    /// One token launches one expert either way; 24 decodes launch 16 round-robin but
    /// 16 × (1 − (15/16)²⁴) = 12.61 when routed at random, so the layer costs 12.61 experts'
    /// time; 4,096 tokens launch all 16 either way, and the table stands.
    #[test]
    fn a_fused_layer_is_priced_at_the_experts_random_routing_launches() {
        let table = RowSurface::new((0..=14).map(|i| 1u64 << i).map(|t| (t, 0, 50e3 * (t.min(16) as f64)))).unwrap();
        let routing = ExpertRouting::new(&moe(16, 1, 0.0, false), 1);
        assert!((routing.fused_layer_s(&table, 1.0) - 50e-6).abs() < 1e-12);
        let launched = 16.0 * (1.0 - (15.0f64 / 16.0).powi(24));
        let priced = routing.fused_layer_s(&table, 24.0);
        assert!((priced - 50e-6 * launched).abs() < 0.02 * 50e-6 * launched, "{priced} against {}", 50e-6 * launched);
        assert!(priced < 0.8 * 16.0 * 50e-6, "{priced}");
        assert!((routing.fused_layer_s(&table, 4096.0) - 16.0 * 50e-6).abs() < 1e-9);
    }

    #[test]
    fn skew_concentrates_the_work_on_the_first_gpu_under_expert_parallelism() {
        let balanced = ExpertRouting::new(&moe(8, 2, 0.0, true), 4);
        let skewed = ExpertRouting::new(&moe(8, 2, 1.0, true), 4);
        // Rows per GPU: balanced, a quarter of the 2·T rows; skewed, the first GPU's share.
        let tokens = 1000.0;
        let rows = |launched: f64, rows: f64| launched * rows;
        assert!((balanced.experts_s(tokens, rows) - tokens * 2.0 / 4.0).abs() < 1e-6);
        let shares: Vec<f64> = (1..=8).map(|i| 1.0 / i as f64).collect();
        let first_gpu = 2.0 * (shares[0] + shares[1]) / shares.iter().sum::<f64>();
        assert!((skewed.experts_s(tokens, rows) - tokens * first_gpu).abs() < 1e-6);
        // Rows conserved over all experts whatever the skew.
        assert!((skewed.experts_launched(1e6) - 8.0).abs() < 1e-9);
    }
}

//! The cost model of data-parallel ranks that share a mixture of experts' expert layers
//! ([`DataParallelCost`]): one rank's model without its routed experts, and the model on every
//! rank's GPUs for the experts, each priced the way the scenario prices any model.

use super::ScenarioCost;
use crate::cost::data_parallel::DataParallelCost;
use crate::cost::token_exchange::TokenExchange;
use crate::scenario::model::MoeSpec;
use crate::scenario::parallel::All2AllBackend;
use crate::scenario::{Scenario, ScenarioError};

/// vLLM's `VLLM_MOE_DP_CHUNK_SIZE` (`vllm/envs.py`, 256 in 0.19.0): under DeepEP's low-latency
/// kernels `DefaultMoERunner.use_dp_chunking` loops the expert layer over chunks of this many
/// tokens a rank, as many as the largest rank needs (the low-latency buffers are sized for it).
/// It does so for MoRI, FlashInfer's NVLink two-sided and NIXL EP kernels too, which servesim
/// does not offer; 0.19.0 has no pplx backend (it falls back to `allgather_reducescatter`), and
/// earlier releases' chunking of pplx is not modelled.
const VLLM_MOE_DP_CHUNK_SIZE: u32 = 256;

/// `scenario`'s cost when its ranks step in lockstep, from `cost_of` (which prices a scenario
/// of one engine); `None` when they do not (one rank, or a model without experts).
pub(super) fn lockstep_cost(
    scenario: &Scenario,
    cost_of: &dyn Fn(&Scenario) -> Result<ScenarioCost, ScenarioError>,
) -> Option<Result<ScenarioCost, ScenarioError>> {
    let dp = scenario.engine.data_parallel.filter(|dp| dp.lockstep)?;
    let moe = scenario.model.moe?;
    let tp = scenario.engine.tensor_parallel;
    // One rank: every layer but the routed experts, which route no token (the router, the
    // shared experts and the leading dense layers stay); its own memory and speculation.
    let mut rank = scenario.clone();
    rank.engine.data_parallel = None;
    rank.model.moe = Some(MoeSpec { experts_per_token: 0, expert_parallel: false, ..moe });
    // The experts as every rank's GPUs hold them; only their routed-expert time is read.
    let mut experts = scenario.clone();
    experts.engine.data_parallel = None;
    experts.engine.speculative = None;
    experts.engine.tensor_parallel = tp * dp.ranks;
    Some((|| {
        let rank_cost = cost_of(&rank)?;
        let experts_cost = cost_of(&experts)?;
        let (exchange, note) = TokenExchange::new(&scenario.model, &scenario.hardware.gpu, tp, &dp, &scenario.cost);
        let ScenarioCost { model, kind, label, mut notes, mut warnings } = rank_cost;
        // The experts' model prices a GPU count the scenario never runs one engine on: of its
        // notes, only those about the experts' GEMMs concern this deployment (its all-to-all
        // is not run: the exchange below moves the tokens, and says how it is priced).
        let about_experts = |n: &String| n.contains("expert") && !n.contains("all-to-all");
        let extra: Vec<String> = experts_cost.notes.into_iter().filter(|n| about_experts(n) && !notes.contains(n)).collect();
        notes.extend(extra);
        let extra: Vec<String> = experts_cost.warnings.into_iter().filter(|w| !warnings.contains(w)).collect();
        warnings.extend(extra);
        notes.push(note);
        let label = format!("{label}; {} data-parallel ranks, experts over {} GPUs", dp.ranks, tp * dp.ranks);
        let chunk_rows = (dp.all2all == All2AllBackend::DeepepLowLatency).then_some(VLLM_MOE_DP_CHUNK_SIZE);
        if let Some(rows) = chunk_rows {
            notes.push(format!(
                "data parallel: a step's expert layers run in rounds of at most {rows} token rows a rank (vLLM's VLLM_MOE_DP_CHUNK_SIZE under {}), each a dispatch, the experts and a combine",
                dp.all2all.name()
            ));
        }
        let model = Box::new(DataParallelCost::new(model, experts_cost.model, exchange, dp.ranks, chunk_rows));
        Ok(ScenarioCost { model, kind, label, notes, warnings })
    })())
}

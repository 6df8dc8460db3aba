//! Batching policies: how each engine forms a step from its waiting and running queues.

use super::batch::Batch;
use super::outcome::Rejection;
use super::state::{PreemptedBlocks, SchedulerState};

/// A batching policy. It reads and changes the scheduler's queues and KV allocations and fills
/// `batch`; it must leave every scheduled sequence with KV blocks for its new tokens.
pub trait SchedulingPolicy {
    fn name(&self) -> &'static str;
    fn schedule(&mut self, state: &mut SchedulerState, batch: &mut Batch);
    /// Whether the engine replays `batch` from a captured graph, and padded to what size.
    /// Engines capture graphs only for some batches; the rest launch kernels one by one, which
    /// costs CPU time per step. Default: always eager.
    fn graph_size(&self, _batch: &Batch) -> Option<u32> {
        None
    }
    /// Whether the engine refuses a request on arrival, before queueing it (TGI's router:
    /// length limits and its concurrency limit). Default: it accepts every request; the
    /// scheduler still rejects one that could never fit in the KV cache.
    fn refuse(&self, _state: &SchedulerState, _prompt_tokens: u32, _max_tokens: u32) -> Option<Rejection> {
        None
    }
    /// The `max_tokens` the engine runs a request with, once accepted: SGLang lowers it so that
    /// prompt and output fit its pool (`handle_generate_request`). Default: as asked.
    fn max_new_tokens(&self, _state: &SchedulerState, _prompt_tokens: u32, max_tokens: u32) -> u32 {
        max_tokens
    }
    /// Whether `max_num_batched_tokens` bounds decode tokens too (the scheduler's invariant
    /// check). TGI's token budget bounds only its prefill steps; its decodes run every running
    /// request. Default: the budget bounds every step.
    fn budget_bounds_decodes(&self) -> bool {
        true
    }
    /// Whether the policy schedules running sequences through [`schedule_running`], which keeps
    /// decoding sequences as a cohort of totals when the scheduler has one. Default: no.
    fn decodes_in_cohort(&self) -> bool {
        false
    }
    /// Whether [`SchedulingPolicy::graph_size`] reads [`Batch::max_context_tokens`] (see
    /// [`crate::cost::CostModel::reads_max_context`]). Default: no.
    fn reads_max_context(&self) -> bool {
        false
    }
    /// Whether the engine advances a multi-step window's later steps on the device, without the
    /// host work of a step (vLLM 0.6's `advance_step`), so cost models charge that work once per
    /// window ([`Batch::window_step`]). Default: no, every step prepares its inputs anew.
    fn advances_windows_on_device(&self) -> bool {
        false
    }
}

/// vLLM V1 (≥ 0.8): one token budget shared by running and new requests; running requests
/// first, in order, each getting all its pending tokens (a decode: 1; a partial prefill: as many
/// as the budget allows). When KV blocks run out, the newest running request is preempted by
/// recompute, its computed blocks left in the prefix cache (when on) for its readmission. New
/// requests are admitted FCFS only in steps without preemption.
pub struct VllmV1;

impl SchedulingPolicy for VllmV1 {
    fn name(&self) -> &'static str {
        "vllm-v1"
    }

    fn decodes_in_cohort(&self) -> bool {
        true
    }

    fn schedule(&mut self, s: &mut SchedulerState, batch: &mut Batch) {
        let mut budget = s.config.max_num_batched_tokens;
        let chunked = s.partial_prefills();
        let preempted = schedule_running(s, batch, &mut budget, chunked, PreemptedBlocks::Cached);
        if !preempted {
            admit_waiting(s, batch, &mut budget, chunked, AdmitBlocks::Chunk);
        }
    }

    /// V1 captures piecewise graphs (attention runs outside them) for every batch of up to 512
    /// tokens, prefill or not, padding the token count up to a capture size.
    fn graph_size(&self, batch: &Batch) -> Option<u32> {
        vllm_capture_size(batch.tokens(), V1_CAPTURE_SIZE_MAX)
    }
}

/// servesim's own engine (`servesim serve`): vLLM V1's scheduling, run eagerly. It captures no
/// graphs, so no batch is padded and every step launches its kernels one by one.
pub struct Servesim;

impl SchedulingPolicy for Servesim {
    fn name(&self) -> &'static str {
        "servesim"
    }

    fn decodes_in_cohort(&self) -> bool {
        true
    }

    fn schedule(&mut self, s: &mut SchedulerState, batch: &mut Batch) {
        VllmV1.schedule(s, batch);
    }
}

/// The smallest of vLLM's capture sizes that holds `n` rows, or `None` past the largest. vLLM
/// captures 1, 2, 4, then every multiple of 8 up to `largest`; asked once per step, so in closed
/// form rather than by a search of the list (issue 14).
fn vllm_capture_size(n: u32, largest: u32) -> Option<u32> {
    let size = match n {
        0..=1 => 1,
        2 => 2,
        3..=4 => 4,
        _ => n.div_ceil(8).saturating_mul(8),
    };
    (size <= largest).then_some(size)
}

/// vLLM V1's default `cudagraph_capture_sizes` end at 512.
const V1_CAPTURE_SIZE_MAX: u32 = 512;

/// vLLM 0.6.3's `_BATCH_SIZES_TO_CAPTURE` end at 256.
const V0_CAPTURE_SIZE_MAX: u32 = 256;

/// vLLM 0.6.3's `max_seq_len_to_capture`: longer contexts run decode eagerly.
const V0_MAX_CONTEXT_TO_CAPTURE: u32 = 8192;

/// vLLM V0 (0.6.x). With chunked prefill: running requests first in order (decodes 1 token,
/// partial prefills a chunk of the remaining budget), then new prompts FCFS, each of which must
/// allocate KV for its *whole* prompt plus the watermark. Without chunked prefill: a step is
/// either all new prefills (whole prompts, if any fit) or all decodes.
pub struct VllmV0;

impl SchedulingPolicy for VllmV0 {
    fn name(&self) -> &'static str {
        "vllm-v0"
    }

    fn decodes_in_cohort(&self) -> bool {
        true
    }

    fn advances_windows_on_device(&self) -> bool {
        true
    }

    /// Its graph check asks for the longest context.
    fn reads_max_context(&self) -> bool {
        true
    }

    fn schedule(&mut self, s: &mut SchedulerState, batch: &mut Batch) {
        let mut budget = s.config.max_num_batched_tokens;
        if s.config.enable_chunked_prefill {
            let partial = s.partial_prefills();
            let preempted = schedule_running(s, batch, &mut budget, partial, PreemptedBlocks::Freed);
            if !preempted {
                admit_waiting(s, batch, &mut budget, partial, AdmitBlocks::WholePrompt);
            }
            return;
        }
        admit_waiting(s, batch, &mut budget, false, AdmitBlocks::WholePrompt);
        if batch.is_empty() {
            schedule_running(s, batch, &mut budget, false, PreemptedBlocks::Freed);
        }
    }

    /// V0 replays graphs only for decode-only batches of up to 256 sequences whose contexts fit
    /// `max_seq_len_to_capture`; mixed prefill/decode steps run eagerly.
    fn graph_size(&self, batch: &Batch) -> Option<u32> {
        if !batch.is_decode_only() || batch.max_context_tokens() > V0_MAX_CONTEXT_TO_CAPTURE {
            return None;
        }
        vllm_capture_size(batch.num_seqs(), V0_CAPTURE_SIZE_MAX)
    }
}

/// How much KV a newly admitted request must be able to allocate.
#[derive(Clone, Copy, PartialEq)]
enum AdmitBlocks {
    /// Only this step's chunk (vLLM V1).
    Chunk,
    /// The whole prompt (plus regenerated tokens) at once (vLLM V0's `can_allocate`).
    WholePrompt,
}

/// Schedules running sequences in order under the budget, preempting the newest when KV runs
/// out, its blocks freed as `preempted_blocks` says. KV grows with the tokens scheduled (both
/// vLLM engines). Returns whether anything was preempted.
///
/// With a decode cohort, a step in which everything runs in full is scheduled from its totals;
/// any other step dissolves the cohort and is scheduled here one sequence at a time.
#[inline(always)]
fn schedule_running(
    s: &mut SchedulerState,
    batch: &mut Batch,
    budget: &mut u32,
    chunked: bool,
    preempted_blocks: PreemptedBlocks,
) -> bool {
    if s.schedule_cohort_step(batch, budget, chunked) {
        return false;
    }
    s.dissolve_cohort();
    let mut preempted = false;
    let mut i = 0;
    while i < s.running.len() && *budget > 0 {
        let seq = s.running[i];
        let pending = s.tokens_wanted(seq);
        if !chunked && pending > *budget {
            break;
        }
        let tokens = pending.min(*budget);
        let tokens_total = s.with_lookahead(seq, s.seqs[seq as usize].computed + tokens);
        let mut scheduled = true;
        while !s.kv.allocate(seq, tokens_total, 0) {
            let victim = s.preempt_newest(preempted_blocks).expect("running is not empty");
            preempted = true;
            if victim == seq {
                scheduled = false;
                break;
            }
        }
        if !scheduled {
            break;
        }
        s.push_work(batch, seq, tokens);
        *budget -= tokens;
        i += 1;
    }
    preempted
}

/// Admits waiting sequences FCFS while budget, `max_num_seqs` and KV allow; stops at the first
/// that does not fit (head-of-line, as both vLLM engines do). With prefix caching, a sequence
/// starts from its cached prompt blocks and computes only the rest (vLLM V1's
/// `get_computed_blocks` before `allocate_slots`).
#[inline(always)]
fn admit_waiting(s: &mut SchedulerState, batch: &mut Batch, budget: &mut u32, chunked: bool, blocks: AdmitBlocks) {
    let watermark_blocks = s.watermark_blocks;
    while let Some(&seq) = s.waiting.front() {
        if *budget == 0 || s.num_running() >= s.config.max_num_seqs {
            break;
        }
        let hit_blocks = s.prefix_hit_blocks(seq);
        let hit_tokens = hit_blocks as u32 * s.config.block_size;
        let pending = s.seqs[seq as usize].tokens_pending() - hit_tokens;
        if !chunked && pending > *budget {
            break;
        }
        let tokens = pending.min(*budget);
        let tokens_to_allocate = s.with_lookahead(
            seq,
            s.seqs[seq as usize].computed
                + hit_tokens
                + match blocks {
                    AdmitBlocks::Chunk => tokens,
                    AdmitBlocks::WholePrompt => pending,
                },
        );
        if !s.allocate_admitted(seq, hit_blocks, tokens_to_allocate, watermark_blocks) {
            break;
        }
        s.record_admission(seq, hit_tokens);
        s.waiting.pop_front();
        s.push_running(seq);
        s.push_work(batch, seq, tokens);
        *budget -= tokens;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::batch::padded_capture_size;

    #[test]
    fn capture_sizes_in_closed_form_are_those_of_the_list() {
        for largest in [V0_CAPTURE_SIZE_MAX, V1_CAPTURE_SIZE_MAX] {
            // 1, 2, 4, 8, 16, …, largest: vLLM's list, written out.
            let list: Vec<u32> = [1, 2, 4].into_iter().chain((8..=largest).step_by(8)).collect();
            for n in (0..=largest + 20).chain([u32::MAX - 7, u32::MAX]) {
                assert_eq!(vllm_capture_size(n, largest), padded_capture_size(n, &list), "{n} rows, up to {largest}");
            }
        }
    }
}

//! Multi-step scheduling (vLLM 0.6's `--num-scheduler-steps N`): the scheduler decides once,
//! and the batch it formed runs N steps before it decides again.
//!
//! ```text
//!   schedule(): policy ──► batch (step 0 of a window)      finish_step(): tokens held
//!   schedule(): the window's members, one decode each      finish_step(): tokens held
//!   ...                                                     last step: every member's tokens
//!                                                           delivered as one chunk; finishers freed
//! ```
//!
//! What vLLM 0.6.x does, and so what this models:
//! - The scheduler and input preparation run once per window; the later steps advance the batch
//!   on the GPU (`advance_step`). Cost models charge a step's CPU overhead only on the window's
//!   first step ([`crate::sched::Batch::window_step`]).
//! - A decode reserves KV for the whole window up front (`num_lookahead_slots = N − 1`), and
//!   preempts as usual when it cannot.
//! - New prompts wait for the window to end: nothing is admitted mid-window.
//! - Tokens reach the client when the window ends, all of a request's window in one chunk
//!   (`MultiStepOutputProcessor` appends a window's tokens at once), so the client sees one
//!   inter-token gap per window, N steps long, while TPOT stays per token.
//! - Without chunked prefill, a prompt step runs alone and is one step (prompts get no lookahead
//!   slots). With chunked prefill (vLLM 0.6.3 and later), a prompt is never split: one that does
//!   not fit the step's budget waits; a scheduled prompt computes in the window's first step and
//!   decodes in the rest (`turn_prefills_into_decodes`).
//!
//! What it does not: a sequence that finishes mid-window leaves the batch at once (vLLM keeps
//! computing it, masked, until the window ends), and the lookahead is not reserved past a
//! request's last token.

use super::batch::{Batch, SeqWork};
use super::outcome::{Chunk, Finished};
use super::state::SchedulerState;

/// The window in flight: who is in it and what each has sampled but not yet delivered.
#[derive(Debug, Default)]
pub(super) struct Window {
    /// Steps in the window (1: no window, each step delivers its own tokens).
    steps: u32,
    /// Steps of the window already scheduled.
    scheduled: u32,
    /// The batch's sequences, in batch order.
    members: Vec<Member>,
}

#[derive(Clone, Copy, Debug)]
struct Member {
    slot: u32,
    /// Tokens sampled in the window and not yet delivered.
    held: u32,
    /// Stopped by the caller ([`super::Scheduler::finish_early`]), who has its record already:
    /// released when the window ends, reported to nobody.
    forgotten: bool,
}

impl Window {
    /// Whether the window has steps left to run without asking the policy.
    pub(super) fn is_open(&self) -> bool {
        self.scheduled > 0 && self.scheduled < self.steps
    }

    /// Whether the step just scheduled holds its tokens back rather than delivering them.
    pub(super) fn holds_tokens(&self) -> bool {
        self.steps > 1
    }

    /// Opens a window on the batch the policy just formed: `steps` steps if every sequence in it
    /// samples a token and its prompts may run as part of a window (`prompts_in_window`),
    /// otherwise a single step.
    pub(super) fn open(&mut self, batch: &mut Batch, steps: u32, prompts_in_window: bool) {
        self.members.clear();
        let windowed = steps > 1
            && batch.seqs.iter().all(|w| w.samples_token)
            && (prompts_in_window || batch.prefill_tokens == 0)
            && batch.cohort.seqs == 0;
        self.steps = if windowed { steps } else { 1 };
        self.scheduled = 1;
        if windowed {
            self.members.extend(batch.seqs.iter().map(|w| Member { slot: w.seq, held: 0, forgotten: false }));
        }
        batch.window_step = 0;
    }

    /// The window's next step: one decode for each member still generating. `on_device`: the
    /// engine advances it without a step's host work, which cost models then skip
    /// ([`Batch::window_step`]); otherwise it is priced as any step.
    pub(super) fn next_step(&mut self, state: &SchedulerState, batch: &mut Batch, on_device: bool) {
        debug_assert!(self.is_open());
        for m in &self.members {
            let s = &state.seqs[m.slot as usize];
            if s.generated < s.max_output_tokens {
                debug_assert!(!s.in_prefill());
                batch.push_decode(SeqWork { seq: m.slot, new_tokens: 1, context_tokens: s.computed, samples_token: true, draft_tokens: 0 });
            }
        }
        batch.window_step = if on_device { self.scheduled } else { 0 };
        self.scheduled += 1;
    }

    /// Whether any member still generates: a window whose members have all finished (or were
    /// stopped) ends.
    pub(super) fn any_generating(&self, state: &SchedulerState) -> bool {
        self.members.iter().any(|m| {
            let s = &state.seqs[m.slot as usize];
            s.generated < s.max_output_tokens
        })
    }

    /// `slot` sampled a token: held until the window ends.
    pub(super) fn hold(&mut self, slot: u32) {
        if let Some(m) = self.members.iter_mut().find(|m| m.slot == slot) {
            m.held += 1;
        }
    }

    /// Whether `slot` is in the window.
    pub(super) fn contains(&self, slot: u32) -> bool {
        self.steps > 1 && self.members.iter().any(|m| m.slot == slot)
    }

    /// The caller stopped `slot` (a member) and keeps its record: it generates no more and is
    /// released, unreported, when the window ends (its blocks stay in the window's batch).
    pub(super) fn forget(&mut self, slot: u32) {
        if let Some(m) = self.members.iter_mut().find(|m| m.slot == slot) {
            m.forgotten = true;
            m.held = 0;
        }
    }

    /// Whether the step just run ended the window: its last step, or nobody left generating.
    pub(super) fn ends_now(&self, state: &SchedulerState) -> bool {
        self.scheduled >= self.steps || !self.any_generating(state)
    }

    /// Ends the window: delivers every member's held tokens as one chunk, reports and releases
    /// those that finished, and returns whether any did. The caller drops released sequences
    /// from its running list.
    pub(super) fn close(&mut self, state: &mut SchedulerState, chunks: &mut Vec<Chunk>, finished: &mut Vec<Finished>) -> bool {
        let mut any_finished = false;
        for m in self.members.drain(..) {
            let s = state.seqs[m.slot as usize];
            if m.held > 0 {
                chunks.push(Chunk { request_id: s.request_id, tokens: m.held });
            }
            if s.generated == s.max_output_tokens {
                any_finished = true;
                if !m.forgotten {
                    finished.push(s.finished());
                }
                state.release(m.slot);
            }
        }
        self.steps = 0;
        self.scheduled = 0;
        any_finished
    }
}

//! Data-parallel ranks that share expert layers step together, as vLLM's `DPEngineCoreProc`
//! runs them (`vllm/v1/engine/core.py`): while any rank has work, every rank steps, a rank with
//! none on a dummy batch, and the step lasts as long as the cost model prices all the ranks'
//! batches together ([`crate::cost::CostModel::predict_ranks`]). When no rank has work they
//! all stop, until a request arrives (vLLM's "wave" ends and the next starts).
//!
//! A deployment's first rank's step events and flags stand for all its ranks: a request admitted
//! to any rank wakes it, and its step end delivers every rank's tokens.

use super::{Event, Simulation};
use crate::sched::Batch;

impl Simulation<'_> {
    /// The ranks of the deployment whose first rank is `lead`.
    fn ranks(&self, lead: u32) -> std::ops::Range<usize> {
        lead as usize..(lead + self.lockstep) as usize
    }

    /// Starts a step of every rank of the deployment that `replica` is in, if any has work.
    pub(super) fn start_lockstep_step(&mut self, replica: u32) {
        let lead = replica - replica % self.lockstep;
        let mut any = false;
        for i in self.ranks(lead) {
            self.cluster.replicas[i].start_queued = false;
            let stepped = self.schedule(i as u32);
            self.stepped[i] = stepped;
            any |= stepped;
        }
        if !any {
            return;
        }
        let dummy = Batch::default();
        let batches: Vec<&Batch> = self
            .ranks(lead)
            .map(|i| if self.stepped[i] { self.cluster.replicas[i].scheduler.batch() } else { &dummy })
            .collect();
        let cost = self.costs[lead as usize].predict_ranks(&batches);
        assert!(cost.total_ns > 0, "a step must take time");
        for i in self.ranks(lead) {
            if self.stepped[i] {
                self.begin_step(i as u32, cost);
            } else {
                // It runs the dummy batch: busy, but no step of its own to count or record.
                self.cluster.replicas[i].busy = true;
            }
        }
        self.events.push(self.now_ns + cost.total_ns, Event::StepEnd { replica: lead });
    }

    /// Every rank's step of the deployment led by `lead` is over: each delivers its tokens,
    /// then all step again if any has work.
    pub(super) fn on_lockstep_end(&mut self, lead: u32) {
        for i in self.ranks(lead) {
            if std::mem::take(&mut self.stepped[i]) {
                self.deliver_step(i as u32);
            } else {
                self.cluster.replicas[i].busy = false;
            }
        }
        self.open_gate();
        let any_work = self.ranks(lead).any(|i| self.cluster.replicas[i].scheduler.has_work());
        if any_work && !self.cluster.replicas[lead as usize].start_queued {
            self.start_lockstep_step(lead);
        }
    }
}

//! Scheduling ahead (`SchedulerConfig::schedule_ahead`): a request that arrives while a step
//! runs joins the batch after next, as vLLM V1's engine core forms that batch when the running
//! step starts; from an idle engine it joins the next.

use super::super::{Admission, Policy, Scheduler};
use crate::sched::prefix::scheduler_tests::config;

fn scheduler(ahead: bool) -> Scheduler {
    let mut c = config(64, false);
    c.schedule_ahead = ahead;
    Scheduler::new(c.clone(), Policy::VllmV1.build(&c))
}

fn add(s: &mut Scheduler, id: u32) -> u32 {
    match s.add_request(id, 32, 4, 4) {
        Admission::Queued { seq } => seq,
        other => panic!("{other:?}"),
    }
}

/// Steps until `seq`'s prompt is scheduled; how many batches went before it.
fn batches_before_prefill(ahead: bool) -> u32 {
    let mut s = scheduler(ahead);
    add(&mut s, 0);
    assert_eq!(s.schedule().num_seqs(), 1, "from idle, the first request runs at once");
    // Request 1 arrives while request 0's prefill runs.
    let late = add(&mut s, 1);
    assert_eq!(s.num_waiting(), 1);
    s.finish_step();
    let mut before = 0;
    loop {
        let batch = s.schedule();
        let prefilled = batch.seqs.iter().any(|w| w.seq == late && !w.is_decode());
        s.finish_step();
        if prefilled {
            return before;
        }
        before += 1;
    }
}

#[test]
fn a_request_arriving_during_a_step_waits_one_more_batch() {
    assert_eq!(batches_before_prefill(false), 0);
    assert_eq!(batches_before_prefill(true), 1);
}

#[test]
fn an_idle_engine_takes_a_request_that_arrived_during_its_last_step() {
    // A one-token answer: its prefill is its whole life, so nothing runs after it.
    let mut s = scheduler(true);
    match s.add_request(0, 32, 1, 1) {
        Admission::Queued { .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(s.schedule().num_seqs(), 1);
    let late = add(&mut s, 1);
    s.finish_step();
    let batch = s.schedule();
    assert!(batch.seqs.iter().any(|w| w.seq == late && !w.is_decode()), "nothing else ran, so the engine scheduled it at once");
}

#[test]
fn a_request_stopped_before_it_was_scheduled_leaves_no_trace() {
    let mut s = scheduler(true);
    add(&mut s, 0);
    s.schedule();
    let gone = add(&mut s, 2);
    s.finish_step();
    assert!(s.finish_early(gone).is_some());
    assert_eq!(s.num_waiting(), 0);
    assert!(s.finish_early(gone).is_none(), "stopped once");
}

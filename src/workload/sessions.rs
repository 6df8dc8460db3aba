//! Multi-turn chat sessions: requests in sessions of `turns`, each turn's prompt the previous
//! prompt, plus its answer, plus the new user text the dataset drew, sent a think time after the
//! previous answer's last token (a closed loop per session, as a person chatting).
//!
//! ```text
//!   session s:  turn 0 ──answer──► think ──► turn 1 ──answer──► think ──► turn 2 ...
//!   prompt:     new₀              new₀+out₀+new₁             new₀+out₀+new₁+out₁+new₂
//! ```
//!
//! Sessions start by the arrival process; later turns are sent by the simulated client when the
//! turn before them ends ([`FollowUp`]), so their `arrival_ns` is only the session's start. The
//! whole prompt and answer of every turn are the conversation's text ([`prefixes::conversation`]): the next
//! turn finds the previous prompt's and answer's full blocks in a prefix cache, as vLLM V1 caches
//! full blocks of generated tokens too (see docs/prefix-caching.md). A turn whose prompt and answer would not fit the
//! engine's context starts a new conversation, as a chat client does when it runs out of room.

use rand_distr::{Distribution, Exp};

use super::prefixes;
use super::rng::{Stream, stream};
use super::RequestSpec;
use crate::scenario::{Sessions, ThinkTime};

/// A turn after the first: sent `think_ns` after request `request` (the turn before) ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowUp {
    pub request: u32,
    pub think_ns: u64,
}

/// How many sessions `num_prompts` requests make: the last one may have fewer turns.
pub fn count(sessions: &Sessions, num_prompts: u32) -> u32 {
    num_prompts.div_ceil(sessions.turns)
}

/// The requests of sessions whose turns have the dataset's `lengths` (new text, answer) in
/// order, session by session, and which start at `starts_ns` (one per session). Deterministic in
/// its inputs and `seed`: think times come from their own stream.
pub fn chain(sessions: &Sessions, lengths: &[(u32, u32)], starts_ns: &[u64], max_tokens: Option<u32>, seed: u64) -> Vec<RequestSpec> {
    debug_assert_eq!(starts_ns.len() as u32, count(sessions, lengths.len() as u32));
    let mut rng = stream(seed, Stream::Sessions);
    let exp = Exp::new(1.0 / sessions.think_time_s).ok().filter(|_| sessions.think_time_s > 0.0);
    let mut think_ns = || -> u64 {
        let s = match (sessions.think_time, &exp) {
            (ThinkTime::Exponential, Some(exp)) => exp.sample(&mut rng),
            _ => sessions.think_time_s,
        };
        // At most a day (validated), so nanoseconds fit.
        crate::rounding::round_to_u64(s * 1e9)
    };
    let mut out = Vec::with_capacity(lengths.len());
    let (mut conversation, mut prompt, mut answer) = (0u64, 0u32, 0u32);
    for (i, &(new_text, output_tokens)) in lengths.iter().enumerate() {
        let turn = i as u32 % sessions.turns;
        let grown = prompt.saturating_add(answer).saturating_add(new_text);
        let fits = u64::from(grown) + u64::from(output_tokens) <= u64::from(sessions.context_len);
        if turn == 0 || !fits {
            conversation += u64::from(i > 0);
            prompt = new_text;
        } else {
            prompt = grown;
        }
        answer = output_tokens;
        out.push(RequestSpec {
            arrival_ns: starts_ns[i / sessions.turns as usize],
            input_tokens: prompt,
            output_tokens,
            max_tokens: max_tokens.unwrap_or(output_tokens).max(output_tokens),
            // The answer is the conversation's text too: the next turn's prompt holds it.
            prefix: prefixes::conversation(conversation, prompt.saturating_add(output_tokens)),
            follows: (turn > 0).then(|| FollowUp { request: i as u32 - 1, think_ns: think_ns() }),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(turns: u32, think_time_s: f64, think_time: ThinkTime, context_len: u32) -> Sessions {
        Sessions { turns, think_time_s, think_time, context_len }
    }

    #[test]
    fn each_turn_extends_the_last_prompt_by_its_answer_and_new_text() {
        let s = sessions(3, 2.0, ThinkTime::Fixed, 10_000);
        let lengths = [(100, 50), (20, 30), (10, 5), (7, 8)];
        let r = chain(&s, &lengths, &[0, 9_000], None, 0);
        let prompts: Vec<u32> = r.iter().map(|q| q.input_tokens).collect();
        assert_eq!(prompts, [100, 170, 210, 7]);
        assert_eq!(r.iter().map(|q| q.arrival_ns).collect::<Vec<_>>(), [0, 0, 0, 9_000]);
        assert_eq!(r[1].follows, Some(FollowUp { request: 0, think_ns: 2_000_000_000 }));
        assert_eq!(r[2].follows, Some(FollowUp { request: 1, think_ns: 2_000_000_000 }));
        assert_eq!((r[0].follows, r[3].follows), (None, None));
        // One conversation's text per session, the whole prompt shared.
        assert_eq!(r[0].prefix.stream, r[2].prefix.stream);
        assert_ne!(r[0].prefix.stream, r[3].prefix.stream);
        assert!(r.iter().all(|q| q.prefix.tokens == q.input_tokens + q.output_tokens));
    }

    #[test]
    fn a_turn_that_would_not_fit_the_context_starts_a_new_conversation() {
        // 100 + 50 + 20 + 30 = 200 fits a context of 200; the third turn (200 + 30 + 10 + 5) does not.
        let s = sessions(3, 0.0, ThinkTime::Exponential, 200);
        let r = chain(&s, &[(100, 50), (20, 30), (10, 5)], &[0], None, 0);
        assert_eq!(r.iter().map(|q| q.input_tokens).collect::<Vec<_>>(), [100, 170, 10]);
        assert_eq!(r[0].prefix.stream, r[1].prefix.stream);
        assert_ne!(r[1].prefix.stream, r[2].prefix.stream);
        // Still the same session: it waits for the turn before it (no think time here).
        assert_eq!(r[2].follows, Some(FollowUp { request: 1, think_ns: 0 }));
    }

    #[test]
    fn exponential_think_times_have_the_mean_asked_for() {
        let s = sessions(1001, 3.0, ThinkTime::Exponential, u32::MAX);
        let r = chain(&s, &[(1, 1); 1001], &[0], None, 7);
        let mean_s = r.iter().filter_map(|q| q.follows).map(|f| f.think_ns as f64 * 1e-9).sum::<f64>() / 1000.0;
        assert!((mean_s - 3.0).abs() < 0.3, "mean think time {mean_s} s");
        assert_eq!(r, chain(&s, &[(1, 1); 1001], &[0], None, 7), "the same seed, the same times");
        assert_ne!(r, chain(&s, &[(1, 1); 1001], &[0], None, 8));
    }
}

//! Which prompts share text: each request's [`SharedPrefix`], for prefix caching
//! (`sched::prefix`). The simulator knows no token ids, so a shared text is a *stream*: prompts
//! that begin with the same stream's first tokens share those tokens' KV blocks.
//!
//! ```text
//!   system prompts  stream = SYSTEM | k     k drawn per request, uniform or Zipf (its own RNG stream)
//!   sonnet          stream = SONNET         its prefix_len lines, the same in every prompt
//!   random          stream = RANDOM_PREFIX  vLLM's prefix_len random tokens, drawn once per run
//!   chat sessions   stream = SESSION | c    conversation c: each turn's prompt extends the last
//!   trace files     stream = TRACE | id     the row's prefix_id, prefix_tokens columns
//! ```

use rand::RngExt;
use rand_distr::{Distribution, Zipf};

use super::rng::{Stream, stream};
use crate::scenario::{Dataset, PrefixLaw, SystemPrompts};

/// The first `tokens` tokens of a request's text (its prompt, then its output) are the first
/// `tokens` tokens of token stream `stream`; the rest are its own. `tokens == 0`: nothing
/// shared. Only a chat turn shares output: its answer is in the next turn's prompt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedPrefix {
    pub stream: u64,
    pub tokens: u32,
}

/// Stream ids by kind, in the top bits so that kinds never collide.
const SYSTEM: u64 = 1 << 48;
const SONNET: u64 = 2 << 48;
const RANDOM_PREFIX: u64 = 3 << 48;
const SESSION: u64 = 4 << 48;
const TRACE: u64 = 5 << 48;

/// The shared text a trace row names (its `prefix_id` is below 2⁴⁸, checked when read).
pub fn trace_prefix(prefix_id: u64, tokens: u32) -> SharedPrefix {
    SharedPrefix { stream: TRACE | prefix_id, tokens }
}

/// The text of chat conversation `conversation`, whose turns' prompts all begin with it.
pub fn conversation(conversation: u64, tokens: u32) -> SharedPrefix {
    SharedPrefix { stream: SESSION | conversation, tokens }
}

/// The prefix every prompt of `dataset` shares by construction, if any.
pub fn dataset_prefix(dataset: &Dataset) -> SharedPrefix {
    match *dataset {
        Dataset::Sonnet { prefix_len, .. } => SharedPrefix { stream: SONNET, tokens: prefix_len },
        Dataset::Random { prefix_len, .. } => SharedPrefix { stream: RANDOM_PREFIX, tokens: prefix_len },
        _ => SharedPrefix::default(),
    }
}

/// The system prompt of each of `num_prompts` requests, drawn from [`Stream::Prefixes`] (so
/// lengths and arrivals do not move), request `i` always taking the `i`-th draw.
pub fn draw_system_prompts(prompts: &SystemPrompts, num_prompts: u32, seed: u64) -> Vec<SharedPrefix> {
    let mut rng = stream(seed, Stream::Prefixes);
    let pick = |k: u64| SharedPrefix { stream: SYSTEM | k, tokens: prompts.tokens };
    match prompts.law {
        PrefixLaw::Uniform => (0..num_prompts).map(|_| pick(rng.random_range(0..u64::from(prompts.count)))).collect(),
        PrefixLaw::Zipf { exponent } => {
            // Zipf's law over ranks 1..=count: system prompt k − 1 is the k-th most popular.
            let zipf = Zipf::new(f64::from(prompts.count), exponent).expect("validated: count ≥ 1, exponent ≥ 0");
            (0..num_prompts).map(|_| pick(zipf.sample(&mut rng) as u64 - 1)).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_favours_the_first_prompts_and_uniform_does_not() {
        let count = |law| {
            let prompts = SystemPrompts { count: 4, tokens: 100, law };
            let mut n = [0u32; 4];
            for p in draw_system_prompts(&prompts, 4000, 1) {
                assert_eq!(p.tokens, 100);
                n[(p.stream - SYSTEM) as usize] += 1;
            }
            n
        };
        let zipf = count(PrefixLaw::Zipf { exponent: 1.5 });
        assert!(zipf[0] > 2 * zipf[1] && zipf[1] > zipf[3], "{zipf:?}");
        let uniform = count(PrefixLaw::Uniform);
        assert!(uniform.iter().all(|&c| (850..1150).contains(&c)), "{uniform:?}");
    }
}

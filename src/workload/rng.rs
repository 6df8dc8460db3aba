//! Random streams: one master seed, one independent ChaCha8 stream per purpose.
//!
//! ```text
//!   seed ──► ChaCha8 key ──┬── nonce 1: Arrivals       (inter-arrival gaps)
//!                          ├── nonce 2: InputLengths   (prompt lengths)
//!                          ├── nonce 3: OutputLengths  (generation lengths)
//!                          └── nonce 4: Routing        (router tie-breaks / random routing)
//! ```
//!
//! Every purpose gets the same key (expanded from the seed) but its own ChaCha stream id (nonce),
//! so the streams are distinct keystreams of one cipher: drawing more or fewer numbers from one
//! stream (say, a new output-length distribution that uses rejection sampling) never shifts the
//! numbers another stream produces. ChaCha's output is specified bit for bit, so the same seed
//! gives the same numbers on every machine.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

/// What a random stream is used for. Each purpose has its own stream.
///
/// The discriminants are the ChaCha stream ids and are part of the output format: results for a
/// given seed depend on them. Give a new purpose a new number; never renumber an existing one.
/// Stream id 0 is left unused so that a bare `ChaCha8Rng::seed_from_u64(seed)` elsewhere cannot
/// alias any of these streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum Stream {
    /// Inter-arrival gaps of the client's requests.
    Arrivals = 1,
    /// Prompt (input) lengths.
    InputLengths = 2,
    /// Generation (output) lengths.
    OutputLengths = 3,
    /// Random choices of the cluster router.
    Routing = 4,
    /// Which system prompt each request begins with (`workload::prefixes`).
    Prefixes = 5,
    /// Think times between the turns of a chat session (`workload::sessions`).
    Sessions = 6,
}

impl Stream {
    /// Every stream, in id order (for tests and diagnostics).
    pub const ALL: [Stream; 6] = [
        Stream::Arrivals,
        Stream::InputLengths,
        Stream::OutputLengths,
        Stream::Routing,
        Stream::Prefixes,
        Stream::Sessions,
    ];

    /// The ChaCha stream id (nonce) of this purpose.
    pub const fn id(self) -> u64 {
        self as u64
    }
}

/// The random stream for purpose `which` under master seed `seed`, positioned at its start.
///
/// Calling it twice with the same arguments gives two generators that produce the same numbers.
pub fn stream(seed: u64, which: Stream) -> ChaCha8Rng {
    // `seed_from_u64` expands the 64-bit seed into a 256-bit key with a PCG, so nearby seeds give
    // unrelated keys; `set_stream` then selects the purpose's keystream and rewinds it to word 0.
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(which.id());
    rng
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    fn first_words(seed: u64, which: Stream, n: usize) -> Vec<u64> {
        let mut rng = stream(seed, which);
        (0..n).map(|_| rng.random::<u64>()).collect()
    }

    #[test]
    fn same_seed_and_purpose_give_the_same_numbers() {
        for which in Stream::ALL {
            assert_eq!(first_words(42, which, 64), first_words(42, which, 64));
        }
    }

    #[test]
    fn purposes_and_seeds_give_different_numbers() {
        let mut all = Vec::new();
        for seed in [0, 1, 42] {
            for which in Stream::ALL {
                all.push(first_words(seed, which, 4));
            }
        }
        for i in 0..all.len() {
            for j in i + 1..all.len() {
                assert_ne!(all[i], all[j], "streams {i} and {j} coincide");
            }
        }
    }

    #[test]
    fn using_one_stream_does_not_perturb_another() {
        let arrivals_alone = first_words(7, Stream::Arrivals, 1000);
        // Interleave heavy use of the other streams with the arrival draws.
        let mut arrivals = stream(7, Stream::Arrivals);
        let mut outputs = stream(7, Stream::OutputLengths);
        let mut inputs = stream(7, Stream::InputLengths);
        let mut interleaved = Vec::new();
        for i in 0..1000 {
            for _ in 0..(i % 5) {
                let _: u64 = outputs.random();
                let _: f64 = inputs.random();
            }
            interleaved.push(arrivals.random::<u64>());
        }
        assert_eq!(arrivals_alone, interleaved);
    }

    #[test]
    fn stream_ids_are_distinct_and_nonzero() {
        for (i, a) in Stream::ALL.iter().enumerate() {
            assert_ne!(a.id(), 0);
            for b in &Stream::ALL[i + 1..] {
                assert_ne!(a.id(), b.id());
            }
        }
    }
}

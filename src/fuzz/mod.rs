//! Fuzzing on the stable toolchain. cargo-fuzz needs nightly, which these machines cannot
//! install, so this is a small mutation fuzzer of our own: each target (a parser, from its
//! public entry point: [`targets::all`]) starts from valid seeds, and every execution mutates a
//! corpus entry ([`mutate`]) and runs it, catching panics. There is no coverage feedback; as a
//! stand-in, a mutant the parser accepts joins the corpus, so later mutants start past the
//! first checks. Runs are deterministic for a seed and a number of executions.
//!
//! A panic is caught; an allocation that fails aborts the process, which is a crash too (the
//! campaign stops there, and the input is lost: rerun with the same seed to find it).
//!
//! `tests/fuzz.rs` runs every target briefly in CI and replays every crash found so far
//! (`tests/data/fuzz/<target>/`); `cargo run --release --example fuzz -- --minutes 60` is a
//! long campaign (docs/testing.md).

pub mod mutate;
pub mod targets;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::{Duration, Instant};

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

pub use targets::Target;

/// Most corpus entries kept per target: accepted mutants beyond it replace random ones.
const CORPUS_MAX: usize = 256;

/// An input that made a target panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    pub input: Vec<u8>,
    /// The panic's message.
    pub message: String,
}

/// What a campaign on one target did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Campaign {
    pub executions: u64,
    /// Corpus entries at the end: the seeds and the mutants the target accepted (at most
    /// 256).
    pub corpus: usize,
    /// Distinct crashes, by panic message less its numbers (the first input for each).
    pub crashes: Vec<Crash>,
}

/// When a campaign stops.
#[derive(Clone, Copy, Debug)]
pub enum Budget {
    Executions(u64),
    Time(Duration),
}

/// Runs `input` through `target`: whether the target accepted it, or the panic message.
pub fn run_one(target: &Target, input: &[u8], scratch: &Path) -> Result<bool, String> {
    catch_unwind(AssertUnwindSafe(|| (target.run)(input, scratch))).map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic with a non-text payload".into())
    })
}

/// Fuzzes `target` from `seed` until `budget` is spent. Panics are caught and collected
/// (the default panic hook still prints them: silence it with [`quiet_panics`]). `scratch` is a
/// directory of the target's own.
pub fn fuzz(target: &Target, seed: u64, budget: Budget, scratch: &Path) -> Campaign {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut corpus = (target.seeds)(scratch);
    let seeds = corpus.len();
    let mut campaign = Campaign::default();
    for input in corpus.clone() {
        campaign.executions += 1;
        if let Err(message) = run_one(target, &input, scratch) {
            record(&mut campaign, input, message);
        }
    }
    let started = Instant::now();
    loop {
        match budget {
            Budget::Executions(n) if campaign.executions >= n => break,
            // Checked every 64 executions: reading the clock costs more than a small parse.
            Budget::Time(limit) if campaign.executions % 64 == 0 && started.elapsed() >= limit => break,
            _ => {}
        }
        let input = &corpus[rng.random_range(0..corpus.len())];
        let other = &corpus[rng.random_range(0..corpus.len())];
        let mutant = mutate::mutate(input, other, &mut rng);
        campaign.executions += 1;
        match run_one(target, &mutant, scratch) {
            Err(message) => record(&mut campaign, mutant, message),
            // An accepted mutant is a valid input the seeds were not: mutating it reaches what
            // lies past the parser's first checks. Beyond the cap, it replaces a random mutant.
            Ok(true) if corpus.len() < CORPUS_MAX => corpus.push(mutant),
            Ok(true) => {
                let i = rng.random_range(seeds..CORPUS_MAX);
                corpus[i] = mutant;
            }
            Ok(false) => {}
        }
    }
    campaign.corpus = corpus.len();
    campaign
}

/// Keeps the first input of each kind of crash: messages that differ only in numbers (a line,
/// a column, a value) are one kind.
fn record(campaign: &mut Campaign, input: Vec<u8>, message: String) {
    let kind = |m: &str| m.chars().filter(|c| !c.is_ascii_digit()).collect::<String>();
    if !campaign.crashes.iter().any(|c| kind(&c.message) == kind(&message)) {
        campaign.crashes.push(Crash { input, message });
    }
}

/// Replaces the panic hook with a silent one for the duration of `f` (a fuzzer's panics are
/// collected, not printed), then restores it.
pub fn quiet_panics<T>(f: impl FnOnce() -> T) -> T {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = f();
    std::panic::set_hook(previous);
    result
}

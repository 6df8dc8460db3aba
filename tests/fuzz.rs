//! Every fuzz target (`servesim::fuzz`) for a fixed number of executions from a fixed seed, so a
//! run is the same on every machine; and every crash found so far, replayed from
//! `tests/data/fuzz/<target>/`. A long campaign: `cargo run --release --example fuzz`.

mod common;
use common::*;

use servesim::fuzz::{self, Budget};

/// Executions per target in CI: a few seconds for the slowest target in a debug build.
const EXECUTIONS: u64 = 3000;

/// Targets whose every execution writes and reads a file and resolves a plan or a parquet footer
/// (about 4 ms each in a debug build): fewer executions keep each to a few seconds too.
const EXECUTIONS_SLOW: [(&str, u64); 3] = [("parquet", 1000), ("plan-merge", 1000), ("plan-resume", 1000)];

#[test]
fn every_target_survives_a_short_campaign() {
    let mut failures = Vec::new();
    for target in fuzz::targets::all() {
        let scratch = tempfile::tempdir().unwrap();
        let executions = EXECUTIONS_SLOW.iter().find(|(name, _)| *name == target.name).map_or(EXECUTIONS, |&(_, n)| n);
        let campaign = fuzz::quiet_panics(|| fuzz::fuzz(&target, 1, Budget::Executions(executions), scratch.path()));
        println!("{}: {} executions, corpus {}, {} crashes", target.name, campaign.executions, campaign.corpus, campaign.crashes.len());
        assert!(campaign.executions >= executions);
        for crash in campaign.crashes {
            failures.push(format!("{}: {}\n  input: {:?}", target.name, crash.message, String::from_utf8_lossy(&crash.input)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn crashes_found_before_stay_fixed() {
    let dir = repo().join("tests/data/fuzz");
    let mut replayed = 0;
    for target in fuzz::targets::all() {
        let Ok(entries) = std::fs::read_dir(dir.join(target.name)) else { continue };
        let scratch = tempfile::tempdir().unwrap();
        for entry in entries {
            let path = entry.unwrap().path();
            let input = std::fs::read(&path).unwrap();
            let panic = fuzz::quiet_panics(|| fuzz::run_one(&target, &input, scratch.path()));
            assert!(panic.is_ok(), "{} panics again: {panic:?}", path.display());
            replayed += 1;
        }
    }
    println!("replayed {replayed} crash inputs");
}

/// The harness finds a crash when there is one: a target that panics on a digit.
#[test]
fn the_fuzzer_finds_a_planted_crash() {
    fn seeds(_: &std::path::Path) -> Vec<Vec<u8>> {
        vec![b"abc".to_vec()]
    }
    fn run(input: &[u8], _: &std::path::Path) -> bool {
        assert!(!input.iter().any(u8::is_ascii_digit), "a digit");
        true
    }
    let target = fuzz::Target { name: "planted", seeds, run };
    let campaign = fuzz::quiet_panics(|| fuzz::fuzz(&target, 1, Budget::Executions(200), std::path::Path::new(".")));
    assert_eq!(campaign.crashes.len(), 1, "{campaign:?}");
    assert!(campaign.crashes[0].message.contains("a digit"));
}

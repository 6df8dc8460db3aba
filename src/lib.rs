//! servesim: a deterministic discrete-event simulator of LLM serving deployments.
//!
//! ```text
//!  scenario.toml ──► Scenario (validated) ──► Workload (requests + arrival times)
//!                                               │
//!                    sim: virtual clock, event queue, Cluster { Router, Replica { Scheduler, KvCacheManager } }
//!                    step time = CostModel::predict(batch)
//!                                               │
//!                                  per-request records ──► metrics (vLLM definitions) ──► report
//! ```
//!
//! Dependencies point downward: `sched` knows nothing of `sim` or time sources, `cost` knows only
//! the shape of a batch, `metrics` knows nothing of where records came from.

pub mod bench;
pub mod calibrate;
pub mod cli;
pub mod error;
pub mod fit;
pub mod fuzz;
pub mod cost;
pub mod engine;
pub mod metrics;
pub mod panic_guard;
pub mod plan;
pub mod report;
pub mod rounding;
pub mod run;
pub mod scenario;
pub mod sched;
pub mod sim;
pub mod timeline;
pub mod validate;
pub mod workload;

pub use error::Error;

#[cfg(test)]
mod import_circles {
    /// docs/design.md's rule, no import circles between files or modules, checked by its script
    /// so that a new circle fails the tests instead of waiting for someone to run it.
    #[test]
    fn there_are_no_import_circles() {
        let run = std::process::Command::new("python3")
            .arg("scripts/import_cycles.py")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output();
        let output = match run {
            Ok(output) => output,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                println!("skipped: no python3 to run scripts/import_cycles.py ({e})");
                return;
            }
            Err(e) => panic!("python3 scripts/import_cycles.py: {e}"),
        };
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.lines().any(|line| line == "0 import circle(s)"),
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

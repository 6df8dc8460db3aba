//! The command line: clap definitions (raw arguments) → validated configuration → library call.
//!
//! ```text
//!   main.rs ── Cli::parse ──► run ──► one module per subcommand:
//!                                       <Sub>Args (clap) ──check──► config ──► library call
//!                                     flags.rs, progress.rs, knobs.rs: what several share
//!   main.rs ◄── Error (src/error.rs: Error::exit_code, the one error → exit-code mapping)
//! ```
//!
//! Following ripgrep's split, nothing here simulates anything: each subcommand turns its flags
//! into a configuration whose every field is valid (for `simulate`, a [`SimulateConfig`]) and
//! hands that to the library. Errors are returned, never printed here: `main` reports each once.

mod bench;
mod calibrate;
mod fit;
mod flags;
mod knobs;
mod plan;
mod progress;
mod report;
mod serve;
mod simulate;
mod validate;
mod validate_engine;

use clap::{Parser, Subcommand};

use crate::Error;

pub use bench::BenchArgs;
pub use calibrate::CalibrateArgs;
pub use fit::FitArgs;
pub use knobs::EngineKnobsArgs;
pub use plan::PlanArgs;
pub use report::ReportArgs;
pub use serve::ServeArgs;
pub use simulate::{SimulateArgs, SimulateConfig};
pub use validate::ValidateArgs;
pub use validate_engine::EngineValidationArgs;

#[derive(Debug, Parser)]
#[command(name = "servesim", version, about = "Deterministic discrete-event simulation of LLM serving")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate a scenario and print vLLM `benchmark_serving`-style results for each sweep point.
    Simulate(SimulateArgs),
    /// Compare scenarios with the recorded benchmark runs they name in `[validation]`.
    Validate(ValidateArgs),
    /// Fit named cost-model parameters to recorded runs and write a profile.
    Fit(FitArgs),
    /// Time real GEMM and attention kernels (CPU, or CUDA through cudarc) into a profile.
    Calibrate(CalibrateArgs),
    /// Measure a running OpenAI- or TGI-compatible server, as vLLM's benchmark_serving.py does.
    Bench(BenchArgs),
    /// Serve a real transformer (CPU) behind OpenAI and TGI HTTP APIs, batched by the simulator's
    /// own scheduler.
    Serve(ServeArgs),
    /// Draw charts (PNG, SVG) and a self-contained index.html from `simulate --out` directories.
    Report(ReportArgs),
    /// Find the cheapest deployment that meets latency objectives at a load (capacity planning).
    Plan(PlanArgs),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Simulate(args) => simulate::run(args.validate()?),
        Command::Validate(args) => validate::run(args),
        Command::Fit(args) => fit::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Report(args) => report::run(args),
        Command::Plan(args) => plan::run(args),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every flag and argument of every subcommand, with its subcommand's path.
    fn every_arg(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
        for arg in cmd.get_arguments() {
            out.push((path.to_string(), arg.clone()));
        }
        for sub in cmd.get_subcommands() {
            every_arg(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_flag_has_a_description() {
        let mut args = Vec::new();
        every_arg(&super::Cli::command(), "servesim", &mut args);
        let blank: Vec<String> = args
            .iter()
            .filter(|(_, a)| !matches!(a.get_id().as_str(), "help" | "version"))
            .filter(|(_, a)| a.get_help().is_none_or(|h| h.to_string().trim().is_empty()))
            .map(|(path, a)| format!("{path} {}", a.get_long().map_or_else(|| a.get_id().to_string(), |l| format!("--{l}"))))
            .collect();
        assert!(blank.is_empty(), "flags with no description in --help:\n{}", blank.join("\n"));
    }
}

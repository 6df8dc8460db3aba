//! servesim's entry point: parse, run, and report an error once with its exit code.

use std::process::ExitCode;

use clap::Parser;

/// Large allocations (weights, KV caches, calibration operands) on transparent huge pages.
#[global_allocator]
static ALLOCATOR: servesim::engine::cpu::HugePageAlloc = servesim::engine::cpu::HugePageAlloc;

fn main() -> ExitCode {
    let cli = servesim::cli::Cli::parse();
    match servesim::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

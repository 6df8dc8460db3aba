//! `servesim fit`: named cost-model parameters fitted to recorded runs, written as a profile.

use std::path::PathBuf;

use clap::Args;

use super::flags::comma_list;
use crate::Error;
use crate::scenario::Scenario;

#[derive(Debug, Args)]
pub struct FitArgs {
    /// Scenario files with `[validation]`; their `fit_blocks` are what is fitted.
    #[arg(required = true)]
    pub scenarios: Vec<PathBuf>,
    /// Comma-separated cost parameters to fit (the rest keep each scenario's values).
    #[arg(long, value_name = "LIST")]
    pub params: String,
    /// Comma-separated vLLM metric keys whose relative error is minimised.
    #[arg(long, default_value = "output_throughput,mean_tpot_ms,mean_ttft_ms", value_name = "LIST")]
    pub metrics: String,
    /// Most objective evaluations per starting point (the fit searches from 5; each evaluation
    /// simulates every fitted point once).
    #[arg(long, default_value_t = 3000)]
    pub max_evals: usize,
    /// Where to write the profile (TOML with provenance).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Override a scenario field in every scenario (repeatable).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
}

pub(super) fn run(args: FitArgs) -> Result<(), Error> {
    let mut targets = Vec::new();
    for path in &args.scenarios {
        let scenario = Scenario::load(path, &args.set)?;
        let plan = crate::validate::Plan::for_scenario(&scenario, None)?;
        targets.push(crate::fit::FitTarget { scenario, plan });
    }
    let config = crate::fit::FitConfig {
        targets,
        params: comma_list(&args.params),
        metrics: comma_list(&args.metrics),
        max_evaluations: args.max_evals,
    };
    let result = crate::fit::fit(&config)?;
    // The command line, minus the binary's path, regenerates the profile.
    let command_line = std::iter::once("servesim".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
    let base = config.targets[0].scenario.cost.clone();
    let text = crate::fit::profile_toml(&result, &config, &base, &command_line);
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| Error::Output { path: dir.to_path_buf(), source })?;
    }
    std::fs::write(&args.out, text).map_err(|source| Error::Output { path: args.out.clone(), source })?;
    eprintln!(
        "objective {:.6} → {:.6} in {} evaluations; wrote {}",
        result.start_objective,
        result.objective,
        result.evaluations,
        args.out.display()
    );
    for (name, value) in &result.values {
        eprintln!("  {name} = {value}");
    }
    Ok(())
}

//! `servesim validate`: scenarios against the recorded runs they name (or, with `--engine`,
//! against servesim's own engine: [`super::validate_engine`]).

use std::path::PathBuf;

use clap::Args;

use super::validate_engine::{self, EngineValidationArgs};
use crate::Error;
use crate::scenario::Scenario;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Scenario files; each names its recorded file and blocks in `[validation]`.
    #[arg(required_unless_present = "engine")]
    pub scenarios: Vec<PathBuf>,
    /// Compare with this recorded file instead (its blocks in order, one per sweep point).
    #[arg(long, value_name = "FILE")]
    pub recorded: Option<PathBuf>,
    /// Also write each comparison to DIR/<scenario>.txt and a summary to DIR/README.md.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Override a scenario field in every scenario (repeatable).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    #[command(flatten)]
    pub engine: EngineValidationArgs,
}

pub(super) fn run(args: ValidateArgs) -> Result<(), Error> {
    if let Some(dir) = &args.out {
        super::flags::output_dir("--out", dir)?;
    }
    if args.engine.enabled {
        return validate_engine::run(args.engine, args.out.as_deref());
    }
    let mut rendered = Vec::new();
    for path in &args.scenarios {
        let scenario = Scenario::load(path, &args.set)?;
        let plan = crate::validate::Plan::for_scenario(&scenario, args.recorded.as_deref())?;
        if scenario.validation.is_none() {
            let missing: Vec<&str> =
                crate::scenario::DEFAULT_VALIDATION_METRICS.into_iter().filter(|m| !plan.metrics.iter().any(|k| k == m)).collect();
            if !missing.is_empty() {
                eprintln!("note: {} has no {}: not compared", plan.recorded.display(), missing.join(", "));
            }
        }
        let validation = crate::validate::validate(&scenario, &plan)?;
        let text = crate::validate::render(&validation);
        print!("{text}");
        println!();
        rendered.push((path.clone(), validation, text));
    }
    if let Some(dir) = &args.out {
        let io_err = |path: PathBuf| move |source| Error::Output { path, source };
        std::fs::create_dir_all(dir).map_err(io_err(dir.clone()))?;
        for (path, _, text) in &rendered {
            let stem = path.file_stem().map_or("scenario".into(), |s| s.to_string_lossy().into_owned());
            let file = dir.join(format!("{stem}.txt"));
            std::fs::write(&file, text).map_err(io_err(file.clone()))?;
        }
        let summary = crate::validate::summary_markdown(rendered.iter().map(|(p, v, _)| (p.as_path(), v)));
        let file = dir.join("README.md");
        std::fs::write(&file, summary).map_err(io_err(file.clone()))?;
        eprintln!("wrote {}", dir.display());
    }
    Ok(())
}

//! `servesim report`: charts and an HTML page from `simulate --out` directories.

use std::path::PathBuf;

use clap::Args;

use crate::Error;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Directories written by `simulate --out` (summary.json, requests.csv, timeline.csv,
    /// itl.csv); each is one series on the sweep charts.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// Directory for the charts and index.html (created).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Recorded results (vLLM text blocks or JSON) to overlay; its blocks are matched in order
    /// to the sweep points of the run directories in order.
    #[arg(long, value_name = "FILE")]
    pub recorded: Option<PathBuf>,
}

pub(super) fn run(args: ReportArgs) -> Result<(), Error> {
    super::flags::output_dir("--out", &args.out)?;
    let config = crate::report::ReportConfig { runs: args.runs, out: args.out, recorded: args.recorded };
    let written = crate::report::generate(&config)?;
    eprintln!("wrote {} files to {} (open index.html)", written.len(), config.out.display());
    Ok(())
}

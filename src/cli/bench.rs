//! `servesim bench`: a load client for any OpenAI-, TGI- or SGLang-compatible server, with vLLM
//! `benchmark_serving.py`'s flags and report, or SGLang `bench_serving`'s for its backends.

use std::path::PathBuf;

use clap::Args;

use super::flags::{self, ReportFormat, usage};
use super::progress;
use crate::Error;
use crate::bench::{Backend, BenchConfig};
use crate::engine::server::Tokenizer;
use crate::metrics::format::{ReportOptions, write_report};
use crate::metrics::sglang::{self, SglangReport};
use crate::scenario::trace::read_trace;
use crate::scenario::{Dataset, LengthDist, WorkloadConfig};

/// `servesim bench`, with vLLM benchmark_serving.py's flag names.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// `openai` (also `vllm`) or `tgi`, measured as vLLM's client does; `sglang` (also
    /// `sglang-native`: SGLang's native /generate) or `sglang-oai` (OpenAI completions),
    /// measured as SGLang 0.4.9's client does.
    #[arg(long, default_value = "openai")]
    pub backend: String,
    /// The server's scheme, host and port; `--endpoint` is appended to it.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub base_url: String,
    /// Default: /v1/completions (openai, sglang-oai), /generate_stream (tgi) or /generate
    /// (sglang).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// The `model` field sent to OpenAI servers.
    #[arg(long, default_value = "servesim")]
    pub model: String,
    /// A Hugging Face tokenizer directory (its `tokenizer.json`) or file: prompts become text
    /// decoded from ids below its vocab_size (vLLM's random dataset), counted with it, and output
    /// text is counted with it when the server reports no usage (TGI).
    #[arg(long, value_name = "DIR")]
    pub tokenizer: Option<PathBuf>,
    /// `random`, `fixed` (every request exactly `--random-input-len` in and
    /// `--random-output-len` out), `sonnet` (fixed input length, `--sonnet-output-len` tokens
    /// out), `sharegpt` (`--dataset-path` a ShareGPT JSON file, counted with `--tokenizer`) or
    /// `trace` (`--dataset-path` a CSV).
    #[arg(long, default_value = "random")]
    pub dataset_name: String,
    /// `random` and `fixed`: prompt tokens of each request (after any `--random-prefix-len`).
    #[arg(long, default_value_t = 1024)]
    pub random_input_len: u32,
    /// `random` and `fixed`: output tokens each request asks for (`max_tokens`).
    #[arg(long, default_value_t = 128)]
    pub random_output_len: u32,
    /// `random`: lengths are drawn uniformly from [len·(1 − r), len·(1 + r)] for input and
    /// output alike (0: every request exactly the length); in [0, 1).
    #[arg(long, default_value_t = 0.0)]
    pub random_range_ratio: f64,
    /// `random`: tokens of one shared prefix put before every prompt (for prefix caching).
    #[arg(long, default_value_t = 0)]
    pub random_prefix_len: u32,
    /// `sonnet`: prompt tokens of each request, the shared prefix included.
    #[arg(long, default_value_t = 550)]
    pub sonnet_input_len: u32,
    /// `sonnet`: tokens of the prompt that every request shares.
    #[arg(long, default_value_t = 200)]
    pub sonnet_prefix_len: u32,
    /// `sonnet`: output tokens each request asks for.
    #[arg(long, default_value_t = 150)]
    pub sonnet_output_len: u32,
    /// CSV of `arrival_s,input_tokens,output_tokens` for `--dataset-name trace`.
    #[arg(long)]
    pub dataset_path: Option<PathBuf>,
    /// A number, or a comma list for a sweep (one report block per value).
    #[arg(long, default_value = "1000")]
    pub num_prompts: String,
    /// Requests per second, or `inf` (all at once).
    #[arg(long, default_value = "inf")]
    pub request_rate: String,
    /// Shape of the gamma distribution of gaps between requests at a finite rate: 1 is a
    /// Poisson process, below 1 burstier, above 1 more even (vLLM's `--burstiness`).
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    /// Most requests in flight at once; a request waits for a slot before it is sent (default:
    /// no limit).
    #[arg(long)]
    pub max_concurrency: Option<u32>,
    /// Ask the server to generate every requested token, past an end-of-sequence token
    /// (OpenAI `ignore_eos`), so output lengths are exact. TGI's API has no such parameter:
    /// start that server with its own `--ignore-eos` (bench says so when both are given).
    /// SGLang's backends ask it unless `--disable-ignore-eos`.
    #[arg(long)]
    pub ignore_eos: bool,
    /// SGLang's backends: do not ask the server to ignore end-of-sequence tokens (SGLang's
    /// client asks it by default).
    #[arg(long)]
    pub disable_ignore_eos: bool,
    /// Requests sent, all at once, before each sweep point's run (the first request, at most 32
    /// tokens), followed by a 1 s pause; the run stops if every one fails. Default: 1 for
    /// SGLang's backends (its client's warm-up), 0 for the others.
    #[arg(long, value_name = "N")]
    pub warmup_requests: Option<u32>,
    /// `vllm` (vLLM benchmark_serving's block, its version by `--report-layout`) or `sglang`
    /// (SGLang 0.4.9 bench_serving's). Default: `sglang` for SGLang's backends, else `vllm`.
    #[arg(long, value_name = "FORMAT")]
    pub report_format: Option<String>,
    /// Append SGLang bench_serving's JSONL record of each sweep point to this file (its
    /// `--output-file`; with `--report-format sglang`).
    #[arg(long, value_name = "FILE")]
    pub output_file: Option<PathBuf>,
    /// With `--output-file`: each record also holds the per-request lists (input_lens,
    /// output_lens, ttfts, itls, generated_texts, errors), as SGLang's `--output-details`.
    #[arg(long)]
    pub output_details: bool,
    /// Seed of the prompts' token ids, the lengths drawn and the arrival times.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The report's layout: `current` (newer vLLM's) or `legacy` (vLLM 0.6.x's).
    #[arg(long, default_value = "current")]
    pub report_layout: String,
    /// Comma-separated percentiles reported for each metric of `--percentile-metrics`, each
    /// strictly between 0 and 100.
    #[arg(long, default_value = "99")]
    pub metric_percentiles: String,
    /// Comma-separated metrics whose percentiles are reported: ttft, tpot, itl, e2el.
    #[arg(long, default_value = "ttft,tpot,itl")]
    pub percentile_metrics: String,
    /// Save each sweep point's results as vLLM --save-result JSON into `--result-dir`.
    #[arg(long)]
    pub save_result: bool,
    /// Where `--save-result` writes its JSON files (created if missing).
    #[arg(long, default_value = ".")]
    pub result_dir: PathBuf,
}

pub(super) fn run(args: BenchArgs) -> Result<(), Error> {
    let backend = Backend::parse(&args.backend)
        .ok_or_else(|| usage("--backend", &args.backend, "expected openai (or vllm), tgi, sglang (or sglang-native) or sglang-oai"))?;
    let layout = flags::report_layout(&args.report_layout)?;
    let format = match &args.report_format {
        Some(text) => flags::report_format(text)?,
        None if backend.is_sglang() => ReportFormat::Sglang,
        None => ReportFormat::Vllm,
    };
    if args.disable_ignore_eos && !backend.is_sglang() {
        return Err(usage("--disable-ignore-eos", &args.backend, "only SGLang's backends ask the server to ignore EOS unasked; leave out --ignore-eos instead"));
    }
    if args.disable_ignore_eos && args.ignore_eos {
        return Err(usage("--disable-ignore-eos", "--ignore-eos", "give one or the other"));
    }
    let ignore_eos = if backend.is_sglang() { !args.disable_ignore_eos } else { args.ignore_eos };
    if let Some(file) = &args.output_file {
        if format != ReportFormat::Sglang {
            return Err(usage("--output-file", file.display(), "writes SGLang's record: use --report-format sglang (or --save-result for vLLM's JSON)"));
        }
        flags::output_file("--output-file", file)?;
    }
    if args.output_details && args.output_file.is_none() {
        return Err(usage("--output-details", "", "adds to the records of --output-file, which is not given"));
    }
    let mut percentiles = flags::percentiles(&args.metric_percentiles)?;
    let mut percentile_metrics = flags::percentile_metrics(&args.percentile_metrics)?;
    if format == ReportFormat::Sglang {
        (percentiles, percentile_metrics) = flags::with_sglang_needs(percentiles, percentile_metrics);
    }
    let num_prompts = flags::positive_integers("--num-prompts", &args.num_prompts)?;
    let request_rate = match args.request_rate.trim() {
        "inf" => f64::INFINITY,
        text => text.parse::<f64>().ok().filter(|r| *r > 0.0).ok_or_else(|| {
            usage("--request-rate", &args.request_rate, "expected a positive number of requests per second, or inf")
        })?,
    };
    if !(args.burstiness > 0.0 && args.burstiness.is_finite()) {
        return Err(usage("--burstiness", args.burstiness, "must be a positive gamma shape"));
    }
    // What the simulator refuses in a scenario, refused here too, naming the flag.
    if let Some(&n) = num_prompts.iter().find(|&&n| n > crate::scenario::NUM_PROMPTS_MAX) {
        return Err(usage("--num-prompts", n, format!("at most {} per sweep point", crate::scenario::NUM_PROMPTS_MAX)));
    }
    if args.ignore_eos && backend == Backend::Tgi {
        eprintln!("note: --ignore-eos is not sent to a TGI server (its API has no such parameter); start the server with --ignore-eos for exact output lengths");
    }
    if args.max_concurrency == Some(0) {
        return Err(usage("--max-concurrency", 0, "must be at least 1 (leave it out for no limit)"));
    }
    for (flag, value) in [
        ("--random-input-len", args.random_input_len),
        ("--random-output-len", args.random_output_len),
        ("--sonnet-input-len", args.sonnet_input_len),
        ("--sonnet-output-len", args.sonnet_output_len),
    ] {
        if value == 0 {
            return Err(usage(flag, 0, "must be at least 1 token"));
        }
    }
    // Where results go is checked before any request is sent, not after the run.
    if args.save_result {
        std::fs::create_dir_all(&args.result_dir).map_err(|source| Error::Output { path: args.result_dir.clone(), source })?;
    }
    if !(0.0..1.0).contains(&args.random_range_ratio) {
        return Err(usage("--random-range-ratio", args.random_range_ratio, "must be in [0, 1)"));
    }
    let dataset = match args.dataset_name.as_str() {
        "random" => Dataset::Random {
            input_len: args.random_input_len,
            output_len: args.random_output_len,
            range_ratio: args.random_range_ratio,
            prefix_len: args.random_prefix_len,
        },
        "sonnet" => Dataset::Sonnet {
            input_len: args.sonnet_input_len,
            prefix_len: args.sonnet_prefix_len,
            output: LengthDist::Fixed { value: args.sonnet_output_len },
        },
        "trace" => {
            let path = args.dataset_path.clone().ok_or_else(|| usage("--dataset-path", "", "needed with --dataset-name trace"))?;
            let rows = read_trace(&path).map_err(|e| usage("--dataset-path", path.display(), e.to_string()))?;
            if let Some(&n) = num_prompts.iter().find(|&&n| n as usize > rows.len()) {
                return Err(usage("--num-prompts", n, "more prompts than the trace has rows"));
            }
            Dataset::Trace { path, rows }
        }
        // The simulator's name for every request at the random dataset's lengths, exactly.
        "fixed" => Dataset::Fixed { input_len: args.random_input_len, output_len: args.random_output_len },
        // Lengths come from the file (below); the dataset only sets the arrival process's seed.
        "sharegpt" => Dataset::Fixed { input_len: 1, output_len: 1 },
        other => return Err(usage("--dataset-name", other, "expected random, sonnet, sharegpt, fixed or trace")),
    };
    let workload = WorkloadConfig {
        request_rate: vec![request_rate; num_prompts.len()],
        num_prompts: num_prompts.clone(),
        burstiness: args.burstiness,
        max_concurrency: args.max_concurrency,
        dataset,
        seed: args.seed,
        input_tokens_total: None,
        output_tokens_total: None,
        system_prompts: None,
        sessions: None,
    };
    let report = ReportOptions { layout, percentile_metrics, percentiles, max_concurrency: args.max_concurrency, request_rate };
    if backend.is_sglang() && args.tokenizer.is_none() {
        eprintln!("note: without --tokenizer the retokenized output count is the server's count (SGLang's client re-encodes the text with its tokenizer)");
    }
    let tokenizer = match &args.tokenizer {
        Some(path) => Some(std::sync::Arc::new(
            Tokenizer::load(path).map_err(|e| usage("--tokenizer", path.display(), e.to_string()))?,
        )),
        None => None,
    };
    // ShareGPT: vLLM's sampling of a conversation file, counted with --tokenizer.
    let sharegpt = if args.dataset_name == "sharegpt" {
        let path = args.dataset_path.clone().ok_or_else(|| usage("--dataset-path", "", "needed with --dataset-name sharegpt (a ShareGPT JSON file)"))?;
        let tokenizer = tokenizer.clone().ok_or_else(|| {
            usage("--tokenizer", "", "needed with --dataset-name sharegpt: ShareGPT conversations are text, counted in the server's tokens")
        })?;
        let most = num_prompts.iter().copied().max().unwrap_or(0) as usize;
        let count = |text: &str| tokenizer.encode(text, true).map(|ids| ids.len());
        Some(
            crate::workload::sharegpt::sample_lengths(&path, most, args.seed, count)
                .map_err(|e| usage("--dataset-path", path.display(), e))?,
        )
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Output { path: "<tokio runtime>".into(), source })?;
    // Sweep points where no request succeeded: the run goes on (a later point may), and the
    // exit status says so.
    let mut failed_points = Vec::new();
    for (i, &n) in num_prompts.iter().enumerate() {
        let mut requests = crate::workload::generate(&workload, n);
        if let Some(lengths) = &sharegpt {
            // vLLM sends each completion's length as max_tokens.
            for (r, &(input, output)) in requests.iter_mut().zip(lengths) {
                (r.input_tokens, r.output_tokens, r.max_tokens) = (input, output, output);
            }
        }
        let mut config = BenchConfig::new(backend, args.base_url.clone(), args.model.clone(), requests);
        if let Some(endpoint) = &args.endpoint {
            config.endpoint = endpoint.clone();
        }
        config.max_concurrency = args.max_concurrency;
        config.ignore_eos = ignore_eos;
        config.tokenizer = tokenizer.clone();
        config.warmup_requests = args.warmup_requests.unwrap_or(if backend.is_sglang() { 1 } else { 0 });
        let bar = progress::requests(config.requests.len());
        let tick = bar.clone();
        let run = runtime
            .block_on(crate::bench::run_with_progress(&config, std::sync::Arc::new(move |_| tick.inc(1))))
            .map_err(|e| match e {
                crate::bench::BenchError::InvalidUrl { .. } | crate::bench::BenchError::Client(_) => {
                    usage("--base-url", &args.base_url, e.to_string())
                }
                other => Error::Bench(other.to_string()),
            });
        bar.finish_and_clear();
        let run = run?;
        let summary = crate::metrics::Summary::from_records(&run.records, &report.percentiles);
        let mut text = String::new();
        if i > 0 {
            text.push('\n');
        }
        text.push_str(&format!("num_prompts: {n}\n"));
        let as_sglang = (format == ReportFormat::Sglang).then(|| sglang_report(&args, &workload, &run, tokenizer.is_some()));
        match &as_sglang {
            None => write_report(&mut text, &summary, &report).expect("writing to a String"),
            Some(r) => sglang::write_block(&mut text, &summary, r).expect("writing to a String"),
        }
        print!("{text}");
        if let (Some(file), Some(r)) = (&args.output_file, &as_sglang) {
            append_record(file, &summary, r, args.output_details.then_some(&run))?;
        }
        if let Some(first) = run.details.iter().find_map(|d| d.error.as_deref()) {
            eprintln!("{} request(s) failed; the first: {first}", run.failed());
        }
        if run.failed() == run.records.requests.len() {
            failed_points.push(n);
        }
        if args.save_result {
            let mut json = crate::metrics::format::to_json(&summary, &report);
            let obj = json.as_object_mut().expect("to_json returns an object");
            let records = &run.records.requests;
            obj.insert("backend".into(), serde_json::json!(args.backend));
            obj.insert("model_id".into(), serde_json::json!(args.model));
            obj.insert("num_prompts".into(), serde_json::json!(n));
            // The load, as vLLM saves it (a burst's rate as "inf"), so `servesim fit --results`
            // knows what each file ran at.
            let rate = if request_rate.is_finite() { serde_json::json!(request_rate) } else { serde_json::json!("inf") };
            obj.insert("request_rate".into(), rate);
            obj.insert("burstiness".into(), serde_json::json!(args.burstiness));
            obj.insert("max_concurrency".into(), serde_json::json!(args.max_concurrency));
            crate::metrics::format::insert_request_arrays(obj, records);
            obj.insert(
                "itls".into(),
                serde_json::json!(run.details.iter().map(|d| d.itl_ns.iter().map(|&g| g as f64 / 1e9).collect::<Vec<_>>()).collect::<Vec<_>>()),
            );
            obj.insert("errors".into(), serde_json::json!(run.details.iter().map(|d| d.error.clone().unwrap_or_default()).collect::<Vec<_>>()));
            let path = args.result_dir.join(format!("bench-{}-{n}.json", args.backend));
            std::fs::create_dir_all(&args.result_dir).map_err(|source| Error::Output { path: args.result_dir.clone(), source })?;
            std::fs::write(&path, serde_json::to_string_pretty(&json).expect("plain JSON"))
                .map_err(|source| Error::Output { path: path.clone(), source })?;
            // Per request, in the columns of `simulate --out`'s requests.csv, plus the error.
            let csv = path.with_extension("csv");
            let rows = run.records.requests.iter().zip(&run.details).enumerate().map(|(request_id, (record, detail))| {
                crate::run::output::RequestRow {
                    key: crate::run::output::PointKey { point: i as u32 + 1, num_prompts: n },
                    request_id,
                    record,
                    replica: None,
                    preemptions: None,
                    error: detail.error.as_deref(),
                }
            });
            crate::run::output::write_requests_file(&csv, rows)?;
            eprintln!("wrote {} and {}", path.display(), csv.display());
        }
    }
    if !failed_points.is_empty() {
        return Err(Error::NothingSucceeded(format!(
            "no request succeeded at num_prompts {}",
            failed_points.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(())
}

/// SGLang's report of one sweep point: the backend as named, the dataset's arguments, the
/// server's accept length, and the retokenized count where a tokenizer made one.
fn sglang_report(args: &BenchArgs, workload: &WorkloadConfig, run: &crate::bench::BenchRun, retokenized: bool) -> SglangReport {
    let mut report = SglangReport {
        backend: args.backend.clone(),
        request_rate: workload.request_rate.first().copied().unwrap_or(f64::INFINITY),
        max_concurrency: args.max_concurrency,
        accept_length: run.accept_length,
        output_tokens_retokenized: retokenized
            .then(|| run.details.iter().map(|d| u64::from(d.output_tokens_retokenized.unwrap_or(0))).sum()),
        ..SglangReport::default()
    };
    super::simulate::sglang_dataset(&workload.dataset, &mut report);
    if args.dataset_name == "sharegpt" {
        report.dataset_name = "sharegpt".into();
        (report.random_input_len, report.random_output_len, report.random_range_ratio) = (1024, 1024, 0.0);
    }
    report
}

/// Appends one record to SGLang's `--output-file`, with the per-request lists when `details`
/// (SGLang's `--output-details`): seconds, 0 for the TTFT of a request without one.
fn append_record(file: &std::path::Path, summary: &crate::metrics::Summary, report: &SglangReport, details: Option<&crate::bench::BenchRun>) -> Result<(), Error> {
    use sglang::PyJson;
    let mut fields = sglang::record_fields(summary, report);
    if let Some(run) = details {
        let requests = &run.records.requests;
        let seconds = |ns: u64| PyJson::Float(ns as f64 / 1e9);
        fields.push(("input_lens", PyJson::List(requests.iter().map(|r| PyJson::Int(u64::from(r.input_tokens))).collect())));
        fields.push(("output_lens", PyJson::List(requests.iter().map(|r| PyJson::Int(u64::from(r.output_tokens))).collect())));
        fields.push(("ttfts", PyJson::List(requests.iter().map(|r| seconds(if r.success { r.ttft_ns() } else { 0 })).collect())));
        fields.push(("itls", PyJson::List(run.details.iter().map(|d| PyJson::List(d.itl_ns.iter().map(|&g| seconds(g)).collect())).collect())));
        fields.push(("generated_texts", PyJson::List(run.details.iter().map(|d| PyJson::Str(d.text.clone())).collect())));
        fields.push(("errors", PyJson::List(run.details.iter().map(|d| PyJson::Str(d.error.clone().unwrap_or_default())).collect())));
    }
    let line = sglang::dumps(&fields) + "\n";
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(|source| Error::Output { path: file.to_path_buf(), source })?;
    std::io::Write::write_all(&mut out, line.as_bytes()).map_err(|source| Error::Output { path: file.to_path_buf(), source })?;
    eprintln!("appended to {}", file.display());
    Ok(())
}

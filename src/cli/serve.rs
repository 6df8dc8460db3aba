//! `servesim serve`: servesim's engine behind OpenAI and TGI HTTP APIs, batched by the
//! simulator's own scheduler.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::flags::{self, usage};
use super::knobs::EngineKnobsArgs;
use crate::Error;
use crate::engine::cuda::CudaModelExecutor;
use crate::engine::model::{LlamaConfig, LlamaWeights, ModelExecutor};
use crate::engine::server::{
    BODY_READ_TIMEOUT_DEFAULT, CudaModelEngine, DRAIN_TIMEOUT_DEFAULT, Executor, HEADER_READ_TIMEOUT_DEFAULT, ModelEngine, PROMPT_BYTES_MAX_DEFAULT,
    REQUEST_BODY_BYTES_MAX, ServerLimits, Tokenizer, http_runtime,
};

/// `servesim serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A folder with a Hugging Face `config.json` and `.safetensors` weights.
    #[arg(long, value_name = "DIR", conflicts_with = "random_weights")]
    pub model: Option<PathBuf>,
    /// Seeded random weights of a named size: tiny, small, 100m or 1b (Llama-3.2-1B's shapes).
    #[arg(long, value_name = "SIZE")]
    pub random_weights: Option<String>,
    /// A Hugging Face tokenizer directory (its `tokenizer.json`) or file. Default: the `--model`
    /// directory's own `tokenizer.json`, else the shipped `tokenizers/servesim-char-N` whose N
    /// is the model's vocabulary size.
    #[arg(long, value_name = "DIR")]
    pub tokenizer: Option<PathBuf>,
    /// On shutdown, write the engine's step trace to FILE, in the columns of the simulator's
    /// timeline.csv (`point` 1, `num_prompts` 0): `step_ms` and `overhead_ms` (host time outside
    /// the forward pass) always; `gemm_ms`, `attention_ms` and `elementwise_ms` on the CPU
    /// executor, 0 on CUDA (which times whole steps); `communication_ms` 0.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    /// Address to listen on (`0.0.0.0` for every interface).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// TCP port; 0 takes any free one, which the "serving … on http://HOST:PORT" line names.
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// `cpu` (the CPU kernels, multi-threaded) or `cuda:N` (bf16 on GPU N: cuBLASLt and the
    /// kernels in `kernels/`).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[command(flatten)]
    pub knobs: EngineKnobsArgs,
    /// Requests that may wait for a batch slot; more get 503.
    #[arg(long, default_value_t = 1024)]
    pub max_waiting: u32,
    /// Every request runs to its `max_tokens`, ignoring EOS whatever it asks.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Seed of random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// CPU threads for the forward pass (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Most bytes of a text prompt; longer ones get 400 before any tokenizing.
    #[arg(long, value_name = "BYTES", default_value_t = PROMPT_BYTES_MAX_DEFAULT)]
    pub max_prompt_bytes: usize,
    /// Seconds a client has to send a request's line and headers (and a kept-alive connection
    /// may sit idle); the connection is closed after it.
    #[arg(long, value_name = "SECONDS", default_value_t = HEADER_READ_TIMEOUT_DEFAULT.as_secs_f64())]
    pub header_read_timeout: f64,
    /// Seconds a client has to send a request's body once its headers are in; 408 after it.
    #[arg(long, value_name = "SECONDS", default_value_t = BODY_READ_TIMEOUT_DEFAULT.as_secs_f64())]
    pub body_read_timeout: f64,
    /// On SIGTERM or Ctrl-C, seconds that requests in flight may take to finish; then every
    /// connection is closed and the server exits.
    #[arg(long, value_name = "SECONDS", default_value_t = DRAIN_TIMEOUT_DEFAULT.as_secs_f64())]
    pub drain_timeout: f64,
}

/// Longest time limit a flag takes: a day.
const TIMEOUT_S_MAX: f64 = 86_400.0;

/// A time-limit flag's value in seconds: positive and at most [`TIMEOUT_S_MAX`].
fn seconds(flag: &'static str, value: f64) -> Result<Duration, Error> {
    if !(value > 0.0 && value <= TIMEOUT_S_MAX) {
        return Err(usage(flag, value, format!("must be a number of seconds above 0 and at most {TIMEOUT_S_MAX}")));
    }
    Ok(Duration::from_secs_f64(value))
}

/// The server's limits from the flags, naming the first bad one.
fn limits(args: &ServeArgs) -> Result<ServerLimits, Error> {
    if args.max_prompt_bytes == 0 || args.max_prompt_bytes > REQUEST_BODY_BYTES_MAX {
        let reason = format!("must be at least 1 and at most the request body limit, {REQUEST_BODY_BYTES_MAX} bytes");
        return Err(usage("--max-prompt-bytes", args.max_prompt_bytes, reason));
    }
    Ok(ServerLimits {
        prompt_bytes_max: args.max_prompt_bytes,
        header_read_timeout: seconds("--header-read-timeout", args.header_read_timeout)?,
        body_read_timeout: seconds("--body-read-timeout", args.body_read_timeout)?,
        drain_timeout: seconds("--drain-timeout", args.drain_timeout)?,
    })
}

/// The tokenizer `serve` uses: `--tokenizer`, else the `--model` directory's `tokenizer.json`,
/// else the shipped one for the model's vocabulary size; refused if its ids do not fit the model.
fn tokenizer(args: &ServeArgs, model: &str, vocab_size: u32) -> Result<Tokenizer, Error> {
    let (flag, value, tokenizer) = match (&args.tokenizer, &args.model) {
        (Some(path), _) => ("--tokenizer", path.clone(), Tokenizer::load(path).map_err(|e| usage("--tokenizer", path.display(), e.to_string()))?),
        (None, Some(dir)) if dir.join("tokenizer.json").exists() => {
            ("--model", dir.clone(), Tokenizer::load(dir).map_err(|e| usage("--model", dir.display(), e.to_string()))?)
        }
        _ => {
            let tokenizer = Tokenizer::shipped(vocab_size).ok_or_else(|| {
                let reason = format!(
                    "model {model} has a vocabulary of {vocab_size} ids and no tokenizer.json; servesim ships tokenizers for 256 and 32000 ids only: give --tokenizer DIR"
                );
                usage("--tokenizer", "", reason)
            })?;
            return Ok(tokenizer);
        }
    };
    tokenizer.check_fits(vocab_size, model).map_err(|reason| usage(flag, value.display(), reason))?;
    Ok(tokenizer)
}

const GIB: f64 = (1u64 << 30) as f64;

pub(super) fn run(args: ServeArgs) -> Result<(), Error> {
    if let Some(path) = &args.timeline {
        flags::output_file("--timeline", path)?;
    }
    let gpu = flags::device(&args.device)?;
    let (name, weights) = match (&args.model, &args.random_weights) {
        (Some(dir), _) => {
            let weights = LlamaWeights::load_dir(dir).map_err(|e| usage("--model", dir.display(), e.to_string()))?;
            (dir.display().to_string(), weights)
        }
        (None, Some(size)) => {
            let config = LlamaConfig::named(size)
                .ok_or_else(|| usage("--random-weights", size, LlamaConfig::unknown_name_reason()))?;
            (format!("random-{size}"), LlamaWeights::random(&config, args.seed))
        }
        (None, None) => return Err(usage("--model", "", "give --model DIR or --random-weights SIZE")),
    };
    let knobs = args.knobs.knobs()?;
    let limits = limits(&args)?;
    if args.max_waiting == 0 {
        return Err(usage("--max-waiting", 0, "must be at least 1: with no room to wait, every request would get 503"));
    }
    let tokenizer = tokenizer(&args, &name, weights.config.vocab_size as u32)?;
    let context_len = knobs.context_len(weights.config.max_position_embeddings);
    let (blocks, block_size) = (knobs.num_gpu_blocks as usize, knobs.block_size as usize);
    // Cores the CPU engine computes on (none on a GPU): the HTTP runtime gets the rest.
    let mut engine_threads = 0;
    let executor: Box<dyn Executor> = match gpu {
        None => {
            let threads = flags::threads(args.threads)?;
            engine_threads = threads;
            // The KV cache is allocated whole at start: a count the machine cannot hold is refused
            // here, not by an allocation abort.
            let kv_bytes = (blocks as u64).saturating_mul(weights.config.kv_bytes_per_block(block_size) as u64);
            if let Some(available) = crate::calibrate::cpu::mem_available_bytes().filter(|&a| kv_bytes > a) {
                return Err(usage(
                    "--num-gpu-blocks",
                    knobs.num_gpu_blocks,
                    format!("the KV cache would take {:.2} GiB, more than the {:.2} GiB of memory available", kv_bytes as f64 / GIB, available as f64 / GIB),
                ));
            }
            let mut model = ModelExecutor::new(weights, blocks, block_size)
                .map_err(|e| usage("--num-gpu-blocks", knobs.num_gpu_blocks, e.to_string()))?;
            model.use_own_pool(threads).map_err(|e| usage("--threads", threads, e.to_string()))?;
            Box::new(ModelEngine::new(model))
        }
        Some(ordinal) => {
            // A missing driver or GPU is reported as calibrate reports it: the --device value
            // cannot be used on this machine (exit code 2), with the CUDA layer's reason.
            let model = CudaModelExecutor::new(&weights, blocks, block_size, ordinal)
                .map_err(|e| usage("--device", &args.device, e.to_string()))?;
            drop(weights);
            let d = model.device();
            eprintln!("forward pass on {} ({}, compute capability {:?}, driver {})", d.label(), d.name(), d.compute_capability(), d.driver_version());
            Box::new(CudaModelEngine::new(model))
        }
    };
    let runtime = http_runtime(engine_threads)
        .map_err(|source| Error::Output { path: "<tokio runtime>".into(), source })?;
    let served = runtime.block_on(async move {
        let address = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .map_err(|e| usage("--port", &address, format!("cannot listen: {e}")))?;
        // `--port 0` takes any free port; the line below names the one bound, for whoever started us.
        let bound = listener.local_addr().map_or(address.clone(), |a| a.to_string());
        let engine = knobs
            .start(executor, args.max_waiting, context_len)
            .with_model_name(name.clone())
            .with_tokenizer(std::sync::Arc::new(tokenizer))
            .with_ignore_eos(args.ignore_eos)
            .with_trace(args.timeline.is_some());
        let scheduling = if knobs.policy == crate::scenario::Policy::Sglang { "sglang policy: SGLang 0.4.9 scheduling" } else { "servesim policy: vLLM V1 scheduling" };
        eprintln!("serving {name} on http://{bound} ({scheduling}, eager; context {context_len} tokens, tokenizer {})", engine.tokenizer().origin());
        // SIGTERM or Ctrl-C: stop accepting and let in-flight requests finish.
        let shutdown = async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
            eprintln!("shutting down");
        };
        let trace = engine.clone();
        let drained = crate::engine::server::serve_with(listener, engine, limits, shutdown).await;
        if drained.connections_closed > 0 {
            eprintln!("closed {} connections still open after --drain-timeout {} s", drained.connections_closed, args.drain_timeout);
        } else {
            eprintln!("drained in {:.3} s", drained.drain_time.as_secs_f64());
        }
        if let Some(path) = &args.timeline {
            let steps = trace.trace();
            // A server has no sweep: its steps are one point, of no set number of prompts.
            let key = crate::run::output::PointKey { point: 1, num_prompts: 0 };
            crate::run::output::write_timeline_file(path, steps.iter().map(|s| (key, s)), knobs.num_gpu_blocks)?;
            eprintln!("wrote {} ({} steps)", path.display(), steps.len());
        }
        Ok(())
    });
    // A tokenizing thread may still run for a request whose connection was closed: not waited for.
    runtime.shutdown_background();
    served
}

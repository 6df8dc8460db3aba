//! Helpers shared by the integration tests: run the real binary, write scenario files.
#![allow(dead_code)]

pub mod sim;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn servesim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_servesim")).args(args).output().expect("run servesim")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("utf-8 stderr")
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write test file");
    path
}

/// Llama-3.1-8B on one H100 under vLLM V1, 20 fixed-length requests at 5 a second: a small,
/// fast scenario for tests that vary one setting.
pub const LLAMA_8B_H100: &str = r#"
[model]
preset = "Llama-3.1-8B"
[hardware]
gpu = "H100-SXM"
[engine]
[workload]
num_prompts = 20
request_rate = 5
[workload.dataset]
kind = "fixed"
input_len = 200
output_len = 20
"#;

/// The repository root (where `scenarios/` lives).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A copy of the shipped 256-id tokenizer directory whose added tokens (`<unk>`, `<s>`, `</s>`)
/// are not special. The random `tiny` model samples them now and then (3 of 60 requests of 8
/// greedy tokens), and an output leaves special tokens' text out, as vLLM's does, so a client that
/// counts tokens by re-encoding the text would miss them, against vLLM as much as against
/// `serve`. Tests of exact client counts serve and count with this copy.
pub fn tokenizer_without_specials() -> tempfile::TempDir {
    let from = repo().join("tokenizers/servesim-char-256");
    let dir = tempfile::tempdir().expect("a temp dir");
    let read = |name: &str| -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(from.join(name)).expect(name)).expect(name) };
    let mut tokenizer = read("tokenizer.json");
    for token in tokenizer["added_tokens"].as_array_mut().expect("added_tokens") {
        token["special"] = serde_json::Value::Bool(false);
    }
    let mut config = read("tokenizer_config.json");
    for (_, token) in config["added_tokens_decoder"].as_object_mut().expect("added_tokens_decoder") {
        token["special"] = serde_json::Value::Bool(false);
    }
    std::fs::write(dir.path().join("tokenizer.json"), tokenizer.to_string()).expect("write tokenizer.json");
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).expect("write tokenizer_config.json");
    std::fs::copy(from.join("special_tokens_map.json"), dir.path().join("special_tokens_map.json")).expect("copy special_tokens_map.json");
    dir
}

/// A small valid scenario that later tests break one field at a time.
pub const SMALL: &str = r#"
name = "small"

[model]
preset = "Llama-3.2-1B"

[hardware]
gpu = "H100-SXM"

[engine]
policy = "vllm-v1"
max_num_seqs = 16
max_model_len = 4096

[workload]
num_prompts = [4, 16]
request_rate = 8.0
seed = 7

[workload.dataset]
kind = "random"
input_len = 256
output_len = 32
range_ratio = 0.5
"#;

/// Kills the server if the test fails before stopping it, so no process outlives the test
/// (an orphan holding the test's output pipe would hang `cargo test`).
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `servesim serve ARGS --port 0` and waits (at most 30 s) for the line that names the
/// port it bound; panics if it exits first. Returns the process and its base URL.
///
/// The server picks its own port: a port chosen here and released for the server to bind can be
/// taken in between by another test's server, or any other process, and the test would then
/// talk to the wrong one.
pub fn spawn_serve(args: &[&str]) -> (KillOnDrop, String) {
    let (server, base, _) = spawn_serve_logged(args);
    (server, base)
}

/// [`spawn_serve`], also keeping every line the server writes to stderr, for as long as it runs.
/// The server's log once it holds `needle`, or after 10 s: the reader thread of
/// [`spawn_serve_logged`] may still be taking the last lines from the pipe when the process has
/// exited, so a log read at once can lack them.
pub fn log_once_it_has(log: &std::sync::Mutex<String>, needle: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let text = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if text.contains(needle) || std::time::Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub fn spawn_serve_logged(args: &[&str]) -> (KillOnDrop, String, std::sync::Arc<std::sync::Mutex<String>>) {
    use std::io::BufRead;
    use std::process::Stdio;
    use std::time::Duration;
    let mut server = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_servesim"))
            .arg("serve")
            .args(args)
            .args(["--port", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn servesim serve"),
    );
    // Read stderr on a thread, for as long as the server lives (a full pipe would block it),
    // and hand over the base URL from the line that announces it.
    let stderr = server.0.stderr.take().expect("piped stderr");
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (found, url) = std::sync::mpsc::channel();
    let thread_log = log.clone();
    std::thread::spawn(move || {
        let mut found = Some(found);
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let base = line.split_whitespace().find(|w| w.starts_with("http://")).filter(|_| line.starts_with("serving "));
            if let (Some(base), Some(tx)) = (base, found.take()) {
                let _ = tx.send(base.to_string());
            }
            let mut log = thread_log.lock().unwrap_or_else(|e| e.into_inner());
            log.push_str(&line);
            log.push('\n');
        }
    });
    match url.recv_timeout(Duration::from_secs(30)) {
        Ok(base) => (server, base, log),
        // Its stderr closed without the line: it is exiting.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("servesim serve {args:?} exited before listening: {}", server.0.wait().unwrap())
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("servesim serve {args:?} did not start in 30 s"),
    }
}

/// Sends SIGTERM to the server and waits for it to exit, panicking after `limit`.
pub fn sigterm_and_wait(server: &mut KillOnDrop, limit: std::time::Duration) -> std::process::ExitStatus {
    let status = Command::new("kill").args(["-TERM", &server.0.id().to_string()]).status().expect("run kill");
    assert!(status.success(), "kill -TERM failed");
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = server.0.try_wait().expect("poll the server") {
            return status;
        }
        assert!(std::time::Instant::now() < deadline, "server still running {limit:?} after SIGTERM");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The value of an unlabelled Prometheus sample `name` in a `/metrics` body.
pub fn metric(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// `GET path` over plain HTTP/1.1 with `Connection: close`: the body of a 200 response.
pub fn http_get(base: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let host = base.strip_prefix("http://").expect("http:// base URL");
    let mut stream = std::net::TcpStream::connect(host).expect("connect");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read the response");
    assert!(response.starts_with("HTTP/1.1 200"), "GET {path}: {response}");
    let (_, body) = response.split_once("\r\n\r\n").expect("headers end");
    body.to_string()
}

/// One replica serving one request at a time, every request one prefill step of 512 tokens and a
/// single output token: a server with a deterministic service time D (an M/D/1 queue under
/// Poisson arrivals). `RATE` stands for the request rate.
pub const ONE_AT_A_TIME: &str = r#"
    [model]
    preset = "Llama-3.2-1B"
    [hardware]
    gpu = "H100-SXM"
    [engine]
    policy = "vllm-v1"
    max_num_seqs = 1
    [workload]
    num_prompts = 1
    request_rate = RATE
    seed = 42
    [workload.dataset]
    kind = "fixed"
    input_len = 512
    output_len = 1
"#;

/// A batch of one sequence, with the graph decision vLLM V1 (the scenarios' policy) makes.
pub fn one_seq_batch(new_tokens: u32, context_tokens: u32, prefill: bool) -> servesim::sched::Batch {
    use servesim::sched::{Batch, SchedulingPolicy, SeqWork, VllmV1};
    let mut batch = Batch::default();
    let work = SeqWork { seq: 0, new_tokens, context_tokens, samples_token: true, draft_tokens: 0 };
    if prefill { batch.push_prefill(work) } else { batch.push_decode(work) }
    batch.graph_size = VllmV1.graph_size(&batch);
    batch
}

/// A small plan: Llama-3.2-1B chat traffic at 30 req/s over two GPUs, TP 1 and 2, and two
/// `max_num_seqs` values (8 candidates).
pub const SMALL_PLAN: &str = r#"
name = "small"
[model]
preset = "Llama-3.2-1B"
[workload]
seed = 3
[workload.dataset]
kind = "sharegpt"
input = { dist = "lognormal", mean = 200, std = 150, min = 4, max = 1024 }
output = { dist = "lognormal", mean = 100, std = 80, min = 2, max = 512 }
[target]
rate = 30.0
[slo]
ttft_p90_ms = 300
tpot_p90_ms = 30
[search]
tensor_parallel = [1, 2]
max_num_seqs = [32, 128]
[[search.gpu]]
name = "H100-SXM"
price_per_gpu_hour = 3.0
[[search.gpu]]
name = "A100-80G-SXM"
price_per_gpu_hour = 1.5
[budget]
max_gpus = 16
"#;

/// Each case: loading `file` with `overrides` fails, and the error names the file and contains
/// every one of `expected` (the field, the value, the reason's key words).
pub fn assert_scenario_errors(cases: &[(&str, &[&str], &[&str])]) {
    for &(file, overrides, expected) in cases {
        let all: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        let err = servesim::scenario::Scenario::load(Path::new(file), &all).unwrap_err().to_string();
        assert!(err.contains(file), "{err}");
        for e in expected {
            assert!(err.contains(e), "{overrides:?}: {err:?} lacks {e:?}");
        }
    }
}

/// Where python3 finds each of `modules`, probed from a fresh empty directory (so nothing in
/// the current or temp directory can pass for a package: Ray leaves a `ray` session folder in
/// the temp dir, and the repository has a `tokenizers/` folder, either of which Python imports
/// as a namespace package). Each module must come from a file — a package's `__init__.py` or a
/// module's own file — outside that directory. `Err` says which is missing and why.
pub fn python_modules(modules: &[&str]) -> Result<Vec<PathBuf>, String> {
    const FIND: &str = "import importlib.util, sys\n\
        for name in sys.argv[1:]:\n\
        \x20   try:\n\
        \x20       spec = importlib.util.find_spec(name)\n\
        \x20   except Exception as e:\n\
        \x20       spec = None\n\
        \x20   print(name + '\\t' + (spec.origin if spec is not None and spec.origin else ''))\n";
    let empty = tempfile::tempdir().map_err(|e| format!("cannot make an empty directory: {e}"))?;
    let out = Command::new("python3")
        .arg("-c")
        .arg(FIND)
        .args(modules)
        .current_dir(empty.path())
        .output()
        .map_err(|e| format!("cannot run python3: {e}"))?;
    if !out.status.success() {
        return Err(format!("python3 failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut found = Vec::new();
    for module in modules {
        let origin = text.lines().find_map(|l| l.strip_prefix(&format!("{module}\t"))).unwrap_or("");
        let path = PathBuf::from(origin);
        if origin.is_empty() || !path.is_absolute() || !path.is_file() {
            return Err(format!("python3 cannot import {module} (no module file found)"));
        }
        if path.starts_with(empty.path()) || path.starts_with(std::env::temp_dir()) {
            return Err(format!("python3's {module} is {}, in a temporary directory, not an installed package", path.display()));
        }
        found.push(path);
    }
    Ok(found)
}

/// The first of `names` that is an executable file in an absolute directory of `PATH` (an empty
/// or relative entry would find whatever the current directory holds).
pub fn executable_on_path(names: &[&str]) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path).filter(|d| d.is_absolute()).map(|d| d.join(name)).find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Whether the optional-package variable `name` is set to 1 (or true): the package's absence is
/// then a failure, not a skip.
pub fn required(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

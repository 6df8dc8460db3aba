//! `servesim serve` with a real (tiny, random-weight) transformer, measured by `servesim bench`
//! over loopback HTTP; SIGTERM stops it cleanly.

mod common;
use common::*;

use std::time::Duration;

/// `servesim bench` against `base` with random prompts of 12 tokens.
fn bench_random(base: &str, output_len: u32, num_prompts: u32, max_concurrency: u32) -> std::process::Output {
    let (output_len, num_prompts, max_concurrency) = (output_len.to_string(), num_prompts.to_string(), max_concurrency.to_string());
    servesim(&[
        "bench", "--base-url", base, "--dataset-name", "random", "--random-input-len", "12",
        "--random-output-len", &output_len, "--num-prompts", &num_prompts, "--max-concurrency", &max_concurrency,
    ])
}

#[test]
fn bench_measures_the_served_model_and_sigterm_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let timeline = dir.path().join("timeline.csv");
    let (mut server, base) =
        spawn_serve(&["--random-weights", "tiny", "--threads", "1", "--max-num-seqs", "4", "--timeline", timeline.to_str().unwrap()]);
    let bench = bench_random(&base, 6, 5, 3);
    let text = stdout(&bench);
    assert!(bench.status.success(), "{}", stderr(&bench));
    assert!(text.contains("Successful requests:                     5         \n"), "{text}");
    assert!(text.contains("Failed requests:                         0         \n"), "{text}");
    assert!(text.contains("Total generated tokens:                  30        \n"), "{text}");
    assert!(text.contains("Total input tokens:                      60        \n"), "{text}");

    // SIGTERM: a graceful stop, exit code 0.
    let status = sigterm_and_wait(&mut server, Duration::from_secs(60));
    assert!(status.success(), "server exit status {status}");

    // The step trace, in timeline.csv's columns: every prompt token prefilled once, every
    // output token after the first decoded once (the first comes from the prefill step).
    let csv = std::fs::read_to_string(&timeline).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (prefill, decode, step_ms) = (col("prefill_tokens"), col("decode_tokens"), col("step_ms"));
    let (mut prefill_total, mut decode_total) = (0u64, 0u64);
    for line in lines {
        let cells: Vec<&str> = line.split(',').collect();
        prefill_total += cells[prefill].parse::<u64>().unwrap();
        decode_total += cells[decode].parse::<u64>().unwrap();
        assert!(cells[step_ms].parse::<f64>().unwrap() > 0.0, "{line}");
    }
    assert_eq!((prefill_total, decode_total), (60, 25), "{csv}");
}

/// `serve --policy sglang` runs SGLang 0.4.9's scheduler (sched/sglang.rs) on the real tiny
/// model: every token is served, with the radix cache on and off, and the prompts' shared
/// tokens are found in the cache (the bench's random prompts share none, so a repeat finds its
/// own: a second identical run hits all but the last token of each prompt).
#[test]
fn the_sglang_policy_serves_every_token_with_its_radix_cache_on_and_off() {
    for cache in [false, true] {
        let mut args = vec!["--random-weights", "tiny", "--threads", "1", "--max-num-seqs", "4", "--policy", "sglang", "--block-size", "1"];
        if cache {
            args.push("--enable-prefix-caching");
        }
        let (mut server, base) = spawn_serve(&args);
        for round in 0..2 {
            let bench = bench_random(&base, 7, 6, 3);
            let text = stdout(&bench);
            assert!(bench.status.success(), "cache {cache}, round {round}: {}", stderr(&bench));
            assert!(text.contains("Total generated tokens:                  42        \n"), "cache {cache}: {text}");
        }
        let metrics = http_get(&base, "/metrics");
        let hits = metric(&metrics, "servesim_prefix_cache_hits_total");
        assert_eq!(hits.is_some(), cache, "{metrics}");
        if let Some(hits) = hits {
            // The second run's 6 prompts of 12 tokens each find 11 in the cache.
            assert!(hits >= 66.0, "{metrics}");
        }
        assert!(sigterm_and_wait(&mut server, Duration::from_secs(60)).success());
    }
    let out = servesim(&["serve", "--random-weights", "tiny", "--port", "0", "--policy", "sglang", "--num-scheduler-steps", "4"]);
    assert!(!out.status.success() && stderr(&out).contains("--num-scheduler-steps"), "{}", stderr(&out));
}

/// `serve --num-scheduler-steps` and `--num-speculative-tokens` reach the engine: a benchmark
/// gets every token, and speculation's counters are on /metrics.
#[test]
fn multi_step_and_speculation_serve_every_token() {
    for flags in [&["--num-scheduler-steps", "4"][..], &["--num-speculative-tokens", "3", "--prompt-lookup-max", "2"][..]] {
        let args = [&["--random-weights", "tiny", "--threads", "1", "--max-num-seqs", "4"][..], flags].concat();
        let (mut server, base) = spawn_serve(&args);
        let bench = bench_random(&base, 9, 4, 2);
        let text = stdout(&bench);
        assert!(bench.status.success(), "{flags:?}: {}", stderr(&bench));
        assert!(text.contains("Total generated tokens:                  36        \n"), "{flags:?}: {text}");
        let metrics = http_get(&base, "/metrics");
        let speculating = flags[0] == "--num-speculative-tokens";
        assert_eq!(metric(&metrics, "servesim_spec_decode_num_draft_tokens_total").is_some(), speculating, "{metrics}");
        // SGLang's server info: the accept length its client reads, tokens per verifying step.
        let info: serde_json::Value = serde_json::from_str(&http_get(&base, "/get_server_info")).unwrap();
        let accept_length = info["internal_states"][0].get("avg_spec_accept_length").and_then(serde_json::Value::as_f64);
        let expected = speculating.then(|| {
            let drafts = metric(&metrics, "servesim_spec_decode_num_drafts_total").unwrap();
            let accepted = metric(&metrics, "servesim_spec_decode_num_accepted_tokens_total").unwrap();
            if drafts == 0.0 { 0.0 } else { 1.0 + accepted / drafts }
        });
        assert_eq!(accept_length, expected, "{info}");
        assert!(sigterm_and_wait(&mut server, Duration::from_secs(60)).success());
    }
}

#[test]
fn serve_rejects_bad_flags() {
    for args in [vec!["serve"], vec!["serve", "--random-weights", "huge"], vec!["serve", "--random-weights", "tiny", "--device", "gpu"]] {
        let out = servesim(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
    let out = servesim(&["serve", "--random-weights", "tiny", "--device", "cuda"]);
    assert!(stderr(&out).contains("expected `cpu` or `cuda:N`"), "{}", stderr(&out));
}

/// `--device cuda:N` that cannot be opened is a usage error (exit 2) naming the device and the
/// reason, never a panic: on every machine for a GPU that does not exist, and for cuda:0 where
/// there is no driver (CI). Where there is a GPU, cuda:0 would start serving, so it is not run.
#[test]
fn serve_on_a_missing_gpu_is_a_clear_error() {
    let mut cases = vec![("cuda:4096", "cuda:4096")];
    let no_driver = servesim::engine::cuda::device::check_driver().is_err();
    if no_driver {
        cases.push(("cuda:0", "no CUDA driver"));
    } else {
        println!("a CUDA driver is present: cuda:0 is not tried (it would serve)");
    }
    for (device, expected) in cases {
        let out = servesim(&["serve", "--random-weights", "tiny", "--port", "0", "--device", device]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "--device {device}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains(&format!("--device: \"{device}\"")) && err.contains(expected), "--device {device}: {err}");
    }
}

/// Issue 17: one half-open connection kept the server from exiting after SIGTERM. Now it waits
/// at most `--drain-timeout`, then closes the connection and exits 0.
#[test]
fn sigterm_exits_despite_a_half_open_connection() {
    use std::io::Write;
    let (mut server, base, log) = spawn_serve_logged(&[
        "--random-weights", "tiny", "--threads", "1", "--drain-timeout", "1", "--header-read-timeout", "600", "--body-read-timeout", "600",
    ]);
    let mut stalled = std::net::TcpStream::connect(base.strip_prefix("http://").unwrap()).unwrap();
    stalled.write_all(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{").unwrap();
    // The server has the connection once it answers another.
    assert!(http_get(&base, "/health").contains("{}"));
    let status = sigterm_and_wait(&mut server, Duration::from_secs(60));
    let closed = "closed 1 connections still open after --drain-timeout 1 s";
    let log = log_once_it_has(&log, closed);
    assert!(status.success(), "exit status {status}: {log}");
    assert!(log.contains(closed), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn serve_rejects_bad_limits() {
    for (flag, value, words) in [
        ("--drain-timeout", "0", "above 0"),
        ("--drain-timeout", "-1", "above 0"),
        ("--drain-timeout", "NaN", "above 0"),
        ("--header-read-timeout", "1e300", "at most 86400"),
        ("--body-read-timeout", "0", "above 0"),
        ("--max-prompt-bytes", "0", "at least 1"),
        ("--max-prompt-bytes", "99999999999", "request body limit"),
        ("--max-waiting", "0", "every request would get 503"),
    ] {
        let out = servesim(&["serve", "--random-weights", "tiny", "--port", "0", &format!("{flag}={value}")]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag) && err.contains(words), "{flag} {value}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

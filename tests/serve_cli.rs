//! `servesim serve` with a real (tiny, random-weight) transformer, measured by `servesim bench`
//! over loopback HTTP; SIGTERM stops it cleanly.

mod common;
use common::*;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port (released just before the server binds it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Kills the server if the test fails before stopping it, so no process outlives the test
/// (an orphan holding the test's output pipe would hang `cargo test`).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn bench_measures_the_served_model_and_sigterm_stops_it() {
    let port = free_port().to_string();
    let mut server = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(["serve", "--random-weights", "tiny", "--port", &port, "--threads", "1", "--max-num-seqs", "4"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://127.0.0.1:{port}");
    // Wait (bounded) until the server answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let bench = servesim(&[
        "bench", "--base-url", &base, "--dataset-name", "random", "--random-input-len", "12",
        "--random-output-len", "6", "--num-prompts", "5", "--max-concurrency", "3",
    ]);
    let text = stdout(&bench);
    assert!(bench.status.success(), "{}", stderr(&bench));
    assert!(text.contains("Successful requests:                     5         \n"), "{text}");
    assert!(text.contains("Failed requests:                         0         \n"), "{text}");
    assert!(text.contains("Total generated tokens:                  30        \n"), "{text}");
    assert!(text.contains("Total input tokens:                      60        \n"), "{text}");

    // SIGTERM: a graceful stop, exit code 0.
    let status = Command::new("kill").args(["-TERM", &server.0.id().to_string()]).status().unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            assert!(status.success(), "server exit status {status}");
            break;
        }
        assert!(Instant::now() < deadline, "server did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serve_rejects_bad_flags() {
    for args in [vec!["serve"], vec!["serve", "--random-weights", "huge"], vec!["serve", "--random-weights", "tiny", "--device", "cuda:0"]] {
        let out = servesim(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
}

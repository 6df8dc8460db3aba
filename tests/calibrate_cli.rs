//! `servesim calibrate` on this machine's CPU, and a profile measured here driving `simulate`:
//! the calibrate → simulate loop that works anywhere, CI included.

mod common;
use common::*;

#[test]
fn a_cpu_profile_measured_here_drives_simulate() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("cpu.csv");
    // A run cut short by a shape limit keeps what it measured, coarse to fine over every op: the
    // same shapes on every machine, idle or busy, whatever its cache (a time budget cuts where
    // the load says; that is checked on a test clock in `calibrate::run`'s unit tests).
    let out = servesim(&[
        "calibrate",
        "--device",
        "cpu",
        "--model",
        "Llama-3.2-1B",
        "--tp",
        "1",
        "--threads",
        "2",
        "--passes",
        "1",
        "--memory-gib",
        "2",
        "--max-shapes",
        "24",
        "--out",
        profile.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("leave-one-out interpolation error"), "{err}");
    let csv = std::fs::read_to_string(&profile).unwrap();
    assert!(csv.starts_with("op,phase,dtype,m,n,k,"), "{csv}");
    // The sampler's 4 shapes, then the next 20 of the grid: a 1B model's largest GEMM (its
    // LM head, 1 GiB of f32 weights) fits the 2 GiB cap, so none is refused.
    assert_eq!(csv.lines().count(), 1 + 24, "{csv}\n{err}");
    for kind in ["gemm,", "attention,prefill,", "attention,decode,", "attention,mixed,", "sampling,"] {
        assert!(csv.lines().any(|l| l.starts_with(kind)), "no {kind} row:\n{csv}");
    }
    let provenance = std::fs::read_to_string(dir.path().join("cpu.provenance.toml")).unwrap();
    assert!(provenance.contains("device") && provenance.contains("engine/cpu/"), "{provenance}");

    let scenario = write_file(dir.path(), "small.toml", SMALL);
    let run_dir = dir.path().join("run");
    let sim = servesim(&[
        "simulate",
        scenario.to_str().unwrap(),
        "--profile",
        profile.to_str().unwrap(),
        "--allow-profile-mismatch",
        "--out",
        run_dir.to_str().unwrap(),
    ]);
    assert!(sim.status.success(), "{}", stderr(&sim));
    // A CPU's timings under an H100 scenario: used only when asked for, and loudly.
    assert!(stderr(&sim).contains("WARNING: the profile was measured on a CPU"), "{}", stderr(&sim));
    let refused = servesim(&["simulate", scenario.to_str().unwrap(), "--profile", profile.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("the scenario runs on H100-SXM"), "{}", stderr(&refused));
    let summary = std::fs::read_to_string(run_dir.join("summary.json")).unwrap();
    assert!(summary.contains("\"cost_model\": \"calibrated profile ("), "{summary}");
    // The rows measured price the run: its figures are printed and finite.
    let tpot_ms = stdout(&sim).lines().find_map(|l| l.strip_prefix("Mean TPOT (ms):")?.trim().parse::<f64>().ok());
    assert!(tpot_ms.is_some_and(|t| t.is_finite() && t > 0.0), "{}", stdout(&sim));
}

/// The default CPU run as a new user starts it, cut short by a shape limit (the same cut on
/// every machine): a bounded grid, progress lines on a stderr that is not a terminal, what was
/// measured written with the cut and the reference timings in its provenance, and no NaN.
#[test]
fn the_default_cpu_run_is_bounded_shows_progress_and_writes_what_it_measured() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("default.csv");
    // The memory cap is given too: by default it is a quarter of the memory available (at most
    // 4 GiB), and which shapes fit must not depend on what else the machine holds.
    let out = servesim(&["calibrate", "--device", "cpu", "--max-shapes", "12", "--memory-gib", "2", "--out", profile.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let planned: usize = err
        .lines()
        .find_map(|l| l.strip_prefix("calibrating ")?.split_once(" shapes (")?.0.parse().ok())
        .unwrap_or_else(|| panic!("no plan line:\n{err}"));
    // servesim::calibrate::grid::CPU_DEFAULT_SHAPES_MAX; every preset at TP 1/2/4/8 was 5,740.
    assert!((100..=320).contains(&planned), "{planned} shapes planned");
    assert!(err.contains("of Llama-3.2-1B at TP 1 on cpu (tiny grid, 3 passes)"), "{err}");
    // A line as soon as the first shape starts, though stderr is a pipe.
    assert!(err.contains("calibrating: 0/") && err.contains(" elapsed, "), "{err}");
    assert!(!err.contains("NaN"), "{err}");
    assert!(err.contains("leave-one-out interpolation error: GEMM "), "{err}");
    assert!(err.contains("--max-shapes 12 was reached: the profile holds what was measured (12 of "), "{err}");
    assert!(profile.exists(), "nothing written:\n{err}");
    let provenance = std::fs::read_to_string(dir.path().join("default.provenance.toml")).unwrap();
    assert!(provenance.contains("cut_short = true") && provenance.contains("shapes_max = 12"), "{provenance}");
    assert!(provenance.contains("[run.reference]") && provenance.contains("kernel = \"gemm 256×1024×1024 fp32\""), "{provenance}");
}

#[test]
fn bad_calibrate_flags_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out_csv = dir.path().join("p.csv");
    for args in [
        ["--device", "tpu:0"],
        ["--grid", "huge"],
        ["--tp", "0"],
        ["--model", "GPT-9"],
        ["--memory-gib", "0"],
        ["--memory-gib", "NaN"],
        ["--memory-gib", "1e300"],
        ["--max-shapes", "0"],
    ] {
        let out = servesim(&["calibrate", args[0], args[1], "--out", out_csv.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(args[0]), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"));
    }
}

#[test]
fn no_gpu_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let out = servesim(&["calibrate", "--device", "cuda:0", "--budget-minutes", "0.1", "--out", dir.path().join("g.csv").to_str().unwrap()]);
    if out.status.success() {
        println!("a GPU is present: the CUDA path ran");
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert!(stderr(&out).contains("cuda:0"), "{}", stderr(&out));
}

#[test]
fn malformed_profile_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_file(dir.path(), "bad.csv", "op,phase\ngemm,oops\n");
    write_file(dir.path(), "bad.provenance.toml", "");
    let scenario = write_file(dir.path(), "small.toml", SMALL);
    let out = servesim(&["simulate", scenario.to_str().unwrap(), "--profile", csv.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("bad"), "{}", stderr(&out));
}

#[test]
fn the_graph_timing_method_is_refused_on_a_cpu_and_bad_targets_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let out_csv = dir.path().join("p.csv");
    let run = |extra: &[&str]| {
        let mut args = vec!["calibrate", "--device", "cpu", "--threads", "1", "--out", out_csv.to_str().unwrap()];
        args.extend_from_slice(extra);
        servesim(&args)
    };
    let out = run(&["--timing-method", "graph"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--timing-method") && stderr(&out).contains("times with flush only"), "{}", stderr(&out));
    let out = run(&["--timing-method", "events"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("expected one of flush, graph"), "{}", stderr(&out));
    let out = run(&["--loo-target", "5"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--loo-target"), "{}", stderr(&out));
    assert!(!out_csv.exists());
}

//! `servesim calibrate` on this machine's CPU, and a profile measured here driving `simulate`:
//! the calibrate → simulate loop that works anywhere, CI included.

mod common;
use common::*;

#[test]
fn a_cpu_profile_measured_here_drives_simulate() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("cpu.csv");
    // A small budget: a run cut short keeps what it measured, coarse to fine over every op.
    // 18 s covers the grid's first level (every op's smallest and largest shape) with room to
    // spare on a loaded 2-core machine: 9 s measured 28 shapes here, and sometimes none of the
    // attention ones when the machine was busy.
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
        "--budget-minutes",
        "0.3",
        "--out",
        profile.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("leave-one-out interpolation error"), "{err}");
    let csv = std::fs::read_to_string(&profile).unwrap();
    assert!(csv.starts_with("op,phase,dtype,m,n,k,"), "{csv}");
    assert!(csv.lines().filter(|l| l.starts_with("gemm,")).count() >= 5, "too few GEMM rows");
    assert!(csv.lines().any(|l| l.starts_with("attention,decode,")), "no decode attention rows");
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
    // A CPU is orders of magnitude slower than an H100: the profile, not the roofline, priced it.
    let roofline = stdout(&servesim(&["simulate", scenario.to_str().unwrap()]));
    let tpot = |text: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with("Mean TPOT (ms):")).unwrap();
        line["Mean TPOT (ms):".len()..].trim().parse().unwrap()
    };
    assert!(tpot(&stdout(&sim)) > 10.0 * tpot(&roofline), "calibrated TPOT is not the CPU's");
}

#[test]
fn bad_calibrate_flags_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out_csv = dir.path().join("p.csv");
    for args in [["--device", "tpu:0"], ["--grid", "huge"], ["--tp", "0"], ["--model", "GPT-9"]] {
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

//! Published per-op measurements as profiles: `calibrate import` on a copy of aiconfigurator's
//! tables, and the bundled profiles (`calibration/public/`) checked, each printed: they
//! reproduce their own rows (round trip) and price GEMM shapes between their grid points (each
//! interior (n, k) left out). How they price other sources' measurements of the same shapes
//! (vidur's A100 and LLMServingSim's H100 Llama layers) is in `calibrate_import_formats.rs`.

mod common;
use common::*;

use servesim::calibrate::backend::GemmShape;
use servesim::calibrate::grid::Shape;
use servesim::calibrate::profile::Profile;
use servesim::cost::calibrated::{LeaveOneOut, ProfileIndex, leave_one_gemm_shape_out};
use servesim::scenario::Dtype;

const BUNDLED: [&str; 4] = [
    "h100-sxm--vllm-0.24.0.csv.zst",
    "h200-sxm--vllm-0.24.0.csv.zst",
    "b200-sxm--vllm-0.24.0.csv.zst",
    "a100-80g-sxm--vllm-0.14.0.csv.zst",
];

fn bundled(name: &str) -> Profile {
    let path = repo().join("calibration/public").join(name);
    Profile::read(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn percent((median, p90): (f64, f64)) -> String {
    format!("median {:.2}%, p90 {:.2}%", median * 100.0, p90 * 100.0)
}

#[test]
fn import_converts_the_tables_and_names_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let source = repo().join("tests/data/public/aiconfigurator/h100_sxm");
    let import = |out: &std::path::Path| {
        servesim(&["calibrate", "import", "--from", "aiconfigurator", source.to_str().unwrap(), "--out", out.to_str().unwrap()])
    };
    let csv = dir.path().join("h100.csv");
    let out = import(&csv);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    println!("{err}");
    // What was left out is said, with counts.
    assert!(err.contains("GEMM dtype fp8_block") && err.contains("sliding-window attention"), "{err}");
    let profile = Profile::read(&csv).unwrap();
    let source = profile.provenance.source.as_ref().expect("an imported profile names its source");
    assert_eq!(
        (source.repository.as_str(), source.commit.as_str(), source.license.as_str()),
        ("ai-dynamo/aiconfigurator", "095f58a51c4ca8e61b66ec108d86f223f8d559ce", "Apache License, Version 2.0")
    );
    assert_eq!((source.gpu.as_str(), source.engine.as_str(), source.engine_version.as_str()), ("H100-SXM", "vllm", "0.24.0"));
    assert!(source.kernels.iter().any(|k| k == "vllm_flash_attn_fa3"), "{:?}", source.kernels);
    assert_eq!(profile.provenance.device.name, "NVIDIA H100 80GB HBM3");
    // Every kind of row arrived: bf16 and fp8 GEMMs, prefill and decode attention, all-reduces.
    let count = |f: &dyn Fn(&Shape) -> bool| profile.rows.iter().filter(|r| f(&r.shape)).count();
    assert_eq!(count(&|s| matches!(s, Shape::Gemm(g) if g.dtype == Dtype::Bf16)), 3 * 3 * 74);
    assert_eq!(count(&|s| matches!(s, Shape::Gemm(g) if g.dtype == Dtype::Fp8)), 3 * 3 * 74);
    assert!(count(&|s| matches!(s, Shape::Attention(a) if a.context_len == 0 && a.query_len > 1)) > 100);
    assert!(count(&|s| matches!(s, Shape::Attention(a) if a.query_len == 1 && a.context_len > 0)) > 100);
    assert_eq!(count(&|s| matches!(s, Shape::AllReduce(_))), 69);
    // NCCL's all-to-alls in half precision, on 2, 4 and 8 GPUs; its other collectives are left out.
    assert!(err.contains("NCCL all_gather"), "{err}");
    for gpus in [2, 4, 8] {
        assert!(count(&|s| matches!(s, Shape::AllToAll(a) if a.gpus == gpus)) > 10, "{gpus} GPUs");
    }
    // A table value, exactly: aiconfigurator's H100 bf16 GEMM m=2048, n=k=8192 (0.366 ms in
    // its README's cross-check, against 0.395 ms from vidur and 0.394 ms from LLMServingSim).
    let o_proj = GemmShape { m: 2048, n: 8192, k: 8192, dtype: Dtype::Bf16 };
    let row = profile.rows.iter().find(|r| r.shape == Shape::Gemm(o_proj)).unwrap();
    assert!((row.measurement.median_ns - 366_000.0).abs() < 1_000.0, "{:?}", row.measurement);
    // The same input gives the same profile, byte for byte.
    let again = dir.path().join("again.csv");
    assert!(import(&again).status.success());
    assert_eq!(std::fs::read(&csv).unwrap(), std::fs::read(&again).unwrap());
}

#[test]
fn a_malformed_table_is_named_with_its_row_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let source = repo().join("tests/data/public/aiconfigurator-bad/h100_sxm");
    let out = dir.path().join("x.csv");
    let run = servesim(&["calibrate", "import", "--from", "aiconfigurator", source.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert!(err.contains("gemm_perf.parquet: row 3, column `latency`: expected a positive, finite number"), "{err}");
    assert!(!err.contains("panicked") && !out.exists(), "{err}");
    for (args, needle) in [
        (vec!["--from", "vidur2"], "unknown format"),
        (vec!["--from", "aiconfigurator", "--engine", "tgi"], "unknown engine `tgi`"),
    ] {
        let mut all = vec!["calibrate", "import"];
        all.extend(args);
        all.extend([source.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        let run = servesim(&all);
        assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
        assert!(stderr(&run).contains(needle), "{}", stderr(&run));
    }
    let missing = dir.path().join("nothing");
    let run = servesim(&["calibrate", "import", "--from", "aiconfigurator", missing.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("no gemm/vllm/<version>/ folder"), "{}", stderr(&run));
}

/// Round trip: each bundled profile prices every GEMM, attention and all-to-all row it holds
/// within 3%. An FP8 GEMM row is priced at most as the fastest FP8 row of its (n, k) at or above
/// its m (one cutlass configuration runs every m above 128: src/calibrate/profile/index.rs), so
/// that capped time is what it reproduces.
#[test]
fn bundled_profiles_reproduce_their_own_rows() {
    for name in BUNDLED {
        let profile = bundled(name);
        let index = ProfileIndex::new(&profile);
        let mut fp8_rows: std::collections::BTreeMap<(u32, u32), Vec<(u32, f64)>> = Default::default();
        for row in &profile.rows {
            if let Shape::Gemm(g) = &row.shape
                && g.dtype == Dtype::Fp8
            {
                fp8_rows.entry((g.n, g.k)).or_default().push((g.m, row.measurement.median_ns));
            }
        }
        let capped_ns = |g: &GemmShape, ns: f64| -> f64 {
            if g.dtype != Dtype::Fp8 {
                return ns;
            }
            fp8_rows[&(g.n, g.k)].iter().filter(|&&(m, _)| m > g.m).map(|&(_, t)| t).fold(ns, f64::min)
        };
        let mut capped = 0;
        let mut errors = Vec::new();
        // NCCL's all-to-alls, half precision: 21 sizes on each of 2, 4 and 8 GPUs.
        let alltoalls = profile.rows.iter().filter(|r| matches!(r.shape, Shape::AllToAll(_))).count();
        assert_eq!(alltoalls, 63, "{name}");
        for row in &profile.rows {
            let predicted = match &row.shape {
                Shape::Gemm(g) => index.predict_gemm_ns(g),
                Shape::Attention(a) => index.predict_attention_ns(a),
                Shape::AllToAll(a) => index.alltoall_s(a.bytes as f64, a.gpus).map(|s| s * 1e9),
                Shape::AllReduce(_) | Shape::Sampling(_) => continue,
            }
            .unwrap_or_else(|| panic!("{name}: no prediction for {:?}", row.shape));
            let expected = match &row.shape {
                Shape::Gemm(g) => capped_ns(g, row.measurement.median_ns),
                _ => row.measurement.median_ns,
            };
            capped += usize::from(expected < row.measurement.median_ns);
            errors.push((predicted - expected).abs() / expected);
        }
        if !fp8_rows.is_empty() {
            assert!(capped > 0, "{name}: no FP8 row above a larger m's time: the cap is untested here");
        }
        let worst = errors.iter().copied().fold(0.0, f64::max);
        println!("{name}: round trip over {} rows: {}, worst {:.3}%", errors.len(), percent(LeaveOneOut::summary(&errors)), worst * 100.0);
        assert!(worst <= 0.03, "{name}: worst round-trip error {:.2}%", worst * 100.0);
    }
}

/// A model's GEMMs mostly fall between a published grid's round sizes: each interior (n, k) of
/// each bundled profile, predicted from the grid around it with that n and k removed (a cell
/// twice as wide as the one a real shape falls in).
#[test]
fn bundled_profiles_price_gemm_shapes_between_their_grid_points() {
    for name in BUNDLED {
        let errors = leave_one_gemm_shape_out(&bundled(name));
        let (median, p90) = LeaveOneOut::summary(&errors);
        println!("{name}: each (n, k) left out, {} GEMMs: {}", errors.len(), percent((median, p90)));
        assert!(errors.len() > 1000, "{name}: only {} GEMMs left out", errors.len());
        assert!(median <= 0.10, "{name}: median {:.1}%", median * 100.0);
    }
}

/// `--profile auto` picks the profile bundled for the scenario's GPU and says which; a profile
/// of another GPU is refused, naming both.
#[test]
fn simulate_picks_the_bundled_profile_and_refuses_another_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = write_file(dir.path(), "small.toml", SMALL);
    let path = scenario.to_str().unwrap();
    let run_dir = dir.path().join("run");
    let auto = servesim(&["simulate", path, "--profile", "auto", "--out", run_dir.to_str().unwrap()]);
    assert!(auto.status.success(), "{}", stderr(&auto));
    assert!(stderr(&auto).contains("cost model: calibrated profile (bundled h100-sxm--vllm-0.24.0, measured on H100-SXM)"), "{}", stderr(&auto));
    let summary = std::fs::read_to_string(run_dir.join("summary.json")).unwrap();
    assert!(summary.contains("bundled h100-sxm--vllm-0.24.0"), "{summary}");
    // The measured kernels, not the datasheet: the report differs from the roofline's. They
    // are the default for a GPU with a bundled profile.
    let roofline = servesim(&["simulate", path, "--cost", "roofline"]);
    assert!(roofline.status.success(), "{}", stderr(&roofline));
    // Named on stderr as a profile is: a user who left the measured kernels must be told.
    assert!(stderr(&roofline).contains("cost model: roofline (H100-SXM datasheet peaks"), "{}", stderr(&roofline));
    assert_ne!(stdout(&auto), stdout(&roofline));
    assert_eq!(stdout(&auto), stdout(&servesim(&["simulate", path])));

    let a100 = repo().join("calibration/public/a100-80g-sxm--vllm-0.14.0.csv.zst");
    let refused = servesim(&["simulate", path, "--profile", a100.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(err.contains("measured on A100-80G-SXM, and the scenario runs on H100-SXM"), "{err}");
}

/// A scenario names its kernel profile itself: `[cost] profile = "auto"` is `--profile auto`;
/// on a GPU with no bundled profile it is the nearest GPU's, carried over (tests/profile_match.rs),
/// the same as leaving `profile` out; a profile file of another
/// GPU, or none at all, is an error naming `cost.profile`.
#[test]
fn a_scenario_names_its_kernel_profile_in_cost() {
    let dir = tempfile::tempdir().unwrap();
    let with_cost = |profile: &str| SMALL.to_string() + &format!("\n[cost]\nprofile = {profile:?}\n");
    let auto = write_file(dir.path(), "auto.toml", &with_cost("auto"));
    let plain = write_file(dir.path(), "plain.toml", SMALL);
    let from_scenario = servesim(&["simulate", auto.to_str().unwrap()]);
    assert!(from_scenario.status.success(), "{}", stderr(&from_scenario));
    assert!(stderr(&from_scenario).contains("cost model: calibrated profile (bundled h100-sxm--vllm-0.24.0"), "{}", stderr(&from_scenario));
    let from_flag = servesim(&["simulate", plain.to_str().unwrap(), "--profile", "auto"]);
    assert_eq!(stdout(&from_scenario), stdout(&from_flag));

    let mi300x = servesim(&["simulate", auto.to_str().unwrap(), "--set", "hardware.gpu=\"MI300X\""]);
    assert!(mi300x.status.success(), "{}", stderr(&mi300x));
    assert!(stderr(&mi300x).contains("transferred to MI300X"), "{}", stderr(&mi300x));
    let default = servesim(&["simulate", plain.to_str().unwrap(), "--set", "hardware.gpu=\"MI300X\""]);
    assert_eq!(stdout(&mi300x), stdout(&default));

    let a100 = repo().join("calibration/public/a100-80g-sxm--vllm-0.14.0.csv.zst");
    for (profile, needle) in [(a100.to_str().unwrap(), "measured on A100-80G-SXM"), ("missing.csv", "no such kernel profile file")] {
        let path = write_file(dir.path(), "bad.toml", &with_cost(profile));
        let out = servesim(&["simulate", path.to_str().unwrap()]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("bad.toml") && err.contains("cost.profile") && err.contains(needle), "{err}");
    }
}

/// The `parquet` crate panics on some corrupt files (a flipped byte in the footer or a data
/// page). Single-byte corruptions of a small published table are read here: each either reads,
/// or fails with an error naming the file, and never panics out of the import. Every 16th byte
/// is flipped, and the six bytes whose flip made the library panic when all 4,365 were tried
/// (2026-11-28; 16 s, too slow to run each time), so the containment is exercised and those
/// errors name the column whose page is corrupt.
#[test]
fn corrupt_parquet_is_an_error_naming_the_file_never_a_panic() {
    use servesim::calibrate::import::table::Table;
    let original = std::fs::read(repo().join("tests/data/public/aiconfigurator/h100_sxm/comm/vllm/0.24.0/custom_allreduce_perf.parquet")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("custom_allreduce_perf.parquet");
    let (mut contained, mut named_column, mut errors) = (0, 0, 0);
    const PANICKED: [usize; 6] = [562, 2203, 2473, 2555, 2762, 3303];
    for at in (0..original.len()).step_by(16).chain(PANICKED) {
        let mut bytes = original.clone();
        bytes[at] ^= 0xff;
        std::fs::write(&file, &bytes).unwrap();
        let outcome = std::panic::catch_unwind(|| Table::read_parquet(&file));
        let result = outcome.unwrap_or_else(|_| panic!("byte {at} flipped: a panic escaped the import"));
        if let Err(e) = result {
            let message = e.to_string();
            assert!(message.contains("custom_allreduce_perf.parquet"), "byte {at}: {message}");
            errors += 1;
            if message.contains("the parquet library fail") {
                contained += 1;
                named_column += usize::from(message.contains("column `"));
            }
        }
    }
    println!("{errors} errors, {contained} contained panics, {named_column} naming a column");
    assert!(contained >= PANICKED.len(), "fewer mutants made the library panic than before ({contained}): the containment went untested");
    assert_eq!(named_column, contained, "every contained panic here is in one column's page");
}

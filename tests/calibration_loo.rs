//! Leave-one-out interpolation error of a CPU profile (issue 4: median ≤ 5%, p90 ≤ 15%).
//!
//! The accuracy bound is asserted on a profile measured once and committed
//! (`tests/data/cpu-profile/tiny.csv`), so it is deterministic: timings taken while other work
//! shares the machine are noisier than any fixed bound (issue 17), and how well the kernels
//! measured today interpolate is what `servesim calibrate` itself prints after every run. The
//! measurement here is still exercised, for what does not depend on the machine's load: every
//! shape of the grid is measured once, with a positive and ordered time, and the profile
//! survives a write and a read. `SERVESIM_BLESS=1` replaces the committed profile with the one
//! just measured (do it on an idle machine).

use servesim::calibrate::cpu::CpuBackend;
use servesim::calibrate::grid::{Grid, GridOptions, GridScale, attention_work};
use servesim::calibrate::profile::Profile;
use servesim::calibrate::run::{RunOptions, calibrate};
use servesim::calibrate::timing::TimingOptions;
use servesim::cost::calibrated::{LeaveOneOut, leave_one_out};
use servesim::scenario::{Dtype, ModelSpec};
use std::path::Path;

const COMMITTED_PROFILE: &str = "tests/data/cpu-profile/tiny.csv";

fn report(label: &str, errors: &[f64]) -> (f64, f64) {
    let (median, p90) = LeaveOneOut::summary(errors);
    println!(
        "leave-one-out {label}: {} points, median relative error {:.2}%, p90 {:.2}%",
        errors.len(),
        median * 100.0,
        p90 * 100.0
    );
    (median, p90)
}

/// A small model whose tiny-grid shapes each take at most a few milliseconds on one core.
fn cpu_test_model() -> ModelSpec {
    ModelSpec {
        name: "cpu-test".into(),
        num_layers: 2,
        hidden_size: 256,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 32,
        ffn_size: 512,
        vocab_size: 1024,
        tied_embeddings: false,
        max_position_embeddings: 4096,
        weight_dtype: Dtype::Fp32,
        kv_dtype: Dtype::Fp32,
        moe: None,
        mla: None,
        dsa: None,
        weight_quant: None,
        attention: Default::default(),
    }
}

fn cpu_test_grid() -> Grid {
    let mut grid = Grid::new(GridOptions::for_model(cpu_test_model(), vec![1], vec![Dtype::Fp32], GridScale::Tiny));
    // Short kernels (≲ 5 ms each on one core) keep the test fast.
    grid.attention.retain(|s| attention_work(s).flops <= 4e6);
    grid
}

#[test]
fn a_cpu_profile_measured_here_covers_its_grid_and_round_trips() {
    let grid = cpu_test_grid();
    // One thread: tests run beside each other, and a pool of one is the least disturbed.
    let mut backend = CpuBackend::new(1).expect("CPU backend");
    let timing = TimingOptions {
        warmup: 2,
        min_repeats: 9,
        max_repeats: 51,
        max_time: std::time::Duration::from_millis(100),
        stable_window: 4,
        stable_rel: 0.005,
        flush_cache: false,
        ..TimingOptions::default()
    };
    let options = RunOptions { timing, ..RunOptions::default() };
    let start = std::time::Instant::now();
    let profile = calibrate(&mut backend, &grid, &options).expect("CPU calibration");
    println!("CPU profile: {} shapes measured in {:.1} s", grid.len(), start.elapsed().as_secs_f64());
    assert_eq!(profile.provenance.run.measured, grid.len() as u64, "{}", profile.provenance.run);
    assert_eq!(profile.rows.len(), grid.len());
    for row in &profile.rows {
        let m = &row.measurement;
        assert!(m.median_ns.is_finite() && m.median_ns > 0.0, "{row:?}");
        assert!(m.p10_ns <= m.median_ns && m.median_ns <= m.p90_ns, "{row:?}");
        assert!(m.repeats >= 1, "{row:?}");
    }
    // Informational only: today's timings on a possibly busy machine.
    report("CPU, measured now (not asserted)", &leave_one_out(&profile).all());

    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().join("profile.csv");
    profile.write(&written).unwrap();
    let read = Profile::read(&written).unwrap();
    assert_eq!(read.rows.len(), profile.rows.len());
    for (a, b) in read.rows.iter().zip(&profile.rows) {
        assert_eq!(a.shape, b.shape);
        assert_eq!(a.measurement, b.measurement);
    }

    if std::env::var_os("SERVESIM_BLESS").is_some() {
        profile.write(Path::new(COMMITTED_PROFILE)).unwrap();
        println!("wrote {COMMITTED_PROFILE}");
    }
}

#[test]
fn leave_one_out_on_the_committed_cpu_profile_meets_the_thresholds() {
    let profile = Profile::read(Path::new(COMMITTED_PROFILE)).expect("committed CPU profile");
    let grid = cpu_test_grid();
    assert_eq!(profile.rows.len(), grid.len(), "the committed profile is of the test's grid; rebless it if the grid changed");
    let loo = leave_one_out(&profile);
    report("CPU GEMM", &loo.gemm);
    report("CPU attention", &loo.attention);
    let (median, p90) = report("CPU all", &loo.all());
    assert!(median <= 0.05 && p90 <= 0.15, "leave-one-out median {median:.4}, p90 {p90:.4} missed 5% / 15%");
}

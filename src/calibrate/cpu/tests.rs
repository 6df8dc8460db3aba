use super::*;
use crate::calibrate::grid::{CPU_DEFAULT_SHAPES_MAX, Grid, GridOptions};

/// Two threads and a 32 MiB last-level cache, whatever the host's: no verdict below may
/// depend on the machine's cache.
fn backend() -> CpuBackend {
    CpuBackend::with_llc_bytes(2, 32 << 20).expect("CPU backend")
}

fn attention(phase: AttentionPhase, batch: u32, query_len: u32, context_len: u32, heads: (u32, u32, u32)) -> AttentionShape {
    AttentionShape {
        phase,
        batch,
        query_len,
        context_len,
        num_heads: heads.0,
        num_kv_heads: heads.1,
        head_dim: heads.2,
        uneven: false,
        dtype: Dtype::Fp32,
    }
}

#[test]
fn peak_is_positive_and_plausible() {
    let b = backend();
    let peak = b.peak();
    // Measured now, so only bounds that load cannot break: a busy machine lowers both
    // figures by any factor, but raises neither past what no CPU reaches.
    assert!(peak.flops_per_s > 0.0 && peak.flops_per_s < 1e14, "implausible peak FLOP/s {:e}", peak.flops_per_s);
    assert!(
        peak.memory_bytes_per_s > 0.0 && peak.memory_bytes_per_s < 1e13,
        "implausible bandwidth {:e} B/s",
        peak.memory_bytes_per_s
    );
    eprintln!("CPU peak on 2 threads: {:.1} GFLOP/s, {:.1} GB/s", peak.flops_per_s / 1e9, peak.memory_bytes_per_s / 1e9);
}

#[test]
fn device_info_and_kernel_hashes() {
    let b = backend();
    let info = b.device_info();
    assert_eq!(info.device, "cpu");
    assert!(!info.name.is_empty());
    assert_eq!(info.parallelism, Some(2));
    assert_eq!((info.driver_version, info.runtime_version), (None, None));
    let hashes = b.kernel_hashes();
    assert_eq!(hashes.len(), KERNEL_SOURCES.len());
    assert!(hashes.iter().any(|(name, _)| name == "engine/cpu/prefill.rs"));
    assert!(hashes.iter().all(|(_, h)| h.len() == 16 && h.bytes().all(|c| c.is_ascii_hexdigit())));
    // Distinct files hash differently.
    let mut distinct: Vec<&String> = hashes.iter().map(|(_, h)| h).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), hashes.len());
    assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c, "FNV-1a 64 test vector");
}

#[test]
fn a_memory_bound_gemm_is_timed_in_its_step_and_must_be_in_it() {
    let mut b = backend();
    let shape = GemmShape { m: 2, n: 96, k: 64, dtype: Dtype::Fp32 };
    let step = StepGemms { sequence: vec![(160, 64), (96, 64), (128, 96)], timed: 1 };
    let mut op = b.prepare_gemm_in_step(&shape, &step).expect("GEMM in its step");
    assert!(op.run_once().unwrap() > 0.0);
    drop(op);
    let elsewhere = StepGemms { timed: 0, ..step };
    let e = b.prepare_gemm_in_step(&shape, &elsewhere).err().expect("the shape is not entry 0");
    assert!(matches!(e, DeviceError::Failed(ref r) if r.contains("not entry 0")), "{e}");
}

#[test]
fn only_f32_is_supported() {
    let mut b = backend();
    assert!(b.supports(Dtype::Fp32));
    for dtype in [Dtype::Bf16, Dtype::Fp16, Dtype::Fp8] {
        assert!(!b.supports(dtype));
        let gemm = GemmShape { m: 4, n: 4, k: 4, dtype };
        assert!(matches!(b.prepare_gemm(&gemm), Err(DeviceError::Unsupported(_))), "{dtype:?} GEMM");
        let attn = AttentionShape { dtype, ..attention(AttentionPhase::Decode, 2, 1, 10, (4, 2, 16)) };
        assert!(matches!(b.prepare_attention(&attn), Err(DeviceError::Unsupported(_))), "{dtype:?} attention");
    }
}

#[test]
fn every_prepared_op_runs_and_reports_positive_times() {
    let mut b = backend();
    let gemms = [(1, 64, 64), (7, 100, 33), (64, 256, 128), (300, 96, 200)];
    for (m, n, k) in gemms {
        let mut op = b.prepare_gemm(&GemmShape { m, n, k, dtype: Dtype::Fp32 }).expect("prepare GEMM");
        for _ in 0..3 {
            op.flush_cache().expect("flush");
            let ns = op.run_once().expect("run GEMM");
            assert!(ns > 0.0 && ns.is_finite(), "GEMM {m}×{n}×{k} took {ns} ns");
        }
    }
    let shapes = [
        attention(AttentionPhase::Prefill, 3, 40, 0, (8, 2, 64)),
        attention(AttentionPhase::Prefill, 1, 17, 0, (4, 4, 80)),
        attention(AttentionPhase::Mixed, 2, 16, 100, (8, 1, 64)),
        attention(AttentionPhase::Decode, 4, 1, 50, (8, 8, 64)),
        attention(AttentionPhase::Decode, 5, 1, 33, (16, 2, 128)),
        AttentionShape { uneven: true, ..attention(AttentionPhase::Decode, 6, 1, 40, (8, 2, 64)) },
    ];
    for shape in shapes {
        let mut op = b.prepare_attention(&shape).expect("prepare attention");
        for _ in 0..3 {
            op.flush_cache().expect("flush");
            let ns = op.run_once().expect("run attention");
            assert!(ns > 0.0 && ns.is_finite(), "{shape:?} took {ns} ns");
        }
    }
}

#[test]
fn gemm_breakpoints_bracket_each_step_of_the_few_row_kernel() {
    let b = backend();
    let m = b.gemm_m_breakpoints();
    if !gemm_skinny::available() {
        assert!(m.is_empty(), "{m:?}");
        return;
    }
    // The kernel switch at 1 | 2, its panel widths' changes up to 6 | 7, each tile boundary
    // j·8 | j·8 + 1, and the switch back.
    for pair in [[1, 2], [2, 3], [3, 4], [4, 5], [6, 7], [8, 9], [16, 17], [24, 25], [32, 33], [64, 65]] {
        assert!(pair.iter().all(|x| m.contains(x)), "{pair:?} in {m:?}");
    }
    assert!(m.iter().all(|&x| x <= 65), "{m:?}");
}

#[test]
fn attention_runs_read_rotating_copies_of_the_cache_kept_between_shapes() {
    let mut b = backend();
    let small = attention(AttentionPhase::Decode, 4, 1, 50, (8, 2, 64));
    {
        let mut op = b.prepare_attention(&small).expect("prepare");
        for _ in 0..2 * KV_COPIES {
            op.run_once().expect("run");
        }
    }
    let block_floats = CALIBRATION_BLOCK_SIZE * 2 * 64;
    let region = Layout::new(&small).unwrap().num_blocks * block_floats;
    assert_eq!((b.kv.block_floats, b.kv.copies.len()), (block_floats, KV_COPIES));
    // Distinct allocations: each run reads memory of its own.
    let bases: std::collections::BTreeSet<usize> = b.kv.copies.iter().map(|(k, _)| k.as_ptr() as usize).collect();
    assert_eq!(bases.len(), KV_COPIES);
    let held = b.kv.copies[0].0.len();
    assert!(held >= region, "{held} < {region}");
    // A smaller shape reuses the copies; a larger one grows them; other heads refill them.
    let first_base = b.kv.copies[0].0.as_ptr();
    drop(b.prepare_attention(&attention(AttentionPhase::Decode, 2, 1, 20, (8, 2, 64))).expect("prepare"));
    assert_eq!(b.kv.copies[0].0.as_ptr(), first_base);
    let large = attention(AttentionPhase::Decode, 16, 1, 400, (8, 2, 64));
    drop(b.prepare_attention(&large).expect("prepare"));
    assert!(b.kv.copies[0].0.len() >= Layout::new(&large).unwrap().num_blocks * block_floats);
    drop(b.prepare_attention(&attention(AttentionPhase::Decode, 2, 1, 20, (4, 4, 16))).expect("prepare"));
    assert_eq!(b.kv.block_floats, CALIBRATION_BLOCK_SIZE * 4 * 16);
}

#[test]
fn uneven_decode_spreads_contexts_around_the_mean() {
    let shape = AttentionShape { uneven: true, ..attention(AttentionPhase::Decode, 8, 1, 100, (4, 4, 16)) };
    let layout = Layout::new(&shape).expect("layout");
    let contexts: Vec<usize> = layout.seq_lens.iter().map(|l| l - 1).collect();
    assert!(contexts.iter().all(|&c| (1..=200).contains(&c)), "{contexts:?}");
    assert!(contexts.windows(2).all(|w| w[0] < w[1]), "spread, not equal: {contexts:?}");
    let mean = contexts.iter().sum::<usize>() as f64 / contexts.len() as f64;
    assert!((mean - 100.0).abs() <= 1.0, "mean context {mean}");
    // Every block is used exactly once across the tables.
    let mut used = layout.blocks[..layout.cu_blocks[8]].to_vec();
    used.sort();
    assert_eq!(used, (0..layout.num_blocks as u32).collect::<Vec<_>>());
}

#[test]
fn malformed_shapes_are_errors_not_panics() {
    let mut b = backend();
    let uneven_groups = attention(AttentionPhase::Prefill, 1, 8, 0, (6, 4, 16));
    assert!(matches!(b.prepare_attention(&uneven_groups), Err(DeviceError::Unsupported(_))));
    let long_decode = attention(AttentionPhase::Decode, 1, 4, 8, (4, 4, 16));
    assert!(matches!(b.prepare_attention(&long_decode), Err(DeviceError::Failed(_))));
    let huge = GemmShape { m: 1 << 20, n: 1 << 20, k: 1 << 20, dtype: Dtype::Fp32 };
    assert!(matches!(b.prepare_gemm(&huge), Err(DeviceError::Unsupported(_))));
}

#[test]
fn operands_held_stay_within_the_memory_cap() {
    // A small last-level cache and a VM's reported 300 MiB one: the copies of small weights
    // grow with the cache (2 × 300 MiB is 512 MiB after the flush buffer's cap), and must
    // stop at the memory cap rather than get a small shape refused.
    for llc_mib in [8, 300] {
        let mut b = CpuBackend::with_llc_bytes(1, llc_mib << 20).expect("CPU backend");
        let cap = 320u64 << 20;
        b.set_memory_cap(cap);
        let step = StepGemms { sequence: vec![(1024, 512), (512, 1024)], timed: 0 };
        for m in [1, 2, 64] {
            drop(b.prepare_gemm_in_step(&GemmShape { m, n: 1024, k: 512, dtype: Dtype::Fp32 }, &step).expect("fits"));
            assert!(b.held_bytes() <= cap, "LLC {llc_mib} MiB: {} > {cap}", b.held_bytes());
        }
        drop(b.prepare_attention(&attention(AttentionPhase::Decode, 8, 1, 1000, (8, 8, 64))).expect("fits"));
        assert!(b.held_bytes() <= cap, "LLC {llc_mib} MiB: {} > {cap}", b.held_bytes());
        drop(b.prepare_gemm(&GemmShape { m: 4, n: 2048, k: 4096, dtype: Dtype::Fp32 }).expect("fits"));
        assert!(b.held_bytes() <= cap, "LLC {llc_mib} MiB: {} > {cap}", b.held_bytes());
        // One shape over the cap by itself is refused, saying what it needs; what is kept
        // stays usable.
        let e = b.prepare_gemm(&GemmShape { m: 1, n: 65536, k: 2048, dtype: Dtype::Fp32 }).err().expect("over the cap");
        assert!(matches!(e, DeviceError::Unsupported(ref r) if r.contains("needs 0.50 GiB") && r.contains("at most 0.31 GiB")), "{e}");
        assert!(b.held_bytes() <= cap);
        assert!(b.prepare_gemm(&GemmShape { m: 1, n: 1024, k: 512, dtype: Dtype::Fp32 }).is_ok());
    }
}

#[test]
fn a_small_cap_still_runs_a_shape_whose_one_copy_fits_whatever_the_cache() {
    // 24 MiB of weights a copy: a 300 MiB cache asks for 21 copies (512 MiB), the cap holds 2.
    for llc_mib in [8, 300] {
        let mut b = CpuBackend::with_llc_bytes(1, llc_mib << 20).expect("CPU backend");
        b.set_memory_cap(64 << 20);
        let step = StepGemms { sequence: vec![(3072, 1024), (1024, 3072)], timed: 1 };
        let op = b.prepare_gemm_in_step(&GemmShape { m: 2, n: 1024, k: 3072, dtype: Dtype::Fp32 }, &step);
        assert!(op.is_ok(), "LLC {llc_mib} MiB: {:?}", op.err());
        drop(op);
        assert!(b.held_bytes() <= 64 << 20, "LLC {llc_mib} MiB: {}", b.held_bytes());
    }
}

#[test]
fn the_cache_size_variable_is_checked() {
    use std::ffi::OsStr;
    assert_eq!(llc_bytes_from_var(OsStr::new("300")).ok(), Some(300 << 20));
    assert_eq!(llc_bytes_from_var(OsStr::new(" 8 ")).ok(), Some(8 << 20));
    for bad in ["0", "65537", "12MB", "", "-3", "1e3"] {
        let got = llc_bytes_from_var(OsStr::new(bad));
        assert!(
            matches!(got, Err(DeviceError::Failed(ref m)) if m.contains(LLC_MIB_VAR) && m.contains(&format!("{bad:?}"))),
            "{bad}: {got:?}"
        );
    }
}

#[test]
fn zero_threads_is_an_error() {
    assert!(matches!(CpuBackend::new(0), Err(DeviceError::Failed(_))));
}

/// Prints each kernel's achieved throughput against the measured peak, for tuning:
/// `cargo test --release --lib calibrate::cpu -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check; run in release"]
fn print_kernel_throughput() {
    use crate::calibrate::grid::{attention_work, gemm_work};
    let threads = std::env::var("SERVESIM_TEST_THREADS").ok().and_then(|t| t.parse().ok()).unwrap_or(2);
    let t0 = Instant::now();
    let mut b = CpuBackend::new(threads).expect("CPU backend");
    let peak = b.peak();
    eprintln!(
        "new({threads}) took {:.0} ms; peak {:.1} GFLOP/s, {:.1} GB/s; isa {:?}",
        t0.elapsed().as_secs_f64() * 1e3,
        peak.flops_per_s / 1e9,
        peak.memory_bytes_per_s / 1e9,
        crate::engine::cpu::isa()
    );
    // On a loaded machine wall time says little: with SERVESIM_TEST_CPU_TIME=1 (and 1
    // thread), report the pool thread's own CPU time from /proc/thread-self/schedstat.
    let cpu_time = std::env::var("SERVESIM_TEST_CPU_TIME").is_ok();
    let schedstat_ns = || -> f64 {
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(f64::NAN)
    };
    // The backend's own pool: `op` borrows the backend for its whole life, so reach the pool
    // through a pointer (it does not move while `b` lives; this is a diagnostic).
    let pool: *const rayon::ThreadPool = &b.pool;
    let thread_ns = || if cpu_time { unsafe { &*pool }.install(schedstat_ns) } else { 0.0 };
    let best = |op: &mut dyn PreparedOp| {
        (0..7)
            .map(|_| {
                op.flush_cache().unwrap();
                let before = thread_ns();
                let ns = op.run_once().unwrap();
                if cpu_time { thread_ns() - before } else { ns }
            })
            .skip(2)
            .fold(f64::INFINITY, f64::min)
    };
    for (m, n, k) in [(1, 2304, 768), (32, 2304, 768), (32, 768, 3072), (256, 2304, 768), (1024, 1024, 1024)] {
        let shape = GemmShape { m, n, k, dtype: Dtype::Fp32 };
        let ns = best(b.prepare_gemm(&shape).unwrap().as_mut());
        let w = gemm_work(&shape);
        eprintln!(
            "gemm {m:>5}×{n:>5}×{k:>5}: {:>9.1} µs  {:>6.1} GFLOP/s  {:>6.1} GB/s",
            ns / 1e3,
            w.flops / ns,
            w.bytes / ns
        );
    }
    for (m, n, k) in [(1, 2304, 768), (4, 2304, 768), (16, 2304, 768), (32, 2304, 768), (64, 768, 3072), (128, 2304, 768), (256, 2304, 768)] {
        for layout in [BLayout::RowMajor, BLayout::Transposed] {
            let gemm = Gemm { m, n, k, b_layout: layout, accumulate: false };
            let (a, bm, mut c) = (vec![0.5; m * k], vec![0.25; k * n], vec![0.0; m * n]);
            let mut ns = f64::INFINITY;
            for _ in 0..5 {
                let before = thread_ns();
                let wall = unsafe { &*pool }.install(|| {
                    let t = Instant::now();
                    gemm.run(&a, &bm, &mut c, threads);
                    t.elapsed().as_nanos() as f64
                });
                ns = ns.min(if cpu_time { thread_ns() - before } else { wall });
            }
            eprintln!("gemm {m:>5}×{n:>5}×{k:>5} B {layout:?}: {:>9.1} µs  {:>6.1} GFLOP/s", ns / 1e3, gemm.flops() / ns);
        }
    }
    let shapes = [
        attention(AttentionPhase::Prefill, 1, 512, 0, (12, 12, 64)),
        attention(AttentionPhase::Prefill, 1, 1024, 0, (32, 8, 128)),
        attention(AttentionPhase::Mixed, 2, 256, 1024, (12, 12, 64)),
        attention(AttentionPhase::Decode, 32, 1, 512, (12, 12, 64)),
        attention(AttentionPhase::Decode, 32, 1, 2048, (32, 8, 128)),
        attention(AttentionPhase::Decode, 1, 1, 8192, (32, 8, 128)),
    ];
    for shape in shapes {
        let ns = best(b.prepare_attention(&shape).unwrap().as_mut());
        let w = attention_work(&shape);
        eprintln!(
            "{:?} b{} q{} c{} h{}/{}/{}: {:>9.1} µs  {:>6.1} GFLOP/s  {:>6.1} GB/s",
            shape.phase,
            shape.batch,
            shape.query_len,
            shape.context_len,
            shape.num_heads,
            shape.num_kv_heads,
            shape.head_dim,
            ns / 1e3,
            w.flops / ns,
            w.bytes / ns
        );
    }
}

#[test]
fn cache_sizes_parse() {
    assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
    assert_eq!(parse_cache_size("2M"), Some(2 << 20));
    assert_eq!(parse_cache_size("512"), Some(512));
    assert_eq!(parse_cache_size("x"), None);
}

#[test]
fn the_cpu_default_grid_is_bounded() {
    let mut options = GridOptions::cpu_default();
    // With the most extra rows a CPU backend asks for (where the few-row kernel runs).
    options.extra_m = few_row_kernel_breakpoints();
    let worst = Grid::new(options).len();
    let plain = Grid::new(GridOptions::cpu_default()).len();
    println!("CPU default grid: {plain} shapes, {worst} with the few-row kernel's breakpoints");
    assert!(worst <= CPU_DEFAULT_SHAPES_MAX, "{worst} shapes");
    assert!(plain >= 100, "{plain} shapes: too few to price a model");
}

//! `calibrate import --from vidur | llmservingsim | frontier` on verbatim subsets of the
//! published files (`tests/data/public/<source>/`, described in its README), as a user runs it:
//! each profile names its source; it reproduces its own rows (round trip, ≤ 3%); each row is
//! predicted from its neighbours (leave one out, median ≤ 10%); and another source's
//! measurements of the same shapes (the bundled aiconfigurator profile of the same GPU) agree
//! (median ≤ 10% on GEMMs). A malformed file is named with its row and column.

mod common;
use common::*;

use std::path::{Path, PathBuf};

use servesim::calibrate::backend::{AttentionPhase, GemmShape};
use servesim::calibrate::grid::Shape;
use servesim::calibrate::import::compare;
use servesim::calibrate::profile::Profile;
use servesim::cost::calibrated::{LeaveOneOut, ProfileIndex, leave_one_out};
use servesim::scenario::{Dtype, GpuSpec};

fn fixture(source: &str) -> PathBuf {
    repo().join("tests/data/public").join(source)
}

/// Runs `servesim calibrate import --from FORMAT PATHS… --out DIR/FORMAT.csv`; the profile and
/// the command's stderr.
fn import(dir: &Path, format: &str, paths: &[&Path]) -> (Profile, String) {
    let out = dir.join(format!("{format}.csv"));
    let mut args = vec!["calibrate", "import", "--from", format];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    args.extend(["--out", out.to_str().unwrap()]);
    let run = servesim(&args);
    let err = stderr(&run);
    assert!(run.status.success(), "{err}");
    println!("{err}");
    (Profile::read(&out).unwrap_or_else(|e| panic!("{e}")), err)
}

fn percent((median, p90): (f64, f64)) -> String {
    format!("median {:.2}%, p90 {:.2}%", median * 100.0, p90 * 100.0)
}

fn count(profile: &Profile, f: &dyn Fn(&Shape) -> bool) -> usize {
    profile.rows.iter().filter(|r| f(&r.shape)).count()
}

fn attention_rows(profile: &Profile, phase: AttentionPhase) -> usize {
    count(profile, &|s| matches!(s, Shape::Attention(a) if a.phase == phase))
}

/// The worst round-trip error: each row priced by the profile it belongs to.
fn round_trip_worst(name: &str, profile: &Profile) -> f64 {
    let index = ProfileIndex::new(profile);
    let (mut worst, mut worst_shape) = (0.0f64, None);
    for row in &profile.rows {
        let predicted = match &row.shape {
            Shape::Gemm(g) => index.predict_gemm_ns(g),
            Shape::Attention(a) => index.predict_attention_ns(a),
            Shape::AllReduce(r) => index.allreduce_s(r.bytes as f64, r.gpus).map(|s| s * 1e9),
            Shape::AllToAll(r) => index.alltoall_s(r.bytes as f64, r.gpus).map(|s| s * 1e9),
            Shape::Sampling(s) => index.sampling_cost(s.method, s.vocab).map(|c| c.ns_per_logit() * f64::from(s.rows) * f64::from(s.vocab)),
        }
        .unwrap_or_else(|| panic!("{name}: no prediction for {:?}", row.shape));
        let error = (predicted - row.measurement.median_ns).abs() / row.measurement.median_ns;
        if error > worst {
            (worst, worst_shape) = (error, Some(row.shape));
        }
    }
    println!("{name}: round trip over {} rows, worst {:.3}% ({worst_shape:?})", profile.rows.len(), worst * 100.0);
    worst
}

/// Leave one out: each GEMM and attention point predicted from its curve's or surface's
/// other points; (median, p90), printed.
fn loo(name: &str, profile: &Profile) -> (f64, f64) {
    let loo = leave_one_out(profile);
    let all = LeaveOneOut::summary(&loo.all());
    println!(
        "{name}: leave one out, GEMMs {}; attention {}; all {}",
        percent(LeaveOneOut::summary(&loo.gemm)),
        percent(LeaveOneOut::summary(&loo.attention)),
        percent(all)
    );
    all
}

/// The bundled profile of `gpu` (aiconfigurator, vLLM) against `profile`'s rows, printed per
/// kind.
fn against_bundled(name: &str, profile: &Profile, gpu: &str) -> compare::Agreement {
    let bundled = servesim::cost::bundled::for_gpu(&GpuSpec::preset(gpu).unwrap()).unwrap();
    let agreement = compare::against(&profile.rows, &bundled.index);
    for line in agreement.lines(&format!("{name}: the bundled {}", bundled.name)) {
        println!("{line}");
    }
    agreement
}

#[test]
fn vidur_a100_imports_gemms_attention_over_a_prefix_and_all_reduce() {
    let dir = tempfile::tempdir().unwrap();
    let (profile, err) = import(dir.path(), "vidur", &[&fixture("vidur")]);
    // What was left out is said, with counts: vidur's non-GEMM ops, all-reduces across nodes.
    for needle in ["left out 136 rows: vidur `input_layernorm` (RMSNorm", "vidur `attn_rope`", "all-reduce spanning nodes"] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(err.contains("shapes timed more than once keep the median"), "{err}");
    let source = profile.provenance.source.as_ref().expect("an imported profile names its source");
    assert_eq!((source.format.as_str(), source.repository.as_str()), ("vidur", "microsoft/vidur"));
    // The per-layer files and the older attention file come from two commits: both named.
    assert_eq!(source.commit, "7d47513363ec447a741ac5e47241580b47724fbf; acb95f6cd118071401fa805a0b0bc11bd2018fc6");
    assert_eq!((source.license.as_str(), source.gpu.as_str()), ("MIT License", "A100-80G-SXM"));
    assert_eq!(source.dtypes, ["fp16"]);
    assert!(source.files.iter().any(|f| f == "vidur/history-acb95f6c/data/profiling/a100/attention.csv"), "{:?}", source.files);
    assert!(source.kernels.iter().any(|k| k == "FLASH_ATTENTION"), "{:?}", source.kernels);
    // Four projections of two models at 14 token counts and four TP degrees: 448 timings,
    // Llama-3-8B's and 70B's O projections at TP 2 and TP 4 differing only in k (and the 8B's
    // QKV at TP 8 = 70B's O at …) — fewer distinct shapes.
    let gemms = count(&profile, &|s| matches!(s, Shape::Gemm(_)));
    assert!((400..=448).contains(&gemms), "{gemms}");
    assert!(attention_rows(&profile, AttentionPhase::Prefill) >= 7);
    assert!(attention_rows(&profile, AttentionPhase::Mixed) >= 20, "chunks over a cached prefix are imported");
    assert!(attention_rows(&profile, AttentionPhase::Decode) >= 60);
    let reduces: std::collections::BTreeSet<u32> =
        profile.rows.iter().filter_map(|r| if let Shape::AllReduce(a) = r.shape { Some(a.gpus) } else { None }).collect();
    assert_eq!(reduces.into_iter().collect::<Vec<_>>(), [2, 4, 8]);
    // A table value, exactly: Meta-Llama-3-70B at TP 1, 4096 tokens, mlp_down_proj
    // (k = 28672, n = 8192), `time_stats.mlp_down_proj.median` in ms; where vidur timed the row
    // twice, the upper middle of the timings.
    let down = GemmShape { m: 4096, n: 8192, k: 28672, dtype: Dtype::Fp16 };
    let row = profile.rows.iter().find(|r| r.shape == Shape::Gemm(down)).expect("the down projection");
    let text = std::fs::read_to_string(fixture("vidur/data/profiling/compute/a100/meta-llama/Meta-Llama-3-70B/mlp.csv")).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let mut timings_ms: Vec<f64> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[col("num_tokens")] == "4096" && f[col("num_tensor_parallel_workers")] == "1")
        .map(|f| f[col("time_stats.mlp_down_proj.median")].parse().unwrap())
        .collect();
    timings_ms.sort_by(f64::total_cmp);
    assert_eq!(row.measurement.median_ns, (timings_ms[timings_ms.len() / 2] * 1e6).round(), "{timings_ms:?}");

    assert!(round_trip_worst("vidur A100", &profile) <= 0.03);
    assert!(loo("vidur A100", &profile).0 <= 0.10);
}

/// vidur's A100 GEMMs (fp16, sarathi-serve, 2024) against the bundled A100 profile
/// (aiconfigurator, vLLM 0.14, bf16) on the same shapes; the all-reduce curves of the two
/// (NCCL in a DGX, and vLLM's custom all-reduce in a CUDA graph) are printed.
#[test]
fn vidur_a100_agrees_with_the_bundled_a100_profile() {
    let dir = tempfile::tempdir().unwrap();
    let (profile, err) = import(dir.path(), "vidur", &[&fixture("vidur")]);
    let agreement = against_bundled("vidur A100", &profile, "A100-80G-SXM");
    let (median, _) = LeaveOneOut::summary(&compare::Agreement::magnitudes(&agreement.gemm));
    assert!(agreement.gemm.len() >= 400, "{}", agreement.gemm.len());
    assert!(median <= 0.10, "GEMMs: median {:.1}%", median * 100.0);
    assert!(!agreement.decode.is_empty() && !agreement.all_reduce.is_empty());
    // The import says the same, in its notes and the provenance.
    assert!(err.contains("sources differ: the bundled a100-80g-sxm--vllm-0.14.0 (aiconfigurator) against these rows on"), "{err}");
    let source = profile.provenance.source.as_ref().unwrap();
    assert!(source.agreement.iter().any(|l| l.contains("GEMMs: median")), "{:?}", source.agreement);
}

/// LLMServingSim's GEMM shapes in the fixture: k and v (and gate and up) projections are one
/// shape each, 6 per model and TP at 22 token counts in 5 files; at TP 1 the O projection is the
/// Q projection's shape (hidden × hidden) too, in both models.
const GEMM_SHAPES: usize = 6 * 22 * 5 - 2 * 22;

#[test]
fn llmservingsim_h100_imports_separate_projections_and_flash_attention() {
    let dir = tempfile::tempdir().unwrap();
    let (profile, err) = import(dir.path(), "llmservingsim", &[&fixture("llmservingsim")]);
    for needle in ["LLMServingSim `attn` (SDPA attention", "LLMServingSim `input_layernorm` (RMSNorm, eager PyTorch)"] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    let source = profile.provenance.source.as_ref().unwrap();
    assert_eq!(
        (source.repository.as_str(), source.commit.as_str(), source.license.as_str(), source.gpu.as_str()),
        ("casys-kaist/LLMServingSim", "5daddb21a545658d5150b535712d0494584b5278", "MIT License", "H100-SXM")
    );
    assert_eq!(count(&profile, &|s| matches!(s, Shape::Gemm(_))), GEMM_SHAPES);
    // LLMServingSim's key lengths include the chunk: a chunk of 64 over 64 keys has no prefix.
    let first = profile
        .rows
        .iter()
        .find_map(|r| match r.shape {
            Shape::Attention(a) if a.phase == AttentionPhase::Prefill && a.query_len == 64 => Some(a),
            _ => None,
        })
        .expect("a whole-prompt prefill of 64 tokens");
    assert_eq!((first.context_len, first.num_heads, first.num_kv_heads, first.head_dim), (0, 16, 2, 128));
    assert!(attention_rows(&profile, AttentionPhase::Mixed) >= 10);
    assert!(attention_rows(&profile, AttentionPhase::Decode) >= 30);
    assert!(round_trip_worst("LLMServingSim H100", &profile) <= 0.03);
    assert!(loo("LLMServingSim H100", &profile).0 <= 0.10);
}

/// LLMServingSim's H100 GEMMs of Llama-3.1-8B and 70B (fp16, Hugging Face layers, cuBLAS;
/// 2026) against the bundled H100 profile (vLLM 0.24, bf16), and its attention (flash-attn 2)
/// against vLLM's FlashAttention 3 rows where the head configuration matches.
#[test]
fn llmservingsim_h100_agrees_with_the_bundled_h100_profile() {
    let dir = tempfile::tempdir().unwrap();
    let (profile, _) = import(dir.path(), "llmservingsim", &[&fixture("llmservingsim")]);
    let agreement = against_bundled("LLMServingSim H100", &profile, "H100-SXM");
    let (median, _) = LeaveOneOut::summary(&compare::Agreement::magnitudes(&agreement.gemm));
    assert_eq!(agreement.gemm.len(), GEMM_SHAPES);
    assert!(median <= 0.10, "GEMMs: median {:.1}%", median * 100.0);
}

#[test]
fn frontier_h800_imports_chunked_prefill_and_decode_as_h100() {
    let dir = tempfile::tempdir().unwrap();
    let (profile, err) = import(dir.path(), "frontier", &[&fixture("frontier")]);
    assert!(err.contains("H800: H100 SXM silicon"), "{err}");
    let source = profile.provenance.source.as_ref().unwrap();
    assert_eq!((source.repository.as_str(), source.gpu.as_str()), ("NetX-lab/Frontier", "H100-SXM"));
    assert_eq!(profile.provenance.device.name, "H800");
    assert_eq!((source.dtypes.as_slice(), source.kernels.as_slice()), (&["bf16".to_string()][..], &["FLASHINFER".to_string()][..]));
    for phase in [AttentionPhase::Prefill, AttentionPhase::Mixed, AttentionPhase::Decode] {
        assert!(attention_rows(&profile, phase) >= 18, "{phase:?}: {}", attention_rows(&profile, phase));
    }
    assert!(round_trip_worst("Frontier H800", &profile) <= 0.03);
    assert!(loo("Frontier H800", &profile).0 <= 0.10);
    // Printed: FlashInfer's decode rows against vLLM's where the heads match (TP 8: 16 query
    // heads over 1 KV head); the bundled table has no 16/1 configuration.
    against_bundled("Frontier H800", &profile, "H100-SXM");
}

/// Copies `from` (a fixture file) to `dir/<relative>` with `(row, column)`'s cell replaced.
fn corrupt(from: &Path, dir: &Path, relative: &str, row: usize, column: &str, value: &str) -> PathBuf {
    let text = std::fs::read_to_string(from).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines[0].split(',').position(|h| h == column).unwrap();
    let mut cells: Vec<String> = lines[row].split(',').map(str::to_string).collect();
    cells[at] = value.to_string();
    lines[row] = cells.join(",");
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

#[test]
fn a_malformed_file_is_named_with_its_row_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let vidur = corrupt(
        &fixture("vidur/data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"),
        dir.path(),
        "a100/Meta-Llama-3-8B/mlp.csv",
        3,
        "time_stats.mlp_up_proj.median",
        "-1.5",
    );
    let lss = corrupt(
        &fixture("llmservingsim/profiler/v0/perf_models/H100/meta-llama/Llama-3.1-8B/tp1/layers.csv"),
        dir.path(),
        "H100/Llama-3.1-8B/tp1/layers.csv",
        5,
        "tp_size",
        "two",
    );
    let frontier = corrupt(
        &fixture("frontier/data/profiling/compute/h800/Llama-3.1-405B-Instruct-FP8/attention_kernel_only.csv"),
        dir.path(),
        "h800/attention_kernel_only.csv",
        2,
        "is_prefill",
        "maybe",
    );
    let out = dir.path().join("x.csv");
    for (format, file, needle) in [
        ("vidur", &vidur, "mlp.csv: row 3, column `time_stats.mlp_up_proj.median`: expected a positive, finite number"),
        ("llmservingsim", &lss, "layers.csv: row 5, column `tp_size`: expected a whole number"),
        ("frontier", &frontier, "attention_kernel_only.csv: row 2, column `is_prefill`: expected True or False"),
    ] {
        let run = servesim(&["calibrate", "import", "--from", format, file.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(2), "{err}");
        assert!(err.contains(needle), "{format}: {err}");
        assert!(!err.contains("panicked") && !out.exists(), "{err}");
    }
    // A file whose path names no GPU (or, for LLMServingSim, no model) says what to give.
    let plain = dir.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    std::fs::copy(&vidur, plain.join("mlp.csv")).unwrap();
    let run = servesim(&["calibrate", "import", "--from", "vidur", plain.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("names the GPU it was measured on") && stderr(&run).contains("--gpu"), "{}", stderr(&run));
    std::fs::copy(&lss, plain.join("layers.csv")).unwrap();
    let run = servesim(&[
        "calibrate", "import", "--from", "llmservingsim", plain.join("layers.csv").to_str().unwrap(), "--gpu", "H100-SXM",
        "--out", out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("no folder above it names the model"), "{}", stderr(&run));
    // Two GPUs' files in one import are refused, naming both.
    let a100 = fixture("vidur/data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv");
    std::fs::create_dir_all(dir.path().join("h100")).unwrap();
    std::fs::copy(&a100, dir.path().join("h100/mlp.csv")).unwrap();
    let run = servesim(&[
        "calibrate", "import", "--from", "vidur", a100.to_str().unwrap(), dir.path().join("h100/mlp.csv").to_str().unwrap(),
        "--out", out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("measured on H100-SXM by its path") && stderr(&run).contains("on A100-80G-SXM"), "{}", stderr(&run));
}

/// The figures of docs/calibration.md, on the whole of `../shared/public-measurements` (not in
/// the repository; run with `--ignored` where a copy is beside it): every vidur, LLMServingSim
/// and Frontier GPU set imported, its shapes, round trip, leave one out, and agreement with the
/// bundled profile of the same GPU; and vidur's H100 against LLMServingSim's on the
/// projections both time (Llama-2-70B and Llama-3.1-70B share O and down shapes). The
/// importers are called as a library: leave one out rebuilds a curve or surface per point,
/// quadratic in its points (LLMServingSim times every m from 1 to 2048), so it runs on a
/// thinned set: GEMMs at m ≤ 16 and multiples of 16, every 8th attention row (each predicted
/// from a grid that much sparser: pessimistic).
#[test]
#[ignore = "needs ../shared/public-measurements"]
fn the_whole_published_sets() {
    use servesim::calibrate::import::{frontier, llmservingsim, vidur};
    let root = repo().join("../shared/public-measurements");
    let vidur_dir = root.join("microsoft-vidur");
    let frontier_dir = root.join("NetX-lab-Frontier/data/profiling/compute");
    type Import = fn(&[PathBuf], Option<&str>) -> Result<servesim::calibrate::import::build::Imported, servesim::calibrate::import::ImportError>;
    let sets: Vec<(&str, Import, &str, Vec<PathBuf>)> = vec![
        ("vidur A100", vidur::import, "A100-80G-SXM", vec![
            vidur_dir.join("data/profiling/compute/a100"),
            vidur_dir.join("data/profiling/network/a100_dgx"),
            vidur_dir.join("history-acb95f6c/data/profiling/a100/attention.csv"),
        ]),
        ("vidur H100", vidur::import, "H100-SXM", vec![
            vidur_dir.join("data/profiling/compute/h100"),
            vidur_dir.join("data/profiling/network/h100_dgx"),
        ]),
        ("LLMServingSim H100", |paths, gpu| llmservingsim::import(paths, gpu, None, None), "H100-SXM", vec![root.join("casys-kaist-LLMServingSim/profiler/v0/perf_models/H100")]),
        ("Frontier H800", frontier::import, "H100-SXM", vec![frontier_dir.join("h800")]),
        ("Frontier H100", frontier::import, "H100-SXM", vec![frontier_dir.join("h100")]),
    ];
    let mut profiles = Vec::new();
    for (name, import, gpu, paths) in &sets {
        let imported = import(paths, None).unwrap_or_else(|e| panic!("{e}"));
        for note in &imported.notes {
            println!("{name}: note: {note}");
        }
        let profile = imported.profile;
        let kinds = |f: &dyn Fn(&Shape) -> bool| count(&profile, f);
        println!(
            "{name}: {} shapes: {} GEMM, {} prefill, {} mixed, {} decode, {} all-reduce",
            profile.rows.len(),
            kinds(&|s| matches!(s, Shape::Gemm(_))),
            attention_rows(&profile, AttentionPhase::Prefill),
            attention_rows(&profile, AttentionPhase::Mixed),
            attention_rows(&profile, AttentionPhase::Decode),
            kinds(&|s| matches!(s, Shape::AllReduce(_))),
        );
        assert!(round_trip_worst(name, &profile) <= 0.03);
        let mut thinned = profile.clone();
        let mut seen = 0usize;
        thinned.rows.retain(|r| match r.shape {
            Shape::Attention(_) => {
                seen += 1;
                seen.is_multiple_of(8)
            }
            Shape::Gemm(g) => g.m <= 16 || g.m % 16 == 0,
            Shape::AllReduce(_) | Shape::AllToAll(_) | Shape::Sampling(_) => true,
        });
        assert!(loo(name, &thinned).0 <= 0.10);
        against_bundled(name, &profile, gpu);
        profiles.push(profile);
    }
    let agreement = compare::against(&profiles[1].rows, &ProfileIndex::new(&profiles[2]));
    for line in agreement.lines("vidur H100: LLMServingSim H100") {
        println!("{line}");
    }
    assert!(!agreement.gemm.is_empty());
}

/// Values a corrupt byte makes that still parse: a GEMM time 100× its neighbours', and one faster
/// than the GPU's peak FLOP/s allows. Each import is refused, naming the row's shape; the
/// untouched file imports (its_time × 1 leaves it as it was).
#[test]
fn an_unphysical_time_is_refused_naming_the_row() {
    let file = fixture("vidur/data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv");
    let text = std::fs::read_to_string(&file).unwrap();
    let cell = |column: &str| -> f64 {
        let at = text.lines().next().unwrap().split(',').position(|h| h == column).unwrap();
        text.lines().nth(ROW).unwrap().split(',').nth(at).unwrap().parse().unwrap()
    };
    // A shape timed twice keeps the upper middle timing (build.rs): row 8 (512 tokens, TP 1) is
    // timed once in this file, so its corrupt value is the one kept either way.
    const ROW: usize = 8;
    let column = "time_stats.mlp_down_proj.median";
    let value = cell(column);
    for (factor, needle) in [(1.0, None), (100.0, Some("off both its neighbours")), (1e-6, Some("faster than its"))] {
        let dir = tempfile::tempdir().unwrap();
        let corrupted = corrupt(&file, dir.path(), "a100/Meta-Llama-3-8B/mlp.csv", ROW, column, &(value * factor).to_string());
        let out = dir.path().join("x.csv");
        let run = servesim(&["calibrate", "import", "--from", "vidur", corrupted.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        let err = stderr(&run);
        match needle {
            None => assert!(run.status.success(), "{err}"),
            Some(needle) => {
                assert_eq!(run.status.code(), Some(2), "×{factor}: {err}");
                assert!(err.contains(needle) && err.contains("gemm 512×") && err.contains("refused"), "×{factor}: {err}");
                assert!(!out.exists(), "{err}");
            }
        }
    }
}

//! `calibrate import --from llmservingsim` on LLMServingSim's profiler bundles (vLLM 0.19.0 on an
//! RTX 4090 and an RTX PRO 6000), GPUs without a servesim preset: a verbatim subset of the files
//! (`tests/data/llmservingsim-perf/`, its README says which rows) imports with the GPU's figures
//! from a scenario's `[hardware]` table, naming its source; its rows arrive by kind, one value
//! exactly; a malformed file is named with its row and column; a rerun writes the same bytes.
//! The profiles imported from the whole bundles (`calibration/public-runs/`) reproduce their
//! own rows, and a scenario on an RTX 4090 simulates with one; the step prices it gives are
//! printed beside the roofline's on the same GPU figures.

mod common;
use common::*;

use std::path::{Path, PathBuf};

use servesim::calibrate::backend::{AttentionPhase, GemmShape};
use servesim::calibrate::grid::Shape;
use servesim::calibrate::profile::Profile;
use servesim::cost::CostModel;
use servesim::cost::calibrated::{Calibrated, ProfileIndex};
use servesim::cost::roofline::Roofline;
use servesim::scenario::{Dtype, Scenario};
use servesim::sched::batch::{Batch, SeqWork};

const LSS: &str = "tests/data/llmservingsim-perf/casys-kaist-LLMServingSim";
const RTX_4090: &str = "profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16";
const QWEN_MOE: &str = "profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16";

/// The four profiles `calibration/public-runs/import.sh` writes.
const IMPORTED: [&str; 4] = [
    "rtx-4090--llama-3.1-8b--vllm-0.19.0.csv.zst",
    "rtx-pro-6000--llama-3.1-8b--vllm-0.19.0.csv.zst",
    "rtx-pro-6000--qwen3-32b--vllm-0.19.0.csv.zst",
    "rtx-pro-6000--qwen3-30b-a3b-instruct-2507--vllm-0.19.0.csv.zst",
];

fn bundle(path: &str) -> PathBuf {
    repo().join(LSS).join(path)
}

fn figures(gpu: &str) -> String {
    repo().join("calibration/public-runs").join(format!("{gpu}.toml")).to_string_lossy().into_owned()
}

/// `servesim calibrate import --from llmservingsim PATH ARGS… --out OUT`: its status and stderr.
fn import(path: &Path, args: &[&str], out: &Path) -> (bool, String) {
    let mut all = vec!["calibrate", "import", "--from", "llmservingsim", path.to_str().unwrap()];
    all.extend(args);
    all.extend(["--out", out.to_str().unwrap()]);
    let run = servesim(&all);
    (run.status.success(), stderr(&run))
}

fn count(profile: &Profile, f: &dyn Fn(&Shape) -> bool) -> usize {
    profile.rows.iter().filter(|r| f(&r.shape)).count()
}

fn median_ns(profile: &Profile, shape: Shape) -> f64 {
    profile.rows.iter().find(|r| r.shape == shape).unwrap_or_else(|| panic!("no row {shape:?}")).measurement.median_ns
}

#[test]
fn an_rtx_4090_bundle_imports_with_the_gpus_figures_and_names_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("rtx4090.csv");
    let gpu = figures("rtx-4090");
    let (ok, err) = import(&bundle(RTX_4090), &["--gpu", &gpu], &csv);
    assert!(ok, "{err}");
    println!("{err}");
    let profile = Profile::read(&csv).unwrap();
    let source = profile.provenance.source.as_ref().expect("an imported profile names its source");
    assert_eq!(
        (source.repository.as_str(), source.commit.as_str(), source.license.as_str()),
        ("casys-kaist/LLMServingSim", "5daddb21a545658d5150b535712d0494584b5278", "MIT License")
    );
    assert_eq!((source.gpu.as_str(), source.engine.as_str(), source.engine_version.as_str()), ("RTX-4090", "vllm", "0.19.0"));
    assert!(source.method.contains("enforce_eager true") && source.method.contains("1 hidden layer(s)"), "{}", source.method);
    assert_eq!(profile.provenance.device.name, "NVIDIA GeForce RTX 4090 (meta.yaml `gpu`)");
    // The profile's peak is the figures file's: utilisation is relative to the RTX 4090's.
    assert_eq!((profile.provenance.peak.flops_per_s, profile.provenance.peak.memory_bytes_per_s), (165.2e12, 1008e9));
    // Rows by kind: QKV, O, gate+up and down at 6 token counts, the LM head at 5 sequence
    // counts; chunks of 3 sizes over no cached token (prefill) and over 2 cached lengths
    // (mixed); 3 × 3 decode batches.
    assert_eq!(count(&profile, &|s| matches!(s, Shape::Gemm(_))), 4 * 6 + 5);
    let phase = |p: AttentionPhase| count(&profile, &|s| matches!(s, Shape::Attention(a) if a.phase == p));
    assert_eq!((phase(AttentionPhase::Prefill), phase(AttentionPhase::Mixed), phase(AttentionPhase::Decode)), (3, 6, 9));
    assert_eq!(profile.rows.len(), 29 + 18);
    // A value exactly: `qkv_proj,2048,631.069` (µs), fused QKV of Llama-3.1-8B, n = (32 + 2 · 8) · 128.
    let qkv = GemmShape { m: 2048, n: 6144, k: 4096, dtype: Dtype::Bf16 };
    assert_eq!(median_ns(&profile, Shape::Gemm(qkv)), 631_069.0);
    // What was left out is said, with counts and why.
    for needle in [
        "left out 6 rows: LLMServingSim `embedding`",
        "left out 6 rows: LLMServingSim `layernorm`",
        "left out 5 rows: LLMServingSim `sampler`",
        "vLLM's sampler (greedy, on the GPU): 25.0 µs at 1 sequence(s) to 310.9 µs at 256",
        "left out 2 rows: attention over a prefill chunk and decodes in one call",
        "skew.csv: left out",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    // The two batches mixing a chunk with decodes, priced as servesim prices them: the
    // chunk's row plus the decodes' row, 20.0% and 38.5% short of their measured time (of two,
    // the upper is the median).
    let agreement = source.agreement.join("\n");
    assert!(agreement.contains("on 2 batches: median 38.5%, p90 38.5% (signed median -20.0%)"), "{agreement}");
    // The same input gives the same profile, byte for byte.
    let again = dir.path().join("again.csv");
    assert!(import(&bundle(RTX_4090), &["--gpu", &gpu], &again).0);
    assert_eq!(std::fs::read(&csv).unwrap(), std::fs::read(&again).unwrap());
}

#[test]
fn a_moe_bundle_becomes_grouped_expert_gemms_of_the_checkouts_model() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("moe.csv");
    // No --model: the checkout's configs/model/Qwen/Qwen3-30B-A3B-Instruct-2507.json gives it.
    let (ok, err) = import(&bundle(QWEN_MOE), &["--gpu", &figures("rtx-pro-6000")], &csv);
    assert!(ok, "{err}");
    println!("{err}");
    let profile = Profile::read(&csv).unwrap();
    let source = profile.provenance.source.as_ref().unwrap();
    assert!(source.method.contains("configs/model/Qwen/Qwen3-30B-A3B-Instruct-2507.json"), "{}", source.method);
    assert!(err.contains("lists TP 2, whose tp2/ files were not given"), "{err}");
    // 50 rows of moe.csv, each a gate+up and a down GEMM of `a` experts side by side; QKV and O
    // at 3 token counts.
    let experts = |s: &Shape| matches!(s, Shape::Gemm(g) if g.k == 768 || g.n % 1536 == 0 && g.n > 4096);
    assert_eq!(count(&profile, &|s| experts(s)), 2 * 50);
    assert_eq!(count(&profile, &|s| matches!(s, Shape::Gemm(_))), 2 * 50 + 2 * 3);
    // `2048,128,1066.6`: 2048 tokens × top-8 over 128 experts, 128 rows each; gate+up
    // (n = 128 · 2 · 768, k = 2048) takes two thirds of the block's time, down (n = 128 · 2048,
    // k = 768) one third.
    let gate_up = GemmShape { m: 128, n: 128 * 1536, k: 2048, dtype: Dtype::Bf16 };
    let down = GemmShape { m: 128, n: 128 * 2048, k: 768, dtype: Dtype::Bf16 };
    assert_eq!(median_ns(&profile, Shape::Gemm(gate_up)), 711_067.0);
    assert_eq!(median_ns(&profile, Shape::Gemm(down)), 355_533.0);
}

/// A copy of the RTX 4090 bundle with `file`'s text passed through `edit`.
fn corrupted(dir: &Path, file: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let root = dir.join("bundle");
    std::fs::create_dir_all(root.join("tp1")).unwrap();
    for name in ["meta.yaml", "tp1/dense.csv", "tp1/per_sequence.csv", "tp1/attention.csv"] {
        let text = std::fs::read_to_string(bundle(RTX_4090).join(name)).unwrap();
        std::fs::write(root.join(name), if name == file { edit(text) } else { text }).unwrap();
    }
    root
}

/// Replaces line `line` (1-based, the header is line 1) of `text` with `with`.
fn replace_line(text: &str, line: usize, with: &str) -> String {
    text.lines().enumerate().map(|(i, l)| if i + 1 == line { with } else { l }).collect::<Vec<_>>().join("\n") + "\n"
}

#[test]
fn a_malformed_bundle_is_named_with_its_row_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.csv");
    let gpu = figures("rtx-4090");
    let fails = |path: &Path, args: &[&str], needle: &str| {
        let (ok, err) = import(path, args, &out);
        assert!(!ok && err.contains(needle), "{needle}: {err}");
        assert!(!err.contains("panicked") && !out.exists(), "{err}");
    };
    // Row 3 (the third after the header) of dense.csv with a negative time.
    let root = corrupted(dir.path(), "tp1/dense.csv", |t| replace_line(&t, 4, "act_fn,16,-3.285"));
    fails(&root, &["--gpu", &gpu], "tp1/dense.csv: row 3, column `time_us`: expected a positive, finite number");
    let root = corrupted(dir.path(), "tp1/attention.csv", |t| replace_line(&t, 2, "0,0,x,16,9.31067"));
    fails(&root, &["--gpu", &gpu], "tp1/attention.csv: row 1, column `n_decode`: expected a whole number");
    let root = corrupted(dir.path(), "tp1/attention.csv", |t| replace_line(&t, 2, "0,0,0,0,9.31067"));
    fails(&root, &["--gpu", &gpu], "row 1, column `n_decode`: Int(0): an empty batch");
    let root = corrupted(dir.path(), "meta.yaml", |t| t.replace("tp_degrees: [1]", "tp_degrees: [one]"));
    fails(&root, &["--gpu", &gpu], "meta.yaml: line 11, `tp_degrees`");
    // The GPU: an RTX 4090 is no preset, and its figures must be given.
    let root = corrupted(dir.path(), "", |t| t);
    fails(&root, &[], "timed on NVIDIA GeForce RTX 4090, which is no servesim GPU preset: give --gpu FILE.toml");
    // Another model than the bundle timed is refused by the sizes vLLM ran with.
    fails(&root, &["--gpu", &gpu, "--model", "Qwen2.5-7B"], "`engine_effective.hf_overrides.num_attention_heads`: 32, but Qwen2.5-7B");
    // A data file outside a bundle, and the two formats in one import.
    std::fs::remove_file(root.join("meta.yaml")).unwrap();
    fails(&root.join("tp1/dense.csv"), &["--gpu", &gpu], "tp1/dense.csv: no meta.yaml beside its tp<N>/ folder");
    let older = repo().join("tests/data/public/llmservingsim");
    let run = servesim(&[
        "calibrate", "import", "--from", "llmservingsim", bundle(RTX_4090).to_str().unwrap(), older.to_str().unwrap(),
        "--gpu", &gpu, "--out", out.to_str().unwrap(),
    ]);
    assert!(stderr(&run).contains("import one format at a time"), "{}", stderr(&run));
}

/// Round trip: each profile imported from the whole bundles prices every row it holds as
/// measured, the rows being points of its own curves and surfaces.
#[test]
fn the_imported_profiles_reproduce_their_own_rows() {
    for name in IMPORTED {
        let profile = Profile::read(&repo().join("calibration/public-runs").join(name)).unwrap_or_else(|e| panic!("{e}"));
        let index = ProfileIndex::new(&profile);
        let (mut worst, mut worst_shape) = (0.0f64, None);
        for row in &profile.rows {
            let predicted = match &row.shape {
                Shape::Gemm(g) => index.predict_gemm_ns(g),
                Shape::Attention(a) => index.predict_attention_ns(a),
                // The TP 2 profile's all-reduce (aiconfigurator's rows, `--allreduce`).
                Shape::AllReduce(a) => index.allreduce_s(a.bytes as f64, a.gpus).map(|s| s * 1e9),
                other => panic!("{name}: an unexpected row {other:?}"),
            }
            .unwrap_or_else(|| panic!("{name}: no prediction for {:?}", row.shape));
            let error = (predicted - row.measurement.median_ns).abs() / row.measurement.median_ns;
            if error > worst {
                (worst, worst_shape) = (error, Some(row.shape));
            }
        }
        println!("{name}: round trip over {} rows, worst {:.3}% ({worst_shape:?})", profile.rows.len(), worst * 100.0);
        assert!(worst <= 0.03, "{name}: {worst}");
    }
}

/// One step of `seqs`: each `(new tokens, cached tokens)`.
fn step(seqs: &[(u32, u32)]) -> Batch {
    let mut batch = Batch::default();
    for (i, &(new_tokens, context_tokens)) in seqs.iter().enumerate() {
        batch.push(SeqWork { seq: i as u32, new_tokens, context_tokens, samples_token: true, draft_tokens: 0 });
    }
    batch
}

/// The scenario of Llama-3.1-8B on an RTX 4090 (`calibration/public-runs/rtx-4090.toml`, its
/// GPU's figures written there) simulates with the imported profile, and prices single steps
/// from it; the roofline's prices on the same figures are printed beside them.
#[test]
fn a_scenario_on_an_rtx_4090_simulates_with_the_imported_profile() {
    let path = repo().join("calibration/public-runs/rtx-4090.toml");
    let run = servesim(&[
        "simulate", path.to_str().unwrap(), "--allow-profile-mismatch", "--set", "workload.num_prompts=40", "--set",
        "workload.request_rate=4", "--out", tempfile::tempdir().unwrap().path().to_str().unwrap(),
    ]);
    let err = stderr(&run);
    assert!(run.status.success(), "{err}");
    assert!(err.contains("cost model: calibrated profile") && stdout(&run).contains("Successful requests:"), "{err}");
    let scenario = Scenario::load(&path, &[]).unwrap();
    let profile = Profile::read(&repo().join("calibration/public-runs").join(IMPORTED[0])).unwrap();
    let (model, gpu, tp) = (&scenario.model, &scenario.hardware.gpu, scenario.engine.tensor_parallel);
    let calibrated = Calibrated::new(&profile, model, gpu, tp, &scenario.cost);
    let roofline = Roofline::new(model, gpu, tp, &scenario.cost);
    for notice in calibrated.notices() {
        println!("note: {notice}");
    }
    let steps = [
        ("decode, 1 sequence at 1,024 cached tokens", vec![(1, 1024)]),
        ("decode, 32 sequences at 1,024 cached tokens", vec![(1, 1024); 32]),
        ("decode, 128 sequences at 1,024 cached tokens", vec![(1, 1024); 128]),
        ("prefill of one 2,048-token prompt", vec![(2048, 0)]),
    ];
    for (what, seqs) in steps {
        let batch = step(&seqs);
        let (c, r) = (calibrated.predict(&batch), roofline.predict(&batch));
        let ms = |ns: u64| ns as f64 / 1e6;
        let gpu_ns = |s: &servesim::cost::StepCost| s.gemm_ns + s.attention_ns + s.elementwise_ns + s.communication_ns;
        println!(
            "{what}: imported profile {:.2} ms (GEMM {:.2}, attention {:.2}, elementwise {:.2}; kernels {:.2}); roofline {:.2} ms \
             (GEMM {:.2}, attention {:.2}, elementwise {:.2}; kernels {:.2}); overhead {:.2} ms in both",
            ms(c.total_ns),
            ms(c.gemm_ns),
            ms(c.attention_ns),
            ms(c.elementwise_ns),
            ms(gpu_ns(&c)),
            ms(r.total_ns),
            ms(r.gemm_ns),
            ms(r.attention_ns),
            ms(r.elementwise_ns),
            ms(gpu_ns(&r)),
            ms(c.overhead_ns)
        );
        // A measured GEMM never beats the datasheet: the profile's kernels are at most the
        // roofline's at full efficiency, which the default roofline divides by its guesses.
        assert!(c.gemm_ns > 0 && c.attention_ns > 0, "{what}");
    }
}

/// aiconfigurator's timing of vLLM 0.19.0's all-reduce on two RTX PRO 6000 Server Edition GPUs
/// (`calibration/public-runs/aiconfigurator/`, its MANIFEST.tsv names the commit).
const RTX_PRO_ALLREDUCE: &str =
    "calibration/public-runs/aiconfigurator/ai-dynamo-aiconfigurator/rtx_pro_6000_server/comm/vllm/0.19.0/custom_allreduce_perf.parquet";

/// Qwen3-32B at TP 2 on two RTX PRO 6000s, which have no NVLink: the profiler ran one GPU and
/// timed no all-reduce, so its profile carries vLLM's measured one, about 15 GB/s for a decode
/// step's 1.3 MB (128 rows × 5,120 × 2 bytes), not the ring formula's 64 GB/s PCIe link at 70%.
#[test]
fn the_qwen3_32b_profile_prices_its_all_reduces_from_vllms_measured_ones() {
    let scenario = Scenario::load(&repo().join("scenarios/public-runs/lss-rtxpro6000-qwen3-32b-tp2.toml"), &[]).unwrap();
    let profile = Profile::read(&repo().join("calibration/public-runs").join(IMPORTED[2])).unwrap();
    let source = profile.provenance.source.as_ref().unwrap();
    assert!(source.repository.contains("ai-dynamo/aiconfigurator") && source.license.contains("Apache"), "{source:?}");
    let (model, gpu, tp) = (&scenario.model, &scenario.hardware.gpu, scenario.engine.tensor_parallel);
    let calibrated = Calibrated::new(&profile, model, gpu, tp, &scenario.cost);
    assert!(!calibrated.notices().iter().any(|n| n.contains("all-reduce")), "{:#?}", calibrated.notices());
    // The rows around 1.3 MB: 1 MiB and 2 MiB (524,288 and 1,048,576 bf16 elements).
    let allreduce_ns = |bytes: u64| {
        let shape = Shape::AllReduce(servesim::calibrate::backend::AllReduceShape { bytes, gpus: 2 });
        median_ns(&profile, shape)
    };
    let (below, above) = (allreduce_ns(1 << 20), allreduce_ns(2 << 20));
    assert!((91_000.0..92_000.0).contains(&below) && (157_000.0..158_000.0).contains(&above), "{below} {above}");
    // 64 layers, two all-reduces each, between those rows; the logits' gather is the rest.
    let comm_ns = calibrated.predict(&step(&[(1, 1024); 128])).communication_ns as f64;
    let per_layer = (comm_ns - 0.3e6) / 128.0;
    assert!(per_layer > below && per_layer < above, "{comm_ns} ns: {per_layer} ns per all-reduce");
    let ring_ns = Roofline::new(model, gpu, tp, &scenario.cost).predict(&step(&[(1, 1024); 128])).communication_ns as f64;
    assert!(comm_ns > 2.0 * ring_ns, "measured {comm_ns} ns against the ring formula's {ring_ns} ns");
}

/// The all-reduce table must be the bundle's GPU and vLLM release, and joins only a bundle.
#[test]
fn an_all_reduce_of_another_gpu_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let table = repo().join(RTX_PRO_ALLREDUCE);
    let args = ["--gpu", &figures("rtx-4090"), "--allreduce", table.to_str().unwrap()];
    let (ok, err) = import(&bundle(RTX_4090), &args, &dir.path().join("x.csv"));
    assert!(!ok, "{err}");
    for needle in ["custom_allreduce_perf.parquet", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA GeForce RTX 4090"] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    let run = servesim(&["calibrate", "import", "--from", "vidur", "x", "--allreduce", table.to_str().unwrap(), "--out", "y.csv"]);
    assert!(!run.status.success() && stderr(&run).contains("--allreduce"), "{}", stderr(&run));
}

//! A profile is checked against the scenario it prices: a kernel profile's GPU, engine and
//! weight dtype, a fitted profile's GPU and engine policy. A mismatch is an error naming
//! `cost.profile`, or a warning with `--allow-profile-mismatch`; `auto` picks the nearest there is
//! and says where it differs, and carries the nearest GPU's profile to a GPU without one.

mod common;
use common::{LLAMA_8B_H100, repo, servesim, stderr, write_file};

fn scenario(dir: &std::path::Path) -> String {
    write_file(dir, "s.toml", LLAMA_8B_H100).to_str().unwrap().to_string()
}

#[test]
fn a_fitted_profile_of_another_gpu_and_engine_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(dir.path());
    let fitted = repo().join("calibration/fitted/mi300x--tgi-2.3.toml");
    let set = format!("cost.profile={:?}", fitted.display().to_string());
    let refused = servesim(&["simulate", &path, "--set", &set]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(err.contains("cost.profile"), "{err}");
    assert!(err.contains("fitted on MI300X x8, and the scenario runs on H100-SXM"), "{err}");
    assert!(err.contains("fitted to the tgi engine, and the scenario's policy is vllm-v1"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let allowed = servesim(&["simulate", &path, "--set", &set, "--allow-profile-mismatch"]);
    assert!(allowed.status.success(), "{}", stderr(&allowed));
    assert!(stderr(&allowed).contains("WARNING: the profile was fitted on MI300X x8"), "{}", stderr(&allowed));

    // On its own GPU and engine it loads without a word.
    let own = servesim(&["simulate", &path, "--set", &set, "--set", "hardware.gpu=\"MI300X\"", "--set", "hardware.count=8",
        "--set", "engine.tensor_parallel=8", "--set", "engine.policy=\"tgi\""]);
    assert!(own.status.success(), "{}", stderr(&own));
    assert!(!stderr(&own).contains("WARNING"), "{}", stderr(&own));
}

#[test]
fn a_kernel_profile_of_another_engine_is_refused_and_auto_says_it_stands_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(dir.path());
    let vllm_h100 = repo().join("calibration/public/h100-sxm--vllm-0.24.0.csv.zst");
    let tgi = "engine.policy=\"tgi\"";
    let refused = servesim(&["simulate", &path, "--set", tgi, "--profile", vllm_h100.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("the profile timed vllm 0.24.0's kernels, and the scenario's engine is tgi"), "{}", stderr(&refused));

    let auto = servesim(&["simulate", &path, "--set", tgi, "--profile", "auto"]);
    assert!(auto.status.success(), "{}", stderr(&auto));
    assert!(stderr(&auto).contains("note: cost.profile = \"auto\": the profile timed vllm 0.24.0's kernels"), "{}", stderr(&auto));
    assert!(stderr(&auto).contains("cost model: calibrated profile (bundled h100-sxm--vllm-0.24.0"), "{}", stderr(&auto));
}

#[test]
fn a_kernel_profile_without_the_weights_dtype_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(dir.path());
    let a100 = repo().join("calibration/public/a100-80g-sxm--vllm-0.14.0.csv.zst");
    let out = servesim(&["simulate", &path, "--set", "hardware.gpu=\"A100-80G-SXM\"", "--set", "model.dtype=\"fp8\"",
        "--profile", a100.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("the profile's GEMMs are bf16, and the scenario's weights are fp8"), "{}", stderr(&out));
}

#[test]
fn auto_on_a_gpu_without_a_profile_carries_the_nearest_gpus_over() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(dir.path());
    let out = servesim(&["simulate", &path, "--set", "hardware.gpu=\"MI300X\"", "--out", dir.path().join("run").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("cost model: calibrated profile (bundled h200-sxm--vllm-0.24.0, measured on H200, transferred to MI300X)"), "{err}");
    assert!(err.contains("each kernel is priced at the utilisation of MI300X's datasheet peaks"), "{err}");
    let summary = std::fs::read_to_string(dir.path().join("run/summary.json")).unwrap();
    assert!(summary.contains("transferred to MI300X"), "{summary}");
    // `roofline` still asks for the datasheet roofline.
    let roofline = servesim(&["simulate", &path, "--set", "hardware.gpu=\"MI300X\"", "--cost", "roofline"]);
    assert!(roofline.status.success() && !stderr(&roofline).contains("transferred"), "{}", stderr(&roofline));
}

/// A profile `servesim calibrate` measured on an H100 (2026-11-24; Llama-3.1-8B and 70B shapes,
/// cut short by its budget) timed servesim's own CUDA attention kernels, far slower than the
/// engines' FlashAttention: it prices a vLLM scenario only when allowed, and servesim's engine
/// without a word.
#[test]
fn a_gpu_profile_of_servesims_own_kernels_prices_only_servesims_engine() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario(dir.path());
    let measured = repo().join("tests/data/h100-measured/h100-servesim-kernels.csv.zst");
    let refused = servesim(&["simulate", &path, "--profile", measured.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(err.contains("servesim's own CUDA attention kernels") && err.contains("vllm (vllm-v1)"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let allowed = servesim(&["simulate", &path, "--profile", measured.to_str().unwrap(), "--allow-profile-mismatch"]);
    assert!(allowed.status.success() && stderr(&allowed).contains("WARNING"), "{}", stderr(&allowed));
    let own = servesim(&["simulate", &path, "--profile", measured.to_str().unwrap(), "--set", "engine.policy=\"servesim\""]);
    assert!(own.status.success(), "{}", stderr(&own));
    assert!(!stderr(&own).contains("WARNING"), "{}", stderr(&own));
}

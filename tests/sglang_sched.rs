//! `policy = "sglang"` end to end through `servesim simulate`: the examples of docs/sglang.md run,
//! RadixAttention's token-granular hits are at least those of block-sized pages, the cache-aware
//! router finds more than round robin, and a rerun is byte for byte the same.

mod common;
use common::*;

/// `simulate` of `scenario` with `sets`, fewer prompts; returns the prefix cache's hit rate (%)
/// from its stderr line, and the summary.
fn run(scenario: &str, sets: &[&str]) -> (f64, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["simulate", scenario, "--set", "workload.num_prompts=400", "--out", dir.path().to_str().unwrap()];
    for s in sets {
        args.extend(["--set", s]);
    }
    let out = servesim(&args);
    assert!(out.status.success(), "{sets:?}: {}", stderr(&out));
    let err = stderr(&out);
    let line = err.lines().find(|l| l.starts_with("prefix cache")).unwrap_or_else(|| panic!("no hit rate in {err}"));
    let rate = line.split("hit rate ").nth(1).and_then(|r| r.split('%').next()).and_then(|r| r.parse().ok()).expect("a rate");
    (rate, std::fs::read_to_string(dir.path().join("summary.json")).unwrap())
}

#[test]
fn token_pages_hit_at_least_what_block_pages_do_and_reruns_are_identical() {
    let (tokens, summary) = run("scenarios/sglang-prefix.toml", &[]);
    let (blocks, _) = run("scenarios/sglang-prefix.toml", &["engine.sglang.page_size=16"]);
    assert!(tokens > blocks && blocks > 50.0, "pages of 1: {tokens}%, of 16: {blocks}%");
    assert!(summary.contains("\"engine_profile\": \"sglang-0.4\""), "{summary}");
    assert_eq!(run("scenarios/sglang-prefix.toml", &[]).1, summary, "a rerun differs");
}

#[test]
fn the_cache_aware_router_finds_more_than_round_robin() {
    let (cache_aware, _) = run("scenarios/sglang-router.toml", &[]);
    let (round_robin, _) = run("scenarios/sglang-router.toml", &["engine.router=round-robin"]);
    assert!(cache_aware > round_robin + 3.0, "cache-aware {cache_aware}%, round robin {round_robin}%");
}

/// DeepSeek-V3 under SGLang takes its MLA from SGLang's own kernel and absorbed-BMM rows (per-
/// tensor FP8: FP8 multiplies), as docs/calibration.md works through, not from the roofline.
#[test]
fn deepseek_on_sglang_prices_mla_from_sglangs_kernel_rows() {
    let dir = tempfile::tempdir().unwrap();
    let out = servesim(&["simulate", "scenarios/deepseek-v3-sglang.toml", "--set", "workload.num_prompts=100", "--out", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("multi-head latent attention is priced from the measured attention-kernel rows (H200, sglang 0.5.14: kv=bfloat16 heads=16)")
            && err.contains("absorbed multiplies' rows (dtype=fp8 heads=16)"),
        "{err}"
    );
    assert!(!err.contains("latent attention is flagged as roofline"), "{err}");
}

//! aiconfigurator's whole-module tables (MLA, fused MoE, Gated DeltaNet) imported beside a
//! profile, as a user would import them, and a scenario priced from them.

mod common;
use common::*;

use servesim::calibrate::families::{Families, FamilyOp, families_path};

fn import(out: &std::path::Path) -> std::process::Output {
    let source = repo().join("tests/data/public/aiconfigurator/h100_sxm");
    servesim(&["calibrate", "import", "--from", "aiconfigurator", source.to_str().unwrap(), "--out", out.to_str().unwrap()])
}

fn ns(families: &Families, op: FamilyOp, key: &str, x: u64, y: u64) -> f64 {
    let row = families.rows.iter().find(|r| r.op == op && r.key == key && r.x == x && r.y == y);
    row.unwrap_or_else(|| panic!("no {} row {key} at ({x}, {y})", op.name())).median_ns
}

#[test]
fn the_module_tables_are_imported_beside_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("h100.csv.zst");
    let out = import(&csv);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("imported whole-module rows (") && err.contains("h100.families.csv.zst"), "{err}");
    let families = Families::read_beside(&csv).unwrap().expect("a families file beside the profile");
    let source = &families.provenance;
    assert_eq!((source.repository.as_str(), source.engine.as_str(), source.engine_version.as_str()), ("ai-dynamo/aiconfigurator", "vllm", "0.24.0"));
    // The fixture's rows, every table: MLA decode 4 × 4 points in 4 dtype pairs, prefill 3 × 4
    // in 4; DeepSeek-V3's MoE at TP 8 and EP 8, 6 token counts, balanced routing only; GDN.
    let counts = families.counts();
    assert_eq!((counts["mla_generation"], counts["mla_context"], counts["moe"]), (64, 48, 12), "{counts:?}");
    assert!(counts["gdn_context"] > 0 && counts["gdn_generation"] == 7, "{counts:?}");
    for routing in ["power_law_1.01", "power_law_1.2"] {
        let note = format!("left out 12 rows: MoE rows with {routing} routing");
        assert!(source.notes.iter().any(|n| n.contains(&note)), "{:?}", source.notes);
    }
    // Table values, exactly (milliseconds to whole nanoseconds): the MLA module at 32 sequences
    // of 1,024 tokens, 16 heads, block-FP8 projections and an fp8 cache (0.1338 ms); DeepSeek-V3's
    // routed experts at TP 8 for 64 tokens (0.32504000266 ms); GDN decode of 8 sequences, the
    // sum of its two kernels' medians over the three models with these heads
    // (0.00212544 + 0.01023136 ms).
    assert_eq!(ns(&families, FamilyOp::MlaGeneration, "model=DeepSeek-V3 gemm=fp8_block kv=fp8 heads=16", 32, 1024), 133_800.0);
    let moe = "dtype=fp8_block hidden=7168 inter=2048 topk=8 experts=256 tp=8 ep=1";
    assert_eq!(ns(&families, FamilyOp::Moe, moe, 64, 0), 325_040.0);
    assert_eq!(ns(&families, FamilyOp::GdnGeneration, "k_heads=16 k_dim=128 v_heads=32 v_dim=128", 8, 0), 12_357.0);
    // The same input gives the same file, byte for byte.
    let again = dir.path().join("again.csv.zst");
    assert!(import(&again).status.success());
    assert_eq!(std::fs::read(families_path(&csv)).unwrap(), std::fs::read(families_path(&again)).unwrap());
}

/// DeepSeek-V3 in block FP8, priced with that profile: its MLA attention and routed experts
/// come from the rows (the fixture is H100's, the scenario an H200 where the model fits, so the
/// mismatch is allowed); without the rows the same scenario is flagged as roofline.
#[test]
fn a_scenario_is_priced_from_the_module_rows() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("h100.csv.zst");
    assert!(import(&csv).status.success());
    let scenario = |profile: &std::path::Path| {
        format!(
            "[model]\npreset = \"DeepSeek-V3\"\ndtype = \"fp8\"\nquantization = \"fp8-block\"\n[hardware]\ngpu = \"H200\"\ncount = 8\n\
             [engine]\ntensor_parallel = 8\n[cost]\nprofile = {:?}\n[workload]\nnum_prompts = 16\nrequest_rate = 4\nseed = 0\n\
             [workload.dataset]\nkind = \"fixed\"\ninput_len = 256\noutput_len = 16\n",
            profile.display().to_string()
        )
    };
    let path = write_file(dir.path(), "s.toml", &scenario(&csv));
    let run = servesim(&["simulate", path.to_str().unwrap(), "--allow-profile-mismatch"]);
    assert!(run.status.success(), "{}", stderr(&run));
    let err = stderr(&run);
    assert!(err.contains("calibrated profile rows"), "{err}");
    assert!(err.contains("multi-head latent attention is priced from the measured whole-module rows"), "{err}");
    assert!(err.contains("routed experts are priced from the measured fused-MoE rows"), "{err}");
    // Without the families file: the roofline, said.
    std::fs::remove_file(families_path(&csv)).unwrap();
    let run = servesim(&["simulate", path.to_str().unwrap(), "--allow-profile-mismatch"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(stderr(&run).contains("no rows for multi-head latent attention"), "{}", stderr(&run));
}

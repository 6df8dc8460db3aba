//! `scripts/plan_ray.py`: a plan's shards as tasks on a real (local) Ray cluster, merged, give
//! exactly the unsharded plan. Needs python3 with `ray` (`pip install ray`; `.ci/run` installs
//! it and sets SERVESIM_REQUIRE_RAY=1, which makes its absence a failure); else prints why and
//! passes.

mod common;
use common::*;

const PLAN: &str = r#"
name = "ray"
[model]
preset = "Llama-3.2-1B"
[workload]
seed = 5
[workload.dataset]
kind = "sharegpt"
input = { dist = "lognormal", mean = 200, std = 150, min = 4, max = 1024 }
output = { dist = "lognormal", mean = 100, std = 80, min = 2, max = 512 }
[target]
rate = 30.0
[slo]
ttft_p90_ms = 300
tpot_p90_ms = 30
[search]
tensor_parallel = [1, 2]
max_num_seqs = [32, 128]
[[search.gpu]]
name = "H100-SXM"
price_per_gpu_hour = 3.0
"#;

#[test]
fn shards_on_ray_merge_into_the_unsharded_plan() {
    let require = std::env::var("SERVESIM_REQUIRE_RAY").as_deref() == Ok("1");
    let probe = std::process::Command::new("python3").args(["-c", "import ray"]).current_dir(std::env::temp_dir()).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        assert!(!require, "SERVESIM_REQUIRE_RAY=1 but python3 cannot import ray");
        eprintln!("skipping: python3 with the ray package is not available");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write_file(dir.path(), "plan.toml", PLAN);
    let whole = dir.path().join("whole");
    let unsharded = servesim(&["plan", plan.to_str().unwrap(), "--out", whole.to_str().unwrap()]);
    assert!(unsharded.status.success(), "{}", stderr(&unsharded));

    let on_ray = dir.path().join("ray");
    let driver = std::process::Command::new("python3")
        .arg(repo().join("scripts/plan_ray.py"))
        .arg(&plan)
        .args(["--shards", "2", "--out", on_ray.to_str().unwrap(), "--servesim", env!("CARGO_BIN_EXE_servesim")])
        .env_remove("RAY_ADDRESS")
        .output()
        .unwrap();
    assert!(driver.status.success(), "{}", stderr(&driver));
    assert_eq!(stdout(&driver), stdout(&unsharded), "the merged table");
    for k in ["1", "2"] {
        assert!(on_ray.join("shards").join(k).join("shard.json").exists(), "shard {k} ran");
    }
    let mut names: Vec<_> = std::fs::read_dir(&whole).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    for name in names {
        assert!(std::fs::read(whole.join(&name)).unwrap() == std::fs::read(on_ray.join(&name)).unwrap(), "{name:?} differs");
    }
}

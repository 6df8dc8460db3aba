//! `scripts/plan_ray.py`: a plan's shards as tasks on a real (local) Ray cluster, merged, give
//! exactly the unsharded plan. Needs python3 with `ray` (`pip install ray`; `.ci/run` installs
//! it and sets SERVESIM_REQUIRE_RAY=1, which makes its absence a failure); else prints why and
//! passes.

mod common;
use common::*;

#[test]
fn shards_on_ray_merge_into_the_unsharded_plan() {
    if let Err(why) = python_modules(&["ray"]) {
        assert!(!required("SERVESIM_REQUIRE_RAY"), "SERVESIM_REQUIRE_RAY=1 but {why}");
        eprintln!("skipping: {why} (pip install ray)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write_file(dir.path(), "plan.toml", SMALL_PLAN);
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

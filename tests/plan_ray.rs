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
    // Relative paths from one working directory, as a user types them: the merged outputs must
    // name the plan as the unsharded run does, not by an absolute path of the driver's machine.
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "plan.toml", SMALL_PLAN);
    let unsharded = std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
        .args(["plan", "plan.toml", "--out", "whole"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(unsharded.status.success(), "{}", stderr(&unsharded));
    let whole = dir.path().join("whole");

    let driver = std::process::Command::new("python3")
        .arg(repo().join("scripts/plan_ray.py"))
        .arg("plan.toml")
        .args(["--shards", "2", "--out", "ray", "--servesim", env!("CARGO_BIN_EXE_servesim")])
        .current_dir(dir.path())
        .env_remove("RAY_ADDRESS")
        .output()
        .unwrap();
    assert!(driver.status.success(), "{}", stderr(&driver));
    assert_eq!(stdout(&driver), stdout(&unsharded), "the merged table");
    let on_ray = dir.path().join("ray");
    for k in ["1", "2"] {
        assert!(on_ray.join("shards").join(k).join("shard.json").exists(), "shard {k} ran");
    }
    let mut names: Vec<_> = std::fs::read_dir(&whole).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    for name in names {
        let bytes = std::fs::read(on_ray.join(&name)).unwrap();
        assert!(std::fs::read(whole.join(&name)).unwrap() == bytes, "{name:?} differs");
        let absolute = dir.path().to_str().unwrap().as_bytes();
        assert!(!bytes.windows(absolute.len()).any(|w| w == absolute), "{name:?} names the absolute path {}", dir.path().display());
    }
}

//! `servesim plan` through the binary: a plan answered, a plan with no answer, bad plan files, and
//! outputs that do not depend on the thread count.

mod common;
use common::*;

const PLAN: &str = SMALL_PLAN;

fn plan(dir: &std::path::Path, text: &str, extra: &[&str]) -> std::process::Output {
    let path = write_file(dir, "plan.toml", text);
    let mut args = vec!["plan", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    servesim(&args)
}

#[test]
fn a_plan_ranks_its_candidates_and_writes_every_one() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = plan(dir.path(), PLAN, &["--out", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    println!("{table}");
    assert!(table.contains("plan small: 8 candidates, 30 req/s"), "{table}");
    let first = table.lines().find(|l| l.trim_start().starts_with("1 ")).expect("a rank-1 row");
    // Both GPUs have bundled kernel profiles, which price their candidates by default.
    assert!(first.contains("calibrated"), "every row names its cost source: {first}");
    let csv = std::fs::read_to_string(out_dir.join("candidates.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 8, "a row per candidate: {csv}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out_dir.join("plan.json")).unwrap()).unwrap();
    let candidates = json["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 8);
    // Every searched candidate keeps its probes, each with its verdict.
    let probes = candidates.iter().filter_map(|c| c["probes"].as_array()).flatten().count();
    assert!(probes >= 8 * 5, "probes: {probes}");
    // The page inlines both charts, which are also files beside it.
    let page = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    for chart in ["pareto", "rate-per-dollar"] {
        assert!(page.contains(&format!("<figure id=\"{chart}\">")), "no {chart} in index.html");
        assert!(out_dir.join(format!("{chart}.png")).exists() && out_dir.join(format!("{chart}.svg")).exists());
    }
    // The top configuration's scenario reruns, and its command names its TP.
    let scenario = out_dir.join("top-1.toml");
    let rerun = servesim(&["simulate", scenario.to_str().unwrap()]);
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    let command = std::fs::read_to_string(out_dir.join("top-1.sh")).unwrap();
    assert!(command.contains("vllm serve meta-llama/Llama-3.2-1B-Instruct --tensor-parallel-size"), "{command}");
    assert!(command.contains("pip install vllm==") && command.contains("vllm/vllm-openai:v"), "the release is pinned: {command}");
    // The script is what sh runs: it parses.
    let parsed = std::process::Command::new("sh").arg("-n").arg(out_dir.join("top-1.sh")).output().unwrap();
    assert!(parsed.status.success(), "{}", String::from_utf8_lossy(&parsed.stderr));
    kubernetes_validate(&out_dir.join("top-1.k8s.yaml"));
    // With a target, the cheapest comes first.
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (rank, price) = (column("rank"), column("price_per_hour"));
    let mut ranked: Vec<(u32, f64)> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| !f[rank].is_empty())
        .map(|f| (f[rank].parse().unwrap(), f[price].parse().unwrap()))
        .collect();
    ranked.sort_by_key(|r| r.0);
    assert!(!ranked.is_empty() && ranked.windows(2).all(|w| w[0].1 <= w[1].1), "ranked by price: {ranked:?}");
}

#[test]
fn outputs_are_the_same_at_any_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let runs: Vec<_> = ["1", "2"]
        .iter()
        .map(|threads| {
            let out_dir = dir.path().join(format!("out-{threads}"));
            let out = plan(dir.path(), PLAN, &["--out", out_dir.to_str().unwrap(), "--threads", threads]);
            assert!(out.status.success(), "{}", stderr(&out));
            let read = |name: &str| std::fs::read(out_dir.join(name)).unwrap();
            (out.stdout, read("candidates.csv"), read("plan.json"), read("top-1.toml"), read("index.html"))
        })
        .collect();
    assert!(runs[0] == runs[1], "1 and 2 threads differ");
}

#[test]
fn no_answer_exits_3_and_names_the_closest_miss() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    // One configuration per GPU: each misses, searched down to the lowest rate.
    let text = PLAN.replace("ttft_p90_ms = 300", "ttft_p90_ms = 0.5").replace("tensor_parallel = [1, 2]", "tensor_parallel = [1]").replace("max_num_seqs = [32, 128]", "max_num_seqs = [32]");
    let out = plan(dir.path(), &text, &["--out", out_dir.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("no configuration meets") && err.contains("the closest is") && err.contains("ttft_p90"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Every miss says why, at the probe that decided it, with that probe's binding and metrics.
    let csv = std::fs::read_to_string(out_dir.join("candidates.csv")).unwrap();
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let header = rows.headers().unwrap().clone();
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    for row in rows.records().map(Result::unwrap) {
        assert_eq!(&row[column("status")], "misses", "{row:?}");
        let reason = &row[column("reason")];
        assert!(reason.contains("the lowest rate searched: ttft_p90") && reason.contains("> 0.5 ms"), "{reason}");
        assert_eq!(&row[column("binding")], "ttft_p90", "{row:?}");
        assert!(row[column("ttft_p90_ms")].parse::<f64>().unwrap() > 0.5, "{row:?}");
        assert!(!row[column("operating_rate")].is_empty(), "{row:?}");
    }
}

#[test]
fn a_candidate_that_cannot_run_is_listed_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    // vLLM refuses a max_model_len the KV cache cannot hold; 8192 fits beside 70B at TP 2.
    let text = PLAN
        .replace("preset = \"Llama-3.2-1B\"", "preset = \"Llama-3.1-70B\"\n[engine]\nmax_model_len = 8192")
        .replace("rate = 30.0", "rate = 1.0");
    let out = plan(dir.path(), &text, &["--out", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = std::fs::read_to_string(out_dir.join("candidates.csv")).unwrap();
    let infeasible: Vec<&str> = csv.lines().filter(|l| l.contains(",infeasible,")).collect();
    assert_eq!(infeasible.len(), 4, "70B at TP 1 fits no 80 GB GPU: {csv}");
    assert!(infeasible.iter().all(|l| l.contains("short by")), "{infeasible:?}");
}

#[test]
fn bad_plan_files_name_the_file_the_field_and_the_value() {
    let cases: [(&str, &str, &[&str]); 18] = [
        ("name = \"H100-SXM\"\nprice_per_gpu_hour = 3.0", "name = \"TPU-v5e\"", &["search.gpu[0].name", "TPU-v5e", "no default price"]),
        ("price_per_gpu_hour = 3.0", "price_per_gpu_hour = -3.0", &["search.gpu[0].price_per_gpu_hour", "-3"]),
        ("kind = \"sharegpt\"", "kind = \"trace\"", &["workload.dataset.kind", "arrival times"]),
        ("ttft_p90_ms = 300", "\"ttft_p99.9999_ms\" = 300", &["slo.ttft_p99.9999_ms", "requests per probe"]),
        ("seed = 3", "seed = 3\n[engine]\nmax_num_seqs = 8", &["engine.max_num_seqs", "[search]"]),
        ("ttft_p90_ms = 300", "ttft_p90_ms = -1", &["slo.ttft_p90_ms", "-1", "positive"]),
        ("ttft_p90_ms = 300", "ttft_p900_ms = 300", &["slo.ttft_p900_ms", "expected <ttft"]),
        ("seed = 3", "seed = 3\nnum_prompts = 100", &["workload.num_prompts", "set by the planner"]),
        ("rate = 30.0", "rate = 0.0", &["target.rate", "positive"]),
        ("tensor_parallel = [1, 2]", "tensor_parallel = []", &["search.tensor_parallel", "at least one"]),
        ("max_gpus = 16", "max_gpus = 16\nmax_dollars = 3", &["unknown field", "max_dollars"]),
        ("rate = 30.0", "", &["target.rate", "needs its rate"]),
        (
            "name = \"A100-80G-SXM\"\nprice_per_gpu_hour = 1.5",
            "name = \"A100-80G-SXM\"\nprice_per_gpu_hour = 1.5\n[[search.gpu]]\nname = \"a100_80g_sxm\"\nprice_per_gpu_hour = 1.5",
            &["search.gpu[2].name", "repeats search.gpu[1]"],
        ),
        ("name = \"H100-SXM\"\nprice_per_gpu_hour = 3.0", "name = \"H100-SXM\"\nprice_source = \"a quote\"", &["search.gpu[0].price_source", "give the price too"]),
        // The plan's own value refused for every candidate alike: the plan's field, not exit 3's
        // "no candidate is feasible".
        ("seed = 3", "seed = 3\n[engine]\ngpu_memory_utilization = 1.5", &["engine.gpu_memory_utilization", "1.5"]),
        ("seed = 3", "seed = 3\n[engine]\nmax_model_len = 0", &["engine.max_model_len", "0"]),
        // A GPU's profile that is missing, or is a folder, is that GPU's field (it was blamed on
        // the `cost.profile` of the candidate's scenario).
        ("price_per_gpu_hour = 3.0", "price_per_gpu_hour = 3.0\nprofile = \"missing.csv\"", &["search.gpu[0].profile", "no such kernel profile"]),
        ("price_per_gpu_hour = 3.0", "price_per_gpu_hour = 3.0\nprofile = \".\"", &["search.gpu[0].profile", "Is a directory"]),
    ];
    for (find, replace, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        assert!(PLAN.contains(find));
        let out = plan(dir.path(), &PLAN.replacen(find, replace, 1), &[]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{replace}: {err}");
        assert!(err.contains("plan.toml") && !err.contains("panicked"), "{err}");
        for needle in expected {
            assert!(err.contains(needle), "{replace}: no {needle:?} in {err}");
        }
    }
    // A thread count past any machine is refused at once (100,000 ran minutes, then hit EAGAIN).
    let dir = tempfile::tempdir().unwrap();
    let out = plan(dir.path(), PLAN, &["--threads", "100000"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--threads") && stderr(&out).contains("at most 1024"), "{}", stderr(&out));
}

/// A GPU the plan gives no price is charged servesim's default, and the outputs say whose price
/// it is.
#[test]
fn a_gpu_without_a_price_is_charged_the_default_and_its_source_named() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    // The A100 has no price in the plan and none in the --prices file: the default. The H100 has
    // none in the plan: the file's, with the file's source.
    let text = PLAN
        .replacen("name = \"A100-80G-SXM\"\nprice_per_gpu_hour = 1.5", "name = \"A100-80G-SXM\"", 1)
        .replacen("name = \"H100-SXM\"\nprice_per_gpu_hour = 3.0", "name = \"H100-SXM\"", 1);
    assert_eq!(text.matches("price_per_gpu_hour").count(), 0);
    let prices = write_file(dir.path(), "prices.toml", "[[price]]\ngpu = \"h100-sxm\"\nprice_per_gpu_hour = 3.0\nsource = \"our quote of 2026-10-02\"\n");
    let out = plan(dir.path(), &text, &["--out", out_dir.to_str().unwrap(), "--prices", prices.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(table.contains("prices per GPU-hour: A100-80G-SXM $1.79, servesim's defaults"), "{table}");
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out_dir.join("plan.json")).unwrap()).unwrap();
    let gpus = json["gpus"].as_array().unwrap();
    assert_eq!(gpus[0]["price_per_gpu_hour"].as_f64(), Some(3.0));
    assert!(gpus[0]["price_source"].as_str().unwrap().starts_with("our quote of 2026-10-02 (--prices "), "{gpus:?}");
    // A price file that is wrong is refused before anything runs, naming it.
    let bad = write_file(dir.path(), "bad.toml", "[[price]]\ngpu = \"H100-SXM\"\nprice_per_gpu_hour = -3.0\nsource = \"s\"\n");
    let out = plan(dir.path(), &text, &["--prices", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("bad.toml") && stderr(&out).contains("price[0].price_per_gpu_hour"), "{}", stderr(&out));
    assert_eq!(gpus[1]["price_per_gpu_hour"].as_f64(), Some(1.79));
    assert!(gpus[1]["price_source"].as_str().unwrap().contains("RunPod Secure Cloud on-demand"), "{gpus:?}");
    // Every evaluated A100 candidate costs its GPUs at the default price.
    for c in json["candidates"].as_array().unwrap().iter().filter(|c| c["gpu"] == "A100-80G-SXM" && c["gpus"].is_u64()) {
        let gpus = c["gpus"].as_f64().unwrap();
        assert!((c["price_per_hour"].as_f64().unwrap() - gpus * 1.79).abs() < 1e-9, "{c}");
    }
}

/// `profile = "auto"` on a GPU prices its candidates with its bundled profile, over a plan-wide
/// `[cost] profile = "roofline"`, and the table says which rows rest on which.
#[test]
fn a_gpu_with_profile_auto_is_priced_by_its_bundled_profile() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let text = PLAN
        .replacen("name = \"H100-SXM\"\n", "name = \"H100-SXM\"\nprofile = \"auto\"\n", 1)
        .replacen("[target]", "[cost]\nprofile = \"roofline\"\n[target]", 1);
    let out = plan(dir.path(), &text, &["--out", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = std::fs::read_to_string(out_dir.join("candidates.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let (gpu, cost_source) = (0..header.len()).fold((0, 0), |(g, c), i| match header[i] {
        "gpu" => (i, c),
        "cost_source" => (g, i),
        _ => (g, c),
    });
    let sources: Vec<(&str, &str)> = csv
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (!f[cost_source].is_empty()).then(|| (f[gpu], f[cost_source]))
        })
        .collect();
    assert!(
        sources.iter().all(|&(gpu, source)| source == if gpu == "H100-SXM" { "calibrated" } else { "roofline" }),
        "{sources:?}"
    );
    // A profile of another GPU is refused, naming the field.
    let a100 = repo().join("calibration/public/a100-80g-sxm--vllm-0.14.0.csv.zst");
    let text = PLAN.replacen("name = \"H100-SXM\"\n", &format!("name = \"H100-SXM\"\nprofile = {:?}\n", a100.to_str().unwrap()), 1);
    let out = plan(dir.path(), &text, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("search.gpu[0].profile") && stderr(&out).contains("measured on A100-80G-SXM"), "{}", stderr(&out));
}

/// Shards run apart and merged give exactly the unsharded outputs; a missing or repeated shard
/// is refused.
#[test]
fn merged_shards_are_the_unsharded_plan() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "plan.toml", PLAN);
    let run = |args: &[&str]| {
        let mut all = vec!["plan"];
        all.extend_from_slice(args);
        let out = servesim(&all);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        out
    };
    let d = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let whole = run(&[path.to_str().unwrap(), "--out", &d("whole")]);
    for k in 1..=3 {
        run(&[path.to_str().unwrap(), "--shard", &format!("{k}/3"), "--out", &d(&format!("s{k}"))]);
    }
    let merged = run(&["merge", &d("s3"), &d("s1"), &d("s2"), "--out", &d("merged")]);
    assert_eq!(stdout(&merged), stdout(&whole));
    let mut names: Vec<_> = std::fs::read_dir(dir.path().join("whole")).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        let read = |d: &str| std::fs::read(dir.path().join(d).join(&name)).unwrap();
        assert!(read("whole") == read("merged"), "{name:?} differs");
    }

    let missing = servesim(&["plan", "merge", &d("s1"), &d("s2")]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("shard 3/3 is missing"), "{}", stderr(&missing));
    let twice = servesim(&["plan", "merge", &d("s1"), &d("s1"), &d("s2")]);
    assert_eq!(twice.status.code(), Some(2));
    assert!(stderr(&twice).contains("given twice"), "{}", stderr(&twice));
    let bad = servesim(&["plan", path.to_str().unwrap(), "--shard", "4/3", "--out", &d("x")]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("--shard") && stderr(&bad).contains("4/3"), "{}", stderr(&bad));

    // Damaged shard files are refused by name, never a panic or an allocation sized by them.
    let shard_json = std::fs::read_to_string(dir.path().join("s1/shard.json")).unwrap();
    let damaged = |name: &str, text: String| {
        std::fs::create_dir_all(dir.path().join(name)).unwrap();
        std::fs::write(dir.path().join(name).join("shard.json"), text).unwrap();
        servesim(&["plan", "merge", &d(name), &d("s2"), &d("s3")])
    };
    let n_huge = shard_json.replace("\"n\": 3", "\"n\": 4294967295");
    assert_ne!(n_huge, shard_json);
    let out = damaged("n-huge", n_huge);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("is missing") && !stderr(&out).contains("panicked"), "{}", stderr(&out));
    let k_zero = shard_json.replace("\"k\": 1", "\"k\": 0");
    let out = damaged("k-zero", k_zero);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("shard 0/3") && !stderr(&out).contains("panicked"), "{}", stderr(&out));
    // An entry that meets the objectives with no operating point (no probe at its rate).
    let mut json: serde_json::Value = serde_json::from_str(&shard_json).unwrap();
    let entry = json["entries"].as_array_mut().unwrap().iter_mut().find(|e| e["evaluated"]["meets"] == true).expect("a candidate that meets");
    entry["evaluated"]["cluster"] = serde_json::Value::Null;
    entry["evaluated"]["replicas"] = 2.into();
    let out = damaged("no-point", serde_json::to_string(&json).unwrap());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("records no operating point") && !stderr(&out).contains("panicked"), "{}", stderr(&out));
}

/// An interrupted run, resumed, evaluates only what its log lacks and writes exactly what an
/// uninterrupted run writes; the log is gone once the run completes.
#[test]
fn a_resumed_run_skips_what_it_logged_and_ends_as_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "plan.toml", PLAN);
    let d = |name: &str| dir.path().join(name);
    let whole = plan(dir.path(), PLAN, &["--out", d("whole").to_str().unwrap()]);
    assert!(whole.status.success(), "{}", stderr(&whole));
    assert!(!d("whole").join(".plan-progress.jsonl").exists(), "the log is removed at the end");

    // A log of another run of this plan: its header, 3 finished candidates, and a line cut short.
    let logged = servesim(&["plan", path.to_str().unwrap(), "--shard", "1/3", "--out", d("part").to_str().unwrap()]);
    assert!(logged.status.success(), "{}", stderr(&logged));
    let shard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(d("part").join("shard.json")).unwrap()).unwrap();
    let mut log = serde_json::json!({ "plan_text": PLAN }).to_string() + "\n";
    for entry in shard["entries"].as_array().unwrap() {
        log += &(entry.to_string() + "\n");
    }
    log += "{\"index\": 4, \"infea";
    std::fs::create_dir_all(d("resumed")).unwrap();
    std::fs::write(d("resumed").join(".plan-progress.jsonl"), log).unwrap();

    let resumed = plan(dir.path(), PLAN, &["--out", d("resumed").to_str().unwrap(), "--resume"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert!(stderr(&resumed).contains("evaluating 5 of 8 candidates (3 done before)"), "{}", stderr(&resumed));
    assert_eq!(stdout(&resumed), stdout(&whole));
    for name in ["candidates.csv", "plan.json", "index.html", "top-1.toml", "top-1.sh", "pareto.png"] {
        assert!(std::fs::read(d("whole").join(name)).unwrap() == std::fs::read(d("resumed").join(name)).unwrap(), "{name} differs");
    }
    assert!(!d("resumed").join(".plan-progress.jsonl").exists());

    // A log of another plan is refused rather than mixed in.
    std::fs::write(d("resumed").join(".plan-progress.jsonl"), "{\"plan_text\": \"other\"}\n").unwrap();
    let other = plan(dir.path(), PLAN, &["--out", d("resumed").to_str().unwrap(), "--resume"]);
    assert_eq!(other.status.code(), Some(2));
    assert!(stderr(&other).contains("another plan"), "{}", stderr(&other));
}

/// Checks a Kubernetes manifest against the Kubernetes API schemas with the `kubernetes-validate`
/// package (offline: it carries the schemas). Skips, saying so, where python3 cannot import it,
/// unless SERVESIM_REQUIRE_KUBERNETES_VALIDATE=1 (CI) makes that a failure.
fn kubernetes_validate(manifest: &std::path::Path) {
    let probe = std::process::Command::new("python3").args(["-c", "import kubernetes_validate"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        assert!(
            std::env::var("SERVESIM_REQUIRE_KUBERNETES_VALIDATE").as_deref() != Ok("1"),
            "SERVESIM_REQUIRE_KUBERNETES_VALIDATE=1 but python3 cannot import kubernetes_validate"
        );
        println!("skipping the Kubernetes schema check: python3 cannot import kubernetes_validate");
        return;
    }
    let out = std::process::Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict", "--kubernetes-version", "1.31.0"])
        .arg(manifest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}{}",
        manifest.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

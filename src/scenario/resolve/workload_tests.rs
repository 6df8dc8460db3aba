//! `[workload]`: arrivals, sweeps, datasets and length distributions.

use crate::scenario::resolve::test_support::{good_text, invalid, invalid_in, load_text, with_dataset};
use crate::scenario::{Dataset, LengthDist, Scenario};

#[test]
fn request_rate_inf_as_toml_float_and_string() {
    // good_text sweeps num_prompts = [10, 20]: one rate applies to both points.
    let rate = |text: &str| load_text(text, &[]).unwrap().workload.request_rate;
    let text = good_text().replace("request_rate = 4.0", "request_rate = inf");
    assert_eq!(rate(&text), vec![f64::INFINITY; 2]);
    let text = good_text().replace("request_rate = 4.0", "request_rate = \"inf\"");
    assert_eq!(rate(&text), vec![f64::INFINITY; 2]);
    let text = good_text().replace("request_rate = 4.0", "request_rate = 3");
    assert_eq!(rate(&text), vec![3.0; 2]);
    let text = good_text().replace("request_rate = 4.0\n", "");
    assert_eq!(rate(&text), vec![f64::INFINITY; 2]);
}

#[test]
fn request_rate_list_sweeps_load() {
    let text = good_text().replace("num_prompts = [10, 20]", "num_prompts = 30").replace("request_rate = 4.0", "request_rate = [1, 2.5, \"inf\"]");
    let w = load_text(&text, &[]).unwrap().workload;
    assert_eq!(w.request_rate, vec![1.0, 2.5, f64::INFINITY]);
    assert_eq!(w.num_prompts, vec![30; 3]);
    assert!(w.sweeps_rate());
    let rates: Vec<f64> = w.points().iter().map(|p| p.request_rate).collect();
    assert_eq!(rates, w.request_rate);
    // Two lists pair up point by point.
    let text = good_text().replace("request_rate = 4.0", "request_rate = [1, 2]");
    let w = load_text(&text, &[]).unwrap().workload;
    assert_eq!((w.num_prompts, w.request_rate), (vec![10, 20], vec![1.0, 2.0]));
    invalid(&["workload.request_rate=[1,2,3]"], "workload.num_prompts", "[10, 20]");
    invalid(&["workload.request_rate=[]"], "workload.request_rate", "[]");
    invalid(&["workload.request_rate=[1,-2]"], "workload.request_rate", "-2");
    // One value of either is a sweep of one point's worth, not a sweep.
    assert!(!load_text(&good_text(), &[]).unwrap().workload.sweeps_rate());
}

#[test]
fn other_dataset_kinds() {
    let s = load_text(
        &with_dataset("kind = \"fixed\"\ninput_len = 100\noutput_len = 10"),
        &[],
    )
    .unwrap();
    assert_eq!(
        s.workload.dataset,
        Dataset::Fixed {
            input_len: 100,
            output_len: 10
        }
    );
    let s = load_text(&with_dataset("kind = \"random\"\nrange_ratio = 0.5"), &[]).unwrap();
    assert_eq!(
        s.workload.dataset,
        Dataset::Random {
            input_len: 1024,
            output_len: 128,
            range_ratio: 0.5,
            prefix_len: 0
        }
    );
    let s = load_text(
        &with_dataset("kind = \"sonnet\"\ninput_len = 80\nprefix_len = 50\noutput_len = 150"),
        &[],
    )
    .unwrap();
    assert_eq!(
        s.workload.dataset,
        Dataset::Sonnet {
            input_len: 80,
            prefix_len: 50,
            output: LengthDist::Fixed { value: 150 }
        }
    );
    let s = load_text(
        &with_dataset("kind = \"sonnet\"\ninput_len = 80\nprefix_len = 50\noutput = { dist = \"uniform\", min = 1, max = 150 }"),
        &[],
    )
    .unwrap();
    assert!(matches!(
        s.workload.dataset,
        Dataset::Sonnet {
            output: LengthDist::Uniform { min: 1, max: 150 },
            ..
        }
    ));
}

#[test]
fn trace_dataset_loads_relative_to_the_scenario() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("traces")).unwrap();
    std::fs::write(
        dir.path().join("traces/t.csv"),
        "arrival_s,input_tokens,output_tokens\n0.0,100,10\n0.5,200,20\n1.0,300,30\n",
    )
    .unwrap();
    let scenario = dir.path().join("s.toml");
    std::fs::write(
        &scenario,
        with_dataset("kind = \"trace\"\npath = \"traces/t.csv\"")
            .replace("num_prompts = [10, 20]\n", ""),
    )
    .unwrap();
    let s = Scenario::load(&scenario, &[]).unwrap();
    let Dataset::Trace { path, rows } = &s.workload.dataset else {
        panic!()
    };
    assert_eq!(path, &dir.path().join("traces/t.csv"));
    assert_eq!(rows.len(), 3);
    assert_eq!(
        s.workload.num_prompts,
        vec![3],
        "defaults to the whole trace"
    );

    // More prompts than rows.
    let err = Scenario::load(&scenario, &["workload.num_prompts=4".into()]).unwrap_err();
    assert!(
        err.to_string().contains("`workload.num_prompts` = 4"),
        "{err}"
    );

    // The first row longer than max_model_len is named.
    let err = Scenario::load(&scenario, &["engine.max_model_len=200".into()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("s.toml")
            && err.contains("`workload.dataset.path`")
            && err.contains("\"traces/t.csv\""),
        "{err}"
    );
    assert!(
        err.contains("request 2") && err.contains("220 tokens") && err.contains("(200)"),
        "{err}"
    );

    // A broken trace: the trace reader's error, against the field.
    std::fs::write(dir.path().join("traces/t.csv"), "time,a,b\n").unwrap();
    let err = Scenario::load(&scenario, &[]).unwrap_err().to_string();
    assert!(
        err.contains("`workload.dataset.path`") && err.contains("header"),
        "{err}"
    );
}

#[test]
fn bad_num_prompts() {
    invalid(&["workload.num_prompts=[]"], "workload.num_prompts", "[]");
    invalid(&["workload.num_prompts=0"], "workload.num_prompts", "0");
    invalid(
        &["workload.num_prompts=[5, -1]"],
        "workload.num_prompts",
        "[5, -1]",
    );
}

#[test]
fn bad_request_rate_and_burstiness() {
    invalid(&["workload.request_rate=-1"], "workload.request_rate", "-1");
    invalid(&["workload.request_rate=0"], "workload.request_rate", "0");
    invalid(
        &["workload.request_rate=nan"],
        "workload.request_rate",
        "NaN",
    );
    invalid(
        &["workload.request_rate=fast"],
        "workload.request_rate",
        "\"fast\"",
    );
    invalid(&["workload.burstiness=0"], "workload.burstiness", "0");
    invalid(&["workload.burstiness=-2.5"], "workload.burstiness", "-2.5");
    invalid(
        &["workload.max_concurrency=0"],
        "workload.max_concurrency",
        "0",
    );
}

#[test]
fn bad_length_distributions() {
    invalid(
        &["workload.dataset.input={ dist = \"uniform\", min = 10, max = 5 }"],
        "workload.dataset.input.min",
        "10",
    );
    invalid(
        &["workload.dataset.output={ dist = \"lognormal\", mean = 5, std = 1, min = 0, max = 10 }"],
        "workload.dataset.output.min",
        "0",
    );
    invalid(
        &["workload.dataset.output={ dist = \"normal\", mean = 5, std = 1 }"],
        "workload.dataset.output.max",
        "(missing)",
    );
    invalid(
        &["workload.dataset.output=0"],
        "workload.dataset.output",
        "0",
    );
    invalid(
        &["workload.dataset.input_len=5"],
        "workload.dataset.input_len",
        "5",
    );
    let random = with_dataset("kind = \"random\"\ninput_len = 100\noutput_len = 10");
    invalid_in(
        &random,
        &["workload.dataset.range_ratio=1.0"],
        "workload.dataset.range_ratio",
        "1",
    );
    invalid_in(
        &random,
        &["workload.dataset.range_ratio=-0.1"],
        "workload.dataset.range_ratio",
        "-0.1",
    );
}

#[test]
fn request_longer_than_max_model_len() {
    let fixed = with_dataset("kind = \"fixed\"\ninput_len = 4000\noutput_len = 200");
    let msg = invalid_in(
        &fixed,
        &["engine.max_model_len=4096"],
        "workload.dataset.input_len",
        "4000",
    );
    assert!(
        msg.contains("4000 + output 200 = 4200") && msg.contains("(4096)"),
        "{msg}"
    );
    let msg = invalid(
        &["engine.max_model_len=2048"],
        "workload.dataset.input.max",
        "2048",
    );
    assert!(msg.contains("2048 + output 1024 = 3072"), "{msg}");
    let random = with_dataset(
        "kind = \"random\"\ninput_len = 1000\noutput_len = 100\nrange_ratio = 0.5\nprefix_len = 10",
    );
    let msg = invalid_in(
        &random,
        &["engine.max_model_len=1600"],
        "workload.dataset.input_len",
        "1510",
    );
    assert!(msg.contains("1510 + output 150 = 1660"), "{msg}");
    let sonnet = with_dataset(
        "kind = \"sonnet\"\ninput_len = 1000\noutput = { dist = \"uniform\", min = 1, max = 200 }",
    );
    invalid_in(
        &sonnet,
        &["engine.max_model_len=1100"],
        "workload.dataset.input_len",
        "1000",
    );
}

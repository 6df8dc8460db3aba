//! End-to-end `servesim report`: a golden SVG byte for byte, byte-identical reruns, errors that
//! name the file and line, `itl.csv`, no progress bar when piped, and the page opened in headless
//! Chromium (screenshot not blank, every chart image loaded).

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

const GOLDEN_SCENARIO: &str = "tests/data/golden.toml";
/// The chart compared byte for byte, and where its expected bytes live.
const GOLDEN_CHART: &str = "sweep-ttft.svg";
const GOLDEN_SVG: &str = "tests/data/report-golden-sweep-ttft.svg";

/// Simulates the golden scenario into `dir/run` and returns that directory.
fn simulate_golden(dir: &Path) -> PathBuf {
    let run = dir.join("run");
    let scenario = repo().join(GOLDEN_SCENARIO);
    let out = servesim(&["simulate", scenario.to_str().unwrap(), "--out", run.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    run
}

fn report(run: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["report", run.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    servesim(&args)
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn golden_svg_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let run = simulate_golden(dir.path());
    let out_dir = dir.path().join("report");
    let out = report(&run, &out_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let actual = std::fs::read(out_dir.join(GOLDEN_CHART)).unwrap();
    let expected = std::fs::read(repo().join(GOLDEN_SVG)).unwrap_or_default();
    if actual != expected && std::env::var_os("SERVESIM_BLESS").is_some() {
        std::fs::write(repo().join(GOLDEN_SVG), &actual).unwrap();
        return;
    }
    assert!(
        actual == expected,
        "{GOLDEN_CHART} differs from {GOLDEN_SVG}; if intended, rerun with SERVESIM_BLESS=1 cargo test --test report"
    );
}

#[test]
fn every_chart_exists_and_two_reports_are_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let run = simulate_golden(dir.path());
    let recorded = repo().join("tests/data/recorded/run-002-vllm-405b.txt");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for out_dir in [&a, &b] {
        let out = report(&run, out_dir, &["--recorded", recorded.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let names = files_in(&a);
    assert_eq!(names, files_in(&b));
    for stem in [
        "sweep-output-throughput",
        "sweep-request-throughput",
        "sweep-ttft",
        "sweep-tpot",
        "sweep-e2el",
        "tradeoff",
        "recorded-scatter",
        "recorded-error",
        "cdf-ttft",
        "cdf-tpot",
        "cdf-itl",
        "cdf-e2el",
        "timeline-requests",
        "timeline-kv",
        "timeline-tokens",
        "timeline-step",
        "step-cost-breakdown",
    ] {
        for ext in ["png", "svg"] {
            assert!(names.contains(&format!("{stem}.{ext}")), "{stem}.{ext} missing from {names:?}");
        }
    }
    assert!(names.contains(&"index.html".to_string()));
    for name in &names {
        let (x, y) = (std::fs::read(a.join(name)).unwrap(), std::fs::read(b.join(name)).unwrap());
        assert!(!x.is_empty(), "{name} is empty");
        assert!(x == y, "{name} differs between two identical report runs");
    }
    let png = std::fs::read(a.join("sweep-ttft.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let svg = std::fs::read_to_string(a.join("sweep-ttft.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("TTFT (ms)"), "{}", &svg[..200.min(svg.len())]);
}

/// The hit-rate chart is drawn where a prefix cache hit something, and only there: the golden
/// run (no shared text) has none.
#[test]
fn a_prefix_hit_rate_chart_where_the_cache_was_hit() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let scenario = repo().join("scenarios/prefix-caching.toml");
    let out = servesim(&["simulate", scenario.to_str().unwrap(), "--set", "workload.num_prompts=200", "--out", run.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out_dir = dir.path().join("report");
    assert!(report(&run, &out_dir, &[]).status.success());
    let svg = std::fs::read_to_string(out_dir.join("sweep-prefix-hit-rate.svg")).unwrap();
    assert!(svg.contains("hit rate (%)"), "{}", &svg[..200.min(svg.len())]);
    let golden = simulate_golden(dir.path());
    let golden_report = dir.path().join("golden-report");
    assert!(report(&golden, &golden_report, &[]).status.success());
    assert!(!files_in(&golden_report).iter().any(|f| f.contains("prefix")));
}

#[test]
fn index_html_is_self_contained() {
    let dir = tempfile::tempdir().unwrap();
    let run = simulate_golden(dir.path());
    let out_dir = dir.path().join("report");
    assert!(report(&run, &out_dir, &[]).status.success());
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    let images = html.matches("<img ").count();
    assert!(images >= 15, "only {images} charts in index.html");
    assert_eq!(html.matches("<img src=\"data:image/png;base64,").count(), images, "every image must be inline");
    for forbidden in ["http://", "https://", "<script", "<link", "@import"] {
        assert!(!html.contains(forbidden), "index.html contains {forbidden:?}");
    }
    // The tables: one row per sweep point of the golden scenario (num_prompts 1 and 12).
    assert!(html.contains("<td class=\"l\">N=1</td>") && html.contains("<td class=\"l\">N=12</td>"));
}

#[test]
fn itl_csv_holds_every_token_gap() {
    let dir = tempfile::tempdir().unwrap();
    let run = simulate_golden(dir.path());
    let itl = std::fs::read_to_string(run.join("itl.csv")).unwrap();
    let requests = std::fs::read_to_string(run.join("requests.csv")).unwrap();
    let mut lines = itl.lines();
    assert_eq!(lines.next(), Some("point,num_prompts,itl_ms,count"));
    let mut gaps = std::collections::BTreeMap::<u32, u64>::new();
    let mut last: Option<(u32, f64)> = None;
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let (n, value, count): (u32, f64, u64) = (f[0].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap());
        if let Some((last_n, last_value)) = last
            && last_n == n
        {
            assert!(value > last_value, "itl.csv not ascending at {line}");
        }
        last = Some((n, value));
        *gaps.entry(n).or_default() += count;
    }
    // vLLM's ITL: output_tokens − 1 gaps per successful request.
    let mut expected = std::collections::BTreeMap::<u32, u64>::new();
    for line in requests.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f[10] == "true" {
            *expected.entry(f[0].parse().unwrap()).or_default() += f[8].parse::<u64>().unwrap() - 1;
        }
    }
    assert_eq!(gaps, expected);
}

/// Runs `report` on a copy of the golden run with one file changed; returns stderr.
fn report_error(dir: &Path, run: &Path, file: &str, change: impl FnOnce(String) -> Option<String>) -> String {
    let broken = dir.join(format!("broken-{}", file.replace('.', "-")));
    std::fs::create_dir_all(&broken).unwrap();
    for name in ["summary.json", "requests.csv", "timeline.csv", "itl.csv"] {
        std::fs::copy(run.join(name), broken.join(name)).unwrap();
    }
    match change(std::fs::read_to_string(broken.join(file)).unwrap()) {
        Some(text) => std::fs::write(broken.join(file), text).unwrap(),
        None => std::fs::remove_file(broken.join(file)).unwrap(),
    }
    let out = report(&broken, &dir.join("out"), &[]);
    assert_eq!(out.status.code(), Some(2), "expected exit 2; stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "one error line expected: {err}");
    err
}

/// Replaces field `col` of 1-based line `line`.
fn set_field(text: &str, line: usize, col: usize, value: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut fields: Vec<&str> = lines[line - 1].split(',').collect();
    fields[col] = value;
    lines[line - 1] = fields.join(",");
    lines.join("\n") + "\n"
}

#[test]
fn bad_input_exits_2_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let run = simulate_golden(dir.path());

    let err = report_error(dir.path(), &run, "itl.csv", |_| None);
    assert!(err.contains("itl.csv: cannot read"), "{err}");

    let err = report_error(dir.path(), &run, "requests.csv", |t| Some(set_field(&t, 3, 4, "soon")));
    assert!(err.contains("requests.csv:3: `send_s`: expected a non-negative decimal number, found \"soon\""), "{err}");

    let err = report_error(dir.path(), &run, "timeline.csv", |t| {
        let mut lines: Vec<&str> = t.lines().collect();
        lines[4] = "1,0,0.5";
        Some(lines.join("\n"))
    });
    assert!(err.contains("timeline.csv:5: expected 17 fields as in the header, found 3"), "{err}");

    let err = report_error(dir.path(), &run, "itl.csv", |t| Some(set_field(&t, 2, 0, "999")));
    assert!(err.contains("itl.csv:2: point 999 is not a sweep point of summary.json, which has 2"), "{err}");

    let err = report_error(dir.path(), &run, "summary.json", |t| Some(t.replacen("\"results\"", "\"results\" oops", 1)));
    assert!(err.contains("summary.json:") && err.contains("malformed JSON"), "{err}");

    let err = report_error(dir.path(), &run, "requests.csv", |t| Some(t.replacen("send_s", "sent_s", 1)));
    assert!(err.contains("requests.csv:1: header has no `send_s` column"), "{err}");

    // A header and no requests: every chart would be blank.
    let err = report_error(dir.path(), &run, "requests.csv", |t| Some(format!("{}\n", t.lines().next().unwrap())));
    assert!(err.contains("requests.csv: sweep point 1 has no requests"), "{err}");

    // Not a run directory at all, and a malformed recorded file.
    let out = report(&dir.path().join("nowhere"), &dir.path().join("out"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nowhere: not a directory"), "{}", stderr(&out));
    let bad = write_file(dir.path(), "bad.txt", "============ Serving Benchmark Result ============\nnonsense\n");
    let out = report(&run, &dir.path().join("out"), &["--recorded", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("bad.txt:2:"), "{}", stderr(&out));
}

#[test]
fn no_progress_bar_when_piped() {
    // stderr is a pipe here, so the sweep's progress bar must stay hidden.
    let scenario = repo().join(GOLDEN_SCENARIO);
    let out = servesim(&["simulate", scenario.to_str().unwrap()]);
    assert!(out.status.success());
    let err = stderr(&out);
    assert!(!err.contains("sweep points") && !err.contains('\r') && !err.contains('\u{1b}'), "{err:?}");
}

/// The Chromium binary, if one is installed: an executable in an absolute `PATH` directory that
/// answers `--version` when run from an empty directory.
fn chromium() -> Option<PathBuf> {
    let bin = executable_on_path(&["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"])?;
    let empty = tempfile::tempdir().ok()?;
    let version = Command::new(&bin).arg("--version").current_dir(empty.path()).output().ok()?;
    (version.status.success() && String::from_utf8_lossy(&version.stdout).to_ascii_lowercase().contains("chrom")).then_some(bin)
}

fn chromium_command(bin: &Path, profile: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    cmd
}

#[test]
fn index_html_renders_in_headless_chromium() {
    let Some(bin) = chromium() else {
        assert!(!required("SERVESIM_REQUIRE_CHROMIUM"), "SERVESIM_REQUIRE_CHROMIUM=1 but no chromium on PATH (apt-get install chromium)");
        eprintln!("skipped: chromium is not installed (apt-get install chromium; SERVESIM_REQUIRE_CHROMIUM=1 makes this fail)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = simulate_golden(dir.path());
    let out_dir = dir.path().join("report");
    let out = report(&run, &out_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let index = out_dir.join("index.html");
    let html = std::fs::read_to_string(&index).unwrap();
    let images = html.matches("<img ").count();

    // 1. A screenshot of the page as opened from disk must not be blank.
    let shot = dir.path().join("shot.png");
    let status = chromium_command(&bin, &dir.path().join("profile-1"))
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,2000")
        .arg(format!("file://{}", index.display()))
        .output()
        .expect("run chromium");
    assert!(shot.is_file(), "no screenshot; chromium said: {}", String::from_utf8_lossy(&status.stderr));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0u8; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    let luma: Vec<f64> = pixels[..info.buffer_size()]
        .chunks(channels)
        .map(|p| if channels >= 3 { 0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2]) } else { f64::from(p[0]) })
        .collect();
    let mean = luma.iter().sum::<f64>() / luma.len() as f64;
    let variance = luma.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / luma.len() as f64;
    let inked = luma.iter().filter(|&&v| v < 200.0).count() as f64 / luma.len() as f64;
    assert!(variance > 100.0 && inked > 0.01, "screenshot looks blank: variance {variance:.1}, {:.2}% inked", inked * 100.0);

    // 2. Every chart image loaded: a copy of the page with a probe that records, after `load`,
    //    how many images decoded to a non-zero size; Chromium prints the resulting DOM.
    let probe = out_dir.join("probe.html");
    let script = "<script>window.addEventListener('load', () => { const all = [...document.images]; \
                  const ok = all.filter(i => i.complete && i.naturalWidth > 0).length; \
                  document.body.setAttribute('data-images-loaded', ok + '/' + all.length); });</script>";
    std::fs::write(&probe, html.replace("</body>", &format!("{script}\n</body>"))).unwrap();
    let dom = chromium_command(&bin, &dir.path().join("profile-2"))
        .args(["--dump-dom", "--virtual-time-budget=10000"])
        .arg(format!("file://{}", probe.display()))
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&dom.stdout);
    let expected = format!("data-images-loaded=\"{images}/{images}\"");
    assert!(images > 0 && dom.contains(&expected), "expected {expected} in the DOM; found {:?}", {
        let at = dom.find("data-images-loaded").unwrap_or(0);
        &dom[at..(at + 40).min(dom.len())]
    });
}

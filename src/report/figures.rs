//! Which charts a report has, as [`Chart`] descriptions built from the runs' data.
//!
//! - Sweep curves (one series per run directory): output and request throughput, mean and p99
//!   TTFT / TPOT / E2EL against load, and the latency–throughput trade-off; recorded values
//!   overlaid with ±10% bars when `--recorded` is given, plus a simulated-vs-recorded scatter.
//! - Per run directory: CDFs of TTFT, TPOT, ITL and E2EL (one line per sweep point), timelines
//!   of its largest sweep point, and the step-cost breakdown against batch size.
//!
//! "Load" is whatever the sweep varies: max concurrency, else the request rate, else
//! `num_prompts` (with `request_rate = inf` that is how many requests are sent at once).

use std::collections::BTreeMap;

use plotters::style::RGBColor;

use super::chart::{Axis, Chart, Kind, Legend, PALETTE, Series, ramp, spans_decades, spans_factor};
use super::input::{COMPONENTS, PointData, RunData, StepRow};
use super::{Latencies, ReportData, mean_and_percentile, runs_mean_and_percentile};

/// The relative tolerance drawn around recorded values and in the scatter (the project's
/// accuracy target).
pub const TOLERANCE: f64 = 0.10;

/// Most points drawn per CDF line (quantiles, evenly spaced).
const CDF_POINTS_MAX: usize = 400;
/// Timelines with more steps than this are averaged into [`TIMELINE_BUCKETS`] time buckets.
const TIMELINE_STEPS_MAX: usize = 1600;
const TIMELINE_BUCKETS: usize = 800;
/// Most distinct batch sizes drawn in the step-cost breakdown before binning.
const BREAKDOWN_BINS_MAX: usize = 64;

const RECORDED_MEAN: RGBColor = RGBColor(0, 0, 0);
const RECORDED_P99: RGBColor = RGBColor(120, 120, 120);

/// What the sweep varies, and so what the sweep charts' x axis is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    Concurrency,
    Rate,
    NumPrompts,
}

impl Load {
    /// What the points of `runs` vary.
    pub fn of(runs: &[RunData]) -> Load {
        let points = || runs.iter().flat_map(|r| &r.points);
        let varies = |f: &dyn Fn(&PointData) -> Option<u64>| {
            let mut values = points().map(f);
            let first = values.next().flatten();
            values.any(|v| v != first)
        };
        if varies(&|p| p.max_concurrency) {
            Load::Concurrency
        } else if varies(&|p| p.request_rate.map(f64::to_bits)) {
            Load::Rate
        } else {
            Load::NumPrompts
        }
    }

    pub fn axis_label(self) -> &'static str {
        match self {
            Load::Concurrency => "max concurrency (requests)",
            Load::Rate => "request rate (req/s)",
            Load::NumPrompts => "num_prompts (requests per run)",
        }
    }

    /// The point's position on the load axis; `None` where it has none (an `inf` rate).
    pub fn value(self, p: &PointData) -> Option<f64> {
        match self {
            Load::Concurrency => p.max_concurrency.map(|c| c as f64),
            Load::Rate => p.request_rate,
            Load::NumPrompts => Some(f64::from(p.num_prompts)),
        }
    }

    /// A short label of the point's load, e.g. `N=64`.
    pub fn label(self, p: &PointData) -> String {
        match self {
            Load::Concurrency => p.max_concurrency.map_or("C=∞".into(), |c| format!("C={c}")),
            Load::Rate => p.request_rate.map_or("inf".into(), |r| format!("{} req/s", super::chart::format_number(r))),
            Load::NumPrompts => format!("N={}", p.num_prompts),
        }
    }
}

/// Every chart of the report, in the order the HTML shows them.
pub fn all(data: &ReportData) -> Vec<Chart> {
    let load = Load::of(&data.runs);
    let latencies: Vec<Vec<Latencies>> =
        data.runs.iter().map(|r| r.points.iter().map(Latencies::of).collect()).collect();
    let mut charts = sweep_charts(data, load, &latencies);
    charts.extend(recorded_scatter(data));
    charts.extend(recorded_errors(data, load));
    let many = data.runs.len() > 1;
    for (i, run) in data.runs.iter().enumerate() {
        // With several runs, each run's charts get a `runN-` prefix and its name in the title.
        let (prefix, suffix) = if many { (format!("run{}-", i + 1), format!(" — {}", run.name)) } else { (String::new(), String::new()) };
        let mut own = cdf_charts(run, load, &latencies[i]);
        own.extend(timeline_charts(run, load));
        own.extend(breakdown_chart(run));
        for mut chart in own {
            chart.file = format!("{prefix}{}", chart.file);
            chart.title.push_str(&suffix);
            charts.push(chart);
        }
    }
    charts
}

/// One y value per sweep point of a run.
type Getter<'a> = &'a dyn Fn(&PointData, &Latencies) -> Option<f64>;

fn sweep_charts(data: &ReportData, load: Load, latencies: &[Vec<Latencies>]) -> Vec<Chart> {
    let many = data.runs.len() > 1;
    let series_name = |run: &RunData, what: &str| match (many, what.is_empty()) {
        (true, true) => run.name.clone(),
        (true, false) => format!("{}: {what}", run.name),
        (false, true) => "simulated".to_string(),
        (false, false) => what.to_string(),
    };
    let has_recorded = data.recorded.iter().flatten().any(Option::is_some);
    // (series, points) for one getter over every run.
    let curve = |run_index: usize, get: Getter| -> Vec<(f64, f64)> {
        let run = &data.runs[run_index];
        run.points
            .iter()
            .zip(&latencies[run_index])
            .filter_map(|(p, l)| Some((load.value(p)?, get(p, l)?)))
            .collect()
    };
    let recorded_curve = |key: &str| -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        for (run, blocks) in data.runs.iter().zip(&data.recorded) {
            for (p, block) in run.points.iter().zip(blocks) {
                if let (Some(x), Some(y)) = (load.value(p), block.as_ref().and_then(|b| b.get(key))) {
                    out.push((x, y));
                }
            }
        }
        out
    };
    let loads: Vec<f64> = data.runs.iter().flat_map(|r| &r.points).filter_map(|p| load.value(p)).collect();
    let x_axis = || Axis::auto(load.axis_label(), loads.iter().copied());
    let inf_note = if load == Load::Rate && data.runs.iter().flat_map(|r| &r.points).any(|p| p.request_rate.is_none()) {
        " Points with an unbounded (inf) rate have no place on this axis and are left out."
    } else {
        ""
    };

    let mut charts = Vec::new();
    for (file, title, y_label, key) in [
        ("sweep-output-throughput", "Output token throughput", "output throughput (tok/s)", "output_throughput"),
        ("sweep-request-throughput", "Request throughput", "request throughput (req/s)", "request_throughput"),
    ] {
        let mut series = Vec::new();
        for (i, run) in data.runs.iter().enumerate() {
            let get = |p: &PointData, _: &Latencies| p.values.get(key).copied();
            series.push(Series::new(series_name(run, ""), PALETTE[i % PALETTE.len()], Kind::LineMarkers, curve(i, &get)));
        }
        if has_recorded {
            series.push(Series::new("recorded (bars ±10%)", RECORDED_MEAN, Kind::ErrorBars { relative: TOLERANCE }, recorded_curve(key)));
        }
        let ys: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).collect();
        charts.push(Chart {
            file: file.into(),
            title: title.into(),
            caption: format!("{title} at each sweep point (vLLM's definition: completed work ÷ benchmark duration).{inf_note}"),
            x: x_axis(),
            y: Axis::auto(y_label, ys),
            series,
            legend: Legend::UpperLeft,
        });
    }

    // Only where something was cached, or drafted: a run with caching on and no shared text has
    // a hit rate of zero everywhere, which is no chart.
    let optional: [(&str, &str, &str, String, &str, f64); 2] = [
        (
            "prefix_cache_hit_rate",
            "sweep-prefix-hit-rate",
            "Prefix cache hit rate",
            format!(
                "Prompt tokens found in the replicas' prefix caches over prompt tokens looked up, at each sweep point \
                 (vLLM's prefix_cache_hits ÷ prefix_cache_queries).{inf_note}"
            ),
            "hit rate (%)",
            100.0,
        ),
        (
            "spec_decode_mean_tokens_per_step",
            "sweep-spec-tokens-per-step",
            "Tokens per speculative step",
            format!(
                "Tokens each verifying step of a sequence produced, its accepted drafts and the target's own token, at \
                 each sweep point (1 + vLLM's spec_decode_num_accepted_tokens ÷ spec_decode_num_drafts).{inf_note}"
            ),
            "tokens per step",
            1.0,
        ),
    ];
    for (key, file, title, caption, y_label, scale) in optional {
        if !data.runs.iter().flat_map(|r| &r.points).any(|p| p.values.get(key).is_some_and(|&v| v > 0.0)) {
            continue;
        }
        let series: Vec<Series> = data
            .runs
            .iter()
            .enumerate()
            .map(|(i, run)| {
                let get = |p: &PointData, _: &Latencies| p.values.get(key).map(|v| scale * v);
                Series::new(series_name(run, ""), PALETTE[i % PALETTE.len()], Kind::LineMarkers, curve(i, &get))
            })
            .collect();
        let ys: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain([0.0]).collect();
        let y = if scale == 100.0 { Axis::auto(y_label, [0.0, 100.0]) } else { Axis::auto(y_label, ys) };
        charts.push(Chart { file: file.into(), title: title.into(), caption, x: x_axis(), y, series, legend: Legend::UpperLeft });
    }

    type Pick = fn(&Latencies) -> Option<(f64, f64)>;
    let metrics: [(&str, &str, &str, &str, Pick); 3] = [
        ("sweep-ttft", "Time to first token", "TTFT (ms)", "ttft", |l| mean_and_percentile(&l.ttft_ms, 99.0)),
        ("sweep-tpot", "Time per output token (excl. 1st)", "TPOT (ms)", "tpot", |l| mean_and_percentile(&l.tpot_ms, 99.0)),
        ("sweep-e2el", "End-to-end latency", "E2EL (ms)", "e2el", |l| mean_and_percentile(&l.e2el_ms, 99.0)),
    ];
    for (file, title, y_label, key, pick) in metrics {
        let mut series = Vec::new();
        for (i, run) in data.runs.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let mean = |_: &PointData, l: &Latencies| pick(l).map(|v| v.0);
            let p99 = |_: &PointData, l: &Latencies| pick(l).map(|v| v.1);
            series.push(Series::new(series_name(run, "mean"), color, Kind::LineMarkers, curve(i, &mean)));
            series.push(Series::new(series_name(run, "p99"), color, Kind::DashedMarkers, curve(i, &p99)));
        }
        if has_recorded {
            for (name, color, k) in [
                ("recorded mean (bars ±10%)", RECORDED_MEAN, format!("mean_{key}_ms")),
                ("recorded p99 (bars ±10%)", RECORDED_P99, format!("p99_{key}_ms")),
            ] {
                let points = recorded_curve(&k);
                if !points.is_empty() {
                    series.push(Series::new(name, color, Kind::ErrorBars { relative: TOLERANCE }, points));
                }
            }
        }
        let ys: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).collect();
        charts.push(Chart {
            file: file.into(),
            title: format!("{title}: mean and p99"),
            caption: format!(
                "Mean (solid) and 99th percentile (dashed) {} over successful requests at each sweep point.{inf_note}",
                key.to_uppercase()
            ),
            x: x_axis(),
            y: Axis::auto(y_label, ys),
            series,
            legend: Legend::UpperLeft,
        });
    }

    // The trade-off: what each user sees (TPOT) against what the deployment delivers.
    let mut series = Vec::new();
    for (i, run) in data.runs.iter().enumerate() {
        let mut s = Series::new(series_name(run, ""), PALETTE[i % PALETTE.len()], Kind::LineMarkers, Vec::new());
        for (p, l) in run.points.iter().zip(&latencies[i]) {
            if let (Some(x), Some((tpot, _))) = (p.values.get("output_throughput"), mean_and_percentile(&l.tpot_ms, 99.0)) {
                s.points.push((*x, tpot));
                s.annotations.push(load.label(p));
            }
        }
        series.push(s);
    }
    if has_recorded {
        let mut points = Vec::new();
        for block in data.recorded.iter().flatten().flatten() {
            if let (Some(x), Some(y)) = (block.get("output_throughput"), block.get("mean_tpot_ms")) {
                points.push((x, y));
            }
        }
        series.push(Series::new("recorded", RECORDED_MEAN, Kind::Markers, points));
    }
    let (xs, ys): (Vec<f64>, Vec<f64>) = series.iter().flat_map(|s| s.points.iter().copied()).unzip();
    charts.push(Chart {
        file: "tradeoff".into(),
        title: "Latency–throughput trade-off".into(),
        caption: "Mean TPOT (the pace each user sees) against output throughput (what the deployment delivers); \
                  each point is a sweep point, labelled with its load."
            .into(),
        x: Axis::auto("output throughput (tok/s)", xs),
        y: Axis::auto("mean TPOT (ms)", ys),
        series,
        legend: Legend::UpperLeft,
    });
    charts
}

/// Simulated against recorded for each matched sweep point and headline metric, with y = x and
/// the ±10% band.
fn recorded_scatter(data: &ReportData) -> Option<Chart> {
    let mut series = Vec::new();
    for (m, (key, name)) in COMPARED.iter().enumerate() {
        let mut points = Vec::new();
        for (run, blocks) in data.runs.iter().zip(&data.recorded) {
            for (p, block) in run.points.iter().zip(blocks) {
                let recorded = block.as_ref().and_then(|b| b.get(key));
                let simulated = p.values.get(*key).copied().or_else(|| simulated_latency(p, key));
                if let (Some(r), Some(s)) = (recorded, simulated)
                    && r > 0.0
                    && s > 0.0
                {
                    points.push((r, s));
                }
            }
        }
        if !points.is_empty() {
            series.push(Series::new(*name, PALETTE[m % PALETTE.len()], Kind::Markers, points));
        }
    }
    if series.is_empty() {
        return None;
    }
    let values: Vec<f64> = series.iter().flat_map(|s| s.points.iter().flat_map(|&(x, y)| [x, y])).collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min) / 1.5;
    let hi = values.iter().copied().fold(0.0, f64::max) * 1.5;
    let log = spans_decades(values.iter().copied());
    let (lo, hi) = if log { (lo, hi) } else { (0.0, hi) };
    let edge = [lo, hi];
    let band = Series::new(
        "±10% band",
        RGBColor(150, 205, 150),
        Kind::Band { lower: edge.iter().map(|v| v * (1.0 - TOLERANCE)).collect() },
        edge.iter().map(|&v| (v, v * (1.0 + TOLERANCE))).collect(),
    );
    let diagonal = Series::new("", RGBColor(90, 90, 90), Kind::Dashed, vec![(lo, lo), (hi, hi)]);
    let mut all = vec![band, diagonal];
    all.extend(series);
    let axis = |label: &str| Axis { label: label.into(), log, fixed: Some((lo, hi)), zero: true };
    Some(Chart {
        file: "recorded-scatter".into(),
        title: "Simulated against recorded".into(),
        caption: "Each marker is one sweep point and metric (units as in its legend entry); on the dashed line \
                  simulation and recording agree, inside the shaded band they agree within 10%."
            .into(),
        x: axis("recorded value (ms; tok/s or req/s for throughput)"),
        y: axis("simulated value (same unit)"),
        series: all,
        legend: Legend::UpperLeft,
    })
}

/// The headline metrics compared with recorded values: vLLM key and legend name with unit.
const COMPARED: [(&str, &str); 6] = [
    ("output_throughput", "output throughput (tok/s)"),
    ("request_throughput", "request throughput (req/s)"),
    ("mean_ttft_ms", "mean TTFT (ms)"),
    ("mean_tpot_ms", "mean TPOT (ms)"),
    ("mean_itl_ms", "mean ITL (ms)"),
    ("mean_e2el_ms", "mean E2EL (ms)"),
];

/// The relative error of each headline metric at each matched sweep point, against load, with
/// the ±10% band: the scatter's story at a readable scale.
fn recorded_errors(data: &ReportData, load: Load) -> Option<Chart> {
    let mut series = Vec::new();
    let mut loads = Vec::new();
    for (m, (key, name)) in COMPARED.iter().enumerate() {
        let mut points = Vec::new();
        for (run, blocks) in data.runs.iter().zip(&data.recorded) {
            for (p, block) in run.points.iter().zip(blocks) {
                let recorded = block.as_ref().and_then(|b| b.get(key));
                let simulated = p.values.get(*key).copied().or_else(|| simulated_latency(p, key));
                if let (Some(x), Some(r), Some(s)) = (load.value(p), recorded, simulated)
                    && r != 0.0
                {
                    points.push((x, 100.0 * (s - r) / r));
                    loads.push(x);
                }
            }
        }
        if !points.is_empty() {
            let name = name.split(" (").next().unwrap_or(name).to_string();
            series.push(Series::new(name, PALETTE[m % PALETTE.len()], Kind::LineMarkers, points));
        }
    }
    if series.is_empty() {
        return None;
    }
    let x = Axis::auto(load.axis_label(), loads.iter().copied());
    let (lo, hi) = loads.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
    let band = Series::new(
        "±10%",
        RGBColor(200, 225, 200),
        Kind::Band { lower: vec![-100.0 * TOLERANCE; 2] },
        vec![(lo, 100.0 * TOLERANCE), (hi, 100.0 * TOLERANCE)],
    );
    let zero = Series::new("", RGBColor(90, 90, 90), Kind::Dashed, vec![(lo, 0.0), (hi, 0.0)]);
    let mut all = vec![band, zero];
    all.extend(series);
    Some(Chart {
        file: "recorded-error".into(),
        title: "Relative error against recorded".into(),
        caption: "(simulated − recorded) ÷ recorded for each headline metric at each matched sweep point; the shaded \
                  band is ±10%."
            .into(),
        x,
        y: Axis::linear("error (%)").with_zero(false),
        series: all,
        legend: Legend::UpperLeft,
    })
}

/// A latency key (`mean_e2el_ms`, …) computed from the point's requests when `summary.json`
/// does not carry it (it holds only the metrics `--percentile-metrics` selected).
pub(crate) fn simulated_latency(p: &PointData, key: &str) -> Option<f64> {
    let l = Latencies::of(p);
    let (mean, _) = match key {
        "mean_ttft_ms" => mean_and_percentile(&l.ttft_ms, 99.0)?,
        "mean_tpot_ms" => mean_and_percentile(&l.tpot_ms, 99.0)?,
        "mean_e2el_ms" => mean_and_percentile(&l.e2el_ms, 99.0)?,
        "mean_itl_ms" => runs_mean_and_percentile(&l.itl_ms, 99.0)?,
        _ => return None,
    };
    Some(mean)
}

/// Evenly spaced quantiles of a sorted sample as CDF points `(value, fraction ≤ value)`.
fn cdf_points(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let take = n.min(CDF_POINTS_MAX);
    // From 0 at the smallest value, so that even one sample draws a visible step.
    std::iter::once((sorted[0], 0.0))
        .chain((0..take).map(|j| {
            let k = if take == n { j } else { (j * (n - 1)) / (take - 1) };
            (sorted[k], (k + 1) as f64 / n as f64)
        }))
        .collect()
}

/// A CDF through `points` drawn as an empirical CDF is: flat until the next value, then up.
fn as_steps(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, &(x, y)) in points.iter().enumerate() {
        if i > 0 {
            out.push((x, points[i - 1].1));
        }
        out.push((x, y));
    }
    out
}

/// CDF points of `(value, cumulative count)` runs.
fn cdf_points_runs(runs: &[(f64, u64)]) -> Vec<(f64, f64)> {
    let Some(&(_, n)) = runs.last() else { return Vec::new() };
    let start = std::iter::once((runs[0].0, 0.0));
    if runs.len() <= CDF_POINTS_MAX {
        return start.chain(runs.iter().map(|&(v, end)| (v, end as f64 / n as f64))).collect();
    }
    start
        .chain(
            (0..CDF_POINTS_MAX)
                .map(|j| runs[(j * (runs.len() - 1)) / (CDF_POINTS_MAX - 1)])
                .map(|(v, end)| (v, end as f64 / n as f64)),
        )
        .collect()
}

fn cdf_charts(run: &RunData, load: Load, latencies: &[Latencies]) -> Vec<Chart> {
    type Pick = fn(&Latencies) -> Vec<(f64, f64)>;
    let metrics: [(&str, &str, &str, &str, Pick); 4] = [
        ("cdf-ttft", "Distribution of TTFT", "TTFT (ms)", "requests", |l| cdf_points(&l.ttft_ms)),
        ("cdf-tpot", "Distribution of TPOT", "TPOT (ms)", "requests", |l| cdf_points(&l.tpot_ms)),
        ("cdf-itl", "Distribution of inter-token latency", "ITL (ms)", "token gaps", |l| cdf_points_runs(&l.itl_ms)),
        ("cdf-e2el", "Distribution of end-to-end latency", "E2EL (ms)", "requests", |l| cdf_points(&l.e2el_ms)),
    ];
    let n = run.points.len();
    let mut charts = Vec::new();
    for (file, title, x_label, of_what, pick) in metrics {
        let series: Vec<Series> = run
            .points
            .iter()
            .zip(latencies)
            .enumerate()
            .map(|(i, (p, l))| Series::new(load.label(p), ramp(i, n), Kind::Line, as_steps(pick(l))))
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        let xs: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
        charts.push(Chart {
            file: file.into(),
            title: title.into(),
            caption: format!("Cumulative distribution over {of_what}, one line per sweep point (darker = lighter load)."),
            // Log from a factor of 10: tails are long and the body is what one reads first.
            x: Axis { label: x_label.into(), log: spans_factor(xs.iter().copied(), 10.0), fixed: None, zero: true },
            y: Axis::linear(format!("fraction of {of_what}")).fixed(0.0, 1.0),
            series,
            legend: Legend::LowerRight,
        });
    }
    charts
}

/// Steps of one replica as (time s, values), averaged into time buckets when there are many.
fn bucketed(steps: &[&StepRow], values: impl Fn(&StepRow) -> Vec<f64>) -> Vec<(f64, Vec<f64>)> {
    let raw: Vec<(f64, Vec<f64>)> = steps.iter().map(|s| (s.start_ns as f64 / 1e9, values(s))).collect();
    if raw.len() <= TIMELINE_STEPS_MAX {
        return raw;
    }
    let t_end = raw.last().map_or(0.0, |r| r.0).max(1e-9);
    let width = t_end / TIMELINE_BUCKETS as f64;
    let mut out: Vec<(f64, Vec<f64>, usize)> = Vec::new();
    let mut current: Option<usize> = None;
    for (t, v) in raw {
        let b = ((t / width) as usize).min(TIMELINE_BUCKETS - 1);
        if current != Some(b) {
            out.push(((b as f64 + 0.5) * width, vec![0.0; v.len()], 0));
            current = Some(b);
        }
        let last = out.last_mut().expect("pushed above");
        for (acc, x) in last.1.iter_mut().zip(&v) {
            *acc += x;
        }
        last.2 += 1;
    }
    out.into_iter().map(|(t, sums, n)| (t, sums.into_iter().map(|s| s / n as f64).collect())).collect()
}

fn timeline_charts(run: &RunData, load: Load) -> Vec<Chart> {
    // The largest sweep point, the one with the most queueing to see: the most requests, or in a
    // load sweep the highest rate (the first of equals).
    let size = |p: &PointData| match load {
        Load::Rate => (p.request_rate.unwrap_or(f64::INFINITY), p.num_prompts),
        Load::Concurrency | Load::NumPrompts => (0.0, p.num_prompts),
    };
    let Some(point) = run.points.iter().rev().max_by(|a, b| {
        let (a, b) = (size(a), size(b));
        a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
    }) else {
        return Vec::new();
    };
    if point.steps.is_empty() {
        return Vec::new();
    }
    let replicas: Vec<u32> = {
        let mut r: Vec<u32> = point.steps.iter().map(|s| s.replica).collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    let by_replica = |r: u32| -> Vec<&StepRow> { point.steps.iter().filter(|s| s.replica == r).collect() };
    let averaged = point.steps.len() / replicas.len() > TIMELINE_STEPS_MAX;
    let note = if averaged { " Steps are averaged over short time buckets." } else { "" };
    let which = match load {
        Load::Rate => format!("request rate {}", load.label(point)),
        Load::Concurrency | Load::NumPrompts => format!("num_prompts = {}", point.num_prompts),
    };
    let multi = replicas.len() > 1;
    let suffix = |r: u32| if multi { format!(" (replica {r})") } else { String::new() };
    let time_axis = || Axis::linear("time since the first request (s)");

    let mut requests = Vec::new();
    let mut kv = Vec::new();
    let mut step = Vec::new();
    for (k, &r) in replicas.iter().enumerate() {
        let steps = by_replica(r);
        let rows = bucketed(&steps, |s| {
            vec![
                f64::from(s.running),
                f64::from(s.waiting),
                if s.kv_blocks_total == 0 { 0.0 } else { 100.0 * s.kv_blocks_used as f64 / s.kv_blocks_total as f64 },
                s.step_ns as f64 / 1e6,
            ]
        });
        let col = |c: usize| rows.iter().map(|(t, v)| (*t, v[c])).collect::<Vec<_>>();
        let (c_run, c_wait) = if multi { (PALETTE[k % 10], PALETTE[k % 10]) } else { (PALETTE[0], PALETTE[1]) };
        requests.push(Series::new(format!("running{}", suffix(r)), c_run, Kind::Line, col(0)));
        requests.push(Series::new(format!("waiting{}", suffix(r)), c_wait, Kind::Dashed, col(1)));
        kv.push(Series::new(if multi { format!("replica {r}") } else { String::new() }, PALETTE[k % 10], Kind::Line, col(2)));
        step.push(Series::new(if multi { format!("replica {r}") } else { String::new() }, PALETTE[k % 10], Kind::Line, col(3)));
    }
    // The whole 0–100% when the cache fills noticeably; otherwise fitted, so low use is legible.
    let kv_max = kv.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max);
    let kv_axis = if kv_max >= 25.0 {
        Axis::linear("KV blocks used (%)").fixed(0.0, 100.0)
    } else {
        Axis::linear("KV blocks used (%)")
    };
    let mut charts = vec![
        Chart {
            file: "timeline-requests".into(),
            title: format!("Running and waiting requests ({which})"),
            caption: format!("Requests in the running batch and in the waiting queue at each engine step.{note}"),
            x: time_axis(),
            y: Axis::linear("requests"),
            series: requests,
            legend: Legend::UpperRight,
        },
        Chart {
            file: "timeline-kv".into(),
            title: format!("KV-cache usage ({which})"),
            caption: format!("Share of the KV-cache blocks held by requests at each engine step.{note}"),
            x: time_axis(),
            y: kv_axis,
            series: kv,
            legend: Legend::UpperRight,
        },
    ];
    // Batch tokens stacked: decode at the bottom, prefill on top (replica 0 when several).
    let first = replicas[0];
    let rows = bucketed(&by_replica(first), |s| vec![f64::from(s.decode_tokens), f64::from(s.prefill_tokens)]);
    let decode: Vec<(f64, f64)> = rows.iter().map(|(t, v)| (*t, v[0])).collect();
    let total: Vec<(f64, f64)> = rows.iter().map(|(t, v)| (*t, v[0] + v[1])).collect();
    charts.push(Chart {
        file: "timeline-tokens".into(),
        title: format!("Tokens per batch ({which}{})", if multi { format!(", replica {first}") } else { String::new() }),
        caption: format!("Tokens scheduled in each engine step, decode tokens below and prefill tokens stacked on top.{note}"),
        x: time_axis(),
        y: Axis::linear("tokens in the batch"),
        series: vec![
            Series::new("decode", PALETTE[0], Kind::Band { lower: vec![0.0; decode.len()] }, decode.clone()),
            Series::new("prefill", PALETTE[1], Kind::Band { lower: decode.iter().map(|p| p.1).collect() }, total),
        ],
        legend: Legend::UpperRight,
    });
    let ys: Vec<f64> = step.iter().flat_map(|s| s.points.iter().map(|p| p.1)).collect();
    charts.push(Chart {
        file: "timeline-step".into(),
        title: format!("Engine step time ({which})"),
        caption: format!("Duration of each engine step as the cost model predicts it.{note}"),
        x: time_axis(),
        y: Axis::auto("step time (ms)", ys),
        series: step,
        legend: Legend::UpperRight,
    });
    charts
}

fn breakdown_chart(run: &RunData) -> Option<Chart> {
    let steps: Vec<&StepRow> = run.points.iter().flat_map(|p| &p.steps).collect();
    let decode_only: Vec<&StepRow> = steps.iter().copied().filter(|s| s.prefill_tokens == 0 && s.decode_tokens > 0).collect();
    let (chosen, x_label, which) = if decode_only.is_empty() {
        (steps, "batch size (tokens: prefill + decode)", "all steps")
    } else {
        (decode_only, "batch size (sequences; decode-only steps)", "decode-only steps")
    };
    if chosen.is_empty() {
        return None;
    }
    let size = |s: &StepRow| -> u32 { if s.prefill_tokens == 0 { s.batch_seqs } else { s.prefill_tokens + s.decode_tokens } };
    // Per distinct batch size: (steps, x sum, component sums).
    let mut groups: BTreeMap<u32, (u64, f64, [f64; 5])> = BTreeMap::new();
    for s in &chosen {
        let g = groups.entry(size(s)).or_insert((0, 0.0, [0.0; 5]));
        g.0 += 1;
        g.1 += f64::from(size(s));
        for (acc, part) in g.2.iter_mut().zip(s.parts_ns) {
            *acc += part as f64 / 1e6;
        }
    }
    if groups.len() > BREAKDOWN_BINS_MAX {
        let lo = *groups.keys().next().expect("non-empty") as f64;
        let hi = *groups.keys().next_back().expect("non-empty") as f64;
        let width = ((hi - lo) / BREAKDOWN_BINS_MAX as f64).max(1.0);
        let mut binned: BTreeMap<u32, (u64, f64, [f64; 5])> = BTreeMap::new();
        for (x, g) in groups {
            let b = (((f64::from(x) - lo) / width) as u32).min(BREAKDOWN_BINS_MAX as u32 - 1);
            let e = binned.entry(b).or_insert((0, 0.0, [0.0; 5]));
            e.0 += g.0;
            e.1 += g.1;
            for (a, v) in e.2.iter_mut().zip(g.2) {
                *a += v;
            }
        }
        groups = binned;
    }
    // Mean x and mean component costs per group.
    let mut rows: Vec<(f64, [f64; 5])> =
        groups.values().map(|&(n, xs, parts)| (xs / n as f64, parts.map(|p| p / n as f64))).collect();
    if rows.len() == 1 {
        // One batch size: widen it into a visible column.
        let (x, parts) = rows[0];
        rows = vec![(x - 0.5, parts), (x + 0.5, parts)];
    }
    let mut series = Vec::new();
    let mut lower = vec![0.0; rows.len()];
    for (c, name) in COMPONENTS.iter().enumerate() {
        let upper: Vec<f64> = rows.iter().zip(&lower).map(|((_, parts), lo)| lo + parts[c]).collect();
        let points = rows.iter().zip(&upper).map(|((x, _), &y)| (*x, y)).collect();
        series.push(Series::new(*name, PALETTE[c], Kind::Band { lower: lower.clone() }, points));
        lower = upper;
    }
    Some(Chart {
        file: "step-cost-breakdown".into(),
        title: "Step cost breakdown by batch size".into(),
        caption: format!(
            "Mean predicted step time split into GEMM, attention, elementwise, communication and overhead, stacked, \
             over the {which} of every sweep point."
        ),
        x: Axis::linear(x_label),
        y: Axis::linear("mean step time (ms)"),
        series,
        legend: Legend::UpperLeft,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_points_are_bounded_and_end_at_one() {
        let sorted: Vec<f64> = (0..10_000).map(f64::from).collect();
        let points = cdf_points(&sorted);
        assert_eq!(points.len(), CDF_POINTS_MAX + 1);
        assert_eq!(points.last(), Some(&(9999.0, 1.0)));
        assert_eq!(cdf_points(&[3.0, 4.0]), vec![(3.0, 0.0), (3.0, 0.5), (4.0, 1.0)]);
        assert_eq!(cdf_points(&[7.0]), vec![(7.0, 0.0), (7.0, 1.0)]);
        assert_eq!(cdf_points_runs(&[(1.0, 3), (2.0, 4)]), vec![(1.0, 0.0), (1.0, 0.75), (2.0, 1.0)]);
    }

    #[test]
    fn load_is_what_the_sweep_varies() {
        let point = |n: u32, rate: Option<f64>| PointData { num_prompts: n, request_rate: rate, ..PointData::default() };
        let run = |points| RunData { dir: "d".into(), name: "r".into(), deployment: Vec::new(), points };
        assert_eq!(Load::of(&[run(vec![point(1, None), point(2, None)])]), Load::NumPrompts);
        assert_eq!(Load::of(&[run(vec![point(100, Some(1.0)), point(100, Some(2.0))])]), Load::Rate);
    }
}

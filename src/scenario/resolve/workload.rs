//! `[workload]`: the sweep, arrivals, token totals and the dataset, whose longest request must fit
//! the engine's `max_model_len`.

use super::context::{Cx, number, positive_count, quote, reject_unused_fields};
use crate::scenario::schema::{OneOrList, RawDataset, RawLengthDist, RawPrefix, RawSessions, RawWorkload, RequestRate, RequestRates};
use crate::scenario::{
    Dataset, EngineConfig, HORIZON_MAX_S, LengthDist, NUM_PROMPTS_MAX, PrefixLaw, ScenarioError, Sessions, SystemPrompts,
    ThinkTime, WorkloadConfig, trace,
};

/// vLLM `benchmark_serving.py` defaults: 1000 prompts, request rate inf, burstiness 1.0 (Poisson),
/// no concurrency cap. The random dataset: input 1024, output 128, range ratio 0, no prefix. The
/// sonnet dataset: input 550, prefix 200, output 150.
const DEFAULT_NUM_PROMPTS: u32 = 1000;
/// Gamma shapes beyond these give gaps whose spread no benchmark client produces: at 10⁻³ one
/// gap in a run can hold nearly all of its time, and past 10³ arrivals are evenly spaced anyway.
const BURSTINESS_MIN: f64 = 1e-3;
/// A finite rate above this is "all at once" in all but name (gaps under a nanosecond), and at
/// 10³⁰⁸ the gamma law's scale underflows to 0.
const RATE_MAX: f64 = 1e9;
const BURSTINESS_MAX: f64 = 1e3;
const RANDOM_INPUT_LEN: u32 = 1024;
const RANDOM_OUTPUT_LEN: u32 = 128;
const SONNET_INPUT_LEN: u32 = 550;
const SONNET_PREFIX_LEN: u32 = 200;
const SONNET_OUTPUT_LEN: u32 = 150;
/// Distinct system prompts a workload may draw from: each is one stream id, and the law's table
/// (Zipf's) is not built per prompt, so this only keeps a typo from reading as intended.
const SYSTEM_PROMPTS_MAX: u32 = 1_000_000;
/// Zipf exponents past this put all but a vanishing share of requests on the first prompt.
const ZIPF_EXPONENT_MAX: f64 = 100.0;
/// Turns of one chat session: far past any conversation, and small enough that a typo is caught.
const SESSION_TURNS_MAX: u32 = 10_000;
/// A think time past a day is no chat.
const THINK_TIME_S_MAX: f64 = 86_400.0;

pub(super) fn resolve_workload(
    raw: &RawWorkload,
    engine: &EngineConfig,
    cx: &Cx,
) -> Result<WorkloadConfig, ScenarioError> {
    let system_prompts = raw.dataset.prefix.as_ref().map(|p| resolve_prefix(p, cx)).transpose()?;
    let dataset = resolve_dataset(&raw.dataset, engine.max_model_len, system_prompts.map_or(0, |p| p.tokens), cx)?;
    let trace_rows = match &dataset {
        Dataset::Trace { rows, .. } => Some(rows.len()),
        _ => None,
    };

    let num_prompts = match &raw.num_prompts {
        None => vec![trace_rows.map_or(DEFAULT_NUM_PROMPTS, |n| n.min(u32::MAX as usize) as u32)],
        Some(OneOrList(list)) => {
            let shown = || format!("{list:?}");
            if list.is_empty() {
                return Err(cx.invalid(
                    "workload.num_prompts",
                    shown(),
                    "must hold at least one value",
                ));
            }
            let mut out = Vec::with_capacity(list.len());
            for &n in list {
                if n < 1 || n > i64::from(NUM_PROMPTS_MAX) {
                    let value = if list.len() == 1 {
                        n.to_string()
                    } else {
                        shown()
                    };
                    return Err(cx.invalid(
                        "workload.num_prompts",
                        value,
                        format!("{n} is not a count from 1 to {NUM_PROMPTS_MAX} (the most one run may send)"),
                    ));
                }
                if let Some(rows) = trace_rows
                    && n as usize > rows
                {
                    return Err(cx.invalid(
                        "workload.num_prompts",
                        n,
                        format!("the trace has only {rows} rows"),
                    ));
                }
                out.push(n as u32);
            }
            out
        }
    };

    let request_rate = resolve_rates(raw.request_rate.as_ref(), cx)?;
    if trace_rows.is_some() && request_rate.len() > 1 {
        return Err(cx.invalid(
            "workload.request_rate",
            format!("{:?}", request_rate),
            "a trace brings its own arrival times, so it cannot sweep request rates",
        ));
    }
    // The sweep: point i runs num_prompts[i] requests at request_rate[i]; a single value of
    // either applies to every point.
    let points = num_prompts.len().max(request_rate.len());
    for (field, len) in [("workload.num_prompts", num_prompts.len()), ("workload.request_rate", request_rate.len())] {
        if len != 1 && len != points {
            let value = if field == "workload.num_prompts" { format!("{num_prompts:?}") } else { format!("{request_rate:?}") };
            return Err(cx.invalid(
                field,
                value,
                format!("a sweep of {points} points needs one value, or {points}: num_prompts and request_rate pair up point by point"),
            ));
        }
    }
    let num_prompts = broadcast(num_prompts, points);
    let request_rate = broadcast(request_rate, points);
    let burstiness = raw.burstiness.unwrap_or(1.0);
    if !(BURSTINESS_MIN..=BURSTINESS_MAX).contains(&burstiness) {
        return Err(cx.invalid(
            "workload.burstiness",
            number(burstiness),
            format!("must be a gamma shape from {BURSTINESS_MIN} to {BURSTINESS_MAX} (1: Poisson)"),
        ));
    }
    // The expected length of each point's run: its requests' mean gaps, summed.
    for (&n, &rate) in num_prompts.iter().zip(&request_rate) {
        if rate.is_finite() && f64::from(n) / rate > HORIZON_MAX_S {
            return Err(cx.invalid(
                "workload.request_rate",
                number(rate),
                format!("{n} requests at this rate would arrive over {:.3e} s, past the longest run servesim simulates ({HORIZON_MAX_S:e} s)", f64::from(n) / rate),
            ));
        }
    }
    if raw.max_concurrency == Some(0) {
        return Err(cx.invalid(
            "workload.max_concurrency",
            0,
            "must be at least 1 (leave it out for no limit)",
        ));
    }
    let sessions = raw.sessions.as_ref().map(|r| resolve_sessions(r, raw, &dataset, &system_prompts, engine, cx)).transpose()?;
    let output_max = dataset.max_tokens().unwrap_or(u32::MAX);
    let input_tokens_total =
        resolve_totals("workload.input_tokens_total", &raw.input_tokens_total, &num_prompts, u32::MAX, cx)?;
    let output_tokens_total =
        resolve_totals("workload.output_tokens_total", &raw.output_tokens_total, &num_prompts, output_max, cx)?;
    Ok(WorkloadConfig {
        num_prompts,
        request_rate,
        burstiness,
        max_concurrency: raw.max_concurrency,
        dataset,
        seed: raw.seed.unwrap_or(0),
        input_tokens_total,
        output_tokens_total,
        system_prompts,
        sessions,
    })
}

/// `[workload.sessions]`. Sessions chain their turns' prompts, so they take their lengths from
/// the dataset as new text per turn, and their arrivals from the arrival process per session:
/// a trace (its own arrivals), system prompts (one shared text per prompt) and token totals (of
/// what, once prompts grow?) do not combine with them.
fn resolve_sessions(
    raw: &RawSessions,
    workload: &RawWorkload,
    dataset: &Dataset,
    system_prompts: &Option<SystemPrompts>,
    engine: &EngineConfig,
    cx: &Cx,
) -> Result<Sessions, ScenarioError> {
    let turns = positive_count(cx, "workload.sessions.turns", raw.turns, "required: requests per session")?;
    if turns > SESSION_TURNS_MAX {
        return Err(cx.invalid("workload.sessions.turns", turns, format!("more than {SESSION_TURNS_MAX} turns per session")));
    }
    let think_time_s = raw.think_time_s.unwrap_or(0.0);
    if !(0.0..=THINK_TIME_S_MAX).contains(&think_time_s) {
        return Err(cx.invalid(
            "workload.sessions.think_time_s",
            number(think_time_s),
            format!("must be from 0 to {THINK_TIME_S_MAX} seconds"),
        ));
    }
    let think_time = match raw.think_time.as_deref().map(|l| l.trim().to_ascii_lowercase()).as_deref() {
        None | Some("exponential") => ThinkTime::Exponential,
        Some("fixed") => ThinkTime::Fixed,
        Some(_) => {
            return Err(cx.invalid(
                "workload.sessions.think_time",
                quote(raw.think_time.as_deref().unwrap_or_default()),
                "unknown law; known: exponential, fixed",
            ));
        }
    };
    let conflict = if matches!(dataset, Dataset::Trace { .. }) {
        Some(("workload.dataset.kind", quote("trace"), "a trace brings its own arrivals; sessions send each turn after the last"))
    } else if system_prompts.is_some() {
        Some(("workload.dataset.prefix", "a table".to_string(), "system prompts do not combine with sessions (each session is its own shared text)"))
    } else if workload.input_tokens_total.is_some() {
        Some(("workload.input_tokens_total", "a total".to_string(), "a session's prompts grow with its turns, so a total of them is no dataset input"))
    } else {
        None
    };
    if let Some((field, value, reason)) = conflict {
        return Err(cx.invalid(field, value, format!("{reason}: leave it out, or [workload.sessions]")));
    }
    Ok(Sessions { turns, think_time_s, think_time, context_len: engine.max_model_len })
}

/// `[workload.dataset.prefix]`.
fn resolve_prefix(raw: &RawPrefix, cx: &Cx) -> Result<SystemPrompts, ScenarioError> {
    let count = positive_count(cx, "workload.dataset.prefix.count", raw.count, "required: how many distinct system prompts")?;
    if count > SYSTEM_PROMPTS_MAX {
        return Err(cx.invalid("workload.dataset.prefix.count", count, format!("more than {SYSTEM_PROMPTS_MAX} system prompts")));
    }
    let tokens = positive_count(cx, "workload.dataset.prefix.len", raw.len, "required: tokens of each system prompt")?;
    let law = match raw.law.as_deref().map(|l| l.trim().to_ascii_lowercase()) {
        None => PrefixLaw::Uniform,
        Some(l) if l == "uniform" => PrefixLaw::Uniform,
        Some(l) if l == "zipf" => {
            let exponent = raw.zipf_exponent.unwrap_or(1.0);
            if !(0.0..=ZIPF_EXPONENT_MAX).contains(&exponent) {
                return Err(cx.invalid(
                    "workload.dataset.prefix.zipf_exponent",
                    number(exponent),
                    format!("must be from 0 (uniform) to {ZIPF_EXPONENT_MAX}"),
                ));
            }
            PrefixLaw::Zipf { exponent }
        }
        Some(_) => {
            return Err(cx.invalid(
                "workload.dataset.prefix.law",
                quote(raw.law.as_deref().unwrap_or_default()),
                "unknown law; known: uniform, zipf",
            ));
        }
    };
    if let (PrefixLaw::Uniform, Some(s)) = (law, raw.zipf_exponent) {
        return Err(cx.invalid("workload.dataset.prefix.zipf_exponent", number(s), "only law = \"zipf\" takes an exponent"));
    }
    Ok(SystemPrompts { count, tokens, law })
}

/// `list` repeated to `len` values if it holds one.
fn broadcast<T: Copy>(list: Vec<T>, len: usize) -> Vec<T> {
    if list.len() == 1 { vec![list[0]; len] } else { list }
}

/// `request_rate`: each value positive or `inf`; left out, `inf` (everything sent at once).
fn resolve_rates(raw: Option<&RequestRates>, cx: &Cx) -> Result<Vec<f64>, ScenarioError> {
    let Some(OneOrList(list)) = raw else { return Ok(vec![f64::INFINITY]) };
    if list.is_empty() {
        return Err(cx.invalid("workload.request_rate", "[]", "must hold at least one value"));
    }
    let mut rates = Vec::with_capacity(list.len());
    for value in list {
        let rate = match value {
            RequestRate::Number(r) => *r,
            RequestRate::Text(t) => {
                let lower = t.trim().to_ascii_lowercase();
                if lower == "inf" || lower == "infinity" {
                    f64::INFINITY
                } else {
                    lower.parse::<f64>().map_err(|_| {
                        cx.invalid("workload.request_rate", quote(t), "expected requests per second or \"inf\"")
                    })?
                }
            }
        };
        if rate.is_nan() || rate <= 0.0 || (rate.is_finite() && rate > RATE_MAX) {
            return Err(cx.invalid(
                "workload.request_rate",
                number(rate),
                format!("must be a positive number of requests per second up to {RATE_MAX:e}, or inf (all at once)"),
            ));
        }
        rates.push(rate);
    }
    Ok(rates)
}

/// Token totals per sweep point: one per `num_prompts` value, each reachable with lengths in
/// `1..=max_per_request`.
fn resolve_totals(
    field: &str,
    raw: &Option<Vec<u64>>,
    num_prompts: &[u32],
    max_per_request: u32,
    cx: &Cx,
) -> Result<Option<Vec<u64>>, ScenarioError> {
    let Some(list) = raw else { return Ok(None) };
    if list.len() != num_prompts.len() {
        return Err(cx.invalid(
            field,
            format!("{list:?}"),
            format!("needs one total per sweep point ({} of them)", num_prompts.len()),
        ));
    }
    for (&total, &n) in list.iter().zip(num_prompts) {
        let most = n as u64 * max_per_request as u64;
        if total < n as u64 || total > most {
            return Err(cx.invalid(
                field,
                total,
                format!("{n} requests can only total {n}..={most} tokens"),
            ));
        }
    }
    Ok(Some(list.clone()))
}

const KINDS: &str = "fixed, random, sonnet, sharegpt, trace";

/// The dataset; `prefix_tokens` are the system prompt's, added to every prompt it draws.
fn resolve_dataset(
    raw: &RawDataset,
    max_model_len: u32,
    prefix_tokens: u32,
    cx: &Cx,
) -> Result<Dataset, ScenarioError> {
    let kind = raw.kind.trim().to_ascii_lowercase();
    let allowed: &[&str] = match kind.as_str() {
        "fixed" => &["input_len", "output_len"],
        "random" => &["input_len", "output_len", "range_ratio", "prefix_len"],
        "sonnet" => &["input_len", "prefix_len", "output", "output_len"],
        "sharegpt" => &["input", "output"],
        "trace" => &["path"],
        _ => {
            return Err(cx.invalid(
                "workload.dataset.kind",
                quote(&raw.kind),
                format!("unknown dataset kind; known: {KINDS}"),
            ));
        }
    };
    if raw.prefix.is_some() && !matches!(kind.as_str(), "random" | "sharegpt") {
        return Err(cx.invalid(
            "workload.dataset.prefix",
            "(a table)",
            format!("not used by dataset kind {kind:?}; system prompts are for kinds random and sharegpt"),
        ));
    }
    if raw.prefix.is_some() && raw.prefix_len.is_some_and(|l| l > 0) {
        return Err(cx.invalid(
            "workload.dataset.prefix_len",
            raw.prefix_len.unwrap_or(0),
            "give prefix_len (one prefix every request shares, vLLM's) or [workload.dataset.prefix], not both",
        ));
    }
    let present: [(&str, Option<String>); 7] = [
        ("input_len", raw.input_len.map(|v| v.to_string())),
        ("output_len", raw.output_len.map(|v| v.to_string())),
        ("range_ratio", raw.range_ratio.map(|v| v.to_string())),
        ("prefix_len", raw.prefix_len.map(|v| v.to_string())),
        (
            "input",
            raw.input.as_ref().map(|_| "(a distribution)".to_string()),
        ),
        (
            "output",
            raw.output.as_ref().map(|_| "(a distribution)".to_string()),
        ),
        ("path", raw.path.as_deref().map(quote)),
    ];
    reject_unused_fields(cx, "workload.dataset", &present, allowed, &format!("dataset kind {kind:?}"))?;
    let count = |field: &str, v: Option<u32>, default: Option<u32>| {
        positive_count(
            cx,
            &format!("workload.dataset.{field}"),
            v.or(default),
            &format!("required for dataset kind {kind:?}"),
        )
    };
    // The longest request the dataset can produce must fit max_model_len: vLLM rejects a request
    // whose prompt + max_tokens exceeds it.
    let check_len = |field: &str, input_max: u64, output_max: u64| -> Result<(), ScenarioError> {
        let input_max = input_max + u64::from(prefix_tokens);
        if input_max + output_max > max_model_len as u64 {
            return Err(cx.invalid(
                &format!("workload.dataset.{field}"),
                input_max,
                format!(
                    "the longest request has input {input_max} + output {output_max} = {} tokens, more than \
                     engine.max_model_len ({max_model_len}); vLLM rejects such requests",
                    input_max + output_max
                ),
            ));
        }
        Ok(())
    };

    match kind.as_str() {
        "fixed" => {
            let input_len = count("input_len", raw.input_len, None)?;
            let output_len = count("output_len", raw.output_len, None)?;
            check_len("input_len", input_len as u64, output_len as u64)?;
            Ok(Dataset::Fixed {
                input_len,
                output_len,
            })
        }
        "random" => {
            let input_len = count("input_len", raw.input_len, Some(RANDOM_INPUT_LEN))?;
            let output_len = count("output_len", raw.output_len, Some(RANDOM_OUTPUT_LEN))?;
            let prefix_len = raw.prefix_len.unwrap_or(0);
            let range_ratio = raw.range_ratio.unwrap_or(0.0);
            if !(0.0..1.0).contains(&range_ratio) {
                return Err(cx.invalid(
                    "workload.dataset.range_ratio",
                    range_ratio,
                    "must be in [0, 1)",
                ));
            }
            // vLLM's random dataset: lengths uniform in [floor(len·(1−r)), ceil(len·(1+r))].
            let low = |len: u32| (len as f64 * (1.0 - range_ratio)).floor() as u64;
            let high = |len: u32| (len as f64 * (1.0 + range_ratio)).ceil() as u64;
            if low(output_len) < 1 || prefix_len as u64 + low(input_len) < 1 {
                return Err(cx.invalid(
                    "workload.dataset.range_ratio",
                    range_ratio,
                    "makes the shortest input or output 0 tokens; lower it or raise the lengths",
                ));
            }
            check_len(
                "input_len",
                prefix_len as u64 + high(input_len),
                high(output_len),
            )?;
            Ok(Dataset::Random {
                input_len,
                output_len,
                range_ratio,
                prefix_len,
            })
        }
        "sonnet" => {
            let input_len = count("input_len", raw.input_len, Some(SONNET_INPUT_LEN))?;
            let prefix_len = raw.prefix_len.unwrap_or(SONNET_PREFIX_LEN);
            if prefix_len > input_len {
                return Err(cx.invalid(
                    "workload.dataset.prefix_len",
                    prefix_len,
                    format!("longer than input_len ({input_len})"),
                ));
            }
            let output = match (&raw.output, raw.output_len) {
                (Some(_), Some(_)) => {
                    return Err(cx.invalid(
                        "workload.dataset.output_len",
                        raw.output_len.unwrap_or(0),
                        "give output (a distribution) or output_len (fixed), not both",
                    ));
                }
                (Some(d), None) => resolve_dist("workload.dataset.output", d, cx)?,
                (None, len) => LengthDist::Fixed {
                    value: count("output_len", len, Some(SONNET_OUTPUT_LEN))?,
                },
            };
            check_len("input_len", input_len as u64, output.max() as u64)?;
            Ok(Dataset::Sonnet {
                input_len,
                prefix_len,
                output,
            })
        }
        "sharegpt" => {
            let dist = |field: &str, d: &Option<RawLengthDist>| {
                match d {
                Some(d) => resolve_dist(&format!("workload.dataset.{field}"), d, cx),
                None => Err(cx.invalid(
                    &format!("workload.dataset.{field}"),
                    "(missing)",
                    "required for dataset kind \"sharegpt\", e.g. { dist = \"lognormal\", mean = 200, std = 150, min = 1, max = 1024 }",
                )),
            }
            };
            let input = dist("input", &raw.input)?;
            let output = dist("output", &raw.output)?;
            check_len("input.max", input.max() as u64, output.max() as u64)?;
            Ok(Dataset::ShareGpt { input, output })
        }
        "trace" => {
            let Some(p) = &raw.path else {
                return Err(cx.invalid(
                    "workload.dataset.path",
                    "(missing)",
                    "required for dataset kind \"trace\"",
                ));
            };
            let path = cx.relative(p);
            let rows = trace::read_trace(&path)
                .map_err(|e| cx.invalid("workload.dataset.path", quote(p), e.to_string()))?;
            if let Some((i, row)) = rows.iter().enumerate().find(|(_, r)| {
                r.input_tokens as u64 + r.output_tokens as u64 > max_model_len as u64
            }) {
                return Err(cx.invalid(
                    "workload.dataset.path",
                    quote(p),
                    format!(
                        "request {} (data row {} of {}) has input {} + output {} = {} tokens, more than \
                         engine.max_model_len ({max_model_len}); vLLM rejects such requests",
                        i + 1,
                        i + 1,
                        path.display(),
                        row.input_tokens,
                        row.output_tokens,
                        row.input_tokens as u64 + row.output_tokens as u64
                    ),
                ));
            }
            Ok(Dataset::Trace { path, rows })
        }
        _ => unreachable!("kind checked above"),
    }
}

/// A length distribution; `field` is its dotted name (`workload.dataset.output`).
fn resolve_dist(field: &str, raw: &RawLengthDist, cx: &Cx) -> Result<LengthDist, ScenarioError> {
    let t = match raw {
        RawLengthDist::Fixed(v) => {
            if *v < 1 || *v > u32::MAX as i64 {
                return Err(cx.invalid(field, v, "must be a token count ≥ 1"));
            }
            return Ok(LengthDist::Fixed { value: *v as u32 });
        }
        RawLengthDist::Table(t) => t,
    };
    let dist = t.dist.trim().to_ascii_lowercase();
    let allowed: &[&str] = match dist.as_str() {
        "fixed" => &["value"],
        "uniform" => &["min", "max"],
        "normal" | "lognormal" => &["mean", "std", "min", "max"],
        _ => {
            return Err(cx.invalid(
                &format!("{field}.dist"),
                quote(&t.dist),
                "unknown distribution; known: fixed, uniform, normal, lognormal",
            ));
        }
    };
    let present = [
        ("value", t.value.map(|v| v.to_string())),
        ("mean", t.mean.map(|v| v.to_string())),
        ("std", t.std.map(|v| v.to_string())),
        ("min", t.min.map(|v| v.to_string())),
        ("max", t.max.map(|v| v.to_string())),
    ];
    reject_unused_fields(cx, field, &present, allowed, &format!("dist {dist:?}"))?;
    let required = |f: &str, v: Option<u32>| -> Result<u32, ScenarioError> {
        match v {
            Some(0) => Err(cx.invalid(&format!("{field}.{f}"), 0, "must be at least 1")),
            Some(x) => Ok(x),
            None => Err(cx.invalid(
                &format!("{field}.{f}"),
                "(missing)",
                format!("required for dist {dist:?}"),
            )),
        }
    };
    if dist == "fixed" {
        return Ok(LengthDist::Fixed {
            value: required("value", t.value)?,
        });
    }
    let min = required("min", Some(t.min.unwrap_or(1)))?;
    let max = required("max", t.max)?;
    if min > max {
        return Err(cx.invalid(
            &format!("{field}.min"),
            min,
            format!("greater than max ({max})"),
        ));
    }
    if dist == "uniform" {
        return Ok(LengthDist::Uniform { min, max });
    }
    let real =
        |f: &str, v: Option<f64>, ok: fn(f64) -> bool, what: &str| -> Result<f64, ScenarioError> {
            match v {
                Some(x) if ok(x) => Ok(x),
                Some(x) => Err(cx.invalid(&format!("{field}.{f}"), number(x), format!("must be {what}"))),
                None => Err(cx.invalid(
                    &format!("{field}.{f}"),
                    "(missing)",
                    format!("required for dist {dist:?}"),
                )),
            }
        };
    // A lognormal's mean is of the lengths themselves, so it must be positive; a normal's may be
    // anything finite (the clamp to [min, max] keeps lengths ≥ 1). The mean is checked first.
    let normal = dist == "normal";
    let mean = if normal {
        real("mean", t.mean, |x| x.is_finite(), "a finite number")?
    } else {
        real("mean", t.mean, |x| x.is_finite() && x > 0.0, "a positive, finite number")?
    };
    let std = real("std", t.std, |x| x.is_finite() && x >= 0.0, "a finite number ≥ 0")?;
    // The log-normal's own (μ, σ) come from mean and std through (std / mean)²: past about
    // 10¹⁵⁴ it overflows, and the sampler cannot be built.
    if !normal && !((std / mean).powi(2).is_finite() && (1.0 + (std / mean).powi(2)).ln().is_finite()) {
        return Err(cx.invalid(
            &format!("{field}.std"),
            number(std),
            format!("is too large against mean {}: the log-normal's parameters overflow", number(mean)),
        ));
    }
    Ok(if normal {
        LengthDist::Normal { mean, std, min, max }
    } else {
        LengthDist::LogNormal { mean, std, min, max }
    })
}

#[cfg(test)]
#[path = "workload_tests.rs"]
mod tests;

//! Latency objectives (SLOs) and the verdict of one simulated run against them.
//!
//! An objective bounds one latency metric's statistic over a run: `ttft` at p90 ≤ 2000 ms, say.
//! Goodput (DistServe's definition) counts the requests that meet every per-request objective at
//! once; an attainment fraction asks that a share of all requests do.

use crate::metrics::{LatencyMetric, RunRecords, Summary};

/// Which statistic of a metric an objective bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Statistic {
    Mean,
    /// numpy's percentile, as vLLM's report computes it; in (0, 100).
    Percentile(f64),
}

/// `metric`'s `statistic` over a run must be at most `limit_ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slo {
    pub metric: LatencyMetric,
    pub statistic: Statistic,
    pub limit_ms: f64,
}

impl Slo {
    /// `ttft_p90`, `tpot_mean`: the name plan files and reports use.
    pub fn name(&self) -> String {
        match self.statistic {
            Statistic::Mean => format!("{}_mean", self.metric.key()),
            Statistic::Percentile(p) => format!("{}_p{p}", self.metric.key()),
        }
    }

    /// What one request contributes, in ms, for the per-request check of goodput. ITL is pooled
    /// over tokens, not kept per request, so it has no per-request value.
    fn request_value_ms(&self, record: &crate::metrics::RequestRecord) -> Option<f64> {
        const NS_PER_MS: f64 = 1e6;
        match self.metric {
            LatencyMetric::Ttft => Some(record.ttft_ns() as f64 / NS_PER_MS),
            LatencyMetric::Tpot => record.tpot_ns().map(|ns| ns / NS_PER_MS),
            LatencyMetric::E2el => Some(record.e2el_ns() as f64 / NS_PER_MS),
            LatencyMetric::Itl => None,
        }
    }
}

/// Every objective a deployment must meet.
#[derive(Clone, Debug, PartialEq)]
pub struct Objectives {
    pub slos: Vec<Slo>,
    /// The share of requests, failed ones included, that must meet every per-request objective
    /// (e.g. 0.99); `None` asks nothing of goodput.
    pub attainment: Option<f64>,
}

/// What kept a run from meeting its objectives, or came closest to doing so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Binding {
    /// The objective at this index of [`Objectives::slos`]: the one nearest its limit.
    Slo(usize),
    /// Too few requests met every per-request objective.
    Attainment,
    /// Requests failed (refused, or could never fit): no latency makes up for a lost request.
    Failures,
    /// The objectives held over the probe, but its queue was still growing
    /// ([`super::steady::SteadyState`]): the rate is past what the deployment sustains.
    Unsteady,
    /// An objective's 98% interval over the probe's batches holds its limit
    /// ([`super::steady::intervals_ms`]): too close to call, so it fails unless a longer probe
    /// decides it.
    Uncertain,
}

/// One run judged against [`Objectives`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Verdict {
    pub met: bool,
    /// Each objective's value over the run, ms, parallel to [`Objectives::slos`].
    pub values_ms: Vec<f64>,
    /// The objective that binds: the violated one furthest over its limit, or, when every one
    /// holds, the one nearest it.
    pub binding: Binding,
    /// The share of all requests that met every per-request objective.
    pub attainment: f64,
    /// Requests per second that met every per-request objective.
    pub goodput_rps: f64,
}

impl Objectives {
    /// The percentiles a summary must compute for [`Objectives::judge`].
    pub fn percentiles(&self) -> Vec<f64> {
        let mut percentiles: Vec<f64> = self
            .slos
            .iter()
            .filter_map(|slo| match slo.statistic {
                Statistic::Percentile(p) => Some(p),
                Statistic::Mean => None,
            })
            .collect();
        percentiles.sort_by(f64::total_cmp);
        percentiles.dedup();
        percentiles
    }

    /// The highest percentile any objective asks for (0 when none does).
    pub fn highest_percentile(&self) -> f64 {
        self.percentiles().last().copied().unwrap_or(0.0)
    }

    /// Judges a run. `summary` must have been built from `records` with [`Objectives::percentiles`].
    /// Each objective's value in `summary` (built with [`Objectives::percentiles`]), ms.
    pub fn values_ms(&self, summary: &Summary) -> Vec<f64> {
        self.slos
            .iter()
            .map(|slo| {
                let stat = summary.stat(slo.metric);
                match slo.statistic {
                    Statistic::Mean => stat.mean_ms,
                    Statistic::Percentile(p) => stat.percentile_ms(p).expect("summary built with Objectives::percentiles"),
                }
            })
            .collect()
    }

    pub fn judge(&self, records: &RunRecords, summary: &Summary) -> Verdict {
        let values_ms = self.values_ms(summary);
        let meets_every = |record: &crate::metrics::RequestRecord| {
            record.success && self.slos.iter().all(|slo| slo.request_value_ms(record).is_none_or(|v| v <= slo.limit_ms))
        };
        let good = records.requests.iter().filter(|r| meets_every(r)).count();
        let total = records.requests.len();
        let attainment = if total == 0 { 0.0 } else { good as f64 / total as f64 };
        let duration_s = records.duration_ns as f64 / 1e9;
        let goodput_rps = if duration_s > 0.0 { good as f64 / duration_s } else { 0.0 };

        // The objective nearest (or furthest over) its limit binds; ties go to the first listed.
        let nearest = values_ms
            .iter()
            .zip(&self.slos)
            .map(|(value, slo)| value / slo.limit_ms)
            .enumerate()
            .fold(None, |best: Option<(usize, f64)>, (i, ratio)| match best {
                Some((_, r)) if r >= ratio => best,
                _ => Some((i, ratio)),
            });
        let slos_met = values_ms.iter().zip(&self.slos).all(|(value, slo)| *value <= slo.limit_ms);
        let attainment_met = self.attainment.is_none_or(|target| attainment >= target);
        let failures = summary.failed > 0 || summary.completed == 0;
        let binding = if failures {
            Binding::Failures
        } else if !slos_met || attainment_met {
            nearest.map_or(Binding::Attainment, |(i, _)| Binding::Slo(i))
        } else {
            Binding::Attainment
        };
        Verdict { met: !failures && slos_met && attainment_met, values_ms, binding, attainment, goodput_rps }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::RequestRecord;

    const MS: u64 = 1_000_000;

    /// A request sent at 0 with its first token at `ttft` ms and `tokens` tokens ending at `end` ms.
    fn request(ttft: u64, end: u64, tokens: u32) -> RequestRecord {
        RequestRecord { send_ns: 0, first_token_ns: Some(ttft * MS), end_ns: end * MS, input_tokens: 8, output_tokens: tokens, success: true }
    }

    fn records(requests: Vec<RequestRecord>) -> RunRecords {
        let duration_ns = requests.iter().map(|r| r.end_ns).max().unwrap_or(0);
        RunRecords { requests, duration_ns, ..RunRecords::default() }
    }

    fn judge(objectives: &Objectives, records: &RunRecords) -> Verdict {
        objectives.judge(records, &Summary::from_records(records, &objectives.percentiles()))
    }

    fn ttft(statistic: Statistic, limit_ms: f64) -> Slo {
        Slo { metric: LatencyMetric::Ttft, statistic, limit_ms }
    }

    fn tpot(statistic: Statistic, limit_ms: f64) -> Slo {
        Slo { metric: LatencyMetric::Tpot, statistic, limit_ms }
    }

    #[test]
    fn names_read_as_plan_files_write_them() {
        assert_eq!(ttft(Statistic::Percentile(90.0), 1.0).name(), "ttft_p90");
        assert_eq!(tpot(Statistic::Mean, 1.0).name(), "tpot_mean");
    }

    #[test]
    fn the_objective_nearest_its_limit_binds() {
        // TTFT 100..1000 ms; TPOT (end − ttft)/(tokens − 1) = 10 ms for every request.
        let r = records((1..=10).map(|i| request(100 * i, 100 * i + 90, 10)).collect());
        let objectives = Objectives { slos: vec![ttft(Statistic::Percentile(90.0), 2000.0), tpot(Statistic::Mean, 12.0)], attainment: None };
        let v = judge(&objectives, &r);
        assert!(v.met);
        assert_eq!(v.binding, Binding::Slo(1), "TPOT at 10/12 is nearer its limit than TTFT at 910/2000");
        assert!((v.values_ms[0] - 910.0).abs() < 1e-9 && (v.values_ms[1] - 10.0).abs() < 1e-9, "{:?}", v.values_ms);
        assert_eq!(v.attainment, 1.0);
        assert!((v.goodput_rps - 10.0 / 1.09).abs() < 1e-9, "10 good requests over 1.09 s: {}", v.goodput_rps);
    }

    #[test]
    fn a_violated_objective_binds_and_fails_the_run() {
        let r = records((1..=10).map(|i| request(100 * i, 100 * i + 90, 10)).collect());
        let objectives = Objectives { slos: vec![ttft(Statistic::Percentile(90.0), 500.0), tpot(Statistic::Mean, 12.0)], attainment: None };
        let v = judge(&objectives, &r);
        assert!(!v.met);
        assert_eq!(v.binding, Binding::Slo(0));
        assert!((v.attainment - 0.5).abs() < 1e-9, "requests with TTFT ≤ 500 ms: {}", v.attainment);
    }

    #[test]
    fn attainment_counts_requests_that_meet_every_objective() {
        // Every statistic holds, but only 8 of 10 requests have TTFT ≤ 800 ms.
        let r = records((1..=10).map(|i| request(100 * i, 100 * i + 90, 10)).collect());
        let slos = vec![ttft(Statistic::Mean, 800.0)];
        let v = judge(&Objectives { slos: slos.clone(), attainment: Some(0.8) }, &r);
        assert!(v.met && (v.attainment - 0.8).abs() < 1e-9, "{v:?}");
        let v = judge(&Objectives { slos, attainment: Some(0.9) }, &r);
        assert!(!v.met);
        assert_eq!(v.binding, Binding::Attainment);
    }

    #[test]
    fn a_failed_request_fails_the_run_whatever_the_latencies() {
        let mut requests: Vec<RequestRecord> = (1..=10).map(|i| request(10 * i, 10 * i + 90, 10)).collect();
        requests[3].success = false;
        let v = judge(&Objectives { slos: vec![ttft(Statistic::Mean, 1e9)], attainment: None }, &records(requests));
        assert!(!v.met);
        assert_eq!(v.binding, Binding::Failures);
        assert!((v.attainment - 0.9).abs() < 1e-9);
    }

    #[test]
    fn percentiles_are_those_the_objectives_name_once_each() {
        let objectives = Objectives {
            slos: vec![ttft(Statistic::Percentile(99.0), 1.0), tpot(Statistic::Percentile(90.0), 1.0), tpot(Statistic::Percentile(99.0), 2.0), ttft(Statistic::Mean, 1.0)],
            attainment: None,
        };
        assert_eq!(objectives.percentiles(), vec![90.0, 99.0]);
        assert_eq!(objectives.highest_percentile(), 99.0);
    }
}

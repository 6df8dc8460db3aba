//! The registry of the cost model's named parameters (`[cost]` keys): one entry per field of
//! [`CostParams`], with its physical kind, so that a fit can move them without ever producing a
//! physically absurd value, and a profile can list every one of them.
//!
//! ```text
//!  optimiser space (ℝ, unconstrained)          parameter space (physical)
//!  ───────────────────────────────────         ─────────────────────────────────────
//!  x ──► ε + (1 − ε) · σ(x)            Fraction     efficiency in (ε, 1]
//!  x ──► min(exp(x), 10 s)             Micros       overhead in (0, 10 s] microseconds
//! ```
//!
//! The transforms are why the fit needs no bounds handling: the optimiser searches all of ℝⁿ,
//! and every point of ℝⁿ maps to an efficiency in (0, 1] and a positive overhead. An issue's rule
//! is that a value outside those ranges is a sign the model is wrong, not a result; the
//! transform makes such values unreachable, so a fit that "wants" one shows up instead as a
//! parameter pinned against its bound (σ → 1, exp → 0), which the report can flag.

use super::{CostParams, MAX_OVERHEAD_US};

/// Smallest efficiency a fit can reach. An efficiency of 10⁻⁴ is already absurd for any kernel;
/// the floor only keeps the roofline's divisions finite.
pub const FRACTION_FLOOR: f64 = 1e-4;

/// Overheads below this many microseconds are mapped to it when entering log space (ln 0 = −∞).
/// A tenth of a microsecond is far below anything a step or sequence costs on a real engine
/// (steps take milliseconds), so the floor changes no prediction that matters.
pub const MICROS_FLOOR_US: f64 = 0.1;

/// How close to an end of its physical range a fitted value may come before it is flagged (see
/// [`ParamKind::edge`]). Efficiencies: within 0.02 of 0 or 1 (no kernel runs at its datasheet
/// peak, and one 50× below its roofline is a missing mechanism, not a kernel). Overheads: under
/// 1 µs (no engine's per-step, per-sequence or per-request CPU work is that small: the model asks
/// for zero, or a negative one), or within a factor of 2 of the 10 s ceiling.
const EFFICIENCY_EDGE_BAND: f64 = 0.02;
const OVERHEAD_LOWER_EDGE_US: f64 = 1.0;
const OVERHEAD_UPPER_EDGE_FACTOR: f64 = 2.0;

/// Which end of its physical range a value sits at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Lower,
    Upper,
}

/// A value found at an end of its physical range: the end, and the band that caught it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RangeEdge {
    pub side: Side,
    /// The end of the range ([`ParamKind::range`]).
    pub bound: f64,
    /// The band's inner limit: values at or beyond it (toward `bound`) are at the edge.
    pub limit: f64,
}

impl std::fmt::Display for RangeEdge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.side {
            Side::Lower => write!(f, "at the lower end of its range (≤ {} near {})", self.limit, self.bound),
            Side::Upper => write!(f, "at the upper end of its range (≥ {} near {})", self.limit, self.bound),
        }
    }
}

/// What range a parameter lives in, and so how the optimiser's coordinate maps to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// An achieved fraction of a peak: in (0, 1]. Mapped through a logistic into
    /// (`FRACTION_FLOOR`, 1).
    Fraction,
    /// A time in microseconds, ≥ 0. Mapped through `exp` (the fit works in log space, so it
    /// moves overheads by factors, as their uncertainty is).
    NonNegativeMicros,
    /// A share in [0, 1] where both ends mean something (no overlap, full overlap). Mapped
    /// through a logistic into (0, 1).
    Share,
}

impl ParamKind {
    /// The physical value of optimiser coordinate `x`. Always in range for any finite or
    /// infinite `x` (NaN maps to NaN).
    pub fn from_unconstrained(self, x: f64) -> f64 {
        match self {
            ParamKind::Fraction => FRACTION_FLOOR + (1.0 - FRACTION_FLOOR) * logistic(x),
            ParamKind::Share => logistic(x),
            // Capped where scenarios are (`MAX_OVERHEAD_US`): beyond it the objective is flat,
            // which turns the optimiser back, instead of simulating runs of absurd length.
            ParamKind::NonNegativeMicros => x.exp().min(MAX_OVERHEAD_US),
        }
    }

    /// The optimiser coordinate of physical value `value`: the inverse of
    /// [`from_unconstrained`](Self::from_unconstrained), with values at or beyond the ends of
    /// the range (an efficiency of exactly 1, an overhead of 0) pulled just inside, where the
    /// inverse is finite.
    pub fn to_unconstrained(self, value: f64) -> f64 {
        match self {
            ParamKind::Fraction => {
                // Keep p inside (0, 1) so the logit is finite; 1 − 1e-9 maps to x ≈ 20.7,
                // from where the optimiser can still come back down in a few steps.
                let p = ((value - FRACTION_FLOOR) / (1.0 - FRACTION_FLOOR)).clamp(1e-9, 1.0 - 1e-9);
                (p / (1.0 - p)).ln()
            }
            ParamKind::Share => {
                let p = value.clamp(1e-9, 1.0 - 1e-9);
                (p / (1.0 - p)).ln()
            }
            ParamKind::NonNegativeMicros => value.max(MICROS_FLOOR_US).ln(),
        }
    }

    /// The physical range, ends included: what [`check`](Self::check) accepts.
    pub fn range(self) -> (f64, f64) {
        match self {
            ParamKind::Fraction | ParamKind::Share => (0.0, 1.0),
            ParamKind::NonNegativeMicros => (0.0, MAX_OVERHEAD_US),
        }
    }

    /// The inner limits of the bands at the lower and upper ends of [`range`](Self::range).
    fn edge_limits(self) -> (f64, f64) {
        match self {
            ParamKind::Fraction | ParamKind::Share => (EFFICIENCY_EDGE_BAND, 1.0 - EFFICIENCY_EDGE_BAND),
            ParamKind::NonNegativeMicros => (OVERHEAD_LOWER_EDGE_US, MAX_OVERHEAD_US / OVERHEAD_UPPER_EDGE_FACTOR),
        }
    }

    /// Which end of its physical range `value` sits at, if it is within the band there: the
    /// fit pushed the parameter toward a value outside its meaning (the transforms keep it
    /// inside), which is a sign the model lacks a mechanism the data shows, not a result.
    pub fn edge(self, value: f64) -> Option<RangeEdge> {
        let (lower, upper) = self.range();
        let (lower_limit, upper_limit) = self.edge_limits();
        // The lower overhead band is strict (1 µs itself is plausible); the others include
        // their limit (an efficiency of exactly 0.98 is already flagged).
        let at_lower = match self {
            ParamKind::Fraction | ParamKind::Share => value <= lower_limit,
            ParamKind::NonNegativeMicros => value < lower_limit,
        };
        if at_lower {
            Some(RangeEdge { side: Side::Lower, bound: lower, limit: lower_limit })
        } else if value >= upper_limit {
            Some(RangeEdge { side: Side::Upper, bound: upper, limit: upper_limit })
        } else {
            None
        }
    }

    /// Whether `value` is at an end of its range ([`edge`](Self::edge)).
    pub fn is_pinned(self, value: f64) -> bool {
        self.edge(value).is_some()
    }

    pub fn describe(self) -> &'static str {
        match self {
            ParamKind::Fraction => "fraction in (0, 1]",
            ParamKind::NonNegativeMicros => "microseconds ≥ 0",
            ParamKind::Share => "share in [0, 1]",
        }
    }
}

/// Numerically stable logistic σ(x) = 1 / (1 + e^−x).
fn logistic(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// One named parameter of [`CostParams`].
#[derive(Clone, Copy)]
pub struct ParamSpec {
    /// The key under `[cost]` in a scenario or profile, and the field name of [`CostParams`].
    pub name: &'static str,
    pub kind: ParamKind,
    get: fn(&CostParams) -> f64,
    set: fn(&mut CostParams, f64),
}

impl ParamSpec {
    pub fn get(&self, params: &CostParams) -> f64 {
        (self.get)(params)
    }

    pub fn set(&self, params: &mut CostParams, value: f64) {
        (self.set)(params, value)
    }
}

impl std::fmt::Debug for ParamSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamSpec").field("name", &self.name).field("kind", &self.kind).finish()
    }
}

macro_rules! param {
    ($field:ident, $kind:expr) => {
        ParamSpec {
            name: stringify!($field),
            kind: $kind,
            get: |p| p.$field,
            set: |p, v| p.$field = v,
        }
    };
}

/// Every parameter of [`CostParams`], in the struct's order (the order profiles list them in).
/// The exhaustive destructuring in the test `registry_covers_every_field` fails to compile when
/// a field is added to `CostParams` and not here.
pub const PARAMS: [ParamSpec; 15] = [
    param!(gemm_efficiency, ParamKind::Fraction),
    param!(attention_efficiency, ParamKind::Fraction),
    param!(memory_bandwidth_efficiency, ParamKind::Fraction),
    param!(collective_latency_us, ParamKind::NonNegativeMicros),
    param!(collective_bandwidth_efficiency, ParamKind::Fraction),
    param!(prefix_attention_efficiency, ParamKind::Fraction),
    param!(step_overhead_eager_us, ParamKind::NonNegativeMicros),
    param!(step_overhead_graph_us, ParamKind::NonNegativeMicros),
    param!(prefill_step_overhead_us, ParamKind::NonNegativeMicros),
    param!(prefill_seq_overhead_us, ParamKind::NonNegativeMicros),
    param!(seq_overhead_us, ParamKind::NonNegativeMicros),
    param!(frontend_overhead_us, ParamKind::NonNegativeMicros),
    param!(frontend_per_token_us, ParamKind::NonNegativeMicros),
    param!(cpu_overlap, ParamKind::Share),
    param!(transfer_utilisation, ParamKind::Fraction),
];

/// The names of all parameters, comma-separated, for error messages.
pub fn known_names() -> String {
    PARAMS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
}


impl ParamKind {
    /// Whether a value given in a scenario or profile is in range; the reason if not.
    pub fn check(self, value: f64) -> Result<(), String> {
        let ok = match self {
            ParamKind::Fraction => value > 0.0 && value <= 1.0,
            ParamKind::NonNegativeMicros => (0.0..=MAX_OVERHEAD_US).contains(&value),
            ParamKind::Share => (0.0..=1.0).contains(&value),
        };
        if ok {
            Ok(())
        } else {
            Err(match self {
                ParamKind::Fraction => "must be in (0, 1]".to_string(),
                ParamKind::Share => "must be in [0, 1]".to_string(),
                ParamKind::NonNegativeMicros => format!("must be microseconds in 0..={MAX_OVERHEAD_US} (10 s)"),
            })
        }
    }
}

/// The parameter called `name`.
pub fn find(name: &str) -> Option<&'static ParamSpec> {
    PARAMS.iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CostParams {
        CostParams {
            gemm_efficiency: 0.1,
            attention_efficiency: 0.2,
            memory_bandwidth_efficiency: 0.3,
            collective_latency_us: 4.0,
            collective_bandwidth_efficiency: 0.5,
            prefix_attention_efficiency: 0.6,
            step_overhead_eager_us: 7.0,
            step_overhead_graph_us: 8.0,
            prefill_step_overhead_us: 8.5,
            prefill_seq_overhead_us: 8.75,
            seq_overhead_us: 9.0,
            frontend_overhead_us: 9.5,
            frontend_per_token_us: 9.75,
            cpu_overlap: 0.25,
            transfer_utilisation: 0.875,
        }
    }

    #[test]
    fn registry_covers_every_field() {
        // Exhaustive: adding a field to CostParams breaks this until the registry has it too.
        let CostParams {
            gemm_efficiency,
            attention_efficiency,
            memory_bandwidth_efficiency,
            collective_latency_us,
            collective_bandwidth_efficiency,
            prefix_attention_efficiency,
            step_overhead_eager_us,
            step_overhead_graph_us,
            prefill_step_overhead_us,
            prefill_seq_overhead_us,
            seq_overhead_us,
            frontend_overhead_us,
            frontend_per_token_us,
            cpu_overlap,
            transfer_utilisation,
        } = sample();
        let expected = [
            gemm_efficiency,
            attention_efficiency,
            memory_bandwidth_efficiency,
            collective_latency_us,
            collective_bandwidth_efficiency,
            prefix_attention_efficiency,
            step_overhead_eager_us,
            step_overhead_graph_us,
            prefill_step_overhead_us,
            prefill_seq_overhead_us,
            seq_overhead_us,
            frontend_overhead_us,
            frontend_per_token_us,
            cpu_overlap,
            transfer_utilisation,
        ];
        let p = sample();
        let got: Vec<f64> = PARAMS.iter().map(|s| s.get(&p)).collect();
        assert_eq!(got, expected);
        // Setters write their own field only.
        for (i, spec) in PARAMS.iter().enumerate() {
            let mut q = sample();
            spec.set(&mut q, 123.0);
            for (j, other) in PARAMS.iter().enumerate() {
                let want = if i == j { 123.0 } else { expected[j] };
                assert_eq!(other.get(&q), want, "setting {} changed {}", spec.name, other.name);
            }
        }
    }

    #[test]
    fn fitted_values_at_the_edge_of_physics_are_flagged() {
        // Values a fit once returned unflagged: a 0.17 µs overhead and a 0.995 efficiency.
        assert!(ParamKind::NonNegativeMicros.is_pinned(0.17));
        assert!(ParamKind::Fraction.is_pinned(0.995));
        assert!(ParamKind::Fraction.is_pinned(0.0106));
        for fine in [0.25, 0.57, 0.9] {
            assert!(!ParamKind::Fraction.is_pinned(fine), "{fine}");
        }
        for fine in [4.1, 250.0, 24_000.0] {
            assert!(!ParamKind::NonNegativeMicros.is_pinned(fine), "{fine}");
        }
        assert!(ParamKind::NonNegativeMicros.is_pinned(MAX_OVERHEAD_US));
        // Near the ceiling, not only at it; and each flag says which end.
        let near_ceiling = ParamKind::NonNegativeMicros.edge(0.6 * MAX_OVERHEAD_US).expect("flagged");
        assert_eq!((near_ceiling.side, near_ceiling.bound), (Side::Upper, MAX_OVERHEAD_US));
        assert_eq!(ParamKind::NonNegativeMicros.edge(0.17).map(|e| e.side), Some(Side::Lower));
        assert_eq!(ParamKind::Fraction.edge(0.995).map(|e| (e.side, e.bound)), Some((Side::Upper, 1.0)));
        assert_eq!(ParamKind::Fraction.edge(0.0106).map(|e| (e.side, e.bound)), Some((Side::Lower, 0.0)));
        assert!(ParamKind::NonNegativeMicros.edge(0.4 * MAX_OVERHEAD_US).is_none());
        // Every parameter of the registry has both ends checked.
        for spec in &PARAMS {
            let (lo, hi) = spec.kind.range();
            assert_eq!(spec.kind.edge(lo).map(|e| e.side), Some(Side::Lower), "{}", spec.name);
            assert_eq!(spec.kind.edge(hi).map(|e| e.side), Some(Side::Upper), "{}", spec.name);
        }
    }

    #[test]
    fn transforms_round_trip_and_stay_in_range() {
        for v in [0.01, 0.3, 0.7, 0.999] {
            let x = ParamKind::Fraction.to_unconstrained(v);
            assert!((ParamKind::Fraction.from_unconstrained(x) - v).abs() < 1e-12, "{v}");
        }
        for v in [0.5, 30.0, 4000.0] {
            let x = ParamKind::NonNegativeMicros.to_unconstrained(v);
            assert!((ParamKind::NonNegativeMicros.from_unconstrained(x) - v).abs() < 1e-9 * v, "{v}");
        }
        for x in [-1e6, -50.0, 0.0, 50.0, 1e6] {
            let f = ParamKind::Fraction.from_unconstrained(x);
            assert!(f > 0.0 && f <= 1.0, "{x} → {f}");
            assert!(ParamKind::NonNegativeMicros.from_unconstrained(x) >= 0.0);
        }
        // The ends of the ranges are pulled inside rather than sent to ±∞.
        assert!(ParamKind::Fraction.to_unconstrained(1.0).is_finite());
        assert!(ParamKind::NonNegativeMicros.to_unconstrained(0.0).is_finite());
    }

    #[test]
    fn ranges_are_checked() {
        assert!(ParamKind::Fraction.check(1.0).is_ok());
        assert!(ParamKind::Fraction.check(0.0).is_err());
        assert!(ParamKind::Fraction.check(1.5).is_err());
        assert!(ParamKind::NonNegativeMicros.check(0.0).is_ok());
        assert!(ParamKind::NonNegativeMicros.check(-1.0).is_err());
        assert!(ParamKind::NonNegativeMicros.check(MAX_OVERHEAD_US * 2.0).is_err());
        assert!(find("seq_overhead_us").is_some() && find("gemm_eff").is_none());
    }
}

//! A derivative-free Nelder–Mead simplex minimiser, with restarts.
//!
//! The fit's objective is a simulation: no gradients, and (because time is integer nanoseconds
//! and scheduling is discrete) not even smooth at the smallest scales. Nelder–Mead needs only
//! function values and tolerates mild noise, and the few parameters a fit moves (≤ 9) are well
//! within what it handles.
//!
//! ```text
//!  one iteration, simplex of n+1 points sorted best … worst (h), centroid c of all but h
//!    reflect   r = c + α(c − h)          α = 1
//!    expand    e = c + γ(r − c)          γ = 2     if r beats the best
//!    contract  k = c + ρ(h − c) or (r−c) ρ = 0.5   if r is no better than the second worst
//!    shrink    xᵢ = x₀ + σ(xᵢ − x₀)      σ = 0.5   if the contraction fails too
//! ```
//!
//! Converged when the spread of function values over the simplex, `f_worst − f_best`, is at most
//! `f_tolerance`. A simplex can also collapse onto a line or stall on a plateau and "converge"
//! where it should not; restarting from the best point with a fresh, full-size simplex is the
//! standard remedy, and stops once a restart no longer improves the best value by more than the
//! tolerance.
//!
//! Deterministic: no randomness, ties in sorting go to the earlier vertex (stable sort).

/// Reflection coefficient α.
const REFLECT: f64 = 1.0;
/// Expansion coefficient γ.
const EXPAND: f64 = 2.0;
/// Contraction coefficient ρ.
const CONTRACT: f64 = 0.5;
/// Shrink coefficient σ.
const SHRINK: f64 = 0.5;

/// Limits and scales of one minimisation.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Stop after this many evaluations of the objective, whatever the state.
    pub max_evaluations: usize,
    /// Converged when `f_worst − f_best ≤ f_tolerance` over the simplex.
    pub f_tolerance: f64,
    /// Edge length of the initial (and every restarted) simplex, in the coordinates' own units:
    /// vertex i is the start point moved by this much along axis i.
    pub initial_step: f64,
    /// Restarts after convergence, at most.
    pub max_restarts: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { max_evaluations: 2000, f_tolerance: 1e-10, initial_step: 0.5, max_restarts: 4 }
    }
}

/// Where the minimisation ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Minimum {
    /// The best point found.
    pub x: Vec<f64>,
    /// The objective at `x`.
    pub f: f64,
    /// Evaluations of the objective used, including the start point's.
    pub evaluations: usize,
    /// Restarts performed.
    pub restarts: usize,
    /// Whether the last simplex met the tolerance (false: stopped by `max_evaluations`).
    pub converged: bool,
}

/// A NaN or ±∞ from the objective is treated as this (worse than any real value), so that
/// sorting and the spread stay meaningful and the simplex moves away from such points.
const NON_FINITE_PENALTY: f64 = 1e300;

/// Minimises `f` from `x0`. `f` is called with a slice of `x0.len()` coordinates.
///
/// Panics if `x0` is empty or `max_evaluations` is 0.
pub fn minimize(mut f: impl FnMut(&[f64]) -> f64, x0: &[f64], options: &Options) -> Minimum {
    assert!(!x0.is_empty(), "nelder-mead: no coordinates to minimise over");
    assert!(options.max_evaluations > 0, "nelder-mead: max_evaluations must be positive");
    let mut evaluations = 0usize;
    let mut eval = |x: &[f64], evaluations: &mut usize| -> f64 {
        *evaluations += 1;
        let v = f(x);
        if v.is_finite() { v } else { NON_FINITE_PENALTY }
    };

    let mut best_x = x0.to_vec();
    let mut best_f = eval(&best_x, &mut evaluations);
    let mut restarts = 0usize;
    loop {
        let run = simplex_run(&mut eval, &best_x, best_f, options, &mut evaluations);
        let improvement = best_f - run.f;
        if run.f < best_f {
            best_x = run.x;
            best_f = run.f;
        }
        let out_of_budget = evaluations >= options.max_evaluations;
        // A restart that no longer helps means the simplex was not stuck: stop. (The first run
        // always gets at least one restart to confirm its minimum, budget permitting.)
        let stalled = restarts > 0 && improvement <= options.f_tolerance;
        if !run.converged || out_of_budget || stalled || restarts >= options.max_restarts {
            return Minimum { x: best_x, f: best_f, evaluations, restarts, converged: run.converged };
        }
        restarts += 1;
    }
}

struct Run {
    x: Vec<f64>,
    f: f64,
    converged: bool,
}

/// One simplex from `start` (whose value `f_start` is known) until the tolerance or the budget.
fn simplex_run(
    eval: &mut impl FnMut(&[f64], &mut usize) -> f64,
    start: &[f64],
    f_start: f64,
    o: &Options,
    evaluations: &mut usize,
) -> Run {
    let n = start.len();
    // Vertices and values, kept sorted best first.
    let mut xs: Vec<Vec<f64>> = Vec::with_capacity(n + 1);
    let mut fs: Vec<f64> = Vec::with_capacity(n + 1);
    xs.push(start.to_vec());
    fs.push(f_start);
    for i in 0..n {
        if *evaluations >= o.max_evaluations {
            break;
        }
        let mut v = start.to_vec();
        v[i] += o.initial_step;
        fs.push(eval(&v, evaluations));
        xs.push(v);
    }
    if xs.len() < n + 1 {
        // The budget ran out while building the simplex.
        let (x, f) = best_of(&xs, &fs);
        return Run { x, f, converged: false };
    }

    let mut centroid = vec![0.0; n];
    loop {
        sort_simplex(&mut xs, &mut fs);
        if fs[n] - fs[0] <= o.f_tolerance {
            return Run { x: xs[0].clone(), f: fs[0], converged: true };
        }
        if *evaluations >= o.max_evaluations {
            return Run { x: xs[0].clone(), f: fs[0], converged: false };
        }

        // Centroid of every vertex but the worst.
        centroid.iter_mut().for_each(|c| *c = 0.0);
        for x in &xs[..n] {
            for (c, xi) in centroid.iter_mut().zip(x) {
                *c += xi / n as f64;
            }
        }
        let along = |coef: f64, towards: &[f64]| -> Vec<f64> {
            centroid.iter().zip(towards).map(|(c, t)| c + coef * (t - c)).collect()
        };

        let worst = xs[n].clone();
        let reflected = along(-REFLECT, &worst);
        let f_reflected = eval(&reflected, evaluations);

        if f_reflected < fs[0] {
            let expanded = along(EXPAND, &reflected);
            let f_expanded = if *evaluations < o.max_evaluations { eval(&expanded, evaluations) } else { f64::INFINITY };
            if f_expanded < f_reflected {
                xs[n] = expanded;
                fs[n] = f_expanded;
            } else {
                xs[n] = reflected;
                fs[n] = f_reflected;
            }
            continue;
        }
        if f_reflected < fs[n - 1] {
            xs[n] = reflected;
            fs[n] = f_reflected;
            continue;
        }
        if *evaluations >= o.max_evaluations {
            continue; // the loop's budget check returns
        }
        // Contract: outside (towards the reflected point) if it beat the worst, else inside.
        let (contracted, f_bound) = if f_reflected < fs[n] {
            (along(CONTRACT, &reflected), f_reflected)
        } else {
            (along(CONTRACT, &worst), fs[n])
        };
        let f_contracted = eval(&contracted, evaluations);
        if f_contracted < f_bound {
            xs[n] = contracted;
            fs[n] = f_contracted;
            continue;
        }
        // Shrink every vertex towards the best.
        for i in 1..=n {
            if *evaluations >= o.max_evaluations {
                break;
            }
            let shrunk: Vec<f64> = xs[0].iter().zip(&xs[i]).map(|(b, x)| b + SHRINK * (x - b)).collect();
            fs[i] = eval(&shrunk, evaluations);
            xs[i] = shrunk;
        }
    }
}

/// Sorts vertices by value, best first; equal values keep their order (stable), which keeps the
/// run deterministic.
fn sort_simplex(xs: &mut Vec<Vec<f64>>, fs: &mut Vec<f64>) {
    let mut order: Vec<usize> = (0..fs.len()).collect();
    order.sort_by(|&a, &b| fs[a].total_cmp(&fs[b]));
    let sorted_x: Vec<Vec<f64>> = order.iter().map(|&i| std::mem::take(&mut xs[i])).collect();
    let sorted_f: Vec<f64> = order.iter().map(|&i| fs[i]).collect();
    *xs = sorted_x;
    *fs = sorted_f;
}

fn best_of(xs: &[Vec<f64>], fs: &[f64]) -> (Vec<f64>, f64) {
    let mut best = 0;
    for i in 1..fs.len() {
        if fs[i] < fs[best] {
            best = i;
        }
    }
    (xs[best].clone(), fs[best])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rosenbrock(x: &[f64]) -> f64 {
        (1.0 - x[0]).powi(2) + 100.0 * (x[1] - x[0] * x[0]).powi(2)
    }

    #[test]
    fn rosenbrock_converges_to_one_one() {
        let m = minimize(rosenbrock, &[-1.2, 1.0], &Options { f_tolerance: 1e-14, ..Options::default() });
        assert!(m.converged, "{m:?}");
        assert!((m.x[0] - 1.0).abs() < 1e-4 && (m.x[1] - 1.0).abs() < 1e-4, "{m:?}");
        assert!(m.f < 1e-8, "{m:?}");
        assert!(m.evaluations <= 2000);
    }

    #[test]
    fn quadratic_bowl_in_five_dimensions() {
        let centre = [1.0, -2.0, 3.0, 0.5, -0.25];
        let scale = [1.0, 2.0, 4.0, 8.0, 16.0];
        let bowl = |x: &[f64]| -> f64 { x.iter().zip(&centre).zip(&scale).map(|((x, c), s)| s * (x - c).powi(2)).sum() };
        let m = minimize(bowl, &[0.0; 5], &Options { max_evaluations: 5000, f_tolerance: 1e-16, ..Options::default() });
        assert!(m.converged, "{m:?}");
        for (x, c) in m.x.iter().zip(&centre) {
            assert!((x - c).abs() < 1e-4, "{m:?}");
        }
    }

    #[test]
    fn deterministic_and_respects_the_budget() {
        let o = Options { max_evaluations: 57, ..Options::default() };
        let a = minimize(rosenbrock, &[-1.2, 1.0], &o);
        let b = minimize(rosenbrock, &[-1.2, 1.0], &o);
        assert_eq!(a, b);
        assert_eq!(a.evaluations, 57);
        assert!(!a.converged);
    }

    #[test]
    fn non_finite_values_are_avoided() {
        // NaN left of 0.5: the minimum at 1 is still found.
        let f = |x: &[f64]| if x[0] < 0.5 { f64::NAN } else { (x[0] - 1.0).powi(2) };
        let m = minimize(f, &[2.0], &Options::default());
        assert!((m.x[0] - 1.0).abs() < 1e-4, "{m:?}");
    }
}

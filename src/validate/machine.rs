//! Can this machine judge the twin? `validate --engine` compares a profile timed during
//! calibration with an engine timed minutes later. On a shared machine whose load changes
//! between the two (load 4–13 in the run that asked for this), the comparison measures the load,
//! not the twin: 0–5 of 12 targets were met, and the table was printed as pass/fail anyway.
//!
//! So the calibration's reference kernel ([`crate::calibrate::noise`]), timed before and after
//! each pass, is timed once more after the engine's benchmarks. If those timings spread by more
//! than [`NOISE_THRESHOLD`] (the accuracy target itself: a machine that moved by more cannot show
//! whether the twin meets it), the run cannot judge, and says why instead of passing or failing
//! any target.
//!
//! ```text
//!  calibration: reference t₀ ─ pass ─ t₁ ─ pass ─ t₂ …   engine benchmarks   reference tₙ
//!  spread (max t − min t) / min t > 10%  ─►  "cannot judge", exit 3
//! ```

use crate::calibrate::noise::{NOISE_THRESHOLD, ReferenceTimings, time_reference};
use crate::calibrate::profile::Profile;
use crate::calibrate::timing::TimingOptions;
use crate::scenario::Dtype;

/// Why the run cannot judge the twin, or `None` where it can: the reference kernel's timings from
/// the profile's calibration and `after_run_ns`, one more after the benchmarks.
pub fn verdict(profile: &Profile, after_run_ns: Option<f64>) -> Option<String> {
    let reference = profile.provenance.run.reference.as_ref()?;
    let mut medians = reference.median_ns.clone();
    medians.extend(after_run_ns);
    let judged = ReferenceTimings::judge(reference.kernel.clone(), medians, NOISE_THRESHOLD);
    if !judged.noisy {
        return None;
    }
    let fmt = |ns: &[f64]| ns.iter().map(|t| format!("{:.2} ms", t / 1e6)).collect::<Vec<_>>().join(", ");
    Some(match after_run_ns {
        Some(after) if !reference.noisy => format!(
            "the machine's speed changed between calibration and the benchmarks: the reference kernel ({}) took {} during \
             calibration and {:.2} ms after the benchmarks, {:.0}% apart (more than {:.0}%); the errors would measure the load, \
             not the twin. Run it on a quieter machine",
            reference.kernel,
            fmt(&reference.median_ns),
            after / 1e6,
            judged.spread * 100.0,
            NOISE_THRESHOLD * 100.0
        ),
        _ => format!(
            "the machine was too noisy to calibrate: the reference kernel ({}) took {}, {:.0}% apart (more than {:.0}%). \
             Run it on a quieter machine",
            reference.kernel,
            fmt(&reference.median_ns),
            reference.spread * 100.0,
            NOISE_THRESHOLD * 100.0
        ),
    })
}

/// The reference kernel timed now on `threads` CPU threads, in `dtype`, as calibration timed it
/// (nanoseconds); `None` where it cannot be (the backend refuses the dtype or fails).
pub fn time_reference_on_cpu(threads: usize, dtype: Dtype) -> Option<f64> {
    let mut backend = crate::calibrate::cpu::CpuBackend::new(threads).ok()?;
    time_reference(&mut backend, &[dtype], &TimingOptions::quick()).ok().flatten().map(|(_, ns)| ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(medians: &[f64]) -> Profile {
        let text = include_str!("../../tests/data/cpu-profile/tiny.provenance.toml");
        let mut provenance = crate::calibrate::profile::parse_provenance(text, "tiny.provenance.toml".as_ref()).unwrap();
        provenance.run.reference = Some(ReferenceTimings::judge("gemm 256×1024×1024 f32".into(), medians.to_vec(), NOISE_THRESHOLD));
        Profile { rows: Vec::new(), provenance }
    }

    #[test]
    fn a_steady_machine_judges_and_a_changed_or_noisy_one_says_why() {
        // Calibration and the run agree within 10%: judged.
        assert_eq!(verdict(&profile(&[5.0e6, 5.1e6, 5.2e6]), Some(5.3e6)), None);
        // The load changed after calibration: the run's timing is 30% over.
        let changed = verdict(&profile(&[5.0e6, 5.1e6, 5.0e6]), Some(6.5e6)).expect("cannot judge");
        assert!(changed.contains("changed between calibration and the benchmarks") && changed.contains("6.50 ms"), "{changed}");
        // A noisy calibration cannot judge, whatever came after.
        let noisy = verdict(&profile(&[5.0e6, 6.5e6]), Some(5.0e6)).expect("cannot judge");
        assert!(noisy.contains("too noisy to calibrate"), "{noisy}");
        // A profile without reference timings (imported, or older) has nothing to judge by.
        let mut bare = profile(&[5.0e6]);
        bare.provenance.run.reference = None;
        assert_eq!(verdict(&bare, Some(9.0e6)), None);
    }
}

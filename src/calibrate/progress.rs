//! Progress of a calibration run on standard error, from its first second: a bar on a terminal,
//! and on anything else (a log file, CI, a pipe) a line every [`LINE_EVERY`] and one at the
//! start, so a run that takes minutes never looks hung.
//!
//! ```text
//!  calibrating: 120/708 shape runs (pass 1 of 3), now decode attention; 41 s elapsed, about 3 min 20 s left
//! ```
//!
//! The time left is the mean time per shape run so far times the runs left (shapes are
//! interleaved coarse to fine, so the mean is representative early on), capped by what is left
//! of the budget.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::grid::OpKind;

/// How often a line is printed when standard error is not a terminal.
pub const LINE_EVERY: Duration = Duration::from_secs(5);

enum Mode {
    Off,
    Bar(ProgressBar),
    Lines { last: Option<Instant> },
}

pub struct Progress {
    mode: Mode,
    start: Instant,
    total: u64,
    done: u64,
    passes: u32,
    budget: Option<Duration>,
}

impl Progress {
    /// `total` shape runs over `passes` passes; nothing is drawn unless `enabled`.
    pub fn new(enabled: bool, total: u64, passes: u32, budget: Option<Duration>) -> Progress {
        let mode = if !enabled {
            Mode::Off
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("calibrating [{bar:30}] {pos}/{len} shape runs, {elapsed} elapsed, ETA {eta}: {msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(500));
            Mode::Bar(bar)
        } else {
            Mode::Lines { last: None }
        };
        Progress { mode, start: Instant::now(), total, done: 0, passes: passes.max(1), budget }
    }

    /// A shape run of `kind` in `pass` (1-based) begins; `label` describes the shape.
    pub fn begin(&mut self, kind: OpKind, pass: u32, label: &str) {
        match &mut self.mode {
            Mode::Off => {}
            Mode::Bar(bar) => bar.set_message(format!("pass {pass}/{}, {label}", self.passes)),
            Mode::Lines { last } => {
                if last.is_none_or(|t| t.elapsed() >= LINE_EVERY) {
                    *last = Some(Instant::now());
                    eprintln!("{}", self.line(kind, pass));
                }
            }
        }
    }

    /// A shape run ended (measured, skipped or failed).
    pub fn end(&mut self) {
        self.done += 1;
        if let Mode::Bar(bar) = &self.mode {
            bar.inc(1);
        }
    }

    /// A line for the user outside the progress display (above the bar on a terminal).
    pub fn note(&self, text: &str) {
        match &self.mode {
            Mode::Bar(bar) => bar.println(text),
            Mode::Lines { .. } => eprintln!("{text}"),
            Mode::Off => {}
        }
    }

    pub fn finish(self) {
        if let Mode::Bar(bar) = self.mode {
            bar.finish_and_clear();
        }
    }

    fn line(&self, kind: OpKind, pass: u32) -> String {
        let elapsed = self.start.elapsed();
        let left = self.estimate_left(elapsed);
        format!(
            "calibrating: {}/{} shape runs (pass {pass} of {}), now {}; {} elapsed, {}",
            self.done,
            self.total,
            self.passes,
            kind.name(),
            format_duration(elapsed),
            match left {
                Some(left) => format!("about {} left", format_duration(left)),
                None => "estimating the time left".to_string(),
            }
        )
    }

    /// Mean time per run so far × runs left, capped by the budget left; `None` before any run.
    fn estimate_left(&self, elapsed: Duration) -> Option<Duration> {
        if self.done == 0 {
            return self.budget.map(|b| b.saturating_sub(elapsed));
        }
        let per_run = elapsed.as_secs_f64() / self.done as f64;
        let left = Duration::from_secs_f64(per_run * self.total.saturating_sub(self.done) as f64);
        Some(self.budget.map_or(left, |b| left.min(b.saturating_sub(elapsed))))
    }
}

/// `7 s`, `3 min 20 s`, `1 h 5 min`.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_millis(7400)), "7 s");
        assert_eq!(format_duration(Duration::from_secs(200)), "3 min 20 s");
        assert_eq!(format_duration(Duration::from_secs(3900)), "1 h 5 min");
    }

    #[test]
    fn time_left_is_the_mean_run_times_the_runs_left_within_the_budget() {
        let mut p = Progress::new(false, 100, 1, None);
        assert_eq!(p.estimate_left(Duration::from_secs(1)), None);
        p.done = 20;
        assert_eq!(p.estimate_left(Duration::from_secs(10)), Some(Duration::from_secs(40)));
        p.budget = Some(Duration::from_secs(30));
        assert_eq!(p.estimate_left(Duration::from_secs(10)), Some(Duration::from_secs(20)));
        p.done = 0;
        assert_eq!(p.estimate_left(Duration::from_secs(10)), Some(Duration::from_secs(20)));
        let line = p.line(OpKind::Decode, 1);
        assert!(line.starts_with("calibrating: 0/100 shape runs (pass 1 of 1), now decode attention; "), "{line}");
        assert!(line.ends_with("left"), "{line}");
    }
}

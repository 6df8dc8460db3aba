//! Progress bars on stderr, shown only on a terminal so that piped output stays clean.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar over the sweep points when the sweep has more than one point.
pub(super) fn sweep(points: usize) -> ProgressBar {
    if points < 2 {
        return ProgressBar::hidden();
    }
    bar(points, "{bar:30} {pos}/{len} sweep points, {elapsed}")
}

/// vLLM's client shows a bar of finished requests; so does `bench`.
pub(super) fn requests(requests: usize) -> ProgressBar {
    bar(requests, "{bar:30} {pos}/{len} requests, {elapsed} elapsed, ETA {eta}")
}

/// A bar of candidates evaluated by `plan`.
pub(super) fn candidates(candidates: usize) -> ProgressBar {
    bar(candidates, "{bar:30} {pos}/{len} candidates, {elapsed} elapsed, ETA {eta}")
}

fn bar(len: usize, template: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64);
    bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
    bar
}

//! A fuzzing campaign over every parser (see `servesim::fuzz`), for a time split evenly between
//! the targets. Crashes are written to `fuzz-crashes/<target>/<n>.bin` with their messages; copy
//! one into `tests/data/fuzz/<target>/` to make it a regression test.
//!
//!     cargo run --release --example fuzz -- --minutes 60 [--target NAME] [--seed N]

use std::time::Duration;

use servesim::fuzz::{self, Budget};

fn main() {
    let mut minutes = 1.0f64;
    let mut only: Option<String> = None;
    let mut seed = 0u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| fail(&format!("{arg} needs a value")));
        match arg.as_str() {
            "--minutes" => minutes = value().parse().ok().filter(|m: &f64| m.is_finite() && *m > 0.0).unwrap_or_else(|| fail("--minutes: expected a positive number")),
            "--target" => only = Some(value()),
            "--seed" => seed = value().parse().unwrap_or_else(|_| fail("--seed: expected an integer")),
            other => fail(&format!("unknown argument {other:?}; expected --minutes, --target, --seed")),
        }
    }
    let targets: Vec<_> = fuzz::targets::all().into_iter().filter(|t| only.as_deref().is_none_or(|o| o == t.name)).collect();
    if targets.is_empty() {
        let names: Vec<_> = fuzz::targets::all().iter().map(|t| t.name).collect();
        fail(&format!("--target: unknown; known: {}", names.join(", ")));
    }
    let each = Duration::from_secs_f64(minutes * 60.0 / targets.len() as f64);
    let scratch = std::env::temp_dir().join(format!("servesim-fuzz-{}", std::process::id()));
    let mut crashes_total = 0;
    println!("| target | executions | per second | corpus | crashes |\n| --- | ---: | ---: | ---: | ---: |");
    for target in &targets {
        let dir = scratch.join(target.name);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
        let campaign = fuzz::quiet_panics(|| fuzz::fuzz(target, seed, Budget::Time(each), &dir));
        println!(
            "| {} | {} | {:.0} | {} | {} |",
            target.name,
            campaign.executions,
            campaign.executions as f64 / each.as_secs_f64(),
            campaign.corpus,
            campaign.crashes.len()
        );
        for (i, crash) in campaign.crashes.iter().enumerate() {
            let out = std::path::Path::new("fuzz-crashes").join(target.name);
            let _ = std::fs::create_dir_all(&out);
            let _ = std::fs::write(out.join(format!("{i}.bin")), &crash.input);
            let _ = std::fs::write(out.join(format!("{i}.txt")), &crash.message);
            eprintln!("{}: crash {i}: {}", target.name, crash.message);
        }
        crashes_total += campaign.crashes.len();
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if crashes_total > 0 {
        std::process::exit(1);
    }
}

fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(2);
}

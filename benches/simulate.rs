//! Speed and memory targets (issues 2 and 14): 100,000 ShareGPT-like requests, Llama-3.1-8B on
//! 1×H100, Poisson arrivals near saturation. Issue 14 asks for ≤ 20 ms on one core, and ≤ 60
//! bytes per request of memory beyond the request specs and the per-request records. The
//! figures measured here are recorded in docs/speed.md ("Simulator speed").
//!
//! It runs on the binary's allocator (`HugePageAlloc`), so it measures what `servesim simulate`
//! does; the allocator is wrapped to count the bytes in use, for the memory figure.

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use servesim::engine::cpu::HugePageAlloc;
use servesim::metrics::{RequestRecord, Summary};
use servesim::run::{cost_model, run_scenario, sim_config};
use servesim::scenario::Scenario;
use servesim::workload::RequestSpec;

/// The binary's allocator, counting the bytes allocated and not yet freed, and their peak.
struct Counting;

static IN_USE_BYTES: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

fn count_alloc(bytes: usize) {
    let now = IN_USE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call goes to `HugePageAlloc` unchanged; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_alloc(layout.size());
        unsafe { HugePageAlloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_alloc(layout.size());
        unsafe { HugePageAlloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { HugePageAlloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        IN_USE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        count_alloc(new_size);
        unsafe { HugePageAlloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn bench_scenario() -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/bench-sharegpt-100k.toml");
    Scenario::load(&path, &[]).expect("bench scenario")
}

fn bench_sharegpt_100k(c: &mut Criterion) {
    let scenario = bench_scenario();
    let mut group = c.benchmark_group("simulate");
    group.sample_size(10);
    group.bench_function("sharegpt_100k_llama8b_h100", |b| b.iter(|| black_box(run_scenario(&scenario, &[99.0]))));
    group.finish();
}

/// Peak heap in use while the 100k requests are simulated and summarised, beyond the specs and
/// the records, per request (printed, not timed: criterion measures time only).
fn memory_per_request(_: &mut Criterion) {
    let scenario = bench_scenario();
    let cost = cost_model(&scenario);
    let config = sim_config(&scenario);
    let point = &scenario.workload.points()[0];
    let requests = servesim::workload::generate_point(&scenario.workload, point);
    let before_bytes = IN_USE_BYTES.load(Ordering::Relaxed);
    PEAK_BYTES.store(before_bytes, Ordering::Relaxed);
    let output = servesim::sim::simulate(&requests, &config, &*cost);
    black_box(Summary::from_records(&output.records, &[99.0]));
    let peak_bytes = PEAK_BYTES.load(Ordering::Relaxed) - before_bytes;
    let n = requests.len();
    let records_bytes = n * size_of::<RequestRecord>();
    let beyond = peak_bytes.saturating_sub(records_bytes) as f64 / n as f64;
    println!(
        "simulate/memory: {n} requests ({} B specs, {} B records each, not counted), peak beyond them {beyond:.1} B per request",
        size_of::<RequestSpec>(),
        size_of::<RequestRecord>(),
    );
}

/// The default path as a user runs it (issue 33): `servesim simulate` on the bench scenario, a
/// whole process that loads the bundled H100 kernel profile and prices every step from it. The
/// figure is the process's CPU time (user and system, from `getrusage` of the waited child), not
/// its wall time, so the machine's other load counts less; the target is ≤ 60 ms.
fn default_path_cli(c: &mut Criterion) {
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/bench-sharegpt-100k.toml");
    let mut group = c.benchmark_group("simulate");
    group.sample_size(20);
    group.bench_function("sharegpt_100k_default_path_cli_cpu", |b| {
        b.iter_custom(|iters| {
            let before = children_cpu();
            for _ in 0..iters {
                let status = std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
                    .arg("simulate")
                    .arg(&scenario)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .expect("servesim runs");
                assert!(status.success(), "servesim simulate failed: {status}");
            }
            children_cpu() - before
        })
    });
    group.finish();
}

/// User plus system CPU of every waited-for child process so far.
fn children_cpu() -> std::time::Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let time = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

criterion_group!(benches, bench_sharegpt_100k, default_path_cli, memory_per_request);
criterion_main!(benches);

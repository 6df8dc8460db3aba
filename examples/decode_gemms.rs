//! Times the `100m` model's decode GEMMs (12 layers of QKV, output, gate|up and down, and the
//! LM head) at 1–8 rows on one thread, best of 7: how the engine's GEMM paths compare at decode
//! sizes (the figures in `gemm_skinny::takes` and docs/speed.md).
//!
//!     cargo run --release --example decode_gemms

use std::time::Instant;

use servesim::engine::cpu::Gemm;

/// (n, k) of one layer's GEMMs, as calibration lists them for the `100m` model.
const LAYER_GEMMS: [(usize, usize); 4] = [(1280, 768), (768, 768), (4096, 768), (768, 2048)];
const LAYERS: usize = 12;
const LM_HEAD: (usize, usize) = (32000, 768);

fn main() {
    let mut state = 1u64;
    let mut random = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    };
    // A copy of the weights per layer, as a step streams each layer's own from memory.
    let weights: Vec<Vec<Vec<f32>>> = (0..LAYERS).map(|_| LAYER_GEMMS.iter().map(|&(n, k)| random(n * k)).collect()).collect();
    let head = random(LM_HEAD.0 * LM_HEAD.1);
    let k_max = LAYER_GEMMS.iter().map(|&(_, k)| k).max().unwrap_or(0);
    for m in 1..=8 {
        let a = random(m * k_max);
        let mut c = vec![0f32; m * LM_HEAD.0];
        let mut best_ms = f64::MAX;
        for _ in 0..7 {
            let start = Instant::now();
            for layer in &weights {
                for (&(n, k), b) in LAYER_GEMMS.iter().zip(layer) {
                    Gemm::new(m, n, k).run(&a[..m * k], b, &mut c[..m * n], 1);
                }
            }
            let (n, k) = LM_HEAD;
            Gemm::new(m, n, k).run(&a[..m * k], &head, &mut c[..m * n], 1);
            best_ms = best_ms.min(start.elapsed().as_secs_f64() * 1e3);
        }
        println!("{m} rows: {best_ms:.2} ms");
    }
}

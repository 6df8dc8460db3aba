use super::*;

/// The semantics written as plainly as possible: f64, full sorts, one pass per rule. The fast
/// sampler must draw what this draws for the same uniform number.
fn reference(logits: &[f32], p: &SamplingParams, u: f32) -> u32 {
    if p.is_greedy() {
        return greedy(logits);
    }
    // The division in f32, as the engine (and vLLM, on f32 logits) does it.
    let scaled: Vec<f64> = logits.iter().map(|&l| if l.is_nan() { f64::NEG_INFINITY } else { (l / p.temperature) as f64 }).collect();
    let mut keep: Vec<bool> = scaled.iter().map(|&x| x > f64::NEG_INFINITY).collect();
    let k = p.top_k as usize;
    if k > 0 && k < logits.len() {
        let mut sorted = scaled.clone();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let threshold = sorted[k - 1];
        for (kept, &x) in keep.iter_mut().zip(&scaled) {
            *kept &= x >= threshold;
        }
    }
    let max = scaled.iter().zip(&keep).filter(|(_, k)| **k).map(|(x, _)| *x).fold(f64::NEG_INFINITY, f64::max);
    let weight: Vec<f64> = scaled.iter().zip(&keep).map(|(&x, &k)| if k { (x - max).exp() } else { 0.0 }).collect();
    let total: f64 = weight.iter().sum();
    let prob: Vec<f64> = weight.iter().map(|w| w / total).collect();
    if p.top_p < 1.0 {
        let mut order: Vec<usize> = (0..logits.len()).filter(|&i| keep[i]).collect();
        order.sort_by(|&a, &b| prob[b].total_cmp(&prob[a]).then(a.cmp(&b)));
        let mut above = 0.0;
        for i in order {
            if above >= p.top_p as f64 {
                keep[i] = false;
            }
            above += prob[i];
        }
    }
    let kept_total: f64 = (0..logits.len()).filter(|&i| keep[i]).map(|i| prob[i]).sum();
    let target = u as f64 * kept_total;
    let mut acc = 0.0;
    let mut last = 0;
    for i in (0..logits.len()).filter(|&i| keep[i]) {
        acc += prob[i];
        last = i;
        if acc > target {
            return i as u32;
        }
    }
    last as u32
}

fn params(temperature: f32, top_p: f32, top_k: u32) -> SamplingParams {
    SamplingParams { temperature, top_p, top_k, seed: None }
}

#[test]
fn fixed_seed_draws_equal_the_reference() {
    let cases = [
        params(1.0, 1.0, 0),
        params(0.7, 1.0, 0),
        params(1.0, 0.9, 0),
        params(1.3, 0.5, 0),
        params(0.8, 1.0, 50),
        params(1.0, 0.8, 40),
        params(1.0, 1.0, 1),
        params(0.0, 0.9, 40),
    ];
    let mut scratch = SampleScratch::default();
    let mut drawn = Vec::new();
    for vocab in [37, 1000, 32_000] {
        for (c, p) in cases.iter().enumerate() {
            let logits = lm_like_logits(vocab, c as u64 + vocab as u64);
            for n in 0..64u64 {
                let u = uniform(n * 1_000_003 + c as u64);
                let fast = sample(&logits, p, u, &mut scratch);
                assert_eq!(fast, reference(&logits, p, u), "vocab {vocab}, {p:?}, draw {n} (u = {u})");
                drawn.push(fast);
            }
        }
    }
    // The draws vary (the test is not comparing argmaxes only).
    drawn.sort_unstable();
    drawn.dedup();
    assert!(drawn.len() > 100, "only {} distinct tokens drawn", drawn.len());
}

/// The tokens drawn over a fine grid of uniform numbers, with how often each came up.
fn tokens_over_grid(logits: &[f32], p: &SamplingParams) -> std::collections::BTreeMap<u32, usize> {
    let mut scratch = SampleScratch::default();
    let mut counts = std::collections::BTreeMap::new();
    for i in 0..10_000 {
        *counts.entry(sample(logits, p, i as f32 / 10_000.0, &mut scratch)).or_insert(0) += 1;
    }
    counts
}

fn ln(probs: &[f64]) -> Vec<f32> {
    probs.iter().map(|p| p.ln() as f32).collect()
}

#[test]
fn top_k_keeps_the_k_largest_and_ties_at_the_threshold() {
    let logits = [1.0, 5.0, 3.0, 5.0, 2.0, 4.0];
    let kept = |k| tokens_over_grid(&logits, &params(1.0, 1.0, k)).into_keys().collect::<Vec<_>>();
    assert_eq!(kept(3), [1, 3, 5]);
    // Both 5s tie at the threshold: both stay, as vLLM masks only logits below the k-th.
    assert_eq!(kept(1), [1, 3]);
    assert_eq!(kept(0), [0, 1, 2, 3, 4, 5]);
    assert_eq!(kept(6), [0, 1, 2, 3, 4, 5]);
    assert_eq!(kept(100), [0, 1, 2, 3, 4, 5]);
}

#[test]
fn top_p_keeps_tokens_whose_higher_ranked_mass_is_below_p() {
    let logits = ln(&[0.1, 0.5, 0.15, 0.25]);
    let kept = |p| tokens_over_grid(&logits, &params(1.0, p, 0)).into_keys().collect::<Vec<_>>();
    assert_eq!(kept(0.3), [1]); // 0.5 alone already holds 0.3
    assert_eq!(kept(0.7), [1, 3]); // 0.5 < 0.7: 0.25 stays; 0.75 ≥ 0.7: 0.15 goes
    assert_eq!(kept(0.8), [1, 2, 3]);
    assert_eq!(kept(0.95), [0, 1, 2, 3]);
    assert_eq!(kept(1.0), [0, 1, 2, 3]);
    // The kept tokens are drawn in proportion to their renormalised probabilities.
    let counts = tokens_over_grid(&logits, &params(1.0, 0.7, 0));
    let share = counts[&1] as f64 / 10_000.0;
    assert!((share - 0.5 / 0.75).abs() < 1e-3, "share {share}");
}

#[test]
fn top_p_applies_to_the_top_k_renormalised_mass_after_temperature() {
    let logits = ln(&[0.4, 0.3, 0.2, 0.1]);
    let kept = |t, p, k| tokens_over_grid(&logits, &params(t, p, k)).into_keys().collect::<Vec<_>>();
    // Alone, top-p 0.5 keeps 0.4 and 0.3 (0.4 < 0.5); after top-k 2 the first holds 4/7 ≥ 0.5.
    assert_eq!(kept(1.0, 0.5, 0), [0, 1]);
    assert_eq!(kept(1.0, 0.5, 2), [0]);
    // A low temperature sharpens before top-p: at 0.25 the first token holds 0.72 of the mass.
    assert_eq!(kept(0.25, 0.7, 0), [0]);
}

#[test]
fn top_p_over_a_large_vocabulary_matches_a_full_sort() {
    // Enough tokens that the cut is narrowed by selection, not only by the final sort.
    let logits = lm_like_logits(5000, 9);
    let mut scratch = SampleScratch::default();
    for &p in &[0.05f32, 0.3, 0.9, 0.99] {
        let mut ranked = Vec::new();
        let w: Vec<f32> = {
            let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            logits.iter().map(|l| (l - max).exp()).collect()
        };
        let total: f32 = w.iter().sum();
        let cut = top_p_cut(&w, p * total, &mut ranked);
        let mut order: Vec<usize> = (0..w.len()).collect();
        order.sort_by(|&a, &b| rank_order((w[a], a as u32), (w[b], b as u32)));
        let mut above = 0.0f64;
        let expected = order.iter().find(|&&i| {
            let out = above >= (p * total) as f64;
            above += w[i] as f64;
            out
        });
        assert_eq!(cut.map(|c| c.1 as usize), expected.copied(), "top_p {p}");
        let _ = sample(&logits, &params(1.0, p, 0), 0.5, &mut scratch);
    }
}

#[test]
fn greedy_below_the_epsilon_and_nan_logits_never_drawn() {
    let logits = [0.5, f32::NAN, 2.0, 2.0, 1.9];
    let mut scratch = SampleScratch::default();
    for t in [0.0, 1e-6, f32::NAN] {
        assert_eq!(sample(&logits, &params(t, 0.5, 3), 0.99, &mut scratch), 2);
    }
    let drawn = tokens_over_grid(&logits, &params(1.0, 1.0, 0));
    assert!(!drawn.contains_key(&1), "{drawn:?}");
    // Nothing finite: the argmax rule (token 0), not a panic.
    assert_eq!(sample(&[f32::NAN, f32::NEG_INFINITY], &params(1.0, 1.0, 0), 0.3, &mut scratch), 0);
}

#[test]
fn request_fields_are_checked_and_defaulted() {
    let p = SamplingParams::from_request(None, None, None, Some(3)).unwrap();
    assert_eq!(p, SamplingParams { temperature: 1.0, top_p: 1.0, top_k: 0, seed: Some(3) });
    assert_eq!(SamplingParams::from_request(Some(0.5), Some(0.9), Some(-1), None).unwrap().top_k, 0);
    assert_eq!(SamplingParams::from_request(Some(0.5), Some(0.9), Some(20), None).unwrap().top_k, 20);
    for (t, p, k, field) in [
        (Some(-0.1), None, None, "temperature"),
        (Some(f32::INFINITY), None, None, "temperature"),
        (None, Some(0.0), None, "top_p"),
        (None, Some(1.5), None, "top_p"),
        (None, None, Some(-2), "top_k"),
    ] {
        let e = SamplingParams::from_request(t, p, k, None).unwrap_err();
        assert!(e.starts_with(field), "{e}");
    }
}

#[test]
fn a_sampler_is_reproducible_from_its_seed() {
    let logits = lm_like_logits(500, 4);
    let draw = |seed| {
        let mut s = Sampler::new(seed, params(0.9, 0.95, 100));
        (0..100).map(|_| s.sample(&logits)).collect::<Vec<u32>>()
    };
    assert_eq!(draw(1), draw(1));
    assert_ne!(draw(1), draw(2));
}

#[test]
fn lm_like_logits_have_a_long_tail() {
    let logits = lm_like_logits(100_000, 0);
    let large = logits.iter().filter(|&&x| x > 7.0).count();
    assert!(logits.iter().all(|&x| (0.0..14.0).contains(&x)));
    assert!(large > 0 && large < 10_000, "{large} of 100,000 above 7");
}

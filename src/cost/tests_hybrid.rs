//! The roofline's prices of sliding, chunked and linear-attention layers (`super::hybrid`),
//! checked against full attention's.

use super::CostModel;
use super::roofline::Roofline;
use super::roofline::tests::{tiny_gpu, tiny_model, tiny_params};
use crate::scenario::ModelSpec;
use crate::scenario::model::AttentionMix;
use crate::sched::batch::{Batch, SeqWork};

fn decode_attention_ns(model: &ModelSpec, context: u32) -> u64 {
    let roofline = Roofline::new(model, &tiny_gpu(), 1, &tiny_params());
    let mut batch = Batch::default();
    batch.push(SeqWork { seq: 0, new_tokens: 1, context_tokens: context, samples_token: true, draft_tokens: 0 });
    roofline.predict(&batch).attention_ns
}

/// A sliding layer with a window of 4 at context 10 sees 4 keys and reads 4 cached tokens:
/// what a full layer sees at context 3. So the tiny model (2 layers) with one sliding
/// layer costs half its full price at context 10 plus half at context 3.
#[test]
fn a_sliding_layer_costs_what_a_full_layer_costs_at_its_window() {
    let full = tiny_model();
    let sliding = ModelSpec { attention: AttentionMix { sliding_layers: 1, sliding_window: 4, ..AttentionMix::default() }, ..full.clone() };
    let expected = (decode_attention_ns(&full, 10) + decode_attention_ns(&full, 3)) as f64 / 2.0;
    assert!((decode_attention_ns(&sliding, 10) as f64 - expected).abs() <= 1.0);
    // Within the window, it is a full layer.
    assert_eq!(decode_attention_ns(&sliding, 2), decode_attention_ns(&full, 2));
    let chunked = ModelSpec { attention: AttentionMix { chunked_layers: 1, attention_chunk: 8, ..AttentionMix::default() }, ..full.clone() };
    // Position 10 is the third of its chunk (8..16): what position 2 sees under full attention.
    let expected = (decode_attention_ns(&full, 10) + decode_attention_ns(&full, 2)) as f64 / 2.0;
    assert!((decode_attention_ns(&chunked, 10) as f64 - expected).abs() <= 1.0);
    assert!(Roofline::new(&chunked, &tiny_gpu(), 1, &tiny_params()).prices_each_sequence());
    assert!(!Roofline::new(&full, &tiny_gpu(), 1, &tiny_params()).prices_each_sequence());
}

/// Qwen3-Next's linear layers cost the same at any context: the attention a longer context
/// adds is its 12 full layers' alone.
#[test]
fn linear_layers_cost_the_same_at_any_context() {
    let next = ModelSpec::preset("Qwen3-Next-80B-A3B").unwrap();
    let all_full = ModelSpec { attention: AttentionMix { output_gate: true, ..AttentionMix::default() }, ..next.clone() };
    let grown = |m: &ModelSpec| decode_attention_ns(m, 100_000) as f64 - decode_attention_ns(m, 1_000) as f64;
    assert!((grown(&next) - grown(&all_full) * 12.0 / 48.0).abs() <= 2.0, "{} {}", grown(&next), grown(&all_full));
    // A decode's linear layer: its 1 MiB state read and written outweighs 2·32·128·128·4
    // FLOPs, so it is memory-bound: 2 × 1,097,728 B + (12,288 + 4,096) × 2 B at 8e9 B/s.
    let linear = decode_attention_ns(&next, 1_000) as f64 - decode_attention_ns(&all_full, 1_000) as f64 * 12.0 / 48.0;
    let by_hand = 36.0 * (2.0 * 1_097_728.0 + 16_384.0 * 2.0) / 8e9 * 1e9;
    assert!((linear - by_hand).abs() <= 2.0, "{linear} {by_hand}");
}

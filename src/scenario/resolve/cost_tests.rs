//! `[cost]`: parameters named and checked against their ranges.

use crate::scenario::resolve::test_support::{FILE, good_text, load_text};

#[test]
fn unknown_cost_parameter_names_the_field_and_the_known_ones() {
    let text = format!("{}\n[cost]\nbogus_knob = 1\n", good_text());
    let msg = load_text(&text, &[]).unwrap_err().to_string();
    assert!(msg.contains(FILE) && msg.contains("cost.bogus_knob") && msg.contains("gemm_efficiency"), "{msg}");
    let text = format!("{}\n[cost]\ngemm_efficiency = 1.5\n", good_text());
    let msg = load_text(&text, &[]).unwrap_err().to_string();
    assert!(msg.contains("cost.gemm_efficiency") && msg.contains("1.5"), "{msg}");
}

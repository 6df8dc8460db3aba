//! `model.quantization`: the schemes a scenario names, and what it refuses.

use crate::scenario::model::{QuantScheme, QuantScope};
use crate::scenario::resolve::test_support::{good, invalid};
use crate::scenario::Dtype;

#[test]
fn a_scenario_names_its_weights_scheme() {
    let awq = good(&["model.quantization=awq"]);
    let quant = awq.model.weight_quant.unwrap();
    assert!(matches!(quant.scheme, QuantScheme::IntWeightOnly { bits: 4, group_size: Some(128), zero_points: true, .. }));
    assert_eq!((quant.scope, awq.model.weight_dtype), (QuantScope::ALL_LINEAR, Dtype::Bf16));
    // By hand in `model::quant_tests`: Llama-3.1-8B in AWQ at TP 1.
    assert_eq!(awq.model.weight_bytes_per_gpu(1), 5_727_854_592);
    let fp16 = good(&["model.quantization=gptq", "model.dtype=fp16"]);
    assert_eq!(fp16.model.weight_dtype, Dtype::Fp16);
    let block = good(&["model.quantization=fp8-block"]);
    assert_eq!(block.model.weight_dtype, Dtype::Fp8);
    // "fp8" is per-tensor FP8, as `dtype = "fp8"` is; "none" drops a scheme.
    let fp8 = good(&["model.quantization=fp8"]);
    assert_eq!((fp8.model.weight_dtype, fp8.model.weight_quant), (Dtype::Fp8, None));
    let none = good(&["model.quantization=none"]);
    assert_eq!((none.model.weight_dtype, none.model.weight_quant), (Dtype::Bf16, None));
    let mxfp4 = good(&["model.preset=Mixtral-8x7B", "model.quantization=mxfp4"]);
    assert_eq!(mxfp4.model.weight_quant.map(|q| q.scope), Some(QuantScope::EXPERTS));
    let nvfp4 = good(&["model.quantization=nvfp4", "hardware.gpu=B200"]);
    assert_eq!(nvfp4.model.weight_quant.map(|q| q.scheme), Some(QuantScheme::Nvfp4));
}

#[test]
fn weights_a_deployment_cannot_run_are_refused_naming_the_field() {
    let msg = invalid(&["model.quantization=int3"], "model.quantization", "\"int3\"");
    assert!(msg.contains("awq") && msg.contains("mxfp4"), "{msg}");
    for gpu in ["H100-SXM", "H200", "A100-80G-SXM"] {
        let msg = invalid(&["model.quantization=nvfp4", &format!("hardware.gpu={gpu}")], "model.quantization", "\"nvfp4\"");
        assert!(msg.contains(&format!("{gpu} lacks")) && msg.contains("FP4 tensor cores"), "{msg}");
    }
    let msg = invalid(&["model.quantization=mxfp4"], "model.quantization", "\"mxfp4\"");
    assert!(msg.contains("routed experts only"), "{msg}");
    let msg = invalid(&["model.quantization=awq", "model.dtype=fp8"], "model.quantization", "\"awq\"");
    assert!(msg.contains("16-bit activations"), "{msg}");
    invalid(&["model.quantization=fp8-block", "model.dtype=bf16"], "model.dtype", "\"bf16\"");
    invalid(&["model.quantization=fp8", "model.dtype=fp16"], "model.dtype", "\"fp16\"");
}

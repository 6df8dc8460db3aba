//! Whole-module rows priced into a step ([`super::family`]), on small tables whose values are
//! easy to follow by hand.

use super::CostModel;
use super::family::RowPriced;
use super::roofline::{PricedElsewhere, Roofline};
use super::to_ns;
use crate::calibrate::families::{Families, FamilyOp, FamilyRow};
use crate::scenario::model::{Dtype, ModelSpec};
use crate::scenario::{CostParams, GpuSpec};
use crate::sched::batch::{Batch, SeqWork};

const KEY: &str = "model=DeepSeek-V3 gemm=bfloat16 kv=bfloat16 heads=16";

fn row(op: FamilyOp, key: &str, x: u64, y: u64, us: f64) -> FamilyRow {
    FamilyRow { op, key: key.into(), x, y, median_ns: us * 1e3 }
}

/// DeepSeek-V3's MLA module at 16 heads per GPU (TP 8), bf16: decode at batch 8 and 32 over
/// sequences of 1,024 and 2,048 tokens, and prefill of 512 and 1,024 tokens at batch 1.
fn tables() -> Families {
    let g = FamilyOp::MlaGeneration;
    let c = FamilyOp::MlaContext;
    Families {
        rows: vec![
            row(g, KEY, 8, 1024, 100.0),
            row(g, KEY, 8, 2048, 150.0),
            row(g, KEY, 32, 1024, 400.0),
            row(g, KEY, 32, 2048, 600.0),
            row(c, KEY, 1, 512, 300.0),
            row(c, KEY, 1, 1024, 700.0),
        ],
        ..Families::default()
    }
}

fn deepseek_bf16() -> ModelSpec {
    let mut model = ModelSpec::preset("DeepSeek-V3").unwrap();
    model.weight_dtype = Dtype::Bf16;
    model.kv_dtype = Dtype::Bf16;
    model
}

fn decodes(n: u32, context: u32) -> Batch {
    let mut batch = Batch::default();
    for seq in 0..n {
        batch.push(SeqWork { seq, new_tokens: 1, context_tokens: context, samples_token: true, draft_tokens: 0 });
    }
    batch
}

/// 16 decodes of sequences 1,024 tokens long with the new one (1,023 cached): between the
/// measured batches 8 and 32, halfway in ln batch, so the module's time is √(100 × 400) = 200
/// µs a layer, and the step's attention is DeepSeek-V3's 61 layers of it. Everything else is
/// the roofline's, whose MLA attention and projections the rows replace.
#[test]
fn a_row_priced_mla_decode_step_is_the_interpolated_table_value_by_hand() {
    let (model, gpu, params) = (deepseek_bf16(), GpuSpec::preset("H200").unwrap(), CostParams::default());
    let (priced, notes) = RowPriced::new(&tables(), "H200, vllm 0.24.0", &model, &gpu, 8, &params);
    let priced = priced.expect("the module rows price DeepSeek-V3's attention");
    assert!(notes.iter().any(|n| n.contains("multi-head latent attention is priced from the measured whole-module rows")), "{notes:?}");
    // The tables have no fused-MoE rows: its routed experts are the roofline's, said.
    assert!(notes.iter().any(|n| n.contains("routed experts are flagged as roofline")), "{notes:?}");

    let batch = decodes(16, 1023);
    let step = priced.predict(&batch);
    assert_eq!(step.attention_ns, to_ns(61.0 * 200e-6));
    let parts = PricedElsewhere { latent_attention: true, ..PricedElsewhere::default() };
    let base = Roofline::new(&model, &gpu, 8, &params).without(parts).predict(&batch);
    assert_eq!(base.attention_ns, 0, "the roofline prices none of the module");
    assert_eq!(step.gemm_ns, base.gemm_ns);
    let full = Roofline::new(&model, &gpu, 8, &params).predict(&batch);
    assert!(base.gemm_ns < full.gemm_ns, "the module's projections left the roofline's GEMMs");

    // On a measured point: batch 32, 2,048 tokens.
    assert_eq!(priced.predict(&decodes(32, 2047)).attention_ns, to_ns(61.0 * 600e-6));
    // A prompt of 768 tokens: halfway in ln length between 512 and 1,024 is 724, so 768 is
    // w = ln(768/512) / ln 2 of the way, in ln time.
    let mut prompt = Batch::default();
    prompt.push(SeqWork { seq: 0, new_tokens: 768, context_tokens: 0, samples_token: true, draft_tokens: 0 });
    let w = (768.0f64 / 512.0).ln() / 2.0f64.ln();
    let us = (300.0f64.ln() * (1.0 - w) + 700.0f64.ln() * w).exp();
    assert_eq!(priced.predict(&prompt).attention_ns, to_ns(61.0 * us * 1e-6));
}

/// A model whose dtype has no rows keeps the roofline for that part, and says so.
#[test]
fn a_missing_dtype_falls_back_with_the_note() {
    let (gpu, params) = (GpuSpec::preset("H200").unwrap(), CostParams::default());
    let mut fp8_cache = deepseek_bf16();
    fp8_cache.kv_dtype = Dtype::Fp8;
    let (priced, notes) = RowPriced::new(&tables(), "H200, vllm 0.24.0", &fp8_cache, &gpu, 8, &params);
    assert!(priced.is_none(), "no part of the model has rows");
    assert!(
        notes.iter().any(|n| n.contains("no multi-head latent attention module rows") && n.contains("fp8 latent cache") && n.contains("flagged as roofline")),
        "{notes:?}"
    );
    // Another model's MLA dimensions are not DeepSeek-V3's: never priced from its rows.
    let mut other = deepseek_bf16();
    other.hidden_size = 5120;
    let (priced, notes) = RowPriced::new(&tables(), "H200, vllm 0.24.0", &other, &gpu, 8, &params);
    assert!(priced.is_none() && notes.iter().any(|n| n.contains("DeepSeek-V3's dimensions only")), "{notes:?}");
}

/// Fused-MoE rows price the routed experts as one layer's time × the expert layers, at the
/// step's tokens; per-tensor FP8 experts use the block-FP8 rows, and say so.
#[test]
fn routed_experts_come_from_the_fused_moe_rows() {
    let (gpu, params) = (GpuSpec::preset("H200").unwrap(), CostParams::default());
    let model = ModelSpec::preset("DeepSeek-V3").unwrap();
    let mut fp8 = model.clone();
    fp8.weight_dtype = Dtype::Fp8;
    let key = "dtype=fp8_block hidden=7168 inter=2048 topk=8 experts=256 tp=8 ep=1";
    let families = Families {
        rows: vec![row(FamilyOp::Moe, key, 16, 0, 250.0), row(FamilyOp::Moe, key, 64, 0, 500.0)],
        ..Families::default()
    };
    let (priced, notes) = RowPriced::new(&families, "H200, vllm 0.24.0", &fp8, &gpu, 8, &params);
    let priced = priced.expect("the MoE rows price its experts");
    assert!(notes.iter().any(|n| n.contains("fp8 experts are priced from the fp8_block fused-MoE rows")), "{notes:?}");
    // 32 decodes route 256 copies round-robin in the rows, launching all 256 experts; at
    // random they launch 256 × (1 − (248/256)³²) = 163.3, which round-robin launches at
    // 163.3 / 8 = 20.4 tokens: the table there, ln-ln between 16 and 64 tokens, in each of
    // the 58 expert layers.
    let batch = decodes(32, 100);
    let parts = PricedElsewhere { routed_experts: true, ..PricedElsewhere::default() };
    let base = Roofline::new(&fp8, &gpu, 8, &params).without(parts).predict(&batch);
    let tokens = 256.0 * (1.0 - (248.0f64 / 256.0).powi(32)) / 8.0;
    let us = 250.0 * 2f64.powf((tokens / 16.0).ln() / 4f64.ln());
    let moe_ns = to_ns(58.0 * us * 1e-6);
    let priced_ns = priced.predict(&batch).gemm_ns;
    assert!(priced_ns.abs_diff(base.gemm_ns + moe_ns) <= 2, "{priced_ns} against {}", base.gemm_ns + moe_ns);
    assert!(us < 0.9 * (250.0f64 * 500.0).sqrt(), "below the round-robin row at 32 tokens: {us}");
}

const KERNEL_KEY: &str = "kv=bfloat16 heads=16";

/// SGLang's tables: the attention kernel alone at 16 heads per GPU, and the absorbed
/// multiplies in bf16 and FP8 at 1 and 64 tokens.
fn sglang_tables() -> Families {
    let (g, c) = (FamilyOp::MlaKernelGeneration, FamilyOp::MlaKernelContext);
    let (pre, post) = (FamilyOp::MlaBmmPre, FamilyOp::MlaBmmPost);
    let mut rows = vec![row(g, KERNEL_KEY, 8, 1024, 20.0), row(g, KERNEL_KEY, 32, 1024, 40.0), row(c, KERNEL_KEY, 1, 512, 50.0), row(c, KERNEL_KEY, 1, 1024, 90.0)];
    for (dtype, us) in [("bfloat16", 4.0), ("fp8", 8.0)] {
        let key = format!("dtype={dtype} heads=16");
        rows.extend([row(pre, &key, 1, 0, us), row(pre, &key, 64, 0, 2.0 * us), row(post, &key, 1, 0, us), row(post, &key, 64, 0, 2.0 * us)]);
    }
    Families { rows, ..Families::default() }
}

/// 16 decodes of 1,024 tokens on SGLang's rows: the kernel at √(20 × 40) µs a layer (halfway
/// in ln batch), the two absorbed multiplies at 16 tokens (two thirds of the way in ln tokens
/// from 1 to 64: 2^(2/3) × their one-token time each), and the roofline's projections, which the whole-module
/// rows would have replaced and these do not.
#[test]
fn sglang_mla_kernel_rows_price_the_attention_and_absorbed_multiplies_by_hand() {
    let (model, gpu, params) = (deepseek_bf16(), GpuSpec::preset("H200").unwrap(), CostParams::default());
    let (priced, notes) = RowPriced::new(&sglang_tables(), "H200, sglang 0.5.14", &model, &gpu, 8, &params);
    let priced = priced.expect("the kernel rows price DeepSeek-V3's attention");
    assert!(notes.iter().any(|n| n.contains("attention-kernel rows (H200, sglang 0.5.14: kv=bfloat16 heads=16)") && n.contains("(dtype=bfloat16 heads=16)")), "{notes:?}");

    let batch = decodes(16, 1023);
    let step = priced.predict(&batch);
    assert_eq!(step.attention_ns, to_ns(61.0 * (20.0f64 * 40.0).sqrt() * 1e-6));
    let kernel_only = PricedElsewhere { latent_attention_kernel: true, ..PricedElsewhere::default() };
    let base = Roofline::new(&model, &gpu, 8, &params).without(kernel_only).predict(&batch);
    assert_eq!(base.attention_ns, 0, "the roofline prices none of the kernel");
    let bmm_us = 2.0 * 4.0 * 2.0f64.powf(2.0 / 3.0);
    assert_eq!(step.gemm_ns, base.gemm_ns + to_ns(61.0 * bmm_us * 1e-6));
    // The projections stay: more GEMM time than without the whole module, less than the full
    // roofline, which also multiplies kv_b on every decode token.
    let whole = PricedElsewhere { latent_attention: true, ..PricedElsewhere::default() };
    let without_module = Roofline::new(&model, &gpu, 8, &params).without(whole).predict(&batch);
    let full = Roofline::new(&model, &gpu, 8, &params).predict(&batch);
    assert!(without_module.gemm_ns < base.gemm_ns && base.gemm_ns < full.gemm_ns, "{without_module:?} {base:?} {full:?}");

    // A prompt takes no absorbed multiply: its kernel row, and kv_b's decompression by the roofline.
    let mut prompt = Batch::default();
    prompt.push(SeqWork { seq: 0, new_tokens: 1024, context_tokens: 0, samples_token: true, draft_tokens: 0 });
    let step = priced.predict(&prompt);
    assert_eq!(step.attention_ns, to_ns(61.0 * 90e-6));
    assert_eq!(step.gemm_ns, Roofline::new(&model, &gpu, 8, &params).without(kernel_only).predict(&prompt).gemm_ns);
    assert_eq!(step.gemm_ns, full_gemm_ns(&model, &gpu, &params, &prompt), "kv_b decompresses every prompt token as before");
}

fn full_gemm_ns(model: &ModelSpec, gpu: &GpuSpec, params: &CostParams, batch: &Batch) -> u64 {
    Roofline::new(model, gpu, 8, params).predict(batch).gemm_ns
}

/// A per-tensor FP8 checkpoint's absorbed multiplies run in FP8, a 128 × 128 block-FP8 one's in
/// bf16 (SGLang dequantizes that `kv_b_proj` when it splits it), and other latent widths are not
/// priced from DeepSeek-V3's kernel rows.
#[test]
fn sglang_mla_kernel_rows_follow_the_checkpoint_and_refuse_other_widths() {
    let (gpu, params) = (GpuSpec::preset("H200").unwrap(), CostParams::default());
    let mut fp8 = deepseek_bf16();
    fp8.weight_dtype = Dtype::Fp8;
    let (priced, notes) = RowPriced::new(&sglang_tables(), "H200, sglang 0.5.14", &fp8, &gpu, 8, &params);
    assert!(priced.is_some() && notes.iter().any(|n| n.contains("(dtype=fp8 heads=16)")), "{notes:?}");
    let mut block = deepseek_bf16();
    block.weight_quant = crate::scenario::model::WeightQuant::from_scenario_name("fp8-block").unwrap();
    block.weight_dtype = Dtype::Fp8;
    let (priced, notes) = RowPriced::new(&sglang_tables(), "H200, sglang 0.5.14", &block, &gpu, 8, &params);
    assert!(priced.is_some() && notes.iter().any(|n| n.contains("(dtype=bfloat16 heads=16)")), "{notes:?}");

    let mut narrow = deepseek_bf16();
    narrow.mla = narrow.mla.map(|m| crate::scenario::model::MlaSpec { kv_lora_rank: 256, ..m });
    let (priced, notes) = RowPriced::new(&sglang_tables(), "H200, sglang 0.5.14", &narrow, &gpu, 8, &params);
    assert!(priced.is_none() && notes.iter().any(|n| n.contains("latent and head widths only") && n.contains("flagged as roofline")), "{notes:?}");
    // An FP8 latent cache has no kernel rows here: the roofline, said.
    let mut fp8_cache = deepseek_bf16();
    fp8_cache.kv_dtype = Dtype::Fp8;
    let (priced, notes) = RowPriced::new(&sglang_tables(), "H200, sglang 0.5.14", &fp8_cache, &gpu, 8, &params);
    assert!(priced.is_none() && notes.iter().any(|n| n.contains("no MLA kernel rows") && n.contains("fp8 latent cache")), "{notes:?}");
}

//! The executor against a naive reference, paged decoding against recomputation, batching
//! invariance, and safetensors round trips.

use super::*;
use crate::sched::batch::{Batch, SeqWork};
use crate::sched::kv::KvCacheManager;

const BLOCK_SIZE: usize = 4;

/// The model by its definition, in f64, with no cache: full causal attention recomputed over the
/// whole sequence, plain loops. Returns the logits at every position, `[tokens.len()][vocab]`.
/// Written from the Llama equations, not from the executor.
fn reference_logits(w: &LlamaWeights, tokens: &[u32]) -> Vec<Vec<f32>> {
    let c = &w.config;
    let (h, qd, kvd, f, vocab, hd) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size, c.head_dim);
    let n = tokens.len();
    let eps = c.rms_norm_eps as f64;
    let norm = |x: &[f64], weight: &[f32]| -> Vec<f64> {
        let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        x.iter().zip(weight).map(|(v, &wt)| v * inv * wt as f64).collect()
    };
    // y[o] = Σ_i x[i] · m[i][col0 + o], m stored [in, width].
    let matvec = |x: &[f64], m: &[f32], width: usize, col0: usize, out: usize| -> Vec<f64> {
        (0..out).map(|o| x.iter().enumerate().map(|(i, xi)| xi * m[i * width + col0 + o] as f64).sum()).collect()
    };
    let rope = |x: &mut [f64], pos: usize| {
        let half = hd / 2;
        for head in x.chunks_exact_mut(hd) {
            for i in 0..half {
                let angle = pos as f64 * c.rope_theta.powf(-((2 * i) as f64) / hd as f64);
                let (s, co) = angle.sin_cos();
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * co - b * s;
                head[i + half] = b * co + a * s;
            }
        }
    };
    let mut x: Vec<Vec<f64>> =
        tokens.iter().map(|&t| w.embed[t as usize * h..(t as usize + 1) * h].iter().map(|&v| v as f64).collect()).collect();
    let group = c.num_heads / c.num_kv_heads;
    for l in &w.layers {
        let cols = qd + 2 * kvd;
        let mut q = Vec::new();
        let mut k = Vec::new();
        let mut v = Vec::new();
        for (p, xp) in x.iter().enumerate() {
            let nx = norm(xp, &l.input_norm);
            let mut qp = matvec(&nx, &l.qkv, cols, 0, qd);
            let mut kp = matvec(&nx, &l.qkv, cols, qd, kvd);
            rope(&mut qp, p);
            rope(&mut kp, p);
            q.push(qp);
            k.push(kp);
            v.push(matvec(&nx, &l.qkv, cols, qd + kvd, kvd));
        }
        for p in 0..n {
            let mut attn = vec![0.0f64; qd];
            for head in 0..c.num_heads {
                let kh = head / group;
                let qh = &q[p][head * hd..(head + 1) * hd];
                let scores: Vec<f64> = (0..=p)
                    .map(|j| qh.iter().zip(&k[j][kh * hd..(kh + 1) * hd]).map(|(a, b)| a * b).sum::<f64>() / (hd as f64).sqrt())
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = e.iter().sum();
                for (j, ej) in e.iter().enumerate() {
                    for d in 0..hd {
                        attn[head * hd + d] += ej / total * v[j][kh * hd + d];
                    }
                }
            }
            let o = matvec(&attn, &l.o, h, 0, h);
            for (xi, oi) in x[p].iter_mut().zip(o) {
                *xi += oi;
            }
            let nx = norm(&x[p], &l.post_norm);
            let gate = matvec(&nx, &l.gate_up, 2 * f, 0, f);
            let up = matvec(&nx, &l.gate_up, 2 * f, f, f);
            let act: Vec<f64> = gate.iter().zip(&up).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            let down = matvec(&act, &l.down, h, 0, h);
            for (xi, di) in x[p].iter_mut().zip(down) {
                *xi += di;
            }
        }
    }
    x.iter().map(|xp| matvec(&norm(xp, &w.norm), &w.lm_head, vocab, 0, vocab).iter().map(|&v| v as f32).collect()).collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn prompt(seed: u64, len: usize, vocab: usize) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab as u64) as u32
        })
        .collect()
}

fn executor(config: &LlamaConfig, num_blocks: usize) -> ModelExecutor {
    ModelExecutor::new(LlamaWeights::random(config, 7), num_blocks, BLOCK_SIZE).unwrap()
}

/// A sequence driven by the tests' little scheduler: its tokens (prompt, then generated) and
/// how many of them have KV in the cache.
struct Seq {
    tokens: Vec<u32>,
    prompt_len: usize,
    computed: usize,
}

/// Generates `max_new` greedy tokens for each prompt, all in one continuous batch: each step,
/// every sequence still in prefill computes its next chunk of at most `chunk` tokens, the others
/// decode. Returns the generated tokens and the logits of each sampled token.
fn generate(
    exec: &mut ModelExecutor,
    kv: &mut KvCacheManager,
    prompts: &[Vec<u32>],
    chunk: usize,
    max_new: usize,
) -> (Vec<Vec<u32>>, Vec<Vec<Vec<f32>>>) {
    let vocab = exec.config().vocab_size;
    let mut seqs: Vec<Seq> = prompts.iter().map(|p| Seq { tokens: p.clone(), prompt_len: p.len(), computed: 0 }).collect();
    let mut logits_seen = vec![Vec::new(); prompts.len()];
    let mut batch = Batch::default();
    let mut ids = Vec::new();
    let mut sampled = Vec::new();
    loop {
        batch.clear();
        ids.clear();
        sampled.clear();
        for (i, s) in seqs.iter().enumerate() {
            if s.tokens.len() - s.prompt_len >= max_new {
                continue;
            }
            let remaining = s.tokens.len() - s.computed;
            let new = remaining.min(chunk);
            let samples = s.computed + new == s.tokens.len();
            assert!(kv.allocate(i as u32, (s.computed + new) as u32, 0), "test KV pool too small");
            batch.push(SeqWork { seq: i as u32, new_tokens: new as u32, context_tokens: s.computed as u32, samples_token: samples, draft_tokens: 0 });
            ids.extend_from_slice(&s.tokens[s.computed..s.computed + new]);
            if samples {
                sampled.push(i);
            }
        }
        if batch.is_empty() {
            break;
        }
        let logits = exec.forward(&batch, &ids, kv).unwrap();
        assert_eq!(logits.len(), sampled.len() * vocab);
        for work in &batch.seqs {
            seqs[work.seq as usize].computed += work.new_tokens as usize;
        }
        for (row, &i) in sampled.iter().enumerate() {
            let l = &logits[row * vocab..(row + 1) * vocab];
            logits_seen[i].push(l.to_vec());
            seqs[i].tokens.push(greedy(l));
        }
    }
    for i in 0..seqs.len() {
        kv.free(i as u32);
    }
    (seqs.into_iter().map(|s| s.tokens[s.prompt_len..].to_vec()).collect(), logits_seen)
}

#[test]
fn forward_matches_the_naive_reference() {
    for tie in [false, true] {
        let config = LlamaConfig { tie_word_embeddings: tie, ..LlamaConfig::tiny() };
        let mut exec = executor(&config, 64);
        let mut kv = KvCacheManager::new(64, BLOCK_SIZE as u32);
        let prompts = [prompt(1, 5, 256), prompt(2, 17, 256), prompt(3, 1, 256), prompt(4, 33, 256)];
        let mut batch = Batch::default();
        let mut ids = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            assert!(kv.allocate(i as u32, p.len() as u32, 0));
            batch.push_prefill(SeqWork { seq: i as u32, new_tokens: p.len() as u32, context_tokens: 0, samples_token: true, draft_tokens: 0 });
            ids.extend_from_slice(p);
        }
        let logits = exec.forward(&batch, &ids, &kv).unwrap().to_vec();
        for (i, p) in prompts.iter().enumerate() {
            let expected = reference_logits(exec.weights(), p);
            let got = &logits[i * 256..(i + 1) * 256];
            let err = max_abs_diff(got, expected.last().unwrap());
            assert!(err <= 1e-4, "tied {tie}, prompt {i}: max abs error {err}");
            // Logits must be O(1) for the tolerance to mean something (and for sampling).
            let spread = got.iter().cloned().fold(0.0f32, |m, v| m.max(v.abs()));
            assert!(spread > 0.1 && spread < 50.0, "logits spread {spread}");
        }
    }
}

#[test]
fn paged_decode_equals_full_recomputation() {
    let config = LlamaConfig::tiny();
    let mut exec = executor(&config, 64);
    let mut kv = KvCacheManager::new(64, BLOCK_SIZE as u32);
    // Another sequence takes blocks in between, so the decoded sequence's blocks are scattered.
    assert!(kv.allocate(1, 3, 0));
    let mut tokens = prompt(11, 9, config.vocab_size);
    let mut computed = 0;
    let mut batch = Batch::default();
    let mut fresh = executor(&config, 64);
    let mut fresh_kv = KvCacheManager::new(64, BLOCK_SIZE as u32);
    for step in 0..20 {
        let new = tokens.len() - computed;
        assert!(kv.allocate(0, tokens.len() as u32, 0));
        if step % 3 == 0 {
            assert!(kv.allocate(1, 3 + 4 * (step as u32 / 3 + 1), 0));
        }
        batch.clear();
        batch.push(SeqWork { seq: 0, new_tokens: new as u32, context_tokens: computed as u32, samples_token: true, draft_tokens: 0 });
        let logits = exec.forward(&batch, &tokens[computed..], &kv).unwrap().to_vec();
        computed = tokens.len();

        // The same sequence recomputed from scratch: by the engine in one prefill, and by the
        // reference.
        fresh_kv.free(0);
        assert!(fresh_kv.allocate(0, tokens.len() as u32, 0));
        batch.clear();
        batch.push(SeqWork { seq: 0, new_tokens: tokens.len() as u32, context_tokens: 0, samples_token: true, draft_tokens: 0 });
        let full = fresh.forward(&batch, &tokens, &fresh_kv).unwrap();
        let err = max_abs_diff(&logits, full);
        assert!(err <= 1e-4, "step {step}: paged decode vs recomputation: {err}");
        let reference = reference_logits(exec.weights(), &tokens);
        let err = max_abs_diff(&logits, reference.last().unwrap());
        assert!(err <= 1e-4, "step {step}: paged decode vs reference: {err}");
        tokens.push(greedy(&logits));
    }
}

#[test]
fn greedy_output_alone_equals_output_in_a_batch() {
    let config = LlamaConfig::tiny();
    let prompts = [prompt(21, 13, 256), prompt(22, 6, 256), prompt(23, 20, 256)];
    let max_new = 8;
    let mut exec = executor(&config, 128);
    let mut kv = KvCacheManager::new(128, BLOCK_SIZE as u32);
    let mut alone = Vec::new();
    for p in &prompts {
        let (tokens, logits) = generate(&mut exec, &mut kv, std::slice::from_ref(p), usize::MAX, max_new);
        alone.push((tokens[0].clone(), logits[0].clone()));
    }
    // Chunks of 10: the first and last prompts prefill over two steps, the middle one decodes
    // beside their second chunks (a mixed step, decode in the middle of the batch).
    let (tokens, logits) = generate(&mut exec, &mut kv, &prompts, 10, max_new);
    for (i, (alone_tokens, alone_logits)) in alone.iter().enumerate() {
        assert_eq!(alone_tokens.len(), max_new);
        assert_eq!(&tokens[i], alone_tokens, "prompt {i}: greedy tokens differ inside the batch");
        for (step, (a, b)) in alone_logits.iter().zip(&logits[i]).enumerate() {
            let err = max_abs_diff(a, b);
            assert!(err <= 1e-4, "prompt {i}, token {step}: logits differ by {err}");
        }
    }
    assert_eq!(kv.pool().blocks_used(), 0);
}

#[test]
fn safetensors_round_trip_gives_the_same_logits() {
    for tie in [false, true] {
        let config = LlamaConfig { tie_word_embeddings: tie, ..LlamaConfig::tiny() };
        let weights = LlamaWeights::random(&config, 99);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), config.to_hf_json()).unwrap();
        // Written by the safetensors crate directly from Hugging Face-layout tensors.
        let tensors = weights.to_hf_tensors();
        assert_eq!(tensors.iter().any(|(n, _, _)| n == "lm_head.weight"), !tie);
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .into_iter()
            .map(|(n, s, d)| (n, s, d.iter().flat_map(|x| x.to_le_bytes()).collect()))
            .collect();
        let views: Vec<(&str, safetensors::tensor::TensorView<'_>)> = bytes
            .iter()
            .map(|(n, s, b)| (n.as_str(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b).unwrap()))
            .collect();
        safetensors::serialize_to_file(views, None, &dir.path().join("model.safetensors")).unwrap();

        let loaded = LlamaWeights::load_dir(dir.path()).unwrap();
        assert_eq!(loaded.config, config);
        assert!(loaded == weights, "tied {tie}: weights changed in the round trip");
        let p = prompt(5, 12, 256);
        let run = |w: LlamaWeights| {
            let mut exec = ModelExecutor::new(w, 16, BLOCK_SIZE).unwrap();
            let mut kv = KvCacheManager::new(16, BLOCK_SIZE as u32);
            assert!(kv.allocate(0, p.len() as u32, 0));
            let mut batch = Batch::default();
            batch.push(SeqWork { seq: 0, new_tokens: p.len() as u32, context_tokens: 0, samples_token: true, draft_tokens: 0 });
            exec.forward(&batch, &p, &kv).unwrap().to_vec()
        };
        assert_eq!(run(loaded), run(weights.clone()));

        // bf16 and f16 files load as the rounded weights.
        for (dtype, rel) in [(WeightDtype::BF16, 1.0 / 256.0), (WeightDtype::F16, 1.0 / 2048.0)] {
            let path = dir.path().join("model.safetensors");
            weights.save_safetensors(&path, dtype).unwrap();
            let low = LlamaWeights::load_dir(dir.path()).unwrap();
            for (a, b) in low.layers[1].qkv.iter().zip(&weights.layers[1].qkv) {
                assert!((a - b).abs() <= b.abs() * rel + 1e-6, "{dtype:?}: {a} vs {b}");
            }
        }
    }
}

#[test]
fn weight_errors_name_the_file_and_the_tensor() {
    let config = LlamaConfig::tiny();
    let weights = LlamaWeights::random(&config, 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    weights.save_safetensors(&path, WeightDtype::F32).unwrap();

    // A config that expects a wider MLP than the file has.
    let wider = LlamaConfig { intermediate_size: 256, ..config.clone() };
    let msg = LlamaWeights::from_safetensors(&wider, std::slice::from_ref(&path)).unwrap_err().to_string();
    assert!(msg.contains("model.safetensors") && msg.contains("model.layers.0.mlp.gate_proj.weight"), "{msg}");
    assert!(msg.contains("[128, 64]") && msg.contains("[256, 64]"), "{msg}");

    // A config with one more layer than the file.
    let deeper = LlamaConfig { num_layers: 3, ..config.clone() };
    let msg = LlamaWeights::from_safetensors(&deeper, std::slice::from_ref(&path)).unwrap_err().to_string();
    assert!(msg.contains("model.layers.2.input_layernorm.weight") && msg.contains("missing"), "{msg}");

    // Not a safetensors file at all.
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a tensor file").unwrap();
    let msg = LlamaWeights::from_safetensors(&config, &[junk]).unwrap_err().to_string();
    assert!(msg.contains("junk.safetensors"), "{msg}");

    // A directory with no config.json.
    let msg = LlamaWeights::load_dir(&dir.path().join("nowhere")).unwrap_err().to_string();
    assert!(msg.contains("config.json"), "{msg}");
}

#[test]
fn config_reads_hugging_face_json_and_named_sizes() {
    // TinyLlama-1.1B's config.json.
    let text = r#"{
      "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
      "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5632,
      "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 32,
      "num_hidden_layers": 22, "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
      "rope_scaling": null, "rope_theta": 10000.0, "tie_word_embeddings": false,
      "torch_dtype": "bfloat16", "transformers_version": "4.35.0", "use_cache": true, "vocab_size": 32000
    }"#;
    let c = LlamaConfig::from_json(text).unwrap();
    assert_eq!((c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim), (2048, 22, 32, 4, 64));
    assert_eq!((c.intermediate_size, c.vocab_size, c.max_position_embeddings), (5632, 32000, 2048));
    assert!(!c.tie_word_embeddings && c.rms_norm_eps == 1e-5 && c.rope_theta == 10_000.0);
    let params = c.num_parameters();
    assert!((1_090_000_000..1_110_000_000).contains(&params), "TinyLlama has 1.1B parameters, counted {params}");

    for bad in [
        r#"{"model_type": "gpt2", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8}"#,
        r#"{"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}"#,
        r#"{"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 3, "num_key_value_heads": 2, "head_dim": 4, "intermediate_size": 8, "vocab_size": 8}"#,
        r#"{"hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8, "vocab_size": 8, "rope_scaling": {"type": "llama3"}}"#,
        "[1, 2]",
    ] {
        assert!(LlamaConfig::from_json(bad).is_err(), "accepted {bad}");
    }

    for name in LlamaConfig::NAMES {
        let c = LlamaConfig::named(name).unwrap();
        assert_eq!(LlamaConfig::from_json(&c.to_hf_json()).unwrap(), c, "{name}");
    }
    assert!(LlamaConfig::named("huge").is_none());
    let params = LlamaConfig::m100().num_parameters();
    assert!((95_000_000..105_000_000).contains(&params), "100m has {params} parameters");
    // Meta's model card gives Llama-3.2-1B 1.23B parameters; 1b's vocabulary is 96 256 ids
    // smaller, and its tied embedding is 2048 wide: 197M parameters fewer.
    let params = LlamaConfig::b1().num_parameters() + 96_256 * 2048;
    assert!((1_220_000_000..1_250_000_000).contains(&params), "1b has {params} parameters with Llama 3's vocabulary");
    let tiny = LlamaConfig::tiny();
    assert_eq!(
        LlamaWeights::random(&tiny, 3).to_hf_tensors().iter().map(|(_, s, _)| s.iter().product::<usize>() as u64).sum::<u64>(),
        tiny.num_parameters()
    );
}

#[test]
fn random_weights_are_seeded() {
    let c = LlamaConfig::tiny();
    assert!(LlamaWeights::random(&c, 5) == LlamaWeights::random(&c, 5));
    assert!(LlamaWeights::random(&c, 5) != LlamaWeights::random(&c, 6));
}

#[test]
fn bad_steps_are_errors_not_panics() {
    let config = LlamaConfig::tiny();
    let mut exec = executor(&config, 8);
    let mut kv = KvCacheManager::new(8, BLOCK_SIZE as u32);
    assert!(kv.allocate(0, 6, 0));
    let mut batch = Batch::default();
    batch.push(SeqWork { seq: 0, new_tokens: 6, context_tokens: 0, samples_token: true, draft_tokens: 0 });
    // Wrong number of token ids, a token outside the vocabulary, a table too short.
    assert!(exec.forward(&batch, &[1, 2, 3], &kv).is_err());
    assert!(exec.forward(&batch, &[1, 2, 3, 4, 5, 999], &kv).is_err());
    batch.clear();
    batch.push(SeqWork { seq: 0, new_tokens: 9, context_tokens: 0, samples_token: true, draft_tokens: 0 });
    assert!(exec.forward(&batch, &[1; 9], &kv).is_err());
    // A KV manager with another block size, and block ids beyond the executor's cache.
    assert!(exec.forward(&batch, &[1; 9], &KvCacheManager::new(8, 8)).is_err());
    let mut big = KvCacheManager::new(64, BLOCK_SIZE as u32);
    assert!(big.allocate(1, 40, 0), "takes blocks first, so that sequence 0's lie beyond 8");
    assert!(big.allocate(0, 9, 0));
    assert!(exec.forward(&batch, &[1; 9], &big).is_err());
    // Weights whose lengths disagree with their config.
    let mut w = LlamaWeights::random(&config, 1);
    w.layers[1].down.pop();
    let msg = ModelExecutor::new(w, 8, BLOCK_SIZE).err().unwrap().to_string();
    assert!(msg.contains("layer 1 down"), "{msg}");
    assert!(ModelExecutor::new(LlamaWeights::random(&config, 1), 8, 3).is_err(), "block size 3 is not a power of two");
    // An empty batch gives no logits.
    assert!(exec.forward(&Batch::default(), &[], &kv).unwrap().is_empty());
}

#[test]
fn sampler_is_seeded_and_temperature_zero_is_greedy() {
    let logits: Vec<f32> = (0..50).map(|i| ((i * 37 % 11) as f32) * 0.3).collect();
    let at = |temperature| SamplingParams { temperature, ..SamplingParams::GREEDY };
    let draw = |seed, t| {
        let mut s = Sampler::new(seed, at(t));
        (0..200).map(|_| s.sample(&logits)).collect::<Vec<u32>>()
    };
    assert_eq!(draw(1, 0.8), draw(1, 0.8));
    assert_ne!(draw(1, 0.8), draw(2, 0.8));
    assert!(draw(1, 0.0).iter().all(|&t| t == greedy(&logits)));
    // At temperature 1 the draws follow the softmax: the best token's share is near its
    // probability.
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let total: f32 = logits.iter().map(|l| (l - max).exp()).sum();
    let best = greedy(&logits);
    let p_best = (logits[best as usize] - max).exp() / total;
    let mut s = Sampler::new(3, at(1.0));
    let hits = (0..20_000).filter(|_| s.sample(&logits) == best).count() as f32 / 20_000.0;
    assert!((hits - p_best).abs() < 0.02, "share {hits}, probability {p_best}");
    assert_eq!(greedy(&[0.5, f32::NAN, 2.0, 2.0]), 2);
}

#[test]
fn a_step_is_timed_by_kind_of_op() {
    let config = LlamaConfig::tiny();
    let mut exec = executor(&config, 16);
    assert_eq!(exec.last_times(), OpTimes::default(), "no step yet");
    let mut kv = KvCacheManager::new(16, BLOCK_SIZE as u32);
    assert!(kv.allocate(0, 9, 0));
    let mut batch = Batch::default();
    batch.push_prefill(SeqWork { seq: 0, new_tokens: 9, context_tokens: 0, samples_token: true, draft_tokens: 0 });
    let start = std::time::Instant::now();
    exec.forward(&batch, &prompt(5, 9, config.vocab_size), &kv).unwrap();
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    let t = exec.last_times();
    assert!(t.gemm_ns > 0 && t.attention_ns > 0 && t.elementwise_ns > 0, "{t:?}");
    // The parts are laps of one clock inside the step: together no longer than the step.
    assert!(t.gemm_ns + t.attention_ns + t.elementwise_ns <= elapsed_ns, "{t:?} in {elapsed_ns} ns");
    // A step that fails its checks computes nothing, and says so.
    assert!(exec.forward(&batch, &[1, 2, 3], &kv).is_err());
    assert_eq!(exec.last_times(), OpTimes::default());
}

/// A config claiming billions of positions builds its RoPE table only as far as the KV cache
/// reaches (issue 17: the table was sized by the config, an allocation abort).
#[test]
fn the_rope_table_stops_at_the_kv_capacity() {
    let config = LlamaConfig { max_position_embeddings: 4_000_000_000, ..LlamaConfig::tiny() };
    let exec = ModelExecutor::new(LlamaWeights::random(&config, 7), 8, BLOCK_SIZE).unwrap();
    assert_eq!(exec.num_blocks(), 8);
}

/// Serves `prompts` one after another through the shared scheduler (the servesim policy), each
/// to `max_new` greedy tokens; returns each one's output and the prefill tokens it computed.
fn serve_in_sequence(prompts: &[Vec<u32>], enable_prefix_caching: bool, max_new: u32) -> (Vec<Vec<u32>>, Vec<u32>) {
    serve_in_sequence_by(crate::sched::Policy::Servesim, prompts, enable_prefix_caching, max_new)
}

/// [`serve_in_sequence`] under `policy` (servesim's, or SGLang's with its radix cache as the
/// prefix cache, in pages of the engine's block size).
fn serve_in_sequence_by(policy: crate::sched::Policy, prompts: &[Vec<u32>], enable_prefix_caching: bool, max_new: u32) -> (Vec<Vec<u32>>, Vec<u32>) {
    use crate::sched::prefix::token_block_hashes;
    use crate::sched::{Admission, SchedulePolicy, Scheduler, SchedulerConfig, SglangConfig};
    let config = LlamaConfig::tiny();
    let mut exec = executor(&config, 32);
    let knobs = SchedulerConfig {
        max_num_batched_tokens: 64,
        max_num_seqs: 4,
        enable_chunked_prefill: true,
        block_size: BLOCK_SIZE as u32,
        num_gpu_blocks: 32,
        kv_blocks_per_seq: 0,
        watermark: 0.0,
        enable_prefix_caching,
        num_scheduler_steps: 1,
        stream_window_steps: false,
        schedule_ahead: false,
        speculative: None,
        tgi: None,
        sglang: (policy == crate::sched::Policy::Sglang).then(|| SglangConfig {
            schedule_policy: SchedulePolicy::Fcfs,
            chunked_prefill_size: Some(64),
            max_prefill_tokens: 16384,
            schedule_conservativeness: 1.0,
            cuda_graph_bs: Vec::new(),
            disable_overlap_schedule: true,
            fp8_tensor_scales: false,
        }),
    };
    let mut s = Scheduler::new(knobs.clone(), policy.build(&knobs));
    let (mut outputs, mut prefills) = (Vec::new(), Vec::new());
    for (id, p) in prompts.iter().enumerate() {
        let hashes = token_block_hashes(p, BLOCK_SIZE as u32);
        let admission = s.add_request_with_prefix(id as u32, p.len() as u32, max_new, max_new, &hashes);
        assert!(matches!(admission, Admission::Queued { .. }));
        let (mut tokens, mut prefill) = (p.clone(), 0);
        while s.has_work() {
            let batch = s.schedule().clone();
            prefill += batch.prefill_tokens;
            let w = batch.seqs[0];
            let ids = tokens[w.context_tokens as usize..(w.context_tokens + w.new_tokens) as usize].to_vec();
            let logits = exec.forward(&batch, &ids, s.kv()).unwrap();
            if w.samples_token {
                tokens.push(greedy(&logits[..config.vocab_size]));
            }
            s.finish_step();
        }
        outputs.push(tokens[p.len()..].to_vec());
        prefills.push(prefill);
    }
    (outputs, prefills)
}

/// Prefix caching in the engine: a repeated prompt computes only its uncached tail, reading the
/// KV of the blocks it shares, and greedy outputs are those computed without the cache.
#[test]
fn prefix_caching_computes_only_the_tail_and_keeps_greedy_outputs() {
    let a = prompt(11, 10, 256);
    let whole_blocks = prompt(12, 12, 256);
    let mut shares_a = a[..8].to_vec();
    shares_a.extend(prompt(13, 5, 256));
    let prompts = [a.clone(), a.clone(), shares_a, whole_blocks.clone(), whole_blocks, a];
    let (cold, cold_prefill) = serve_in_sequence(&prompts, false, 6);
    let (warm, warm_prefill) = serve_in_sequence(&prompts, true, 6);
    assert_eq!(warm, cold, "greedy outputs differ with prefix caching");
    assert_eq!(cold_prefill, vec![10, 10, 13, 12, 12, 10]);
    // a: its 2 full blocks hit, 2 tokens left. shares_a: a's 2 blocks. A prompt of whole blocks
    // cached whole recomputes its last block (vLLM V1 recomputes at least the last token).
    assert_eq!(warm_prefill, vec![10, 2, 5, 12, 4, 2]);
}

/// SGLang's radix cache in the engine: its pages are the engine's KV blocks, shared by id
/// between the tree and the requests that match it. Greedy outputs are those computed without
/// any cache.
#[test]
fn sglang_radix_cache_computes_only_the_tail_and_keeps_greedy_outputs() {
    use crate::sched::Policy;
    let a = prompt(11, 10, 256);
    let mut shares_a = a[..8].to_vec();
    shares_a.extend(prompt(13, 5, 256));
    let prompts = [a.clone(), a.clone(), shares_a, a.clone()];
    let (cold, _) = serve_in_sequence(&prompts, false, 6);
    let (warm, warm_prefill) = serve_in_sequence_by(Policy::Sglang, &prompts, true, 6);
    assert_eq!(warm, cold, "greedy outputs differ with the radix cache");
    // Pages of 4: a repeat of a (10 tokens) matches ⌊9 / 4⌋ = 2 pages; shares_a its 2 pages.
    assert_eq!(warm_prefill, vec![10, 2, 5, 2]);
}

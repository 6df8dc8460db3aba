//! The engine's Hugging Face tokenizer directories through the real binary: `serve` picks the
//! shipped one for the model's vocabulary (or `--tokenizer`, or the `--model` directory's own),
//! refuses one that does not fit, and `bench --tokenizer` counts text exactly as the server does.

mod common;
use common::*;

use serde_json::{Value, json};
use servesim::engine::model::{LlamaConfig, LlamaWeights, WeightDtype};
use servesim::engine::server::Tokenizer;

fn post(base: &str, path: &str, body: &Value) -> Value {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let resp = reqwest::Client::new().post(format!("{base}{path}")).json(body).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        resp.json().await.unwrap()
    })
}

#[test]
fn serve_counts_text_with_the_shipped_tokenizer() {
    let (_server, base) = spawn_serve(&["--random-weights", "tiny", "--threads", "1"]);
    let tokenizer = Tokenizer::load(&repo().join("tokenizers/servesim-char-256")).unwrap();
    // One token per character (11), not per UTF-8 byte (13).
    let v = post(&base, "/v1/completions", &json!({"prompt": "héllo wörld", "max_tokens": 12, "temperature": 0.0}));
    assert_eq!(v["usage"]["prompt_tokens"], 11, "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 12, "{v}");
    // The generated text re-encodes to exactly the generated count, as clients count it.
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert_eq!(tokenizer.encode(text, false).unwrap().len(), 12, "{text:?}");

    let v = post(&base, "/generate", &json!({"inputs": "héllo", "parameters": {"max_new_tokens": 9, "details": true}}));
    let ids: Vec<u32> = v["details"]["tokens"].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap() as u32).collect();
    assert_eq!(v["generated_text"], tokenizer.decode(&ids).unwrap());
    for t in v["details"]["tokens"].as_array().unwrap() {
        let id = t["id"].as_u64().unwrap() as u32;
        assert_eq!(t["text"], tokenizer.token_text(id));
        assert_eq!(t["special"], id == 0 || id >= 254, "{t}");
    }
}

#[test]
fn serve_uses_the_model_directorys_own_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let config = LlamaConfig::named("tiny").unwrap();
    std::fs::write(dir.path().join("config.json"), config.to_hf_json()).unwrap();
    LlamaWeights::random(&config, 1).save_safetensors(&dir.path().join("model.safetensors"), WeightDtype::F32).unwrap();
    // A byte-level tokenizer.json: "héllo" is 6 tokens with it, 5 with the shipped one.
    let byte_level = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": null, "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": true, "ignore_merges": false, "merges": [],
                  "vocab": (0..256).map(|b| (format!("<0x{b:02X}>"), json!(b))).collect::<serde_json::Map<_, _>>()},
    });
    std::fs::write(dir.path().join("tokenizer.json"), byte_level.to_string()).unwrap();
    let (_server, base) = spawn_serve(&["--model", dir.path().to_str().unwrap(), "--threads", "1"]);
    let v = post(&base, "/v1/completions", &json!({"prompt": "héllo", "max_tokens": 2}));
    assert_eq!(v["usage"]["prompt_tokens"], 6, "{v}");
}

#[test]
fn serve_refuses_missing_malformed_and_misfitting_tokenizers() {
    let dir = tempfile::tempdir().unwrap();
    let malformed = write_file(dir.path(), "tokenizer.json", "{\"model\": 1}");
    let big = repo().join("tokenizers/servesim-char-32000");
    let missing = dir.path().join("nowhere");
    let cases = [
        (missing.clone(), vec![missing.join("").display().to_string(), "cannot read".to_string()]),
        (malformed.clone(), vec![malformed.display().to_string(), "not a valid Hugging Face tokenizer.json".to_string()]),
        // The 32000-id tokenizer cannot drive the 256-id tiny model.
        (big.clone(), vec![big.join("tokenizer.json").display().to_string(), "31999".into(), "256 ids".into(), "random-tiny".into()]),
    ];
    for (path, expected) in cases {
        let out = servesim(&["serve", "--random-weights", "tiny", "--port", "0", "--tokenizer", path.to_str().unwrap()]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{path:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains("--tokenizer"), "{err}");
        for e in expected {
            assert!(err.contains(e.trim_end_matches('/')), "{path:?}: expected {e:?} in {err}");
        }
    }
    let out = servesim(&["bench", "--tokenizer", missing.to_str().unwrap(), "--num-prompts", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--tokenizer") && stderr(&out).contains("cannot read"), "{}", stderr(&out));
}

/// `bench --tokenizer` makes text prompts of exactly the requested tokens and, for TGI (which
/// reports no usage), counts output by re-encoding the text; the server counts the same.
#[test]
fn bench_tokenizer_counts_agree_with_the_server() {
    let (_server, base) = spawn_serve(&["--random-weights", "tiny", "--threads", "1"]);
    let tokenizer = repo().join("tokenizers/servesim-char-256");
    let mut expected_prompt = 0.0;
    for backend in ["openai", "tgi"] {
        let out = servesim(&[
            "bench", "--backend", backend, "--base-url", &base, "--tokenizer", tokenizer.to_str().unwrap(), "--random-input-len", "300",
            "--random-output-len", "5", "--num-prompts", "3", "--ignore-eos",
        ]);
        let text = stdout(&out);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(text.contains("Total input tokens:                      900       \n"), "{backend}: {text}");
        assert!(text.contains("Total generated tokens:                  15        \n"), "{backend}: {text}");
        expected_prompt += 900.0;
        let m = http_get(&base, "/metrics");
        assert_eq!(metric(&m, "servesim_prompt_tokens_total"), Some(expected_prompt), "{backend}");
    }
}

/// The committed tokenizer directories are what `tokenizers/generate.py` writes. Needs python3
/// with the `tokenizers` package (`.ci/run` installs it, and `SERVESIM_REQUIRE_VLLM_CLIENT=1`
/// makes its absence a failure); else prints why and passes.
#[test]
fn shipped_tokenizers_match_their_generator() {
    // Run from the repository, a bare `import tokenizers` finds its own `tokenizers/` folder
    // as a namespace package: the probe runs elsewhere and wants the package's file.
    if let Err(why) = python_modules(&["tokenizers"]) {
        assert!(!required("SERVESIM_REQUIRE_VLLM_CLIENT"), "SERVESIM_REQUIRE_VLLM_CLIENT=1 but {why}");
        eprintln!("skipping: {why} (pip install tokenizers)");
        return;
    }
    let out = std::process::Command::new("python3").arg(repo().join("tokenizers/generate.py")).arg("--check").output().unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
}

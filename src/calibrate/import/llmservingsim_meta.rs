//! What an LLMServingSim profile bundle's `meta.yaml` says of its rows (the vLLM version, the
//! GPU, the model, the dtypes, the TP degrees, how each row was timed), and the model whose
//! dimensions turn its op names into shapes.
//!
//! `meta.yaml` is read as the profiler writes it: block mappings of `key: value` lines, nested by
//! indentation, flow lists (`[1, 2]`) and quoted scalars. That subset is all it holds, and
//! servesim has no YAML dependency to spend on one file; a line outside it is skipped, and a key
//! the import needs that is missing or malformed is an error naming the file, line and key.
//!
//! The model: `--model` (a preset, or a Hugging Face `config.json`), else the checkout's own
//! `configs/model/<org>/<model>.json` (LLMServingSim's profiler reads the model from there),
//! else the servesim preset named as the model. Whichever it is must be the model the bundle
//! timed: the sharded sizes vLLM ran with (`engine_effective.hf_overrides`) are checked against
//! it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ImportError;
use crate::scenario::{Dtype, ModelSpec};

/// A bundle's `meta.yaml`, the parts the import reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    pub file: PathBuf,
    pub vllm_version: String,
    pub cuda_version: Option<String>,
    /// The driver's device name (`NVIDIA GeForce RTX 4090`).
    pub gpu: String,
    /// The Hugging Face id (`meta-llama/Llama-3.1-8B`).
    pub model_id: String,
    /// Weights' and KV cache's dtype, from `variant` (`bf16`).
    pub dtype: Dtype,
    pub tp_degrees: Vec<u32>,
    /// Timed forwards each row is the mean of, after one warm-up.
    pub iterations: u32,
    pub profiled_at: Option<String>,
    /// `engine_effective` keys that say how the engine ran: `enforce_eager`, `load_format`,
    /// `hf_overrides.num_hidden_layers`, as written.
    pub enforce_eager: Option<String>,
    pub load_format: Option<String>,
    pub layers: Option<String>,
    /// `engine_effective.hf_overrides`: the sharded sizes of the last TP degree profiled.
    overrides: BTreeMap<String, (usize, String)>,
}

const OVERRIDES: &str = "engine_effective.hf_overrides.";

/// `key.path → (line, value)` of every scalar line of a block-mapping YAML text.
fn flatten(text: &str) -> BTreeMap<String, (usize, String)> {
    let mut out = BTreeMap::new();
    // The mappings open above the current line: (indentation, key).
    let mut open: Vec<(usize, String)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('-') {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else { continue };
        let indent = raw.len() - raw.trim_start().len();
        while open.last().is_some_and(|(depth, _)| *depth >= indent) {
            open.pop();
        }
        let key = key.trim().to_string();
        let value = value.trim();
        if value.is_empty() {
            open.push((indent, key));
        } else {
            let path: Vec<&str> = open.iter().map(|(_, k)| k.as_str()).chain([key.as_str()]).collect();
            let unquoted = value.trim_matches(|c| c == '\'' || c == '"');
            out.insert(path.join("."), (i + 1, unquoted.to_string()));
        }
    }
    out
}

impl Meta {
    /// Reads `file`.
    pub fn read(file: &Path) -> Result<Meta, ImportError> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| ImportError::File { file: file.to_path_buf(), message: format!("cannot read: {e}") })?;
        let keys = flatten(&text);
        let missing = |key: &str| ImportError::File {
            file: file.to_path_buf(),
            message: format!("no `{key}`: the bundle's model, GPU and vLLM version are read from it"),
        };
        let bad = |key: &str, message: String| ImportError::Key {
            file: file.to_path_buf(),
            line: keys.get(key).map_or(0, |(line, _)| *line),
            key: key.to_string(),
            message,
        };
        let text_of = |key: &str| keys.get(key).map(|(_, v)| v.clone());
        let required = |key: &str| text_of(key).filter(|v| !v.is_empty()).ok_or_else(|| missing(key));
        let variant = required("variant")?;
        // `bf16`, `fp16`: weights and KV cache alike. Quantized variants (`fp8-kvfp8`,
        // `bf16-kvfp8`) name dtypes whose kernels this import does not know how the profiler
        // ran, so they are refused rather than guessed.
        let dtype = match variant.as_str() {
            "bf16" => Dtype::Bf16,
            "fp16" => Dtype::Fp16,
            other => return Err(bad("variant", format!("{other:?}: only the bf16 and fp16 variants are read"))),
        };
        let tp_text = required("tp_degrees")?;
        let tp_degrees: Vec<u32> = tp_text
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split(',')
            .map(|t| t.trim().parse::<u32>().ok().filter(|&tp| (1..=1024).contains(&tp)))
            .collect::<Option<_>>()
            .filter(|v: &Vec<u32>| !v.is_empty())
            .ok_or_else(|| bad("tp_degrees", format!("{tp_text:?}: expected a list of TP degrees, [1, 2]")))?;
        let iterations = match text_of("measurement_iterations") {
            None => 1,
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|&n| (1..=1_000_000).contains(&n))
                .ok_or_else(|| bad("measurement_iterations", format!("{v:?}: expected a whole number ≥ 1")))?,
        };
        Ok(Meta {
            file: file.to_path_buf(),
            vllm_version: required("vllm_version")?,
            cuda_version: text_of("cuda_version"),
            gpu: required("gpu")?,
            model_id: required("model")?,
            dtype,
            tp_degrees,
            iterations,
            profiled_at: text_of("profiled_at"),
            enforce_eager: text_of("engine_effective.enforce_eager"),
            load_format: text_of("engine_effective.load_format"),
            layers: text_of(&format!("{OVERRIDES}num_hidden_layers")),
            overrides: keys.into_iter().filter(|(k, _)| k.starts_with(OVERRIDES)).collect(),
        })
    }

    /// The model's name: the last part of its Hugging Face id.
    pub fn model_name(&self) -> &str {
        self.model_id.rsplit('/').next().unwrap_or(&self.model_id)
    }
}

/// The model a bundle timed and where its dimensions came from.
#[derive(Clone, Debug, PartialEq)]
pub struct BundleModel {
    pub spec: ModelSpec,
    pub from: String,
}

/// The model `--model` names: a `.json` Hugging Face config, or a servesim preset. `context` is
/// the file an error about a preset names.
pub fn model_named(value: &str, context: &Path) -> Result<BundleModel, ImportError> {
    if value.ends_with(".json") {
        let path = Path::new(value);
        // `…/Qwen3-32B/config.json` is named by its folder, `…/Qwen3-32B.json` by itself.
        let name = match path.file_stem().map(|s| s.to_string_lossy().into_owned()) {
            Some(stem) if stem != "config" => stem,
            _ => path.parent().and_then(|p| p.file_name()).map_or("custom".into(), |n| n.to_string_lossy().into_owned()),
        };
        return config(path, &name);
    }
    let spec = ModelSpec::preset(value).ok_or_else(|| ImportError::File {
        file: context.to_path_buf(),
        message: format!(
            "--model {value:?} is not a model preset ({}) nor a Hugging Face config.json",
            ModelSpec::preset_names().join(", ")
        ),
    })?;
    Ok(BundleModel { spec, from: format!("servesim's preset {value}") })
}

fn config(path: &Path, name: &str) -> Result<BundleModel, ImportError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ImportError::File { file: path.to_path_buf(), message: format!("cannot read: {e}") })?;
    let spec = ModelSpec::from_hf_config_json(&text, path, name)
        .map_err(|e| ImportError::File { file: path.to_path_buf(), message: e.to_string() })?;
    Ok(BundleModel { spec, from: path.display().to_string() })
}

/// The model `meta` timed (see the module's documentation for where it is looked up), checked
/// against the sizes vLLM ran with.
pub fn model_of(meta: &Meta, given: Option<&str>) -> Result<BundleModel, ImportError> {
    let model = match given {
        Some(value) => model_named(value, &meta.file)?,
        None => {
            let in_checkout = meta
                .file
                .ancestors()
                .skip(1)
                .map(|dir| dir.join("configs/model").join(format!("{}.json", meta.model_id)))
                .find(|candidate| candidate.is_file());
            match (in_checkout, ModelSpec::preset(meta.model_name())) {
                (Some(path), _) => config(&path, meta.model_name())?,
                (None, Some(spec)) => BundleModel { spec, from: format!("servesim's preset {}", meta.model_name()) },
                (None, None) => {
                    return Err(ImportError::File {
                        file: meta.file.clone(),
                        message: format!(
                            "times {}: no servesim preset has that name and no configs/model/{}.json is above it; give \
                             --model PRESET or --model CONFIG.json",
                            meta.model_id, meta.model_id
                        ),
                    });
                }
            }
        }
    };
    check_sizes(meta, &model)?;
    Ok(model)
}

/// The sharded sizes vLLM ran the last TP degree with must be the model's divided by it: else
/// the model named is not the one the bundle timed, and every shape would be wrong.
fn check_sizes(meta: &Meta, model: &BundleModel) -> Result<(), ImportError> {
    let tp = u64::from(*meta.tp_degrees.last().expect("tp_degrees is not empty"));
    let m = &model.spec;
    let mut expected = vec![
        ("num_attention_heads", u64::from(m.num_heads)),
        ("num_key_value_heads", u64::from(m.num_kv_heads)),
        ("vocab_size", u64::from(m.vocab_size)),
    ];
    // A mixture-of-experts config's `intermediate_size` is no layer's (every layer's MLP is
    // routed): only a dense model's is checked.
    if m.moe.is_none() {
        expected.push(("intermediate_size", u64::from(m.ffn_size)));
    }
    for (key, whole) in expected {
        let path = format!("{OVERRIDES}{key}");
        let Some((line, value)) = meta.overrides.get(&path) else { continue };
        if !whole.is_multiple_of(tp) || value.parse::<u64>().ok() != Some(whole / tp) {
            return Err(ImportError::Key {
                file: meta.file.clone(),
                line: *line,
                key: path,
                message: format!(
                    "{value}, but {} ({}) has {whole} at TP 1, so {} at TP {tp}: the model named is not the one this \
                     bundle timed",
                    m.name,
                    model.from,
                    if whole.is_multiple_of(tp) { (whole / tp).to_string() } else { "no whole number".into() }
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: &str = "profiler_version: 1.0.0
vllm_version: 0.19.0
cuda_version: '12.8'
gpu: NVIDIA GeForce RTX 4090
profiled_at: '2026-08-17T19:43:32+00:00'
model: meta-llama/Llama-3.1-8B
variant: bf16
tp_degrees: [1, 2]
engine_effective:
  load_format: dummy
  enforce_eager: true
  hf_overrides:
    num_hidden_layers: 1
    intermediate_size: 7168
    num_attention_heads: 16
    num_key_value_heads: 4
    vocab_size: 64128
  model: /tmp/x
attention_grid:
  chunks: 0, 16-2048 x2
measurement_iterations: 3
skew_fit:
  bucket_axes:
    n_bins: [0, 2]
";

    #[test]
    fn meta_yaml_is_read_and_the_model_checked_against_its_sharded_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("meta.yaml");
        std::fs::write(&file, META).unwrap();
        let meta = Meta::read(&file).unwrap();
        assert_eq!((meta.vllm_version.as_str(), meta.cuda_version.as_deref()), ("0.19.0", Some("12.8")));
        assert_eq!((meta.model_name(), meta.dtype, meta.iterations), ("Llama-3.1-8B", Dtype::Bf16, 3));
        assert_eq!(meta.tp_degrees, [1, 2]);
        assert_eq!((meta.enforce_eager.as_deref(), meta.layers.as_deref()), (Some("true"), Some("1")));
        assert_eq!(meta.profiled_at.as_deref(), Some("2026-08-17T19:43:32+00:00"));
        // The preset named as the model; the sizes at TP 2 are its halves.
        let model = model_of(&meta, None).unwrap();
        assert_eq!(model.spec.name, "Llama-3.1-8B");
        // Another model is refused, naming the line and key that tell.
        let err = model_of(&meta, Some("Mistral-7B")).unwrap_err().to_string();
        assert!(err.contains("line 17, `engine_effective.hf_overrides.vocab_size`: 64128, but Mistral-7B"), "{err}");
        // A quantized variant and a malformed list are named with their line.
        std::fs::write(&file, META.replace("variant: bf16", "variant: fp8-kvfp8")).unwrap();
        let err = Meta::read(&file).unwrap_err().to_string();
        assert!(err.contains("line 7, `variant`: \"fp8-kvfp8\""), "{err}");
        std::fs::write(&file, META.replace("[1, 2]", "[1, two]")).unwrap();
        assert!(Meta::read(&file).unwrap_err().to_string().contains("line 8, `tp_degrees`"));
        std::fs::write(&file, META.replace("vllm_version: 0.19.0\n", "")).unwrap();
        assert!(Meta::read(&file).unwrap_err().to_string().contains("no `vllm_version`"));
    }

    #[test]
    fn a_model_without_a_preset_comes_from_the_checkouts_configs() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("profiler/perf/GPU/acme/Tiny-1B/bf16");
        std::fs::create_dir_all(&bundle).unwrap();
        let meta = META.replace("meta-llama/Llama-3.1-8B", "acme/Tiny-1B").replace("tp_degrees: [1, 2]", "tp_degrees: [1]");
        let meta = meta.replace("7168", "512").replace(": 16\n", ": 8\n").replace(": 4\n", ": 2\n").replace("64128", "1000");
        std::fs::write(bundle.join("meta.yaml"), meta).unwrap();
        let meta = Meta::read(&bundle.join("meta.yaml")).unwrap();
        assert!(model_of(&meta, None).unwrap_err().to_string().contains("give --model PRESET or --model CONFIG.json"));
        let configs = dir.path().join("configs/model/acme");
        std::fs::create_dir_all(&configs).unwrap();
        std::fs::write(
            configs.join("Tiny-1B.json"),
            r#"{"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
               "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 2048}"#,
        )
        .unwrap();
        let model = model_of(&meta, None).unwrap();
        assert_eq!((model.spec.name.as_str(), model.spec.head_dim), ("Tiny-1B", 32));
        assert!(model.from.ends_with("configs/model/acme/Tiny-1B.json"), "{}", model.from);
    }
}

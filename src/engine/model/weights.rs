//! A Llama model's weights in the executor's layout: seeded random, or loaded from Hugging Face
//! `.safetensors` files (and saved to them, in Hugging Face's layout).
//!
//! ```text
//! Hugging Face (safetensors)                      executor (f32, [in, out] row-major)
//! model.embed_tokens.weight        [vocab, h]  ─► embed    [vocab, h]        (rows are gathered)
//! model.layers.N.input_layernorm   [h]         ─► input_norm [h]
//!   self_attn.{q,k,v}_proj.weight  [out, h]    ─► qkv      [h, q_dim + 2·kv_dim]  (q | k | v)
//!   self_attn.o_proj.weight        [h, q_dim]  ─► o        [q_dim, h]
//!   post_attention_layernorm       [h]         ─► post_norm [h]
//!   mlp.{gate,up}_proj.weight      [ffn, h]    ─► gate_up  [h, 2·ffn]        (gate | up)
//!   mlp.down_proj.weight           [h, ffn]    ─► down     [ffn, h]
//! model.norm.weight                [h]         ─► norm     [h]
//! lm_head.weight (or the embedding) [vocab, h] ─► lm_head  [h, vocab]
//! ```
//!
//! Why this layout: the `gemm` crate is up to 3.5× faster with B as `[in, out]` at decode-sized
//! batches (see `engine::cpu::BLayout`), and merging q/k/v and gate/up turns five thin GEMMs per
//! layer into two wider ones. The transposition is paid once, at load.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use super::{LlamaConfig, ModelError};

/// One decoder layer's weights, f32, `[in, out]` row-major (see the module's table).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerWeights {
    /// RMSNorm weight before attention, `[hidden]`.
    pub input_norm: Vec<f32>,
    /// Merged Q, K, V projection, `[hidden, q_dim + 2·kv_dim]`: each row is q's columns, then
    /// k's, then v's.
    pub qkv: Vec<f32>,
    /// Attention output projection, `[q_dim, hidden]`.
    pub o: Vec<f32>,
    /// RMSNorm weight before the MLP, `[hidden]`.
    pub post_norm: Vec<f32>,
    /// Merged gate and up projection, `[hidden, 2·ffn]`: each row is gate's columns then up's
    /// (the layout `silu_and_mul` reads).
    pub gate_up: Vec<f32>,
    /// MLP down projection, `[ffn, hidden]`.
    pub down: Vec<f32>,
}

/// A whole model's weights, f32, in the executor's layout.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaWeights {
    pub config: LlamaConfig,
    /// Token embedding, `[vocab, hidden]`.
    pub embed: Vec<f32>,
    pub layers: Vec<LayerWeights>,
    /// Final RMSNorm weight, `[hidden]`.
    pub norm: Vec<f32>,
    /// Output projection, `[hidden, vocab]`. With tied embeddings it is a transposed copy of
    /// `embed`: the copy costs `vocab·hidden` floats but keeps the largest GEMM of a decode step
    /// in the fast `[in, out]` layout.
    pub lm_head: Vec<f32>,
}

/// Element type to write a `.safetensors` file in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightDtype {
    F32,
    BF16,
    F16,
}

impl LlamaWeights {
    /// Seeded random weights, uniform with the scales that keep activations O(1): projections
    /// have variance `1/fan_in`, the two that write into the residual stream (o, down) are
    /// further scaled by `1/√(2·layers)` (GPT-2's rule) so the residual does not grow with depth,
    /// the embedding has variance `1/hidden` so that tied output logits stay O(1), and norm
    /// weights are `1 ± 0.1` so that tests see them used. The same config and seed give the same
    /// weights on every machine (ChaCha8).
    ///
    /// # Panics
    /// If the config is invalid (see [`LlamaConfig::validate`]).
    pub fn random(config: &LlamaConfig, seed: u64) -> LlamaWeights {
        if let Err(e) = config.validate() {
            panic!("LlamaWeights::random: invalid config: {e}");
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut uniform = |len: usize, scale: f32| -> Vec<f32> {
            // Uniform on [-a, a] has variance a²/3: a = √3 · scale gives standard deviation `scale`.
            let a = 3f32.sqrt() * scale;
            (0..len).map(|_| a * (2.0 * rng.random::<f32>() - 1.0)).collect()
        };
        let (h, q, kv, f, v) =
            (config.hidden_size, config.q_dim(), config.kv_dim(), config.intermediate_size, config.vocab_size);
        let residual_scale = 1.0 / ((2 * config.num_layers) as f32).sqrt();
        let inv_sqrt = |n: usize| 1.0 / (n as f32).sqrt();
        let embed = uniform(v * h, inv_sqrt(h));
        let mut layers = Vec::with_capacity(config.num_layers);
        for _ in 0..config.num_layers {
            let input_norm = uniform(h, 0.1 / 3f32.sqrt()).into_iter().map(|x| 1.0 + x).collect();
            let qkv = uniform(h * (q + 2 * kv), inv_sqrt(h));
            let o = uniform(q * h, inv_sqrt(q) * residual_scale);
            let post_norm = uniform(h, 0.1 / 3f32.sqrt()).into_iter().map(|x| 1.0 + x).collect();
            let gate_up = uniform(h * 2 * f, inv_sqrt(h));
            let down = uniform(f * h, inv_sqrt(f) * residual_scale);
            layers.push(LayerWeights { input_norm, qkv, o, post_norm, gate_up, down });
        }
        let norm = uniform(h, 0.1 / 3f32.sqrt()).into_iter().map(|x| 1.0 + x).collect();
        let lm_head = if config.tie_word_embeddings { transpose(&embed, v, h) } else { uniform(h * v, inv_sqrt(h)) };
        LlamaWeights { config: config.clone(), embed, layers, norm, lm_head }
    }

    /// Loads a Hugging Face model directory: `config.json` and every `*.safetensors` file in it
    /// (one file, or the shards of a sharded checkpoint).
    pub fn load_dir(dir: &Path) -> Result<LlamaWeights, ModelError> {
        let config = LlamaConfig::from_file(&dir.join("config.json"))?;
        let io = |source| ModelError::Io { path: dir.to_owned(), source };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().is_some_and(|e| e == "safetensors") {
                files.push(path);
            }
        }
        // Sorted, so that errors and loading order do not depend on the file system.
        files.sort();
        if files.is_empty() {
            return Err(ModelError::Weights {
                path: dir.to_owned(),
                tensor: String::new(),
                message: "no .safetensors file in the directory".into(),
            });
        }
        LlamaWeights::from_safetensors(&config, &files)
    }

    /// Loads the weights of `config` from `.safetensors` files (f32, bf16 or f16; converted to
    /// f32). Tensors the model does not use (e.g. `rotary_emb.inv_freq`) are ignored; a missing
    /// tensor, a wrong shape, an unsupported dtype or a tensor found twice is an error naming
    /// the file and the tensor.
    pub fn from_safetensors(config: &LlamaConfig, files: &[PathBuf]) -> Result<LlamaWeights, ModelError> {
        config.validate().map_err(|message| ModelError::Config { path: PathBuf::from("config.json"), message })?;
        let wanted = hf_names(config);
        let mut found: BTreeMap<String, (PathBuf, Vec<usize>, Vec<f32>)> = BTreeMap::new();
        for path in files {
            let bytes = std::fs::read(path).map_err(|source| ModelError::Io { path: path.clone(), source })?;
            let st = SafeTensors::deserialize(&bytes).map_err(|e| ModelError::Weights {
                path: path.clone(),
                tensor: String::new(),
                message: format!("not a valid safetensors file: {e}"),
            })?;
            for (name, view) in st.iter() {
                if !wanted.contains_key(name) {
                    continue;
                }
                let err = |message: String| ModelError::Weights { path: path.clone(), tensor: name.to_owned(), message };
                if let Some((first, _, _)) = found.get(name) {
                    return Err(err(format!("also found in {}", first.display())));
                }
                let data = to_f32(&view).map_err(err)?;
                found.insert(name.to_owned(), (path.clone(), view.shape().to_vec(), data));
            }
        }
        let where_missing = files.first().cloned().unwrap_or_default();
        let mut take = |name: &str| -> Result<Vec<f32>, ModelError> {
            let expected = &wanted[name];
            let (path, shape, data) = found.remove(name).ok_or_else(|| ModelError::Weights {
                path: where_missing.clone(),
                tensor: name.to_owned(),
                message: format!("missing (searched {} file(s))", files.len()),
            })?;
            if &shape != expected {
                return Err(ModelError::Weights {
                    path,
                    tensor: name.to_owned(),
                    message: format!("shape {shape:?}, expected {expected:?} for this config.json"),
                });
            }
            Ok(data)
        };
        let (h, q, kv, f, v) =
            (config.hidden_size, config.q_dim(), config.kv_dim(), config.intermediate_size, config.vocab_size);
        let embed = take("model.embed_tokens.weight")?;
        let mut layers = Vec::with_capacity(config.num_layers);
        for n in 0..config.num_layers {
            let p = format!("model.layers.{n}.");
            let input_norm = take(&format!("{p}input_layernorm.weight"))?;
            let qkv_cols = q + 2 * kv;
            let mut qkv = vec![0.0; h * qkv_cols];
            place_transposed(&mut qkv, qkv_cols, 0, &take(&format!("{p}self_attn.q_proj.weight"))?, q, h);
            place_transposed(&mut qkv, qkv_cols, q, &take(&format!("{p}self_attn.k_proj.weight"))?, kv, h);
            place_transposed(&mut qkv, qkv_cols, q + kv, &take(&format!("{p}self_attn.v_proj.weight"))?, kv, h);
            let o = transpose(&take(&format!("{p}self_attn.o_proj.weight"))?, h, q);
            let post_norm = take(&format!("{p}post_attention_layernorm.weight"))?;
            let mut gate_up = vec![0.0; h * 2 * f];
            place_transposed(&mut gate_up, 2 * f, 0, &take(&format!("{p}mlp.gate_proj.weight"))?, f, h);
            place_transposed(&mut gate_up, 2 * f, f, &take(&format!("{p}mlp.up_proj.weight"))?, f, h);
            let down = transpose(&take(&format!("{p}mlp.down_proj.weight"))?, h, f);
            layers.push(LayerWeights { input_norm, qkv, o, post_norm, gate_up, down });
        }
        let norm = take("model.norm.weight")?;
        let lm_head = if config.tie_word_embeddings { transpose(&embed, v, h) } else { transpose(&take("lm_head.weight")?, v, h) };
        Ok(LlamaWeights { config: config.clone(), embed, layers, norm, lm_head })
    }

    /// The weights as Hugging Face names and lays them out: `(name, shape, f32 data)`, in a
    /// fixed order. `lm_head.weight` is left out when embeddings are tied (as Hugging Face does).
    pub fn to_hf_tensors(&self) -> Vec<(String, Vec<usize>, Vec<f32>)> {
        let c = &self.config;
        let (h, q, kv, f, v) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size);
        let mut out = vec![("model.embed_tokens.weight".to_owned(), vec![v, h], self.embed.clone())];
        for (n, l) in self.layers.iter().enumerate() {
            let p = format!("model.layers.{n}.");
            let cols = |w: &[f32], width: usize, from: usize, count: usize| -> Vec<f32> {
                // Columns from..from+count of a [h, width] matrix, as [count, h].
                let mut t = vec![0.0; count * h];
                for i in 0..h {
                    for o in 0..count {
                        t[o * h + i] = w[i * width + from + o];
                    }
                }
                t
            };
            out.push((format!("{p}input_layernorm.weight"), vec![h], l.input_norm.clone()));
            out.push((format!("{p}self_attn.q_proj.weight"), vec![q, h], cols(&l.qkv, q + 2 * kv, 0, q)));
            out.push((format!("{p}self_attn.k_proj.weight"), vec![kv, h], cols(&l.qkv, q + 2 * kv, q, kv)));
            out.push((format!("{p}self_attn.v_proj.weight"), vec![kv, h], cols(&l.qkv, q + 2 * kv, q + kv, kv)));
            out.push((format!("{p}self_attn.o_proj.weight"), vec![h, q], transpose(&l.o, q, h)));
            out.push((format!("{p}post_attention_layernorm.weight"), vec![h], l.post_norm.clone()));
            out.push((format!("{p}mlp.gate_proj.weight"), vec![f, h], cols(&l.gate_up, 2 * f, 0, f)));
            out.push((format!("{p}mlp.up_proj.weight"), vec![f, h], cols(&l.gate_up, 2 * f, f, f)));
            out.push((format!("{p}mlp.down_proj.weight"), vec![h, f], transpose(&l.down, f, h)));
        }
        out.push(("model.norm.weight".to_owned(), vec![h], self.norm.clone()));
        if !c.tie_word_embeddings {
            out.push(("lm_head.weight".to_owned(), vec![v, h], transpose(&self.lm_head, h, v)));
        }
        out
    }

    /// Writes the weights to one `.safetensors` file in Hugging Face's names and layout, in
    /// `dtype` (bf16 and f16 round to nearest even).
    pub fn save_safetensors(&self, path: &Path, dtype: WeightDtype) -> Result<(), ModelError> {
        let tensors: Vec<(String, Vec<usize>, Vec<u8>)> =
            self.to_hf_tensors().into_iter().map(|(name, shape, data)| (name, shape, to_bytes(&data, dtype))).collect();
        let st_dtype = match dtype {
            WeightDtype::F32 => Dtype::F32,
            WeightDtype::BF16 => Dtype::BF16,
            WeightDtype::F16 => Dtype::F16,
        };
        let err = |tensor: &str, message: String| ModelError::Weights { path: path.to_owned(), tensor: tensor.to_owned(), message };
        let mut views = Vec::with_capacity(tensors.len());
        for (name, shape, bytes) in &tensors {
            let view = TensorView::new(st_dtype, shape.clone(), bytes).map_err(|e| err(name, e.to_string()))?;
            views.push((name.as_str(), view));
        }
        safetensors::serialize_to_file(views, None, path).map_err(|e| err("", format!("cannot write: {e}")))
    }

    /// Checks every vector's length against the config (the fields are public, so a caller can
    /// build inconsistent weights; the kernels would panic on them mid-step).
    pub fn validate(&self) -> Result<(), String> {
        let c = &self.config;
        c.validate()?;
        let (h, q, kv, f, v) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size);
        let check = |name: &str, len: usize, expected: usize| {
            if len == expected { Ok(()) } else { Err(format!("{name} holds {len} floats, expected {expected}")) }
        };
        check("embed", self.embed.len(), v * h)?;
        check("norm", self.norm.len(), h)?;
        check("lm_head", self.lm_head.len(), h * v)?;
        if self.layers.len() != c.num_layers {
            return Err(format!("{} layers, expected {}", self.layers.len(), c.num_layers));
        }
        for (n, l) in self.layers.iter().enumerate() {
            check(&format!("layer {n} input_norm"), l.input_norm.len(), h)?;
            check(&format!("layer {n} qkv"), l.qkv.len(), h * (q + 2 * kv))?;
            check(&format!("layer {n} o"), l.o.len(), q * h)?;
            check(&format!("layer {n} post_norm"), l.post_norm.len(), h)?;
            check(&format!("layer {n} gate_up"), l.gate_up.len(), h * 2 * f)?;
            check(&format!("layer {n} down"), l.down.len(), f * h)?;
        }
        Ok(())
    }

    /// Parameters held (a tied output projection counts once).
    pub fn num_parameters(&self) -> u64 {
        self.config.num_parameters()
    }
}

/// Every tensor name the model reads, with its Hugging Face shape.
fn hf_names(c: &LlamaConfig) -> BTreeMap<String, Vec<usize>> {
    let (h, q, kv, f, v) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size);
    let mut names = BTreeMap::new();
    names.insert("model.embed_tokens.weight".to_owned(), vec![v, h]);
    for n in 0..c.num_layers {
        let p = format!("model.layers.{n}.");
        names.insert(format!("{p}input_layernorm.weight"), vec![h]);
        names.insert(format!("{p}self_attn.q_proj.weight"), vec![q, h]);
        names.insert(format!("{p}self_attn.k_proj.weight"), vec![kv, h]);
        names.insert(format!("{p}self_attn.v_proj.weight"), vec![kv, h]);
        names.insert(format!("{p}self_attn.o_proj.weight"), vec![h, q]);
        names.insert(format!("{p}post_attention_layernorm.weight"), vec![h]);
        names.insert(format!("{p}mlp.gate_proj.weight"), vec![f, h]);
        names.insert(format!("{p}mlp.up_proj.weight"), vec![f, h]);
        names.insert(format!("{p}mlp.down_proj.weight"), vec![h, f]);
    }
    names.insert("model.norm.weight".to_owned(), vec![h]);
    if !c.tie_word_embeddings {
        names.insert("lm_head.weight".to_owned(), vec![v, h]);
    }
    names
}

/// A tensor's little-endian data as f32.
fn to_f32(view: &TensorView<'_>) -> Result<Vec<f32>, String> {
    let data = view.data();
    let out = match view.dtype() {
        Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        // bf16 is the top half of an f32: widening is exact.
        Dtype::BF16 => data.chunks_exact(2).map(|b| f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)).collect(),
        Dtype::F16 => data.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
        other => return Err(format!("dtype {other:?} is not supported (f32, bf16, f16)")),
    };
    Ok(out)
}

fn to_bytes(data: &[f32], dtype: WeightDtype) -> Vec<u8> {
    match dtype {
        WeightDtype::F32 => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
        WeightDtype::BF16 => data.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
        WeightDtype::F16 => data.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
    }
}

/// `[rows, cols]` → `[cols, rows]`.
fn transpose(src: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    debug_assert_eq!(src.len(), rows * cols);
    let mut out = vec![0.0; src.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = src[r * cols + c];
        }
    }
    out
}

/// Writes Hugging Face's `src` (`[out, in]`) transposed into columns `col0..col0 + out` of
/// `dst` (`[in, dst_cols]`).
fn place_transposed(dst: &mut [f32], dst_cols: usize, col0: usize, src: &[f32], out: usize, inp: usize) {
    debug_assert_eq!(src.len(), out * inp);
    for o in 0..out {
        for i in 0..inp {
            dst[i * dst_cols + col0 + o] = src[o * inp + i];
        }
    }
}

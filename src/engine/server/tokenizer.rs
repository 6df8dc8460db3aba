//! Text ↔ token ids: a Hugging Face `tokenizer.json`, run by Hugging Face's own `tokenizers`
//! crate (the code `transformers`' fast tokenizers call), so a benchmark client that loads the
//! same directory counts exactly what the server counts.
//!
//! Three sources, one type:
//! - a directory (or file) given by the user: `servesim serve --tokenizer DIR`, `--model DIR`;
//! - the shipped character-level tokenizers `tokenizers/servesim-char-{256,32000}` (compiled in,
//!   so a fresh clone or an installed binary needs no files; see `tokenizers/generate.py`);
//! - [`Tokenizer::bytes`], one token per UTF-8 byte, built in code: the default of an
//!   [`super::EngineHandle`] that was given none (tests with fake executors).
//!
//! A generated output's text skips special tokens unless the request says otherwise
//! (`skip_special_tokens`, true by default, as vLLM and TGI decode); everything else here
//! decodes them too (a token's own text, an echoed prompt).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use super::chat_template::{ChatTemplateState, from_files, load_dir};

/// Vocabulary sizes of the shipped tokenizers, their `tokenizer.json` and their
/// `tokenizer_config.json` (for its chat template), compiled in.
const SHIPPED: [(u32, &str, &str, &str); 2] = [
    (
        256,
        "servesim-char-256",
        include_str!("../../../tokenizers/servesim-char-256/tokenizer.json"),
        include_str!("../../../tokenizers/servesim-char-256/tokenizer_config.json"),
    ),
    (
        32_000,
        "servesim-char-32000",
        include_str!("../../../tokenizers/servesim-char-32000/tokenizer.json"),
        include_str!("../../../tokenizers/servesim-char-32000/tokenizer_config.json"),
    ),
];

/// A tokenizer that could not be loaded, with the file it came from.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct TokenizerError {
    pub path: String,
    pub reason: String,
}

/// Bytes of text tokenized at once when a long prompt is checked against the context
/// ([`Tokenizer::count_past`]): a few MB of `tokenizers`' state at most.
pub const PIECE_BYTES: usize = 16 * 1024;

/// A loaded `tokenizer.json`.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// Where it came from, for messages: a path, or a shipped tokenizer's name.
    origin: String,
    /// One more than the largest id it can produce (added tokens included).
    id_bound: u32,
    special_ids: HashSet<u32>,
    /// The chat template of the directory it came from, for `/v1/chat/completions`.
    chat: ChatTemplateState,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("origin", &self.origin).field("id_bound", &self.id_bound).finish()
    }
}

impl Tokenizer {
    /// Loads `path/tokenizer.json` and the chat template beside it when `path` is a directory,
    /// else the file `path` itself (with no chat template: a lone file has no directory of its own).
    /// A chat template that is missing or cannot be used does not fail the load: only chat
    /// requests need it, and they are told why ([`Tokenizer::chat_template`]).
    pub fn load(path: &Path) -> Result<Tokenizer, TokenizerError> {
        let is_dir = path.is_dir();
        let file: PathBuf = if is_dir { path.join("tokenizer.json") } else { path.to_path_buf() };
        let shown = file.display().to_string();
        let text = std::fs::read_to_string(&file).map_err(|e| TokenizerError { path: shown.clone(), reason: format!("cannot read: {e}") })?;
        let mut tokenizer = Tokenizer::from_json(&text, shown)?;
        if is_dir {
            tokenizer.chat = load_dir(path);
        }
        Ok(tokenizer)
    }

    /// Parses the text of a `tokenizer.json`; `origin` names it in messages.
    pub fn from_json(text: &str, origin: impl Into<String>) -> Result<Tokenizer, TokenizerError> {
        let origin = origin.into();
        let invalid = |reason: String| TokenizerError { path: origin.clone(), reason: format!("not a valid Hugging Face tokenizer.json: {reason}") };
        // The `tokenizers` crate panics on some malformed files (its decoder deserializer
        // `expect`s, found by fuzzing): JSON syntax is checked here first, and a panic on a
        // well-formed file that is still not a tokenizer is caught and reported like an error.
        serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| invalid(e.to_string()))?;
        let parsed = crate::panic_guard::contain(|| tokenizers::Tokenizer::from_bytes(text.as_bytes()))
            .map_err(|_| invalid("the tokenizers library could not read it (it panicked)".into()))?;
        let inner = parsed.map_err(|e| invalid(e.to_string()))?;
        let id_bound = inner.get_vocab(true).values().max().map_or(0, |&m| m.saturating_add(1));
        let special_ids = inner.get_added_tokens_decoder().iter().filter(|(_, t)| t.special).map(|(&id, _)| id).collect();
        let chat = ChatTemplateState::Missing(format!("tokenizer {origin} comes without a tokenizer directory"));
        Ok(Tokenizer { inner, origin, id_bound, special_ids, chat })
    }

    /// The shipped character-level tokenizer for a model vocabulary of exactly `vocab_size` ids
    /// (256 or 32000), if there is one.
    pub fn shipped(vocab_size: u32) -> Option<Tokenizer> {
        let &(_, name, text, config) = SHIPPED.iter().find(|(n, _, _, _)| *n == vocab_size)?;
        // Compiled-in text that a unit test parses: failing here is a build defect, not input.
        let mut tokenizer = Tokenizer::from_json(text, format!("tokenizers/{name} (built in)")).expect("shipped tokenizer.json parses");
        let config_origin = format!("tokenizers/{name}/tokenizer_config.json (built in)");
        let missing = format!("{config_origin} has no `chat_template`");
        tokenizer.chat = from_files(Some(config), &config_origin, None, None, missing);
        Some(tokenizer)
    }

    /// One token per UTF-8 byte: ids 0–255 are the tokens `<0x00>`–`<0xFF>` of a BPE model with
    /// byte fallback and no other vocabulary; decoding turns runs of byte tokens back into text
    /// (U+FFFD for bytes that are not valid UTF-8).
    pub fn bytes() -> Tokenizer {
        let vocab: serde_json::Map<String, serde_json::Value> = (0..256u32).map(|b| (format!("<0x{b:02X}>"), json!(b))).collect();
        let spec = json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": null, "pre_tokenizer": null, "post_processor": null,
            "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]},
            "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": true, "ignore_merges": false,
                      "vocab": vocab, "merges": []},
        });
        Tokenizer::from_json(&spec.to_string(), "byte-level (built in)").expect("byte-level tokenizer.json parses")
    }

    /// Where the tokenizer came from: a path, or a built-in name.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// One more than the largest id it can produce, added tokens included (`len(tokenizer)` in
    /// transformers when ids are dense).
    pub fn id_bound(&self) -> u32 {
        self.id_bound
    }

    /// transformers' `tokenizer.vocab_size`: the model's vocabulary without added tokens. vLLM's
    /// random dataset draws prompt ids below it.
    pub fn base_vocab_size(&self) -> u32 {
        self.inner.get_vocab_size(false) as u32
    }

    /// Refuses a tokenizer that could produce ids the model has no embedding for, and one that
    /// cannot decode the ids the model emits: a model samples from its whole vocabulary, ids the
    /// tokenizer lacks decode to nothing, and clients then count no tokens for them. Published
    /// configs pad the vocabulary past the tokenizer's ids by well under 1% (Qwen2.5: 152,064 for
    /// 151,665), so up to that much is allowed.
    pub fn check_fits(&self, model_vocab_size: u32, model: &str) -> Result<(), String> {
        if self.id_bound > model_vocab_size {
            return Err(format!(
                "tokenizer {} produces ids up to {} but model {model} has a vocabulary of {model_vocab_size} ids (0..={})",
                self.origin,
                self.id_bound - 1,
                model_vocab_size.saturating_sub(1)
            ));
        }
        let missing = model_vocab_size - self.id_bound;
        if u64::from(missing) * 100 > u64::from(model_vocab_size) {
            return Err(format!(
                "tokenizer {} has {} ids but model {model} has a vocabulary of {model_vocab_size}: the {missing} ids past the tokenizer's would decode to no text; give the model's own tokenizer",
                self.origin, self.id_bound
            ));
        }
        Ok(())
    }

    /// Token ids of `text`. With `add_special_tokens`, whatever the tokenizer's post-processor
    /// adds (a BOS for Llama's; nothing for the shipped ones), as a server encodes a prompt;
    /// without, as vLLM's client counts generated text.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, String> {
        let encoding =
            self.inner.encode(text, add_special_tokens).map_err(|e| format!("tokenizer {}: cannot encode the text: {e}", self.origin))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Whether `text` is over `limit` tokens, found without tokenizing all of it: a long text is
    /// counted a piece of [`PIECE_BYTES`] at a time (cut at whitespace where one is near), and
    /// the count stops once it is past `limit` plus two tokens a piece (what cutting can add at
    /// each seam). The tokens counted when it stops, or `None` where the text may fit (then it is
    /// tokenized whole, as before). Why: tokenizing a 1 MB prompt whole held about 400 MB of
    /// `tokenizers`' per-token state, and 16 such requests took the server to 833 MB, only to
    /// be refused as over the context.
    pub fn count_past(&self, text: &str, limit: usize) -> Option<usize> {
        if text.len() <= PIECE_BYTES {
            return None;
        }
        let (mut counted, mut pieces, mut rest) = (0usize, 0usize, text);
        while !rest.is_empty() {
            let mut end = PIECE_BYTES.min(rest.len());
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            if end < rest.len() {
                if let Some(space) = rest[..end].rfind(char::is_whitespace).filter(|&at| at > end / 2) {
                    end = space;
                }
            }
            counted += self.inner.encode_fast(&rest[..end], false).ok()?.len();
            pieces += 1;
            if counted > limit.saturating_add(2 * pieces) {
                return Some(counted);
            }
            rest = &rest[end..];
        }
        None
    }

    /// Text of `ids`, special tokens included. Ids the tokenizer does not know decode to nothing
    /// (as in transformers).
    pub fn decode(&self, ids: &[u32]) -> Result<String, String> {
        self.decode_skipping(ids, false)
    }

    /// Text of `ids`, special tokens left out when `skip_special_tokens`.
    pub fn decode_skipping(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, String> {
        self.inner.decode(ids, skip_special_tokens).map_err(|e| format!("tokenizer {}: cannot decode: {e}", self.origin))
    }

    /// The text of one token alone (TGI's per-token `text`); empty if it cannot be decoded.
    pub fn token_text(&self, id: u32) -> String {
        self.decode(&[id]).unwrap_or_default()
    }

    /// Whether `id` is a special added token (`<s>`, `</s>`, ...): TGI's `special` flag.
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.contains(&id)
    }

    /// The chat template that came with it, or why there is none.
    pub fn chat_template(&self) -> &ChatTemplateState {
        &self.chat
    }
}

/// Incremental decoding for streamed responses: emits text only once it is stable, so the
/// pieces concatenate to exactly [`Tokenizer::decode`] of all ids whenever decoding is
/// prefix-stable (the shipped tokenizers, byte-level BPE; not a trailing incomplete character
/// under ByteFallback, see [`StreamDecoder::flush`]). Runs the `tokenizers` crate's
/// own streaming step (what its `DecodeStream` and TGI use: decode a short window of ids, hold
/// back text ending in U+FFFD, an incomplete character); it keeps the state itself, instead of
/// borrowing the tokenizer as `DecodeStream` does, so it can live in a `'static` response stream.
pub struct StreamDecoder {
    tokenizer: Arc<Tokenizer>,
    skip_special_tokens: bool,
    ids: Vec<u32>,
    prefix: String,
    prefix_index: usize,
}

impl StreamDecoder {
    /// A decoder that leaves special tokens' text out when `skip_special_tokens`.
    pub fn new(tokenizer: Arc<Tokenizer>, skip_special_tokens: bool) -> StreamDecoder {
        StreamDecoder { tokenizer, skip_special_tokens, ids: Vec::new(), prefix: String::new(), prefix_index: 0 }
    }

    /// The text that became stable with this token (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, String> {
        let t = &self.tokenizer;
        let skip = self.skip_special_tokens;
        let step = tokenizers::tokenizer::step_decode_stream(&t.inner, vec![id], skip, &mut self.ids, &mut self.prefix, &mut self.prefix_index);
        step.map(Option::unwrap_or_default).map_err(|e| format!("tokenizer {}: cannot decode token {id}: {e}", t.origin))
    }

    /// Whatever is still held back (an incomplete character, decoded as the full decode would).
    pub fn flush(&mut self) -> Result<String, String> {
        let (t, skip) = (&self.tokenizer, self.skip_special_tokens);
        let whole = t.decode_skipping(&self.ids, skip)?;
        let rest = match whole.strip_prefix(self.prefix.as_str()) {
            Some(rest) => rest.to_string(),
            // Decoding is not prefix-stable here: Hugging Face's ByteFallback turns a whole run
            // of byte tokens into one U+FFFD per byte when the run is not valid UTF-8, so the
            // window's text is not the emitted text plus more. Flush the held-back tail alone.
            None => t.decode_skipping(&self.ids[self.prefix_index.min(self.ids.len())..], skip)?,
        };
        self.ids.clear();
        self.prefix.clear();
        self.prefix_index = 0;
        Ok(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    fn stream(tokenizer: &Arc<Tokenizer>, ids: &[u32]) -> String {
        let mut d = StreamDecoder::new(tokenizer.clone(), false);
        let mut s: String = ids.iter().map(|&t| d.push(t).unwrap()).collect();
        s.push_str(&d.flush().unwrap());
        s
    }

    #[test]
    fn a_text_past_the_limit_is_counted_a_piece_at_a_time_and_stops() {
        let t = Tokenizer::shipped(256).unwrap();
        // One token a character: 1 MB is a million tokens, found past 2,048 in the first piece.
        let long = "ab ".repeat(349_525);
        let counted = t.count_past(&long, 2048).expect("over the limit");
        assert!(counted > 2048 && counted <= PIECE_BYTES, "stopped after one piece: {counted}");
        // Short texts, and long ones within the limit, are left to the whole tokenization.
        assert_eq!(t.count_past("hello", 1), None);
        assert_eq!(t.count_past(&long, 2_000_000), None);
        // Counting in pieces (cut at spaces) gives the whole text's count.
        let whole = t.encode(&long[..100_000], false).unwrap().len();
        assert_eq!(t.count_past(&long[..100_000], whole - 20), Some(whole));
    }

    #[test]
    fn shipped_tokenizers_have_the_documented_ids() {
        for vocab in [256u32, 32_000] {
            let t = Tokenizer::shipped(vocab).unwrap();
            assert_eq!(t.id_bound(), vocab);
            assert_eq!(t.base_vocab_size(), vocab - 2, "HF vocab_size leaves out <s> and </s>");
            assert_eq!(t.encode("<unk></s><s>", true).unwrap(), [0, vocab - 1, vocab - 2]);
            assert!(t.is_special(vocab - 1) && !t.is_special(5));
            assert_eq!(t.encode("hello\n", true).unwrap().len(), 6, "one token per character");
            assert_eq!(t.encode("😀", true).unwrap(), [0], "an unknown character is one <unk>");
            t.check_fits(vocab, "m").unwrap();
            let ChatTemplateState::Ready(chat) = t.chat_template() else { panic!("{:?}", t.chat_template()) };
            let messages = [json!({"role": "user", "content": "hi"})];
            assert_eq!(chat.render(&messages, true, &Default::default()).unwrap(), "<|user|>\nhi</s>\n<|assistant|>\n");
            let err = t.check_fits(vocab - 1, "m").unwrap_err();
            assert!(err.contains(&format!("ids up to {}", vocab - 1)) && err.contains(&format!("vocabulary of {} ids", vocab - 1)), "{err}");
            // A model vocabulary past the tokenizer's: padding under 1% passes, more is refused
            // with both sizes.
            t.check_fits(vocab + vocab / 100, "m").unwrap();
            let err = t.check_fits(vocab * 4, "m").unwrap_err();
            assert!(err.contains(&format!("has {vocab} ids")) && err.contains(&format!("vocabulary of {}", vocab * 4)), "{err}");
        }
        assert!(Tokenizer::shipped(1000).is_none());
    }

    /// What benchmark clients rely on: decoding any ids and re-encoding the text gives the same
    /// ids back, whether drawn below `vocab_size` (prompts) or from every id (what a model emits).
    #[test]
    fn shipped_tokenizers_round_trip_any_ids_and_stream_exactly() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for vocab in [256u32, 32_000] {
            let t = Arc::new(Tokenizer::shipped(vocab).unwrap());
            for trial in 0..200 {
                let bound = if trial % 2 == 0 { t.base_vocab_size() } else { t.id_bound() };
                let n = rng.random_range(1..300usize);
                let ids: Vec<u32> = (0..n).map(|_| rng.random_range(0..bound)).collect();
                let text = t.decode(&ids).unwrap();
                assert_eq!(t.encode(&text, false).unwrap(), ids, "vocab {vocab}, trial {trial}");
                assert_eq!(stream(&t, &ids), text);
            }
        }
    }

    #[test]
    fn skipping_special_tokens_leaves_their_text_out_whole_and_streamed() {
        let t = Arc::new(Tokenizer::shipped(256).unwrap());
        let mut ids = t.encode("ab", false).unwrap();
        ids.extend([254, 255]);
        ids.extend(t.encode("c", false).unwrap());
        assert_eq!(t.decode(&ids).unwrap(), "ab<s></s>c");
        assert_eq!(t.decode_skipping(&ids, true).unwrap(), "abc");
        for (skip, text) in [(true, "abc"), (false, "ab<s></s>c")] {
            let mut d = StreamDecoder::new(t.clone(), skip);
            let mut streamed: String = ids.iter().map(|&id| d.push(id).unwrap()).collect();
            streamed.push_str(&d.flush().unwrap());
            assert_eq!(streamed, text, "skip_special_tokens {skip}");
        }
    }

    #[test]
    fn byte_tokenizer_round_trips_multibyte_text_and_streams_whole_characters() {
        let t = Arc::new(Tokenizer::bytes());
        let text = "héllo → 世界";
        let ids = t.encode(text, true).unwrap();
        assert_eq!(ids, text.bytes().map(u32::from).collect::<Vec<_>>());
        assert_eq!(t.decode(&ids).unwrap(), text);
        assert_eq!(stream(&t, &ids), text);
        // A character split across tokens is held back until whole.
        let mut d = StreamDecoder::new(t.clone(), false);
        assert_eq!(d.push(0xE4).unwrap(), "");
        assert_eq!(d.push(0xB8).unwrap(), "");
        assert_eq!(d.push(0x96).unwrap(), "世");
        // An incomplete one at the end is flushed as U+FFFD (the whole run's decode would turn
        // the finished character into U+FFFDs too: ByteFallback is not prefix-stable).
        assert_eq!(d.push(0xE4).unwrap(), "");
        assert_eq!(d.flush().unwrap(), "\u{FFFD}");
        assert_eq!(d.push(b'a'.into()).unwrap(), "a", "a flushed decoder starts afresh");
        assert_eq!(t.token_text(104), "h");
    }

    #[test]
    fn load_errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("servesim-tokenizer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = Tokenizer::load(&dir).unwrap_err().to_string();
        assert!(err.contains("tokenizer.json") && err.contains("cannot read"), "{err}");
        std::fs::write(dir.join("tokenizer.json"), "{\"model\": 3}").unwrap();
        let err = Tokenizer::load(&dir).unwrap_err().to_string();
        assert!(err.contains(&dir.join("tokenizer.json").display().to_string()) && err.contains("not a valid"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Request lengths from a ShareGPT conversation file, sampled as vLLM's `benchmark_serving.py`
//! (0.6.x) samples its `sharegpt` dataset: the first turn of each conversation with at least two
//! is the prompt, the second the completion, counted in tokens by the benchmark's tokenizer.
//!
//! ```text
//!  [{"conversations": [{"from": "human", "value": …}, {"from": "gpt", "value": …}, …]}, …]
//!    ──► pairs (turn 0, turn 1) ──► seeded shuffle ──► tokenize in order, keep a pair unless
//!        prompt < 4 or completion < 4 tokens, prompt > 1024, or both together > 2048
//!        ──► the first `count` kept
//! ```
//!
//! Only the lengths are kept: the client sends prompts of those lengths (see `bench`), not the
//! conversation text, which loads the server alike.

use std::path::Path;

use rand::seq::SliceRandom;

use super::rng::{Stream, stream};

/// vLLM's filters: shorter pairs say little about serving; longer ones do not fit the 2048-token
/// context of the models it benchmarked first.
const MIN_TOKENS: usize = 4;
const PROMPT_TOKENS_MAX: usize = 1024;
const TOTAL_TOKENS_MAX: usize = 2048;

#[derive(serde::Deserialize)]
struct Conversation {
    #[serde(default)]
    conversations: Vec<Turn>,
}

#[derive(serde::Deserialize)]
struct Turn {
    value: String,
}

/// The `(prompt, completion)` token counts of the first `count` pairs that pass vLLM's filters,
/// in the order a shuffle seeded with `seed` puts them. `tokens` counts one text's tokens.
///
/// Errors name the file: unreadable, not ShareGPT JSON, a tokenizer error, or fewer than
/// `count` usable pairs.
pub fn sample_lengths(
    path: &Path,
    count: usize,
    seed: u64,
    tokens: impl Fn(&str) -> Result<usize, String>,
) -> Result<Vec<(u32, u32)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let conversations: Vec<Conversation> = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a ShareGPT file (a JSON list of {{\"conversations\": [{{\"value\": …}}, …]}}): {e}", path.display()))?;
    let mut pairs: Vec<(String, String)> = conversations
        .into_iter()
        .filter(|c| c.conversations.len() >= 2)
        .map(|c| {
            let mut turns = c.conversations.into_iter();
            let prompt = turns.next().map(|t| t.value).unwrap_or_default();
            let completion = turns.next().map(|t| t.value).unwrap_or_default();
            (prompt, completion)
        })
        .collect();
    pairs.shuffle(&mut stream(seed, Stream::InputLengths));
    let mut out = Vec::with_capacity(count);
    for (prompt, completion) in &pairs {
        if out.len() == count {
            break;
        }
        let p = tokens(prompt).map_err(|e| format!("{}: {e}", path.display()))?;
        let c = tokens(completion).map_err(|e| format!("{}: {e}", path.display()))?;
        if p < MIN_TOKENS || c < MIN_TOKENS || p > PROMPT_TOKENS_MAX || p + c > TOTAL_TOKENS_MAX {
            continue;
        }
        out.push((p as u32, c as u32));
    }
    if out.len() < count {
        return Err(format!(
            "{}: only {} of its {} conversations pass vLLM's ShareGPT filters (4–1024 prompt tokens, ≥ 4 completion tokens, ≤ 2048 in all); {count} are needed",
            path.display(),
            out.len(),
            pairs.len()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per whitespace-separated word.
    fn words(text: &str) -> Result<usize, String> {
        Ok(text.split_whitespace().count())
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn keeps_first_turn_pairs_that_pass_the_filters() {
        let f = file(
            r#"[
            {"conversations": [{"from": "human", "value": "a b c d e"}, {"from": "gpt", "value": "1 2 3 4 5 6"}, {"from": "human", "value": "x"}]},
            {"conversations": [{"from": "human", "value": "too short"}, {"from": "gpt", "value": "1 2 3 4"}]},
            {"conversations": [{"from": "human", "value": "only one turn here at all"}]},
            {"id": "no conversations"},
            {"conversations": [{"from": "human", "value": "w w w w w w w"}, {"from": "gpt", "value": "v v v v"}]}
        ]"#,
        );
        let mut got = sample_lengths(f.path(), 2, 0, words).unwrap();
        got.sort();
        assert_eq!(got, vec![(5, 6), (7, 4)]);
        // The shuffle is the seed's: the same seed, the same order.
        assert_eq!(sample_lengths(f.path(), 2, 9, words).unwrap(), sample_lengths(f.path(), 2, 9, words).unwrap());
    }

    #[test]
    fn too_few_usable_pairs_is_an_error_naming_the_file() {
        let f = file(r#"[{"conversations": [{"value": "a b c d"}, {"value": "e f g h"}]}]"#);
        let e = sample_lengths(f.path(), 2, 0, words).unwrap_err();
        assert!(e.contains(&f.path().display().to_string()) && e.contains("only 1"), "{e}");
        let bad = file("{not json");
        assert!(sample_lengths(bad.path(), 1, 0, words).unwrap_err().contains("not a ShareGPT file"));
    }
}

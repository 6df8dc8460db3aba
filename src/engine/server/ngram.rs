//! N-gram speculation (prompt lookup): drafts a sequence's next tokens by finding its last few
//! tokens earlier in the sequence and proposing what followed them there. It needs no draft
//! model, and pays off where outputs repeat their inputs (code edits, summaries, chat turns
//! that quote the context). vLLM's `method = "ngram"` with `prompt_lookup_min/max`.

/// `--num-speculative-tokens` with `--prompt-lookup-min` / `--prompt-lookup-max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgramLookup {
    /// k: the most drafts proposed for one step.
    pub num_speculative_tokens: u32,
    /// The shortest suffix that may match.
    pub min_n: u32,
    /// The longest suffix tried first.
    pub max_n: u32,
}

impl NgramLookup {
    /// vLLM's bounds on the lookup window (`SpeculativeConfig`): n in 1..=`MAX_N`.
    pub const MAX_N: u32 = 64;
    /// The most drafts a step may verify.
    pub const MAX_SPECULATIVE_TOKENS: u32 = 32;

    /// Checks the settings, naming the flag at fault.
    pub fn check(&self) -> Result<(), (&'static str, u32, String)> {
        if !(1..=Self::MAX_SPECULATIVE_TOKENS).contains(&self.num_speculative_tokens) {
            let reason = format!("must be in 1..={}", Self::MAX_SPECULATIVE_TOKENS);
            return Err(("--num-speculative-tokens", self.num_speculative_tokens, reason));
        }
        if !(1..=Self::MAX_N).contains(&self.max_n) {
            return Err(("--prompt-lookup-max", self.max_n, format!("must be in 1..={}", Self::MAX_N)));
        }
        if !(1..=self.max_n).contains(&self.min_n) {
            return Err(("--prompt-lookup-min", self.min_n, format!("must be in 1..=--prompt-lookup-max ({})", self.max_n)));
        }
        Ok(())
    }

    /// Drafts for the sequence `tokens` into `drafts` (cleared first), at most `limit`: for n
    /// from `max_n` down to `min_n`, the latest earlier place where its last n tokens occur, and
    /// up to k of the tokens after it. None when no suffix recurs.
    pub fn propose(&self, tokens: &[u32], limit: u32, drafts: &mut Vec<u32>) {
        drafts.clear();
        let want = self.num_speculative_tokens.min(limit) as usize;
        if want == 0 {
            return;
        }
        let len = tokens.len();
        for n in (self.min_n as usize..=(self.max_n as usize).min(len.saturating_sub(1))).rev() {
            let suffix = &tokens[len - n..];
            // Latest start first: recent context predicts best, and a match ending right before
            // the suffix still has tokens after it.
            let found = (0..len - n).rev().find(|&start| &tokens[start..start + n] == suffix);
            if let Some(start) = found {
                let after = start + n;
                let take = want.min(len - after);
                drafts.extend_from_slice(&tokens[after..after + take]);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(k: u32, min_n: u32, max_n: u32) -> NgramLookup {
        NgramLookup { num_speculative_tokens: k, min_n, max_n }
    }

    #[test]
    fn proposes_what_followed_the_latest_match_of_the_longest_suffix() {
        let mut drafts = Vec::new();
        // "1 2 3 9 9 | 1 2 3 7 8 | 1 2 3": the latest earlier "1 2 3" is followed by 7 8.
        let tokens = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3];
        lookup(2, 1, 3).propose(&tokens, 10, &mut drafts);
        assert_eq!(drafts, [7, 8]);
        // Capped by the limit, and by the tokens that exist after the match.
        lookup(5, 1, 3).propose(&tokens, 1, &mut drafts);
        assert_eq!(drafts, [7]);
        lookup(5, 1, 3).propose(&tokens, 10, &mut drafts);
        assert_eq!(drafts, [7, 8, 1, 2, 3]);
    }

    #[test]
    fn falls_back_to_shorter_suffixes_and_proposes_nothing_without_a_match() {
        let mut drafts = Vec::new();
        // "5 6" never recurs, "6" does.
        lookup(3, 1, 2).propose(&[6, 4, 4, 5, 6], 10, &mut drafts);
        assert_eq!(drafts, [4, 4, 5]);
        lookup(3, 2, 2).propose(&[6, 4, 4, 5, 6], 10, &mut drafts);
        assert!(drafts.is_empty());
        lookup(3, 1, 4).propose(&[1], 10, &mut drafts);
        assert!(drafts.is_empty());
    }

    #[test]
    fn bad_settings_name_their_flag() {
        assert_eq!(lookup(0, 1, 3).check().unwrap_err().0, "--num-speculative-tokens");
        assert_eq!(lookup(4, 1, 0).check().unwrap_err().0, "--prompt-lookup-max");
        assert_eq!(lookup(4, 5, 3).check().unwrap_err().0, "--prompt-lookup-min");
        assert!(lookup(4, 1, 3).check().is_ok());
    }
}

//! Stop strings over streamed text: the output ends where one first appears, and text that could
//! still turn out to begin one is held back, so a stream never sends part of a stop string it
//! then leaves out (vLLM holds back the longest stop string's length less one; holding back only
//! a tail that is a prefix of a stop string sends the rest sooner, and sends the same text).
//!
//! Which stop string ends the output is vLLM's choice (`check_stop_strings` in its detokenizer):
//! each time text is added, the stop strings are tried in the request's order, and the first one
//! that ends in the new text wins, cut at its first place there. So of `["lo", "hel"]`, a piece
//! "say hello" stops on "lo" (the output is "say hel"), not on "hel", which starts earlier.
//! The server pushes one token's text at a time, also for tokens delivered together, as vLLM
//! 0.6's multi-step output processor checked them.

/// What one piece of text let through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Text that may be sent now.
    pub emit: String,
    /// The stop string that ended the output, if one did.
    pub matched: Option<String>,
}

/// Finds stop strings in text pushed piece by piece.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Whether the stop string stays in the output (vLLM's `include_stop_str_in_output`, TGI).
    include: bool,
    /// Everything pushed so far.
    text: String,
    /// Bytes of `text` already let through.
    emitted: usize,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>, include: bool) -> StopMatcher {
        StopMatcher { stops, include, text: String::new(), emitted: 0 }
    }

    /// Takes the next piece of output text. After a match the output is over: push no more.
    pub fn push(&mut self, piece: &str) -> Step {
        if self.stops.is_empty() {
            return Step { emit: piece.to_string(), matched: None };
        }
        let before = self.text.len();
        self.text.push_str(piece);
        let text = &self.text;
        let found = self.stops.iter().find_map(|stop| {
            // A stop string that ends in the new text starts at most its length less one byte
            // before it; one that ended earlier was found by an earlier push.
            let mut from = before.saturating_sub(stop.len().saturating_sub(1));
            while !text.is_char_boundary(from) {
                from -= 1;
            }
            text[from..].find(stop.as_str()).map(|at| (from + at, stop))
        });
        if let Some((at, stop)) = found {
            let end = if self.include { at + stop.len() } else { at };
            let emit = self.text[self.emitted.min(end)..end].to_string();
            self.emitted = end;
            return Step { emit, matched: Some(stop.clone()) };
        }
        let end = self.text.len() - if self.include { 0 } else { self.held_back() };
        let emit = self.text[self.emitted..end].to_string();
        self.emitted = end;
        Step { emit, matched: None }
    }

    /// The text held back, once the output has ended without a stop string.
    pub fn finish(&mut self) -> String {
        let rest = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        rest
    }

    /// Bytes at the end of the text that begin some stop string: the longest such tail. It
    /// starts on a character boundary, because a stop string starts with a whole character.
    fn held_back(&self) -> usize {
        let text = self.text.as_bytes();
        let mut longest = 0;
        for stop in &self.stops {
            let stop = stop.as_bytes();
            for k in (longest + 1..stop.len().min(text.len() + 1)).rev() {
                if text.ends_with(&stop[..k]) {
                    longest = k;
                    break;
                }
            }
        }
        longest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole output and the stop string, pushed in `pieces`.
    fn run(stops: &[&str], include: bool, pieces: &[&str]) -> (Vec<String>, Option<String>) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect(), include);
        let mut sent = Vec::new();
        for piece in pieces {
            let step = m.push(piece);
            sent.push(step.emit);
            if step.matched.is_some() {
                return (sent, step.matched);
            }
        }
        sent.push(m.finish());
        (sent, None)
    }

    #[test]
    fn a_stop_string_across_pieces_ends_the_output_before_it() {
        let (sent, matched) = run(&["END"], false, &["ab", "cE", "N", "Dxyz"]);
        // "E" and "EN" were held back: they might have begun "END".
        assert_eq!(sent, ["ab", "c", "", ""]);
        assert_eq!(matched.as_deref(), Some("END"));
        let (sent, matched) = run(&["END"], true, &["ab", "cE", "N", "Dxyz"]);
        assert_eq!(sent.concat(), "abcEND", "included, and nothing after it");
        assert_eq!(matched.as_deref(), Some("END"));
    }

    #[test]
    fn held_back_text_that_was_no_stop_is_sent_later() {
        let (sent, matched) = run(&["END"], false, &["aE", "Nb", "c"]);
        assert_eq!(sent, ["a", "ENb", "c", ""]);
        assert_eq!(matched, None);
        let (sent, _) = run(&["END"], false, &["xEN"]);
        assert_eq!(sent, ["x", "EN"], "finish sends the tail");
    }

    #[test]
    fn the_first_stop_string_in_the_requests_order_wins_and_text_is_cut_on_characters() {
        // vLLM tries the stop strings in the request's order: "lo" ends in the new text, so it
        // wins over "hel", which starts earlier.
        let (sent, matched) = run(&["lo", "hel"], false, &["say hello"]);
        assert_eq!((sent.concat(), matched.as_deref()), ("say hel".to_string(), Some("lo")));
        let (sent, matched) = run(&["hel", "lo"], false, &["say hello"]);
        assert_eq!((sent.concat(), matched.as_deref()), ("say ".to_string(), Some("hel")));
        // Pushed a character at a time, "hel" ends first, whatever the order.
        let (sent, matched) = run(&["lo", "hel"], false, &["say ", "h", "e", "l", "l", "o"]);
        assert_eq!((sent.concat(), matched.as_deref()), ("say ".to_string(), Some("hel")));
        // A stop string twice in one piece: cut at its first place.
        let (sent, matched) = run(&["ab"], true, &["xabyab"]);
        assert_eq!((sent.concat(), matched.as_deref()), ("xab".to_string(), Some("ab")));
        let (sent, matched) = run(&["é!"], false, &["caf", "é", "!", "x"]);
        assert_eq!((sent.concat(), matched.as_deref()), ("caf".to_string(), Some("é!")));
        let (sent, matched) = run(&["界"], false, &["世", "界"]);
        assert_eq!((sent, matched.as_deref()), (vec!["世".to_string(), String::new()], Some("界")));
        let (sent, _) = run(&[], false, &["a", "b"]);
        assert_eq!(sent.concat(), "ab");
    }
}

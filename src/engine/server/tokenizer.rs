//! A byte-level tokenizer: one token per UTF-8 byte (ids 0..=255).
//!
//! A stand-in until the engine ships a Hugging Face tokenizer directory (`tokenizer.json`):
//! benchmark clients that count tokens with their own tokenizer will not agree with it, but the
//! `usage` counts the server reports are exact for it.

/// Text → one token per UTF-8 byte; tokens → bytes. Ids of 256 and above have no bytes and
/// decode to U+FFFD.
#[derive(Clone, Copy, Debug, Default)]
pub struct ByteTokenizer;

impl ByteTokenizer {
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    /// The text of one token alone (lossy for a partial UTF-8 sequence).
    pub fn decode_one(&self, id: u32) -> String {
        match u8::try_from(id) {
            Ok(b) => String::from_utf8_lossy(&[b]).into_owned(),
            Err(_) => "\u{FFFD}".to_string(),
        }
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        let mut d = ByteDecoder::default();
        let mut s: String = ids.iter().map(|&t| d.push(t)).collect();
        s.push_str(&d.flush());
        s
    }
}

/// Incremental decoding: holds back the bytes of an incomplete UTF-8 character until it is whole,
/// so streamed text concatenates to exactly the decoded whole.
#[derive(Clone, Debug, Default)]
pub struct ByteDecoder {
    pending: Vec<u8>,
}

impl ByteDecoder {
    /// The text that became complete with this token (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        match u8::try_from(id) {
            Ok(b) => self.pending.push(b),
            Err(_) => {
                let mut s = self.flush();
                s.push('\u{FFFD}');
                return s;
            }
        }
        match std::str::from_utf8(&self.pending) {
            Ok(s) => {
                let s = s.to_string();
                self.pending.clear();
                s
            }
            Err(e) if e.error_len().is_none() && self.pending.len() - e.valid_up_to() < 4 => {
                // An incomplete character at the end: emit what is whole, keep the rest.
                let valid = e.valid_up_to();
                let s = String::from_utf8_lossy(&self.pending[..valid]).into_owned();
                self.pending.drain(..valid);
                s
            }
            Err(_) => self.flush(),
        }
    }

    /// Whatever is held back, lossily.
    pub fn flush(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_multibyte_text() {
        let text = "héllo → 世界";
        let ids = ByteTokenizer.encode(text);
        assert_eq!(ids.len(), text.len());
        assert_eq!(ByteTokenizer.decode(&ids), text);
    }
}

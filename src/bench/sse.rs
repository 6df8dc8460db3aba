//! A minimal server-sent-events line splitter: bytes in, `data:` payloads out.
//!
//! Only what OpenAI- and TGI-style streams use is handled: `data:` fields, one event per line.
//! Other fields (`event:`, `id:`, `retry:`) and comment lines (`:`) are skipped rather than
//! rejected, so a server that sends keep-alives still works.

/// Splits a byte stream into complete lines and yields their `data:` payloads.
///
/// Bytes are buffered until a newline arrives, because the network splits chunks anywhere —
/// including inside a multi-byte UTF-8 character or a JSON object.
#[derive(Debug, Default)]
pub struct SseLines {
    pending: Vec<u8>,
}

/// Longest line kept while waiting for its newline. A limit on everything: a server that never
/// sends a newline must not grow the buffer without bound. 16 MiB is far above any real event.
const LINE_BYTES_MAX: usize = 16 << 20;

impl SseLines {
    /// An empty splitter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds `bytes` and appends the payload of every `data:` line they complete to `out`
    /// (prefix and one optional leading space removed, `\r` trimmed).
    ///
    /// # Errors
    ///
    /// A line longer than 16 MiB, or a `data:` line that is not UTF-8.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<String>) -> Result<(), String> {
        self.pending.extend_from_slice(bytes);
        let mut consumed = 0;
        while let Some(offset) = self.pending[consumed..].iter().position(|&b| b == b'\n') {
            let line = &self.pending[consumed..consumed + offset];
            consumed += offset + 1;
            if let Some(payload) = data_payload(line)? {
                out.push(payload);
            }
        }
        self.pending.drain(..consumed);
        if self.pending.len() > LINE_BYTES_MAX {
            return Err(format!("stream line longer than {LINE_BYTES_MAX} bytes"));
        }
        Ok(())
    }

    /// Payload of a final line the stream ended without terminating (some servers omit the last
    /// newline); `None` if nothing usable is left.
    ///
    /// # Errors
    ///
    /// A `data:` line that is not UTF-8.
    pub fn finish(&mut self) -> Result<Option<String>, String> {
        let line = std::mem::take(&mut self.pending);
        data_payload(&line)
    }
}

/// The payload of one line if it is a non-empty `data:` field.
fn data_payload(line: &[u8]) -> Result<Option<String>, String> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Some(rest) = line.strip_prefix(b"data:") else {
        return Ok(None);
    };
    // The SSE spec strips exactly one space after the colon; TGI sends none, OpenAI one.
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    if rest.is_empty() {
        return Ok(None);
    }
    std::str::from_utf8(rest)
        .map(|s| Some(s.to_owned()))
        .map_err(|e| format!("stream line is not UTF-8: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_across_chunks_and_skips_other_fields() {
        let mut lines = SseLines::new();
        let mut out = Vec::new();
        lines
            .feed(b": keep-alive\n\ndata: {\"a\"", &mut out)
            .unwrap();
        assert!(out.is_empty());
        lines
            .feed(b":1}\r\n\r\nevent: x\ndata:[DONE]\n\ndata: tail", &mut out)
            .unwrap();
        assert_eq!(out, vec!["{\"a\":1}".to_owned(), "[DONE]".to_owned()]);
        assert_eq!(lines.finish().unwrap(), Some("tail".to_owned()));
        assert_eq!(lines.finish().unwrap(), None);
    }

    #[test]
    fn multibyte_character_split_between_chunks() {
        let text = "data: é\n".as_bytes();
        let mut lines = SseLines::new();
        let mut out = Vec::new();
        lines.feed(&text[..7], &mut out).unwrap();
        lines.feed(&text[7..], &mut out).unwrap();
        assert_eq!(out, vec!["é".to_owned()]);
    }
}

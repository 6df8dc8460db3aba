//! What one client may cost the server: prompt bytes, time to send a request, and how long a
//! shutdown waits for the requests in flight (`servesim serve`'s flags of the same names).

use std::time::Duration;

/// Most bytes of a request body accepted (413 beyond).
pub const REQUEST_BODY_BYTES_MAX: usize = 16 << 20;

/// The server's limits. [`ServerLimits::default`] is what `servesim serve` starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Most bytes of a text prompt, checked before tokenizing (400 beyond). Tokenizing costs
    /// about 1 s and 36 MB per MB of text (issue 17: 15 MB took 14 s and 540 MB), so this, not
    /// the context length in tokens, is what bounds a request's tokenizer work.
    pub prompt_bytes_max: usize,
    /// Time to send a request's line and headers, and how long a kept-alive connection may sit
    /// idle; the connection is closed after it.
    pub header_read_timeout: Duration,
    /// Time to send a request's body once its headers are in (408 after it).
    pub body_read_timeout: Duration,
    /// After SIGTERM, how long requests in flight may take to finish before every connection
    /// is closed.
    pub drain_timeout: Duration,
}

/// 1 MiB of text: 256K tokens at BPE's ~4 bytes a token, eight times a 32K context, and about a
/// second of tokenizing.
pub const PROMPT_BYTES_MAX_DEFAULT: usize = 1 << 20;
pub const HEADER_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
pub const BODY_READ_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Kubernetes' default grace period between SIGTERM and SIGKILL is 30 s too.
pub const DRAIN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);

impl Default for ServerLimits {
    fn default() -> ServerLimits {
        ServerLimits {
            prompt_bytes_max: PROMPT_BYTES_MAX_DEFAULT,
            header_read_timeout: HEADER_READ_TIMEOUT_DEFAULT,
            body_read_timeout: BODY_READ_TIMEOUT_DEFAULT,
            drain_timeout: DRAIN_TIMEOUT_DEFAULT,
        }
    }
}

//! The accept loop and each connection's HTTP/1.1 (hyper): a header-read timeout, and a
//! shutdown that drains for at most [`ServerLimits::drain_timeout`] and then closes every
//! connection, so that no client can hold the server open.
//!
//! axum's own `serve` has neither: a connection that sent half a request line kept it from
//! exiting after SIGTERM (issue 17).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::StatusCode;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::request::error_body;
use super::limits::ServerLimits;

/// Most header fields in a request (431 beyond); hyper's default.
pub const HEADERS_MAX: usize = 100;
/// Most bytes of a request line plus its headers (431 beyond).
pub const HEADER_BYTES_MAX: usize = 64 << 10;

/// How a server stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drained {
    /// Connections still open when the drain timeout ran out, closed then.
    pub connections_closed: usize,
    /// From the shutdown signal to the last connection gone.
    pub drain_time: Duration,
}

/// Serves `app` on `listener` until `shutdown` completes; then stops accepting, lets the
/// requests in flight finish for at most `limits.drain_timeout`, and closes what is left.
pub async fn serve_app(listener: TcpListener, app: Router, limits: ServerLimits, shutdown: impl Future<Output = ()> + Send + 'static) -> Drained {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    connections.spawn(connection(tcp, app.clone(), limits, stop_rx.clone()));
                }
                // Out of file descriptors or the like: wait for connections to close rather
                // than spin on accept.
                Err(e) if !is_connection_error(&e) => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(_) => {}
            },
            // Reap finished connections, so the set holds only open ones.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let started = Instant::now();
    let _ = stop_tx.send(true);
    let drain = async { while connections.join_next().await.is_some() {} };
    let connections_closed = match tokio::time::timeout(limits.drain_timeout, drain).await {
        Ok(()) => 0,
        Err(_) => {
            let open = connections.len();
            // Dropping a connection's task closes its socket, and its request streams cancel
            // their requests in the engine.
            connections.shutdown().await;
            open
        }
    };
    Drained { connections_closed, drain_time: started.elapsed() }
}

/// Errors of one connection that `accept` reports; the listener itself is fine.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset)
}

async fn connection(tcp: TcpStream, app: Router, limits: ServerLimits, mut stop: watch::Receiver<bool>) {
    // No Nagle: a streamed token is one small write, and holding it until the client's delayed
    // ACK arrives (up to 40 ms on Linux) would show up in the client's TTFT and ITL.
    let _ = tcp.set_nodelay(true);
    let io = TokioIo::new(JsonErrorHeads::new(tcp));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_headers(HEADERS_MAX)
        .max_header_size(HEADER_BYTES_MAX);
    let conn = builder.serve_connection(io, TowerToHyperService::new(app));
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stop.wait_for(|&stopping| stopping) => {}
    }
    // Idle: closes now. Mid-request: finishes the response, then closes.
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Gives hyper's own error responses a JSON body like every other error of the server.
///
/// hyper answers a request it cannot parse (bad request line or header: 400; headers too many
/// or too large: 431; URI too long: 414) itself, with an empty body, and offers no hook to
/// change it. Those heads are the only bodiless 4xx/5xx responses this server writes (the
/// routes' errors all carry JSON), so this writer recognises them and appends the JSON.
struct JsonErrorHeads<T> {
    inner: T,
    /// The rewritten head and its body, still to be written.
    pending: Vec<u8>,
    written: usize,
}

impl<T> JsonErrorHeads<T> {
    fn new(inner: T) -> Self {
        JsonErrorHeads { inner, pending: Vec::new(), written: 0 }
    }
}

/// `head` with a JSON body, if it is a whole bodiless error head.
fn with_json_body(head: &[u8]) -> Option<Vec<u8>> {
    const EMPTY: &[u8] = b"\r\ncontent-length: 0\r\n";
    let status: u16 = std::str::from_utf8(head.strip_prefix(b"HTTP/1.1 ")?.get(..3)?).ok()?.parse().ok()?;
    let status = StatusCode::from_u16(status).ok()?;
    if !(status.is_client_error() || status.is_server_error()) || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let at = head.windows(EMPTY.len()).position(|w| w == EMPTY)?;
    let message = match status {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
            format!("the request's headers are too large: at most {HEADERS_MAX} fields and {HEADER_BYTES_MAX} bytes with the request line")
        }
        StatusCode::URI_TOO_LONG => "the request's URI is too long".to_string(),
        _ => "malformed HTTP request: the request line or a header cannot be parsed".to_string(),
    };
    let body = error_body(status, &message);
    let mut out = Vec::with_capacity(head.len() + body.len() + 64);
    out.extend_from_slice(&head[..at]);
    out.extend_from_slice(format!("\r\ncontent-type: application/json\r\ncontent-length: {}\r\n", body.len()).as_bytes());
    out.extend_from_slice(&head[at + EMPTY.len()..]);
    out.extend_from_slice(body.as_bytes());
    Some(out)
}

impl<T: AsyncWrite + Unpin> JsonErrorHeads<T> {
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonErrorHeads<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonErrorHeads<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        match with_json_body(buf) {
            Some(rewritten) => {
                self.pending = rewritten;
                // hyper's bytes are taken; the rewrite goes out now or on the next flush.
                let _ = self.poll_pending(cx)?;
                Poll::Ready(Ok(buf.len()))
            }
            None => Pin::new(&mut self.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Unvectored, so that hyper hands a head over in one buffer.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bodiless_error_heads_get_a_json_body() {
        let head = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let out = String::from_utf8(with_json_body(head).unwrap()).unwrap();
        let (head_part, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head_part.starts_with("HTTP/1.1 431 ") && head_part.contains("\r\ncontent-type: application/json\r\n"), "{out}");
        assert!(head_part.contains(&format!("\r\ncontent-length: {}\r\n", body.len())) && head_part.ends_with("date: x"), "{out}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], 431);
        for other in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 20\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{\"x\"",
            b"HTTP/1.1 4",
            b"data: {}\n\n",
        ] {
            assert_eq!(with_json_body(other), None, "{}", String::from_utf8_lossy(other));
        }
    }
}

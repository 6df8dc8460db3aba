//! The HTTP front end (axum): the routes, and what every request passes through before them
//! (the body read whole within its limits; every error status given a JSON body).

use std::future::Future;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use serde_json::{Value, json};

use super::chat::chat_completions;
use super::completions::completions;
use super::connection::{Drained, serve_app};
use super::engine::EngineHandle;
use super::front::{Front, error_response, json_response};
use super::limits::{REQUEST_BODY_BYTES_MAX, ServerLimits};
use super::request::MODEL_NAME_ALIAS;
use super::sglang::{generate, server_info};
use super::tgi::generate_stream;

/// Serves the engine on `listener` with the default [`ServerLimits`] until `shutdown`
/// completes (e.g. on SIGTERM); see [`serve_with`].
pub async fn serve(listener: tokio::net::TcpListener, engine: EngineHandle, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    serve_with(listener, engine, ServerLimits::default(), shutdown).await;
    Ok(())
}

/// Serves the engine on `listener` until `shutdown` completes; then stops accepting, lets
/// requests in flight finish for at most `limits.drain_timeout`, and closes every connection.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    engine: EngineHandle,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Drained {
    serve_app(listener, router_with(engine, limits), limits, shutdown).await
}

/// The routes with the default [`ServerLimits`], for callers that want to embed them.
pub fn router(engine: EngineHandle) -> Router {
    router_with(engine, ServerLimits::default())
}

/// The routes under `limits`.
pub fn router_with(engine: EngineHandle, limits: ServerLimits) -> Router {
    let front = Front::new(engine, limits);
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/generate", post(generate))
        .route("/generate_stream", post(generate_stream))
        .route("/get_server_info", get(server_info))
        .route("/server_info", get(server_info))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        // The body is already whole and within the limit (read_body); the extractor's own
        // default limit (2 MB) must not cut it shorter.
        .layer(axum::extract::DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX))
        .layer(middleware::from_fn_with_state(limits, read_body))
        .layer(middleware::map_response(json_errors))
        .with_state(front)
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error_response(StatusCode::NOT_FOUND, &format!("no route for {method} {}", uri.path()))
}

/// Every error status gets a JSON body: axum's own (405, a rejected extractor) come as plain
/// text or nothing, and keep their other headers (405's `Allow`).
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    // axum's rejection texts are a line or two; anything longer is cut.
    let text = axum::body::to_bytes(body, 4096).await.map(|b| String::from_utf8_lossy(&b).trim().to_string()).unwrap_or_default();
    let message = if text.is_empty() { status.canonical_reason().unwrap_or("error").to_string() } else { text };
    let mut json = error_response(status, &message);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            json.headers_mut().insert(name, value.clone());
        }
    }
    json
}

/// Reads the whole request body before any handler runs: at most [`REQUEST_BODY_BYTES_MAX`]
/// bytes (413), within `limits.body_read_timeout` (408), and well framed (400).
async fn read_body(State(limits): State<ServerLimits>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let too_large = || {
        error_response(StatusCode::PAYLOAD_TOO_LARGE, &format!("the request body is larger than {REQUEST_BODY_BYTES_MAX} bytes"))
    };
    // A declared length over the limit is refused before a byte of it is read.
    if content_length(&parts.headers).is_some_and(|n| n > REQUEST_BODY_BYTES_MAX as u64) {
        return too_large();
    }
    let read = async {
        let mut data = Vec::new();
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| error_response(StatusCode::BAD_REQUEST, &format!("malformed request body: {}", error_chain(&e))))?;
            if data.len() + chunk.len() > REQUEST_BODY_BYTES_MAX {
                return Err(too_large());
            }
            data.extend_from_slice(&chunk);
        }
        Ok(data)
    };
    match tokio::time::timeout(limits.body_read_timeout, read).await {
        Ok(Ok(data)) => next.run(Request::from_parts(parts, Body::from(data))).await,
        Ok(Err(response)) => response,
        Err(_) => error_response(
            StatusCode::REQUEST_TIMEOUT,
            &format!("the request body did not arrive within {} s", limits.body_read_timeout.as_secs_f64()),
        ),
    }
}

/// An error and its sources: hyper's framing errors say what was wrong only in a source.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        // axum's wrapper repeats its source's text.
        let part = s.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

async fn models(State(front): State<Front>) -> Response {
    let engine = &front.engine;
    let mut names = vec![engine.model_name()];
    if engine.model_name() != MODEL_NAME_ALIAS {
        names.push(MODEL_NAME_ALIAS);
    }
    let data: Vec<Value> = names
        .iter()
        .map(|name| json!({"id": name, "object": "model", "created": 0, "owned_by": "servesim", "max_model_len": engine.context_len()}))
        .collect();
    json_response(&json!({"object": "list", "data": data}))
}

// ---------------------------------------------------------------- health, metrics

async fn health() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], "{}").into_response()
}

async fn metrics(State(front): State<Front>) -> Response {
    let page = super::metrics::render(&front.engine.stats(), &front.metrics, front.engine.model_name());
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4")], page).into_response()
}

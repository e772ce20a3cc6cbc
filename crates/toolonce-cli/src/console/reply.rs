//! The shapes of the console's answers: JSON documents and errors, with headers that keep a
//! browser from framing, sniffing or caching them.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

pub(crate) type Answer = Response<Full<Bytes>>;

/// An answer with `content_type`, and the headers every console answer carries.
pub(crate) fn with(status: StatusCode, content_type: &'static str, body: Bytes) -> Answer {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    // Only the console's own script and style: an injected tag would not run.
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
             img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    response
}

pub(crate) fn json(status: StatusCode, doc: &Value) -> Answer {
    with(status, "application/json", Bytes::from(doc.to_string()))
}

/// `{"error": message}` with `status`.
pub(crate) fn error(status: StatusCode, message: &str) -> Answer {
    json(status, &json!({"error": message}))
}

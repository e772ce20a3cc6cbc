//! `GET /metrics` on the gateway: the Prometheus exposition ([`crate::prometheus`]), behind
//! the same authentication and Origin check as `/mcp` (a scraper sends the gateway's token, or
//! an OAuth access token of the gateway's issuer, as `Authorization: Bearer`).

use hyper::header::{self, HeaderValue};
use hyper::{Method, StatusCode};

use super::request::{Answer, answer, refuse};
use crate::mcp::store::LazyStore;

/// The route's path.
pub(super) const PATH: &str = "/metrics";

/// The exposition as the Prometheus text format 0.0.4, to `GET` only.
pub(super) async fn serve(store: &LazyStore, method: &Method) -> Answer {
    if method != Method::GET {
        let mut response = refuse(StatusCode::METHOD_NOT_ALLOWED, "/metrics is served to GET");
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    let text = crate::prometheus::render(store).await;
    let mut response = answer(StatusCode::OK, text.into_bytes());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

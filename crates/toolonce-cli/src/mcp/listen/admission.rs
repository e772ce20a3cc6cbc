//! Who may go further than the headers: the caller's credentials (checked right after the
//! headers, before the body is read, so that without them a client cannot make the gateway
//! read and hold a body) and its Origin. The same for `/mcp` and `/metrics`.

use hyper::Request;
use hyper::StatusCode;
use hyper::body::Incoming as Body;
use hyper::header;

use super::request::{Answer, origin_allowed, refuse};
use crate::mcp::auth::{Auth, Principal};

/// The caller's principal, or the refusal to answer it with.
pub(super) async fn admit(auth: &Auth, request: &Request<Body>) -> Result<Principal, Answer> {
    let principal = match auth.principal(request.headers()).await {
        Ok(principal) => principal,
        Err(refusal) => {
            let mut response = refuse(refusal.status, &refusal.message);
            if let Some(challenge) = refusal.challenge {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, challenge);
            }
            return Err(response);
        }
    };
    if !origin_allowed(request) {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "requests from this Origin are refused",
        ));
    }
    Ok(principal)
}

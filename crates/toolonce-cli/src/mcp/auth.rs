//! Who may use the gateway (`toolonce mcp --listen`) and as whom: each request is
//! authenticated right after its headers, before its body is read, and gets a
//! [`Principal`], which is part of the scope of every operation its calls start and owns the
//! sessions it opens. Three choices:
//!
//! - nobody is checked: every client is the same anonymous principal (on loopback, or behind
//!   something that authenticates);
//! - `--require-token VAR`: one shared bearer token, whose holders are one principal;
//! - `--oauth-jwks`, `--oauth-issuer`, `--oauth-resource`: an OAuth 2.1 resource server
//!   ([`jwt`]): bearer JWTs of the issuer for this resource, one principal per subject and
//!   client; RFC 9728 metadata is served ([`metadata`]) and every 401 points at it.
//!
//! The client's `Authorization` is the gateway's and stays here: the gateway reaches an
//! `--upstream` server with its own credentials (`--header`), as the MCP authorization
//! specification requires of a proxy. `--forward-authorization` passes it on instead
//! (explicitly, for servers that must see each user's own credentials); then, unless the
//! gateway checks tokens itself, the principal is the credential's digest, so two
//! credentials never share entries.
//!
//! Layout: [`principal`] names principals, [`jwt`] checks tokens against [`jwks`]'s keys with
//! [`ring_crypto`]'s signature checks, [`metadata`] is RFC 9728.

use hyper::StatusCode;
use hyper::header::{self, HeaderMap, HeaderValue};

mod jwks;
mod jwt;
mod metadata;
mod principal;
mod ring_crypto;

pub(crate) use principal::Principal;

use metadata::Metadata;

/// How the gateway authenticates its clients, and whether their `Authorization` goes on.
pub(crate) struct Auth {
    check: Check,
    forward: bool,
}

enum Check {
    Nobody,
    SharedToken { token: String, principal: Principal },
    // Boxed: the verifier holds the key set and its locks, far more than the others.
    OAuth(Box<OAuth>),
}

struct OAuth {
    verifier: jwt::Verifier,
    metadata: Metadata,
}

/// A request refused for its credentials (a 401 with a challenge), or because no token can be
/// checked now (a 503 without one: the issuer's keys could not be loaded for too long, which
/// no new token would fix).
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    pub(crate) challenge: Option<HeaderValue>,
}

/// The settings of the OAuth resource server.
pub(crate) struct OAuthSettings {
    pub(crate) issuer: String,
    pub(crate) resource: String,
    pub(crate) jwks: String,
    /// For the metadata; the issuer when empty.
    pub(crate) authorization_servers: Vec<String>,
    /// The least max-age of the key set and the least time between its loads (30 s; lower
    /// only in tests, with the hidden `--oauth-jwks-min-age`).
    pub(crate) jwks_floor: std::time::Duration,
}

impl Auth {
    /// Nobody is checked.
    pub(crate) fn nobody(forward: bool) -> Self {
        Auth {
            check: Check::Nobody,
            forward,
        }
    }

    /// One shared bearer token (`--require-token`).
    pub(crate) fn shared_token(token: String) -> Self {
        let principal = Principal::of_shared_token(&token);
        Auth {
            check: Check::SharedToken { token, principal },
            forward: false,
        }
    }

    /// An OAuth resource server; loads the key set (so a gateway that could check no token
    /// does not start).
    pub(crate) async fn oauth(settings: OAuthSettings, forward: bool) -> anyhow::Result<Self> {
        let servers = if settings.authorization_servers.is_empty() {
            vec![settings.issuer.clone()]
        } else {
            settings.authorization_servers
        };
        let metadata = Metadata::new(&settings.resource, &servers)?;
        let verifier = jwt::Verifier::new(
            settings.issuer,
            settings.resource,
            &settings.jwks,
            settings.jwks_floor,
        )
        .await?;
        Ok(Auth {
            check: Check::OAuth(Box::new(OAuth { verifier, metadata })),
            forward,
        })
    }

    /// Starts keeping the OAuth key set fresh (see [`jwks`]), on the runtime of the caller.
    pub(crate) fn refresh_keys_in_background(&self) -> Option<tokio::task::JoinHandle<()>> {
        match &self.check {
            Check::OAuth(oauth) => Some(oauth.verifier.refresh_in_background()),
            _ => None,
        }
    }

    /// Whether the client's `Authorization` goes on to the `--upstream` server.
    pub(crate) fn forwards(&self) -> bool {
        self.forward
    }

    /// Whether clients are authenticated at all.
    pub(crate) fn checks(&self) -> bool {
        !matches!(self.check, Check::Nobody)
    }

    /// The RFC 9728 document, when `path` is where it is served.
    pub(crate) fn metadata(&self, path: &str) -> Option<&[u8]> {
        match &self.check {
            Check::OAuth(oauth) if oauth.metadata.paths.iter().any(|p| p == path) => {
                Some(&oauth.metadata.document)
            }
            _ => None,
        }
    }

    /// Who the request with these headers acts for, or why it is refused. Never logs or
    /// repeats a credential.
    pub(crate) async fn principal(&self, headers: &HeaderMap) -> Result<Principal, Refusal> {
        let authorization = headers.get(header::AUTHORIZATION);
        let principal = match &self.check {
            Check::Nobody => {
                return Ok(match authorization {
                    Some(value) if self.forward => Principal::of_forwarded(value.as_bytes()),
                    _ => Principal::anonymous(),
                });
            }
            Check::SharedToken { token, principal } => match bearer(authorization) {
                Bearer::Missing => Err(None),
                Bearer::Given(given) if same(given, token) => Ok(principal.clone()),
                Bearer::Given(_) | Bearer::Malformed => {
                    Err(Some("the bearer token is not the gateway's".to_owned()))
                }
            },
            Check::OAuth(oauth) => match bearer(authorization) {
                Bearer::Missing => Err(None),
                Bearer::Malformed => Err(Some(
                    "the Authorization header is not `Bearer TOKEN`".to_owned(),
                )),
                Bearer::Given(token) => match oauth.verifier.check(token).await {
                    Ok(principal) => Ok(principal),
                    Err(jwt::Rejected::Token(why)) => Err(Some(why)),
                    Err(jwt::Rejected::KeysUnavailable) => {
                        return Err(Refusal {
                            status: StatusCode::SERVICE_UNAVAILABLE,
                            message: "the gateway cannot check tokens now: the authorization \
                                      server's keys (--oauth-jwks) could not be loaded for too \
                                      long; try again later"
                                .to_owned(),
                            challenge: None,
                        });
                    }
                },
            },
        };
        principal.map_err(|refused| {
            let challenge = match &self.check {
                Check::OAuth(oauth) => oauth.metadata.challenge(refused.as_deref()),
                _ => metadata::challenge(None, refused.as_deref()),
            };
            if let Some(why) = &refused {
                tracing::info!(target: "toolonce::mcp", why = %why, "refused a request's bearer token");
            }
            Refusal {
                status: StatusCode::UNAUTHORIZED,
                message: match refused {
                    None => "a valid bearer token is required".to_owned(),
                    Some(why) => format!("a valid bearer token is required: {why}"),
                },
                challenge: Some(challenge),
            }
        })
    }
}

enum Bearer<'a> {
    Missing,
    Malformed,
    Given(&'a str),
}

/// The token of `Authorization: Bearer TOKEN`.
fn bearer(value: Option<&HeaderValue>) -> Bearer<'_> {
    let Some(value) = value else {
        return Bearer::Missing;
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|token| !token.is_empty())
        .map_or(Bearer::Malformed, Bearer::Given)
}

/// Whether `given` is `token`, in the same time wherever the first difference is.
fn same(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

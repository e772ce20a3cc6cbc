//! RFC 9728 protected resource metadata: the document that tells an MCP client which
//! authorization server issues tokens for this gateway, where it is served, and the
//! `WWW-Authenticate` challenge of a 401 that points at it (RFC 6750's `error="invalid_token"`
//! when a token was sent but refused; no error code when none was sent).

use hyper::header::HeaderValue;
use serde_json::json;

/// The well-known path of the metadata (RFC 9728 section 3).
pub(super) const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata of the gateway as the resource `resource`.
pub(super) struct Metadata {
    /// The document, as served.
    pub(super) document: Vec<u8>,
    /// Where it is served: the well-known path with the resource's path after it (RFC 9728
    /// section 3.1), and the bare well-known path, which MCP clients try next.
    pub(super) paths: Vec<String>,
    /// The document's URL, for the challenge.
    pub(super) url: String,
}

impl Metadata {
    /// `resource` must be an absolute `http(s)://` URI without a fragment (checked by the
    /// caller).
    pub(super) fn new(resource: &str, authorization_servers: &[String]) -> anyhow::Result<Self> {
        let uri: hyper::Uri = resource
            .parse()
            .map_err(|_| anyhow::anyhow!("--oauth-resource is not a valid URI"))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            anyhow::bail!("--oauth-resource must be an absolute http:// or https:// URI");
        };
        if !matches!(scheme, "http" | "https") || resource.contains('#') || uri.query().is_some() {
            anyhow::bail!(
                "--oauth-resource must be an http:// or https:// URI without a query or fragment \
                 (RFC 8707), such as https://gateway.example.com/mcp"
            );
        }
        let path = uri.path().trim_end_matches('/');
        let suffixed = format!("{WELL_KNOWN}{path}");
        let url = format!("{scheme}://{authority}{suffixed}");
        let mut paths = vec![suffixed];
        if !path.is_empty() {
            paths.push(WELL_KNOWN.to_owned());
        }
        let document = serde_json::to_vec(&json!({
            "resource": resource,
            "authorization_servers": authorization_servers,
            "bearer_methods_supported": ["header"],
        }))
        .expect("JSON always serializes");
        Ok(Metadata {
            document,
            paths,
            url,
        })
    }

    /// The challenge of a 401: `refused` says why a token that was sent is not accepted.
    pub(super) fn challenge(&self, refused: Option<&str>) -> HeaderValue {
        challenge(Some(&self.url), refused)
    }
}

/// `Bearer` with `resource_metadata` (when there is metadata) and, for a token that was sent,
/// `error="invalid_token"` and its description.
pub(super) fn challenge(metadata: Option<&str>, refused: Option<&str>) -> HeaderValue {
    let mut params = Vec::new();
    if let Some(url) = metadata {
        params.push(format!("resource_metadata=\"{url}\""));
    }
    if let Some(why) = refused {
        params.push("error=\"invalid_token\"".to_owned());
        // RFC 6750 allows neither `"` nor `\` in a description, nor anything outside ASCII.
        let why: String = why
            .chars()
            .filter(|c| c.is_ascii() && !c.is_ascii_control() && *c != '"' && *c != '\\')
            .collect();
        params.push(format!("error_description=\"{why}\""));
    }
    let text = if params.is_empty() {
        "Bearer".to_owned()
    } else {
        format!("Bearer {}", params.join(", "))
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

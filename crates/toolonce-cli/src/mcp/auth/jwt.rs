//! The gateway as an OAuth 2.1 resource server: a bearer JWT is accepted when its signature
//! checks against a key of the authorization server's set ([`Keys`]), its `iss` is the
//! trusted issuer, its `aud` names this gateway's resource URI (RFC 8707: a token minted for
//! another server is refused, so none is accepted here that was meant elsewhere), it has
//! `exp` and has not expired, and its `nbf` (if any) has passed, within [`LEEWAY`] of clock
//! skew. Its principal is its `sub` at its issuer, through its `client_id` (or `azp`).

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{DecodingKey, Validation};
use serde::Deserialize;

use super::jwks::{Keys, Missing};
use super::principal::Principal;
use super::ring_crypto;

/// The clock skew tolerated on `exp` and `nbf`, in seconds.
pub(super) const LEEWAY: u64 = 30;

/// What the gateway checks bearer JWTs against.
pub(crate) struct Verifier {
    pub(super) issuer: String,
    pub(super) resource: String,
    keys: Keys,
}

/// Why a token is refused.
pub(crate) enum Rejected {
    /// The token's fault (said to the client: a 401).
    Token(String),
    /// The issuer's keys could not be loaded for too long: no token can be checked (a 503).
    KeysUnavailable,
}

/// The claims that name the principal.
#[derive(Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    azp: Option<String>,
}

impl Verifier {
    /// Loads the key set from `jwks` (see [`Keys::load`]; `floor`: its least max-age).
    pub(crate) async fn new(
        issuer: String,
        resource: String,
        jwks: &str,
        floor: std::time::Duration,
    ) -> anyhow::Result<Self> {
        ring_crypto::install();
        Ok(Verifier {
            issuer,
            resource,
            keys: Keys::load(jwks, floor).await?,
        })
    }

    /// Keeps the key set fresh from now on (see [`Keys::refresh_in_background`]).
    pub(crate) fn refresh_in_background(&self) -> tokio::task::JoinHandle<()> {
        self.keys.refresh_in_background()
    }

    /// The principal of `token`, or why it is refused (said to the client: it never quotes
    /// the token or a claim).
    pub(crate) async fn check(&self, token: &str) -> Result<Principal, Rejected> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| Rejected::Token("the bearer token is not a JWT".to_owned()))?;
        // Before any key is looked up: a symmetric token never makes the set load again.
        if !ring_crypto::ACCEPTED.contains(&header.alg) {
            return Err(Rejected::Token(format!(
                "the token is signed with {:?}; only public-key algorithms (RS256, PS256, ES256, \
                 EdDSA and their kin) are accepted",
                header.alg
            )));
        }
        let jwk = match self.keys.find(header.kid.as_deref()).await {
            Ok(jwk) => jwk,
            Err(Missing::Token(why)) => return Err(Rejected::Token(why.to_owned())),
            Err(Missing::Unavailable) => return Err(Rejected::KeysUnavailable),
        };
        self.principal(token, header, &jwk).map_err(Rejected::Token)
    }

    /// The principal of `token`, its signature checked with `jwk` and its claims checked.
    fn principal(
        &self,
        token: &str,
        header: jsonwebtoken::Header,
        jwk: &jsonwebtoken::jwk::Jwk,
    ) -> Result<Principal, String> {
        // Both spell an algorithm by its JOSE name ("RS256").
        if let Some(declared) = jwk.common.key_algorithm
            && serde_json::to_value(declared).ok() != serde_json::to_value(header.alg).ok()
        {
            return Err("the token's algorithm is not the one its key is for".to_owned());
        }
        let key = DecodingKey::from_jwk(jwk)
            .map_err(|_| "the authorization server's key for this token is unusable".to_owned())?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = LEEWAY;
        validation.validate_nbf = true;
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| self.why(e.kind()))?
            .claims;
        let client = claims.client_id.as_deref().or(claims.azp.as_deref());
        Ok(Principal::of_subject(&self.issuer, &claims.sub, client))
    }

    fn why(&self, kind: &ErrorKind) -> String {
        match kind {
            ErrorKind::ExpiredSignature => "the token has expired (exp)".to_owned(),
            ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".to_owned(),
            ErrorKind::InvalidIssuer => format!(
                "the token was not issued by {} (iss), the issuer this gateway trusts",
                self.issuer
            ),
            ErrorKind::InvalidAudience => format!(
                "the token is not for this resource: its audience (aud) must be {}",
                self.resource
            ),
            ErrorKind::InvalidSignature => "the token's signature does not verify".to_owned(),
            ErrorKind::MissingRequiredClaim(claim) => {
                format!("the token has no {claim} claim")
            }
            ErrorKind::InvalidAlgorithm => {
                "the token's algorithm does not match its key".to_owned()
            }
            ErrorKind::InvalidClaimFormat(claim) => {
                format!("the token's {claim} claim has the wrong type")
            }
            ErrorKind::Json(_) => {
                "the token's claims are not the expected JSON (a string sub is required)".to_owned()
            }
            _ => "the bearer token is not a valid JWT".to_owned(),
        }
    }
}

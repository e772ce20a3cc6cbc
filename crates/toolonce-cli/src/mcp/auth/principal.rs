//! Who a gateway request acts for: the principal, part of the scope of every operation its
//! calls start, so one principal never gets (nor learns of) another's entries.
//!
//! A principal is named by a digest, never by the credential itself: the scope is written
//! into every entry (`toolonce ls` shows it), and a token must never reach the store. The
//! digest covers a tag saying what kind of identity it is and each part with its length, so
//! no two identities (a token whose text equals a subject, `("ab", "c")` and `("a", "bc")`)
//! share a name.

use ring::digest::{SHA256, digest};

/// Who a request acts for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Principal(Option<String>);

impl Principal {
    /// Nobody in particular: the gateway authenticates nobody and passes no credentials on,
    /// so its clients cannot be told apart. Its scope is the gateway's `--scope` unchanged, the
    /// scope a stdio proxy with the same `--scope` uses (the same caller, the same name).
    pub(crate) fn anonymous() -> Self {
        Principal(None)
    }

    /// Whether this is [`Principal::anonymous`]: every client the gateway cannot tell apart.
    pub(crate) fn is_anonymous(&self) -> bool {
        self.0.is_none()
    }

    /// Whoever holds the gateway's shared token (`--require-token`): one principal per token.
    pub(crate) fn of_shared_token(token: &str) -> Self {
        Self::named("token", &[token.as_bytes()])
    }

    /// The holder of the `Authorization` a client sent, when the gateway passes it on to the
    /// server unchecked (`--forward-authorization`): the server acts as whoever it names.
    pub(crate) fn of_forwarded(authorization: &[u8]) -> Self {
        Self::named("authorization", &[authorization])
    }

    /// The subject of a bearer JWT of `issuer`, through the OAuth client `client` (its
    /// `client_id` or `azp`): a subject is unique only at its issuer, and the same user through
    /// two client applications is two principals, as the token says it is.
    pub(crate) fn of_subject(issuer: &str, subject: &str, client: Option<&str>) -> Self {
        let client = client.unwrap_or("");
        Self::named(
            "jwt",
            &[issuer.as_bytes(), subject.as_bytes(), client.as_bytes()],
        )
    }

    fn named(kind: &str, parts: &[&[u8]]) -> Self {
        let mut text = Vec::new();
        text.extend_from_slice(b"toolonce/principal\0");
        text.extend_from_slice(kind.as_bytes());
        for part in parts {
            text.extend_from_slice(&(part.len() as u64).to_be_bytes());
            text.extend_from_slice(part);
        }
        let hash = digest(&SHA256, &text);
        let hex: String = hash.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Principal(Some(format!("{kind}-{hex}")))
    }

    /// The scope of the operations of this principal's calls: `BASE/principal:KIND-DIGEST`
    /// (the base scope alone for [`Principal::anonymous`]).
    pub(crate) fn scope(&self, base: &str) -> String {
        match &self.0 {
            None => base.to_owned(),
            Some(name) => format!("{base}/principal:{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Principal;

    #[test]
    fn principals_of_different_kinds_or_parts_never_share_a_scope() {
        let scopes = [
            Principal::anonymous().scope("team"),
            Principal::of_shared_token("alice").scope("team"),
            Principal::of_forwarded(b"alice").scope("team"),
            Principal::of_subject("https://idp", "alice", None).scope("team"),
            Principal::of_subject("https://idp", "alice", Some("app")).scope("team"),
            Principal::of_subject("https://idp", "alic", Some("eapp")).scope("team"),
            Principal::of_subject("https://other", "alice", None).scope("team"),
        ];
        for (i, a) in scopes.iter().enumerate() {
            for b in &scopes[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(scopes[0], "team");
    }

    #[test]
    fn the_same_principal_always_gets_the_same_scope_and_it_never_holds_the_credential() {
        let a = Principal::of_shared_token("s3cret-token").scope("team");
        assert_eq!(a, Principal::of_shared_token("s3cret-token").scope("team"));
        assert!(!a.contains("s3cret"), "{a}");
        assert!(a.starts_with("team/principal:token-"), "{a}");
        assert_eq!(a.len(), "team/principal:token-".len() + 32);
    }
}

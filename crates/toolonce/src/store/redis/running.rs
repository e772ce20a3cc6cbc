//! The running entry a claim writes, built by hand in the wire format `wire` reads (and the
//! scripts' `ours` and `owned` match): the owner's digest instead of its token, the fencing
//! members at fixed places, then the about members, JSON-encoded.

use crate::store::contract::{About, ClaimRequest};
use crate::store::owner::OwnerToken;

/// The about members of a new entry as the claim script splices them in: `}` when nothing is
/// recorded, else `,"scope":…,"tool":…,"detail":…}` with the members that are set, JSON-encoded.
#[cfg(test)]
fn about_members(about: &About) -> String {
    let mut out = String::new();
    about_members_into(about, &mut out);
    out
}

/// Appends [`about_members`] to `out`.
fn about_members_into(about: &About, out: &mut String) {
    for (name, value) in [
        ("scope", &about.scope),
        ("tool", &about.tool),
        ("detail", &about.detail),
    ] {
        if let Some(value) = value {
            out.push_str(",\"");
            out.push_str(name);
            out.push_str("\":");
            // Escaped in place, as serde_json would (and as the TypeScript package's
            // `JSON.stringify` does): no string of its own per member on every claim.
            crate::canonical::write_string(out, value);
        }
    }
    out.push('}');
}

/// The SHA-1 of an owner token as 40 lowercase hex digits, as the scripts compute it with
/// `redis.sha1hex`: what a running entry stores instead of the token, so that whoever reads the
/// entry cannot settle it.
fn owner_digest(owner: &OwnerToken) -> [u8; 40] {
    use sha1::Digest;
    let digest: [u8; 20] = sha1::Sha1::digest(owner.as_str().as_bytes()).into();
    let mut hex = [0u8; 40];
    crate::key::hex_into(&digest, &mut hex);
    hex
}

/// The running entry a claim writes for `req` (in the shape `ours` in entry.lua and `owned` in
/// owned.lua read): started at `started_ms` on this machine's clock, first attempt, kept
/// `retention_ms` after its lease. Built by hand, not with `format!`: it is made for every
/// claim, replays included, since the native claim sends it before it knows.
pub(super) fn running_value(req: &ClaimRequest<'_>, started_ms: u64, retention_ms: u64) -> String {
    let digest = owner_digest(req.owner);
    let mut started = itoa::Buffer::new();
    let started = started.format(started_ms);
    let mut retention = itoa::Buffer::new();
    // The fixed members, the numbers and the hex digits come to at most 272 bytes; the about
    // members (JSON-encoded, so perhaps a little longer than their text) go on top. Sized
    // once, as the string would otherwise grow, copying itself, on every claim.
    let about_len: usize = [&req.about.scope, &req.about.tool, &req.about.detail]
        .into_iter()
        .flatten()
        .map(|text| text.len() + 16)
        .sum();
    let mut out = String::with_capacity(272 + about_len);
    out.push_str(r#"{"status":"running","startedAt":"#);
    out.push_str(started);
    out.push_str(r#","owner":""#);
    out.push_str(std::str::from_utf8(&digest).expect("hex is ASCII"));
    out.push_str(r#"","retention":"#);
    out.push_str(retention.format(retention_ms));
    out.push_str(r#","fingerprint":""#);
    out.push_str(req.fingerprint.as_str());
    out.push_str(r#"","firstStartedAt":"#);
    out.push_str(started);
    out.push_str(r#","attempts":1"#);
    about_members_into(req.about, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::key::{Fingerprint, OperationKey};
    use crate::store::redis::wire::decode_entry;

    fn key() -> OperationKey {
        "idem:0123456789abcdef0123456789abcdef".parse().unwrap()
    }

    #[test]
    fn the_owner_digest_is_the_sha1_that_redis_computes() {
        // redis-cli EVAL "return redis.sha1hex(ARGV[1])" 0 0123456789abcdef0123456789abcdef
        let owner = OwnerToken::from_stored("0123456789abcdef0123456789abcdef");
        assert_eq!(
            &owner_digest(&owner),
            b"b1775a785f09a6ebaf2dc33d6eaeb98974d9cdb8"
        );
    }

    #[test]
    fn the_owner_digest_agrees_with_another_sha1_at_every_length_up_to_three_blocks() {
        // Tokens are 32 characters; `from_stored` takes any, so cover padding at each length.
        for len in 0..200 {
            let token: String = "0123456789abcdefghij".chars().cycle().take(len).collect();
            let owner = OwnerToken::from_stored(token.clone());
            let other = sha1_smol::Sha1::from(token.as_str()).digest().to_string();
            assert_eq!(std::str::from_utf8(&owner_digest(&owner)).unwrap(), other);
        }
    }

    #[test]
    fn the_running_value_built_by_hand_is_the_shape_the_scripts_read() {
        let owner = OwnerToken::from_stored("0123456789abcdef0123456789abcdef");
        let fp: Fingerprint = "ab".repeat(32).parse().unwrap();
        let about = About::new("run \"1\"", "charge");
        let k = key();
        let req = ClaimRequest::new(&k, &fp, &owner, Duration::from_secs(60)).about(&about);
        let value = running_value(&req, 1_764_400_000_123, 86_400_000);
        assert_eq!(
            value,
            format!(
                r#"{{"status":"running","startedAt":1764400000123,"owner":"b1775a785f09a6ebaf2dc33d6eaeb98974d9cdb8","retention":86400000,"fingerprint":"{}","firstStartedAt":1764400000123,"attempts":1,"scope":"run \"1\"","tool":"charge"}}"#,
                fp.as_str()
            )
        );
        let e = decode_entry(
            &key(),
            value.as_bytes(),
            Some(86_400_001),
            None,
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(e.about, about);
        assert_eq!((e.attempts, e.fingerprint), (1, Some(fp)));
    }

    #[test]
    fn about_members_are_json_encoded_and_absent_ones_left_out() {
        assert_eq!(about_members(&About::default()), "}");
        let about = About::new("run \"1\"", "charge").detail("line\nbreak");
        assert_eq!(
            about_members(&about),
            r#","scope":"run \"1\"","tool":"charge","detail":"line\nbreak"}"#
        );
    }

    #[test]
    fn about_members_are_escaped_byte_for_byte_as_serde_json_escapes_them() {
        // Every control character, the two that JSON always escapes, the ones it never does
        // (`/`, DEL), and text beyond ASCII: what the TypeScript package's `JSON.stringify`
        // writes and every reader decodes.
        let mut text: String = (0u8..0x20).map(char::from).collect();
        text.push_str("\"\\/\u{7f}é€😀 end");
        let about = About::new(text.clone(), "charge").detail(text.clone());
        let json = serde_json::to_string(&text).unwrap();
        assert_eq!(
            about_members(&about),
            format!(r#","scope":{json},"tool":"charge","detail":{json}}}"#)
        );
    }
}

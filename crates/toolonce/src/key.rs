//! The operation key, which names one logical operation (never one attempt), the fingerprint of
//! the full arguments, and the key fields that let a tool key on part of its arguments.
//!
//! `key = "idem:" + hex(sha256(scope ‖ 0x00 ‖ tool ‖ 0x00 ‖ canonical(args)))[..32]`, with the
//! canonical text of [`crate::canonical`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::canonical::{self, DEFAULT_MAX_DEPTH};
use crate::repeat::Repeat;
use crate::{Error, Result};

/// The name of the HTTP header that carries an operation key to a downstream system, as in the
/// IETF Idempotency-Key draft.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

pub(crate) const KEY_PREFIX: &str = "idem:";
const KEY_HEX_LEN: usize = 32;
const KEY_LEN: usize = KEY_PREFIX.len() + KEY_HEX_LEN;

/// The key of one logical operation: `idem:` followed by 32 lowercase hex digits (the first 128
/// bits of a SHA-256).
///
/// It is derived from the scope (by default the run id), the tool name and the canonical
/// arguments, never from the attempt (`tool_use_id`), so every duplicate of an operation (a
/// retry, a replay after a crash, the model asking twice) gets the same key.
///
/// The key is the same as the one a TypeScript worker of the widespread reference
/// implementation computes for flat arguments, so both can share one store. For nested
/// arguments the reference implementation is wrong (see [`crate::canonical`]) and the keys
/// differ, by design.
// Held inline rather than as a `String`: a key is cloned into the store, the context, the answer
// and logs on every call, and a fixed-size clone costs no allocation. (Not `Copy`, so that code
// keeps saying where a key is duplicated.)
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationKey([u8; KEY_LEN]);

impl OperationKey {
    /// Derives the key of `tool` called in `scope` with arguments whose canonical text (see
    /// [`canonical::canonicalize`]) is `canonical`.
    ///
    /// The NUL between the parts is what keeps `("ab", "c")` apart from `("a", "bc")`, which is
    /// why neither part may contain one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidKeyPart`] if `scope` or `tool` is empty or contains NUL: a bad part is
    /// an error, never a silent key.
    pub fn derive(scope: &str, tool: &str, canonical: &str) -> Result<OperationKey> {
        check_parts(scope, tool)?;
        Ok(key_of(scope, tool, canonical))
    }

    /// The key as text, for example `idem:6cbc65f0aa6d3f844178448aa38d1ee9`.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("a key is ASCII by construction")
    }

    /// The key's ASCII bytes, for a store that sends them as they are (`as_str` checks them
    /// as UTF-8 on each call, which a statement parameter does not need).
    #[cfg(feature = "postgres")]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The value to send in an [`IDEMPOTENCY_KEY_HEADER`] header to a downstream system that
    /// deduplicates requests: the key itself, so a crash between the downstream success and our
    /// record of it is covered by the downstream system.
    pub fn idempotency_key(&self) -> &str {
        self.as_str()
    }
}

/// Computes the key; the parts must already be checked.
fn key_of(scope: &str, tool: &str, canonical: &str) -> OperationKey {
    key_of_repeat(scope, tool, canonical, Repeat::FIRST)
}

/// Computes the key of the `repeat`th time (see [`derive_repeat`]); the parts must already be
/// checked.
fn key_of_repeat(scope: &str, tool: &str, canonical: &str, repeat: Repeat) -> OperationKey {
    let mut suffix = String::new();
    repeat.push_key_suffix(&mut suffix);
    let digest: [u8; 32] = Sha256::new()
        .chain_update(scope)
        .chain_update([0u8])
        .chain_update(tool)
        .chain_update([0u8])
        .chain_update(canonical)
        .chain_update(suffix)
        .finalize()
        .into();
    let mut key = [0u8; KEY_LEN];
    key[..KEY_PREFIX.len()].copy_from_slice(KEY_PREFIX.as_bytes());
    hex_into(&digest[..KEY_HEX_LEN / 2], &mut key[KEY_PREFIX.len()..]);
    OperationKey(key)
}

/// Checks that the scope and the tool name can be parts of a key.
fn check_parts(scope: &str, tool: &str) -> Result<()> {
    for (part, text) in [("scope", scope), ("tool name", tool)] {
        if text.is_empty() {
            return Err(Error::InvalidKeyPart {
                part,
                reason: "is empty",
            });
        }
        if text.contains('\0') {
            return Err(Error::InvalidKeyPart {
                part,
                reason: "contains NUL",
            });
        }
    }
    Ok(())
}

/// Writes `bytes` in lowercase hex into `out`, which is twice as long.
pub(crate) fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl FromStr for OperationKey {
    type Err = Error;

    /// Reads a key, checking it is `idem:` followed by exactly 32 lowercase hex digits.
    fn from_str(text: &str) -> Result<Self> {
        match text.strip_prefix(KEY_PREFIX) {
            Some(digits) if digits.len() == KEY_HEX_LEN && is_lower_hex(digits) => Ok(
                OperationKey(text.as_bytes().try_into().expect("length checked")),
            ),
            _ => Err(Error::InvalidKey(text.to_owned())),
        }
    }
}

impl fmt::Display for OperationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for OperationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl AsRef<str> for OperationKey {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Serialize for OperationKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OperationKey {
    /// Reads the key from a string, refusing text that is not a well-formed key.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

const FINGERPRINT_HEX_LEN: usize = 64;

/// The SHA-256 of the canonical full arguments, as 64 lowercase hex digits.
///
/// It is stored with every entry. When a tool keys on some fields only (see [`KeyFields`]), two
/// calls may share a key with different arguments; their fingerprints then differ, and the
/// second call is a conflict rather than a duplicate.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; FINGERPRINT_HEX_LEN]);

impl Fingerprint {
    /// The fingerprint of arguments whose canonical text is `canonical`.
    pub fn of_canonical(canonical: &str) -> Fingerprint {
        let digest: [u8; 32] = Sha256::digest(canonical).into();
        let mut text = [0u8; FINGERPRINT_HEX_LEN];
        hex_into(&digest, &mut text);
        Fingerprint(text)
    }

    /// The fingerprint as 64 lowercase hex digits.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("a fingerprint is ASCII by construction")
    }

    /// The fingerprint's ASCII bytes (see [`OperationKey::as_bytes`]).
    #[cfg(feature = "postgres")]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Text that should be a [`Fingerprint`] (64 lowercase hex digits) is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fingerprint {0:?}: expected 64 lowercase hex digits")]
pub struct InvalidFingerprint(pub String);

impl FromStr for Fingerprint {
    type Err = InvalidFingerprint;

    /// Reads a fingerprint, checking it is exactly 64 lowercase hex digits.
    fn from_str(text: &str) -> std::result::Result<Self, InvalidFingerprint> {
        if text.len() == FINGERPRINT_HEX_LEN && is_lower_hex(text) {
            Ok(Fingerprint(
                text.as_bytes().try_into().expect("length checked"),
            ))
        } else {
            Err(InvalidFingerprint(text.to_owned()))
        }
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Fingerprint {
    /// Reads the fingerprint from a string, refusing text that is not 64 lowercase hex digits.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The argument fields that define an operation, as JSON Pointers (RFC 6901), for tools whose
/// other arguments the model may rephrase between calls (a free-text `note`, say).
///
/// The key is then computed over the [projection](KeyFields::project) of the arguments on these
/// fields, while the [`Fingerprint`] still covers all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyFields {
    pointers: Vec<String>,
}

impl KeyFields {
    /// Key fields from JSON Pointers such as `/amount` or `/payment/card` (`""` is the whole
    /// arguments document).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPointer`] if there are no pointers, or one is neither empty nor starts
    /// with `/`, or has a `~` not followed by `0` or `1`.
    ///
    /// # Example
    ///
    /// ```
    /// use toolonce::key::KeyFields;
    /// let fields = KeyFields::new(["/to", "/amount"])?;
    /// let args = serde_json::json!({"to": "acct-1", "amount": 5, "note": "rent"});
    /// assert_eq!(fields.project(&args), serde_json::json!({"/amount": 5, "/to": "acct-1"}));
    /// # Ok::<(), toolonce::Error>(())
    /// ```
    pub fn new<I, S>(pointers: I) -> Result<KeyFields>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let pointers: Vec<String> = pointers.into_iter().map(Into::into).collect();
        if pointers.is_empty() {
            return Err(Error::InvalidPointer {
                pointer: String::new(),
                reason: "no key fields given: at least one is needed",
            });
        }
        for pointer in &pointers {
            check_pointer(pointer)?;
        }
        Ok(KeyFields { pointers })
    }

    /// The pointers, as given.
    pub fn pointers(&self) -> &[String] {
        &self.pointers
    }

    /// The object that maps each pointer to the value it finds in `args`.
    ///
    /// A pointer that finds nothing is left out, so a missing field and a `null` one give
    /// different projections (and keys).
    pub fn project(&self, args: &Value) -> Value {
        let mut projection = Map::new();
        for pointer in &self.pointers {
            if let Some(found) = args.pointer(pointer) {
                projection.insert(pointer.clone(), found.clone());
            }
        }
        Value::Object(projection)
    }
}

/// Checks RFC 6901 syntax: empty, or `/`-separated tokens whose only escapes are `~0` and `~1`.
fn check_pointer(pointer: &str) -> Result<()> {
    let invalid = |reason| {
        Err(Error::InvalidPointer {
            pointer: pointer.to_owned(),
            reason,
        })
    };
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return invalid(
            "a JSON Pointer must start with \"/\" (such as \"/id\"), or be empty for the whole \
             arguments",
        );
    }
    let mut bytes = pointer.bytes();
    while let Some(b) = bytes.next() {
        if b == b'~' && !matches!(bytes.next(), Some(b'0' | b'1')) {
            return invalid("\"~\" must be followed by \"0\" or \"1\"");
        }
    }
    Ok(())
}

/// The key and the fingerprint of one call.
#[derive(Clone, Debug)]
pub struct Derived {
    /// The operation key.
    pub key: OperationKey,
    /// The fingerprint of the full arguments.
    pub fingerprint: Fingerprint,
    /// Which time the action is performed on purpose (see [`crate::repeat`]): the key covers
    /// it, and a replay's note names the next one.
    pub repeat: Repeat,
}

/// Derives the key and the fingerprint of `tool` called in `scope` with `args`.
///
/// The key covers the projection of `args` on `key_fields` if there are key fields, else all
/// of `args`; the fingerprint always covers all of `args`. Without key fields the arguments are
/// canonicalized once and hashed twice.
///
/// # Errors
///
/// - [`Error::InvalidKeyPart`] if `scope` or `tool` is empty or contains NUL (checked before
///   anything else);
/// - [`Error::TooDeep`] if `args` nests deeper than [`DEFAULT_MAX_DEPTH`].
///
/// # Example
///
/// ```
/// let args = serde_json::json!({"payment": {"card": "A", "amount": 100}});
/// let derived = toolonce::key::derive("run-1", "charge_card", &args, None)?;
/// assert_eq!(derived.key.as_str(), "idem:a696f045ec83b1a80d5f52d3c5a3b6b0");
/// # Ok::<(), toolonce::Error>(())
/// ```
pub fn derive(
    scope: &str,
    tool: &str,
    args: &Value,
    key_fields: Option<&KeyFields>,
) -> Result<Derived> {
    derive_repeat(scope, tool, args, key_fields, Repeat::FIRST)
}

/// [`derive`] for the `repeat`th time the same action is performed on purpose: the key text
/// (the canonical arguments, or their key-fields projection) gets `NUL "toolonce/repeat" NUL`
/// and the ordinal in decimal appended, unless it is the first time, whose key is the one
/// [`derive`] gives. The fingerprint covers the arguments only. Surfaces that show a model the
/// repeat argument take it out of the arguments with [`crate::repeat::take`] first.
///
/// # Errors
///
/// As [`derive`].
///
/// ```
/// use toolonce::repeat::Repeat;
/// let args = serde_json::json!({"to": "bob", "cents": 500});
/// let first = toolonce::key::derive("run-1", "pay", &args, None)?;
/// let again = toolonce::key::derive_repeat("run-1", "pay", &args, None, Repeat::new(2)?)?;
/// assert_ne!(first.key, again.key);
/// assert_eq!(again.key.as_str(), "idem:9317ffdcff3597d146d4cbb938e7a0ed");
/// # Ok::<(), toolonce::Error>(())
/// ```
///
/// [`derive`]: fn@derive
pub fn derive_repeat(
    scope: &str,
    tool: &str,
    args: &Value,
    key_fields: Option<&KeyFields>,
    repeat: Repeat,
) -> Result<Derived> {
    check_parts(scope, tool)?;
    let full = canonical::canonicalize(args)?;
    let fingerprint = Fingerprint::of_canonical(&full);
    let key = match key_fields {
        None => key_of_repeat(scope, tool, &full, repeat),
        Some(fields) => {
            // The projection wraps values one level deeper than they were (a pointer "" puts
            // the whole arguments inside it), hence one more level allowed.
            let mut projected = String::with_capacity(full.len());
            canonical::canonicalize_into(
                &fields.project(args),
                DEFAULT_MAX_DEPTH + 1,
                &mut projected,
            )?;
            key_of_repeat(scope, tool, &projected, repeat)
        }
    };
    Ok(Derived {
        key,
        fingerprint,
        repeat,
    })
}

/// The marker that starts the key text of an operation its caller named (see [`derive_named`]):
/// canonical JSON never starts with NUL, so a named key can never equal the key of any
/// arguments.
const NAMED_MARKER: &str = "\0toolonce/key\0";

/// Derives the key of an operation its caller named — an MCP client's `_meta["toolonce/key"]`,
/// an HTTP client's idempotency key — and the fingerprint of `args`.
///
/// The key covers `(scope, tool, name)` only, so a retry under the same name is the same
/// operation whatever its arguments; the fingerprint still covers all of `args`, so a retry
/// under that name with other arguments is a conflict, never a replay of something else. The
/// key text is `NUL "toolonce/key" NUL name` where [`derive`] hashes canonical arguments:
///
/// ```text
/// key = "idem:" + first 32 hex digits of SHA-256( scope, 0x00, tool, 0x00, 0x00 "toolonce/key" 0x00 name )
/// ```
///
/// # Errors
///
/// As [`derive`]: [`Error::InvalidKeyPart`] for an empty scope or tool (or one with NUL), and
/// [`Error::TooDeep`] for arguments that nest too deep. The name itself is the caller's to
/// check (the MCP proxy accepts 1 to 255 visible ASCII characters).
///
/// ```
/// let args = serde_json::json!({"to": "ada@example.com"});
/// let a = toolonce::key::derive_named("run-1", "send_email", "step-7", &args)?;
/// let b = toolonce::key::derive_named("run-1", "send_email", "step-7", &serde_json::json!({}))?;
/// assert_eq!(a.key, b.key);
/// assert_ne!(a.fingerprint, b.fingerprint);
/// # Ok::<(), toolonce::Error>(())
/// ```
///
/// [`derive`]: fn@derive
pub fn derive_named(scope: &str, tool: &str, name: &str, args: &Value) -> Result<Derived> {
    derive_named_repeat(scope, tool, name, args, Repeat::FIRST)
}

/// [`derive_named`] for the `repeat`th time: the repeat's suffix (see [`derive_repeat`])
/// follows the name.
///
/// # Errors
///
/// As [`derive_named`].
pub fn derive_named_repeat(
    scope: &str,
    tool: &str,
    name: &str,
    args: &Value,
    repeat: Repeat,
) -> Result<Derived> {
    check_parts(scope, tool)?;
    let full = canonical::canonicalize(args)?;
    let mut named = String::with_capacity(NAMED_MARKER.len() + name.len());
    named.push_str(NAMED_MARKER);
    named.push_str(name);
    Ok(Derived {
        key: key_of_repeat(scope, tool, &named, repeat),
        fingerprint: Fingerprint::of_canonical(&full),
        repeat,
    })
}

#[cfg(test)]
mod tests;

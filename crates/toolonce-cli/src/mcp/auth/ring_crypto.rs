//! The signature checks of bearer JWTs, on `ring` (which the TLS stack already builds), as a
//! `jsonwebtoken` crypto provider: that crate parses and validates the token, this checks
//! its signature. Only public-key algorithms: an HMAC secret cannot come from a public key
//! set, and accepting one is the classic key-confusion hole, so HS256 and its kin are refused
//! here as well as by the validation. Nothing signs here: the gateway only verifies.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::signature::{
    self as sig, RsaPublicKeyComponents, UnparsedPublicKey, VerificationAlgorithm,
};

/// The provider, installed once for the process by [`install`].
static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: no_signer,
    verifier_factory: verifier,
    key_utils: KeyUtils::new_unimplemented(),
};

/// Makes [`PROVIDER`] the process's provider (once; later calls change nothing).
pub(super) fn install() {
    let _ = PROVIDER.install_default();
}

/// The algorithms a token may be signed with.
pub(super) const ACCEPTED: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

fn no_signer(_: &Algorithm, _: &EncodingKey) -> Result<Box<dyn JwtSigner>, Error> {
    Err(ErrorKind::Provider("the gateway verifies tokens and never signs one".into()).into())
}

/// The ring algorithm of `alg` (none for HMAC).
fn ring_algorithm(alg: Algorithm) -> Option<&'static dyn VerificationAlgorithm> {
    if let Some(rsa) = rsa_parameters(alg) {
        return Some(rsa);
    }
    Some(match alg {
        Algorithm::ES256 => &sig::ECDSA_P256_SHA256_FIXED,
        Algorithm::ES384 => &sig::ECDSA_P384_SHA384_FIXED,
        Algorithm::EdDSA => &sig::ED25519,
        // HMAC, and whatever a later jsonwebtoken adds until it is looked at here.
        _ => return None,
    })
}

fn verifier(alg: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    let Some(ring_alg) = ring_algorithm(*alg) else {
        return Err(ErrorKind::InvalidAlgorithm.into());
    };
    if key.family() != alg.family() {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    let key = match key.kind() {
        DecodingKeyKind::RsaModulusExponent { n, e } => Key::Rsa {
            n: n.clone(),
            e: e.clone(),
        },
        DecodingKeyKind::SecretOrDer(bytes) => Key::Bytes(bytes.clone()),
    };
    Ok(Box::new(Verifier {
        alg: *alg,
        ring_alg,
        key,
    }))
}

/// A public key as the JWK gave it.
enum Key {
    /// RSA modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// An EC point (uncompressed), an Ed25519 key, or an RSA key as DER.
    Bytes(Vec<u8>),
}

struct Verifier {
    alg: Algorithm,
    ring_alg: &'static dyn VerificationAlgorithm,
    key: Key,
}

impl signature::Verifier<Vec<u8>> for Verifier {
    fn verify(&self, message: &[u8], given: &Vec<u8>) -> Result<(), signature::Error> {
        let checked = match &self.key {
            Key::Rsa { n, e } => {
                let Some(params) = rsa_parameters(self.alg) else {
                    return Err(signature::Error::new());
                };
                RsaPublicKeyComponents { n, e }.verify(params, message, given)
            }
            Key::Bytes(bytes) => {
                UnparsedPublicKey::new(self.ring_alg, bytes).verify(message, given)
            }
        };
        checked.map_err(|_| signature::Error::new())
    }
}

impl JwtVerifier for Verifier {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

/// The ring parameters of an RSA `alg` (none for the others): how an RSA key from a JWK's
/// modulus and exponent is checked, and, as a verification algorithm, an RSA signature.
fn rsa_parameters(alg: Algorithm) -> Option<&'static sig::RsaParameters> {
    Some(match alg {
        Algorithm::RS256 => &sig::RSA_PKCS1_2048_8192_SHA256,
        Algorithm::RS384 => &sig::RSA_PKCS1_2048_8192_SHA384,
        Algorithm::RS512 => &sig::RSA_PKCS1_2048_8192_SHA512,
        Algorithm::PS256 => &sig::RSA_PSS_2048_8192_SHA256,
        Algorithm::PS384 => &sig::RSA_PSS_2048_8192_SHA384,
        Algorithm::PS512 => &sig::RSA_PSS_2048_8192_SHA512,
        _ => return None,
    })
}

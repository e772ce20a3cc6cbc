//! An OAuth authorization server's keys for the gateway's tests: an RSA key (made by the
//! `openssl` command: ring cannot generate one) and a P-256 key (made by ring), their JWK Set,
//! and bearer JWTs signed with either (RS256, ES256), or with a key the set does not hold.
//! Keys are made fresh for each issuer; nothing leaves loopback.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use ring::rand::SystemRandom;
use ring::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, RSA_PKCS1_SHA256, RsaKeyPair,
    RsaPublicKeyComponents,
};
use serde_json::{Value, json};

/// Who signs: a key named by its `kid`.
pub(crate) enum Key {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

pub(crate) struct Signer {
    pub(crate) kid: String,
    key: Key,
}

impl Signer {
    /// A fresh RSA 2048 key (RS256).
    pub(crate) fn rsa(kid: &str, dir: &Path) -> Signer {
        let path = dir.join(format!("{kid}.der"));
        let status = Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ])
            .args(["-outform", "DER", "-out"])
            .arg(&path)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("`openssl` is required by this test (it makes an RSA key): install it");
        assert!(status.success(), "openssl genpkey failed");
        let der = std::fs::read(&path).unwrap();
        Signer {
            kid: kid.to_owned(),
            // openssl writes a DER RSA key as PKCS#1 (RSAPrivateKey).
            key: Key::Rsa(RsaKeyPair::from_der(&der).expect("an RSA private key")),
        }
    }

    /// A fresh P-256 key (ES256).
    pub(crate) fn ec(kid: &str) -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Signer {
            kid: kid.to_owned(),
            key: Key::Ec(key),
        }
    }

    pub(crate) fn alg(&self) -> &'static str {
        match self.key {
            Key::Rsa(_) => "RS256",
            Key::Ec(_) => "ES256",
        }
    }

    /// The public key as a JWK.
    pub(crate) fn jwk(&self) -> Value {
        match &self.key {
            Key::Rsa(key) => {
                let public = RsaPublicKeyComponents::<Vec<u8>>::from(key.public());
                json!({"kty": "RSA", "kid": self.kid, "alg": "RS256", "use": "sig",
                       "n": b64(&public.n), "e": b64(&public.e)})
            }
            Key::Ec(key) => {
                let point = key.public_key().as_ref();
                json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "alg": "ES256", "use": "sig",
                       "x": b64(&point[1..33]), "y": b64(&point[33..65])})
            }
        }
    }

    /// A JWT of `claims` with this key's `kid` and algorithm.
    pub(crate) fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": self.alg(), "typ": "JWT", "kid": self.kid});
        self.sign_with_header(&header, claims)
    }

    /// A JWT of `claims` under `header`, signed with this key whatever the header says.
    pub(crate) fn sign_with_header(&self, header: &Value, claims: &Value) -> String {
        let message = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match &self.key {
            Key::Rsa(key) => {
                let mut out = vec![0; key.public().modulus_len()];
                key.sign(&RSA_PKCS1_SHA256, &rng, message.as_bytes(), &mut out)
                    .unwrap();
                out
            }
            Key::Ec(key) => key
                .sign(&rng, message.as_bytes())
                .unwrap()
                .as_ref()
                .to_vec(),
        };
        format!("{message}.{}", b64(&signature))
    }
}

/// Seconds since the epoch.
pub(crate) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A JWK Set of `signers`.
pub(crate) fn jwks(signers: &[&Signer]) -> Value {
    json!({"keys": signers.iter().map(|s| s.jwk()).collect::<Vec<_>>()})
}

/// base64url without padding (RFC 7515).
pub(crate) fn b64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
        }
    }
    out
}

/// A loopback HTTP server answering every GET with the JWK Set in `file` (read at each
/// request, so a test can rotate keys; an empty body once it is gone), counting the requests.
pub(crate) struct JwksServer {
    pub(crate) port: u16,
    pub(crate) fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    pub(crate) fn start(file: &Path) -> JwksServer {
        Self::start_with(file, None)
    }

    /// The same, its answers with this `Cache-Control` value.
    pub(crate) fn start_with(file: &Path, cache_control: Option<&str>) -> JwksServer {
        let cache_control =
            cache_control.map_or(String::new(), |v| format!("Cache-Control: {v}\r\n"));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let fetches = Arc::new(AtomicUsize::new(0));
        let counted = fetches.clone();
        let file = file.to_owned();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                // The request head, up to its blank line.
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let body = std::fs::read(&file).unwrap_or_default();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                     {cache_control}Connection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            }
        });
        JwksServer { port, fetches }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/jwks.json", self.port)
    }

    pub(crate) fn fetched(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

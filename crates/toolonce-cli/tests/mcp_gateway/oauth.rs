//! The gateway as an OAuth 2.1 resource server (`--oauth-jwks`, `--oauth-issuer`,
//! `--oauth-resource`): tokens this file signs itself (RS256 with a key made by openssl,
//! ES256 with one made by ring), the RFC 9728 metadata and the 401s that point at it, each
//! kind of bad token refused with a clear reason, key rotation through a JWKS URL on
//! loopback, and credentials checked before a body is read.

use std::sync::atomic::Ordering;

use super::jwt_issuer::{JwksServer, Signer, jwks, now};
use super::principals::open_session_as;
use super::*;

const ISSUER: &str = "https://idp.example.test";
const RESOURCE: &str = "https://gateway.example.test/mcp";
const METADATA_URL: &str = "https://gateway.example.test/.well-known/oauth-protected-resource/mcp";

/// An issuer's two keys, their set in a file, and a gateway (in front of the stdio test server,
/// its executions in `counter`) that trusts them.
struct Setup {
    rsa: Signer,
    ec: Signer,
    dir: tempfile::TempDir,
    gateway: Gateway,
}

impl Setup {
    fn start(extra: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let rsa = Signer::rsa("rsa-1", dir.path());
        let ec = Signer::ec("ec-1");
        let file = dir.path().join("jwks.json");
        std::fs::write(&file, jwks(&[&rsa, &ec]).to_string()).unwrap();
        let jwks_arg = file.display().to_string();
        let mut args = vec![
            "--oauth-jwks",
            &jwks_arg,
            "--oauth-issuer",
            ISSUER,
            "--oauth-resource",
            RESOURCE,
        ];
        args.extend_from_slice(extra);
        let gateway = gateway_for_command_with(&dir.path().join("counter"), &args);
        Setup {
            rsa,
            ec,
            dir,
            gateway,
        }
    }

    fn charges(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("counter"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("charge\t"))
            .count()
    }
}

/// Claims that pass: of ISSUER, for RESOURCE, valid for five minutes.
fn claims(sub: &str) -> Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub, "exp": now() + 300, "iat": now(),
           "client_id": "agent-app"})
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}\r\n")
}

fn charge(port: u16, headers: &str, id: &str) -> Value {
    raw_call(port, headers, id, "charge", &json!({"amount": 42}))
}

#[test]
fn the_gateway_serves_its_protected_resource_metadata_and_every_401_points_at_it() {
    let mut setup = Setup::start(&[]);
    let port = setup.gateway.port;
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 "), "{path}: {answer}");
        let document: Value = serde_json::from_str(body).unwrap();
        assert_eq!(document["resource"], RESOURCE, "{document}");
        assert_eq!(document["authorization_servers"], json!([ISSUER]));
        assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    }
    // No token: a challenge without an error code (RFC 6750 section 3.1).
    let refused = raw(port, "POST", JSON_ONLY, INITIALIZE);
    assert_eq!(refused.status(), 401, "{}", refused.body);
    assert_eq!(
        refused.header("www-authenticate").as_deref(),
        Some(format!("Bearer resource_metadata=\"{METADATA_URL}\"").as_str())
    );
    // A refused token: `invalid_token`, and the metadata too.
    let refused = raw(
        port,
        "POST",
        &format!("{JSON_ONLY}{}", bearer("nonsense")),
        INITIALIZE,
    );
    assert_eq!(refused.status(), 401, "{}", refused.body);
    let challenge = refused.header("www-authenticate").unwrap();
    assert!(
        challenge.starts_with(&format!(
            "Bearer resource_metadata=\"{METADATA_URL}\", error=\"invalid_token\", \
             error_description=\""
        )),
        "{challenge}"
    );
    assert_eq!(setup.charges(), 0);
    setup.gateway.stop();
}

#[test]
fn rs256_and_es256_tokens_are_accepted_and_each_subject_is_a_principal_whatever_its_token() {
    let mut setup = Setup::start(&[]);
    let port = setup.gateway.port;
    let alice = open_session_as(port, &bearer(&setup.rsa.sign(&claims("alice"))));
    let bob = open_session_as(port, &bearer(&setup.ec.sign(&claims("bob"))));
    let first = charge(port, &alice, "1");
    assert_eq!(outcome(&first["result"]), None, "{first}");
    let bobs = charge(port, &bob, "1");
    assert_eq!(
        outcome(&bobs["result"]),
        None,
        "Bob got Alice's result: {bobs}"
    );
    assert_eq!(setup.charges(), 2);
    // Alice with a new token (another key, other claims' times): still Alice.
    let mut later = claims("alice");
    later["exp"] = json!(now() + 600);
    let alice_again = open_session_as(port, &bearer(&setup.ec.sign(&later)));
    let again = charge(port, &alice_again, "2");
    assert_eq!(outcome(&again["result"]), Some("replayed"), "{again}");
    // The same subject through another client application is another principal.
    let mut other_app = claims("alice");
    other_app["client_id"] = json!("other-app");
    let elsewhere = open_session_as(port, &bearer(&setup.rsa.sign(&other_app)));
    let ran = charge(port, &elsewhere, "3");
    assert_eq!(outcome(&ran["result"]), None, "{ran}");
    assert_eq!(setup.charges(), 3);
    // Alice's session with Bob's token is not there for Bob.
    let session = alice.split_once("\r\n").unwrap().1;
    let as_bob = format!("{}{session}", bear_of(&bob));
    let post = raw(port, "POST", &format!("{BOTH}{as_bob}"), PING);
    assert_eq!(post.status(), 404, "{}", post.body);
    setup.gateway.stop();
}

/// The `Authorization` line of a session's headers.
fn bear_of(headers: &str) -> String {
    format!("{}\r\n", headers.split_once("\r\n").unwrap().0)
}

#[test]
fn expired_premature_misaddressed_forged_unknown_key_and_symmetric_tokens_get_a_clear_401() {
    let mut setup = Setup::start(&[]);
    let port = setup.gateway.port;
    let forger = Signer::ec("ec-1");
    let with = |change: &dyn Fn(&mut Value)| {
        let mut c = claims("mallory");
        change(&mut c);
        c
    };
    let hmac_header = json!({"alg": "HS256", "typ": "JWT", "kid": "ec-1"});
    let unknown_kid = json!({"alg": "ES256", "typ": "JWT", "kid": "nobody-knows"});
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "expired",
            setup.ec.sign(&with(&|c| c["exp"] = json!(now() - 120))),
            "the token has expired",
        ),
        (
            "not yet valid",
            setup.ec.sign(&with(&|c| c["nbf"] = json!(now() + 300))),
            "not valid yet",
        ),
        (
            "for another resource",
            setup.rsa.sign(&with(&|c| {
                c["aud"] = json!("https://other.example.test/mcp")
            })),
            "its audience (aud) must be https://gateway.example.test/mcp",
        ),
        (
            "of another issuer",
            setup
                .rsa
                .sign(&with(&|c| c["iss"] = json!("https://evil.example.test"))),
            "was not issued by https://idp.example.test",
        ),
        (
            "without exp",
            setup.rsa.sign(&with(&|c| {
                c.as_object_mut().unwrap().remove("exp");
            })),
            "no exp claim",
        ),
        (
            "signed by another key under a trusted kid",
            forger.sign(&claims("mallory")),
            "signature does not verify",
        ),
        (
            "signed by a key the set does not hold",
            forger.sign_with_header(&unknown_kid, &claims("mallory")),
            "a key (kid) the authorization server's key set does not hold",
        ),
        (
            "symmetric",
            setup.ec.sign_with_header(&hmac_header, &claims("mallory")),
            "only public-key algorithms",
        ),
        ("not a JWT", "not.a-jwt".to_owned(), "not a JWT"),
    ];
    for (what, token, why) in &cases {
        let refused = raw(
            port,
            "POST",
            &format!("{JSON_ONLY}{}", bearer(token)),
            INITIALIZE,
        );
        assert_eq!(refused.status(), 401, "{what}: {}", refused.body);
        assert!(refused.body.contains(why), "{what}: {}", refused.body);
        let challenge = refused.header("www-authenticate").unwrap();
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{what}: {challenge}"
        );
        assert!(challenge.contains(why), "{what}: {challenge}");
        assert!(
            !refused.body.contains(token.as_str()),
            "{what}: {}",
            refused.body
        );
    }
    let basic = raw(
        port,
        "POST",
        &format!("{JSON_ONLY}Authorization: Basic YTpi\r\n"),
        INITIALIZE,
    );
    assert_eq!(basic.status(), 401, "{}", basic.body);
    assert!(basic.body.contains("not `Bearer TOKEN`"), "{}", basic.body);
    // Within the leeway for clock skew, an expired token still passes.
    let skewed = setup.ec.sign(&with(&|c| c["exp"] = json!(now() - 10)));
    open_session_as(port, &bearer(&skewed));
    assert_eq!(setup.charges(), 0);
    let log = setup.gateway.stop();
    for (what, token, _) in &cases {
        let signature = token.rsplit('.').next().unwrap();
        assert!(
            !log.contains(signature),
            "{what}: the token was logged: {log}"
        );
    }
}

/// A JWKS URL (on loopback) is fetched at start, not again for every unknown key id (a client
/// cannot make the gateway hammer the issuer), and again once the set is older than 30 s, so
/// a key the issuer added since is accepted.
#[test]
fn keys_from_a_jwks_url_are_fetched_again_for_an_unknown_key_at_most_every_30_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let old = Signer::ec("old");
    let new = Signer::rsa("new", dir.path());
    let file = dir.path().join("served.json");
    std::fs::write(&file, jwks(&[&old]).to_string()).unwrap();
    let server = JwksServer::start(&file);
    let url = server.url();
    let mut gateway = gateway_for_command_with(
        &dir.path().join("counter"),
        &[
            "--oauth-jwks",
            &url,
            "--oauth-issuer",
            ISSUER,
            "--oauth-resource",
            RESOURCE,
        ],
    );
    let port = gateway.port;
    assert_eq!(server.fetched(), 1);
    open_session_as(port, &bearer(&old.sign(&claims("alice"))));
    std::fs::write(&file, jwks(&[&old, &new]).to_string()).unwrap();
    let token = new.sign(&claims("alice"));
    for _ in 0..10 {
        let refused = raw(
            port,
            "POST",
            &format!("{JSON_ONLY}{}", bearer(&token)),
            INITIALIZE,
        );
        assert_eq!(refused.status(), 401, "{}", refused.body);
    }
    assert_eq!(
        server.fetches.load(Ordering::SeqCst),
        1,
        "fetched for each unknown key"
    );
    std::thread::sleep(Duration::from_secs(31));
    open_session_as(port, &bearer(&token));
    assert_eq!(server.fetched(), 2);
    gateway.stop();
}

/// Issue 22, item 8 (the token half): a request without valid credentials is refused right
/// after its headers; the gateway never waits for (or holds) its body. With a valid token
/// the same request does wait for its body, so the test would see a gateway that read first.
#[test]
fn a_request_without_a_valid_token_is_refused_before_its_16_mib_body_is_read() {
    let mut oauth = Setup::start(&["--max-body", "33554432"]);
    let valid = bearer(&oauth.ec.sign(&claims("alice")));
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", "memory://", "--scope", "gateway-test"])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--require-token",
            "AUTH_TEST_TOKEN",
            // Above the 16 MiB body, so that a valid token's request waits for it instead of
            // getting 413 at once from the size limit.
            "--max-body",
            "33554432",
            "--",
        ])
        .arg(test_server())
        .env("MCP_TEST_COUNTER", dir.path().join("counter"))
        .env("AUTH_TEST_TOKEN", GATEWAY_TOKEN);
    let mut shared = Gateway::spawn(command);
    let cases = [
        (oauth.gateway.port, String::new(), false),
        (oauth.gateway.port, bearer("forged.token.here"), false),
        (oauth.gateway.port, valid, true),
        (shared.port, String::new(), false),
        (shared.port, bearer("gw-00000000"), false),
        (shared.port, bearer(GATEWAY_TOKEN), true),
    ];
    for (port, auth, waits) in cases {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        write!(
            stream,
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             {BOTH}{auth}Content-Length: {}\r\n\r\n{{\"jsonrpc\"",
            16 * 1024 * 1024
        )
        .unwrap();
        let mut head = [0u8; 12];
        let read = stream.read(&mut head);
        if waits {
            assert!(read.is_err(), "answered before the body came: {read:?}");
        } else {
            assert_eq!(&head[..read.unwrap()], b"HTTP/1.1 401", "{auth:?}");
        }
    }
    shared.stop();
    oauth.gateway.stop();
}

#[test]
fn bad_oauth_settings_stop_the_gateway_with_exit_code_2_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json").display().to_string();
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, r#"{"keys": []}"#).unwrap();
    let empty = empty.display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "--oauth-jwks",
                &missing,
                "--oauth-issuer",
                ISSUER,
                "--oauth-resource",
                RESOURCE,
            ],
            "--oauth-jwks",
        ),
        (
            vec![
                "--oauth-jwks",
                &empty,
                "--oauth-issuer",
                ISSUER,
                "--oauth-resource",
                RESOURCE,
            ],
            "holds no keys",
        ),
        (
            vec!["--oauth-jwks", &empty, "--oauth-resource", RESOURCE],
            "--oauth-issuer",
        ),
        (
            vec![
                "--oauth-jwks",
                &empty,
                "--oauth-issuer",
                ISSUER,
                "--oauth-resource",
                "gateway/mcp",
            ],
            "--oauth-resource",
        ),
        (
            vec![
                "--oauth-jwks",
                "http://127.0.0.1:9/jwks.json",
                "--oauth-issuer",
                ISSUER,
                "--oauth-resource",
                RESOURCE,
            ],
            "cannot fetch --oauth-jwks http://127.0.0.1:9/jwks.json",
        ),
    ];
    for (args, named) in cases {
        let output = Command::new(toolonce())
            .args(["mcp", "--store", "memory://", "--listen", "127.0.0.1:0"])
            .args(&args)
            .arg("--")
            .arg(test_server())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
}

/// Requests of protocol 2026-07-28 have no session: they share proxies, but never across
/// principals, and each principal's operations are its own.
#[test]
fn requests_without_a_session_of_two_principals_never_share_an_operation() {
    let dir = tempfile::tempdir().unwrap();
    let signer = Signer::ec("ec-1");
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks(&[&signer]).to_string()).unwrap();
    let counter = dir.path().join("counter");
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", "memory://", "--scope", "gateway-test"])
        .args([
            "--server-id",
            "mail",
            "--listen",
            "127.0.0.1:0",
            "--oauth-jwks",
        ])
        .arg(&file)
        .args(["--oauth-issuer", ISSUER, "--oauth-resource", RESOURCE, "--"])
        .arg(mcp_peer::modern_server())
        .env("MCP_TEST_COUNTER", &counter)
        .env_remove("MCP_TEST_LOG");
    let mut gateway = Gateway::spawn(command);
    let charges = || {
        std::fs::read_to_string(&counter)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("charge\t"))
            .count()
    };
    let charge = |who: &str, id: &str| {
        let auth = bearer(&signer.sign(&claims(who)));
        let params = json!({"name": "charge", "arguments": {"amount": 7}});
        modern_post_with(gateway.port, &auth, "tools/call", id, params)
    };
    let alice = charge("alice", "a-1");
    assert_eq!(outcome(&alice["result"]), None, "{alice}");
    let bob = charge("bob", "b-1");
    assert_eq!(
        outcome(&bob["result"]),
        None,
        "Bob got Alice's result: {bob}"
    );
    let again = charge("alice", "a-2");
    assert_eq!(outcome(&again["result"]), Some("replayed"), "{again}");
    assert_eq!(charges(), 2);
    // And without a token, nothing at all.
    let body = json!({"jsonrpc": "2.0", "id": "x", "method": "tools/list"});
    let refused = raw(
        gateway.port,
        "POST",
        &format!("{BOTH}MCP-Protocol-Version: {MODERN}\r\n"),
        &body.to_string(),
    );
    assert_eq!(refused.status(), 401, "{}", refused.body);
    gateway.stop();
}

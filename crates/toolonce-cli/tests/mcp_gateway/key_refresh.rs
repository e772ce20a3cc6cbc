//! The OAuth key set (`--oauth-jwks` URL) is kept only as long as its `Cache-Control: max-age`
//! says (10 minutes without one): a key the issuer removed is refused once that age has
//! passed, the set is loaded again in the background without waiting for a request, and a
//! set that cannot be loaded again is used for a bounded grace, then tokens get 503. The
//! floor of the max-age (30 s) is lowered for these tests with `TOOLONCE_TEST_JWKS_MIN_AGE`,
//! which is for tests only.

use std::path::Path;

use super::jwt_issuer::{JwksServer, Signer, jwks, now};
use super::*;

const ISSUER: &str = "https://idp.example.test";
const RESOURCE: &str = "https://gateway.example.test/mcp";

/// A gateway trusting the set served at `url`, with the max-age floor at 0.2 s and the
/// gateway's own log lines on stderr.
fn gateway_trusting(url: &str, dir: &Path) -> Gateway {
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", "memory://", "--scope", "gateway-test"])
        .args(["--listen", "127.0.0.1:0", "--oauth-jwks", url])
        .args(["--oauth-issuer", ISSUER, "--oauth-resource", RESOURCE, "--"])
        .arg(test_server())
        .env("MCP_TEST_COUNTER", dir.join("counter"))
        .env_remove("MCP_TEST_LOG")
        .env("TOOLONCE_TEST_JWKS_MIN_AGE", "0.2")
        .env("RUST_LOG", "toolonce::mcp=info");
    Gateway::spawn(command)
}

/// An issuer serving a key set from a file it can change, and a gateway trusting it.
struct Served {
    /// Holds the served file and the gateway's counter.
    _dir: tempfile::TempDir,
    file: std::path::PathBuf,
    server: JwksServer,
    gateway: Gateway,
}

/// Serves the set of `signers` (with `cache_control`, if any) to a gateway that trusts it.
fn served(signers: &[&Signer], cache_control: Option<&str>) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("served.json");
    std::fs::write(&file, jwks(signers).to_string()).unwrap();
    let server = match cache_control {
        Some(header) => JwksServer::start_with(&file, Some(header)),
        None => JwksServer::start(&file),
    };
    let gateway = gateway_trusting(&server.url(), dir.path());
    Served {
        _dir: dir,
        file,
        server,
        gateway,
    }
}

fn token(signer: &Signer, sub: &str) -> String {
    signer.sign(&json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub,
                        "exp": now() + 300, "iat": now()}))
}

/// The answer to an `initialize` with `token`.
fn initialize_with(port: u16, token: &str) -> Raw {
    let auth = format!("Authorization: Bearer {token}\r\n");
    raw(port, "POST", &format!("{JSON_ONLY}{auth}"), INITIALIZE)
}

/// The answer to a request with `token` that opens no session: 400 (no session) once the
/// token is accepted, 401 or 503 when it is not.
fn probe(port: u16, token: &str) -> Raw {
    let auth = format!("Authorization: Bearer {token}\r\n");
    raw(port, "POST", &format!("{JSON_ONLY}{auth}"), PING)
}

#[test]
fn a_key_removed_from_the_set_is_refused_once_the_sets_max_age_has_passed() {
    let (old, new) = (Signer::ec("old"), Signer::ec("new"));
    let Served {
        _dir,
        file,
        server: _server,
        mut gateway,
    } = served(&[&old, &new], Some("public, max-age=1"));
    let port = gateway.port;
    let accepted = initialize_with(port, &token(&old, "alice"));
    assert_eq!(accepted.status(), 200, "{}", accepted.body);
    // The issuer revokes the old key.
    std::fs::write(&file, jwks(&[&new]).to_string()).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let refused = initialize_with(port, &token(&old, "alice"));
    assert_eq!(refused.status(), 401, "still trusted: {}", refused.body);
    assert!(refused.body.contains("does not hold"), "{}", refused.body);
    let kept = initialize_with(port, &token(&new, "alice"));
    assert_eq!(kept.status(), 200, "{}", kept.body);
    gateway.stop();
}

#[test]
fn the_key_set_is_loaded_again_before_its_max_age_without_any_request() {
    let signer = Signer::ec("only");
    let Served {
        _dir,
        file: _file,
        server,
        mut gateway,
    } = served(&[&signer], Some("max-age=1"));
    assert_eq!(server.fetched(), 1);
    // No request at all: at three quarters of each second, a load.
    std::thread::sleep(Duration::from_millis(2500));
    let fetched = server.fetched();
    assert!((3..=5).contains(&fetched), "fetched {fetched} times");
    gateway.stop();
}

#[test]
fn without_cache_control_the_key_set_is_kept_for_the_default_ten_minutes() {
    let signer = Signer::ec("only");
    let Served {
        _dir,
        file: _file,
        server,
        mut gateway,
    } = served(&[&signer], None);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        server.fetched(),
        1,
        "loaded again though no max-age was given"
    );
    let accepted = initialize_with(gateway.port, &token(&signer, "alice"));
    assert_eq!(accepted.status(), 200, "{}", accepted.body);
    let log = gateway.stop();
    assert!(
        log.contains("loaded the key set") && log.contains("max_age_secs=600"),
        "{log}"
    );
}

#[test]
fn a_set_that_cannot_be_loaded_again_is_used_for_its_grace_then_tokens_get_503() {
    let signer = Signer::ec("only");
    let Served {
        _dir,
        file,
        server: _server,
        mut gateway,
    } = served(&[&signer], Some("max-age=1"));
    let port = gateway.port;
    let alice = token(&signer, "alice");
    // The issuer answers nothing usable from now on (an empty body).
    std::fs::remove_file(&file).unwrap();
    // Within the grace (the max-age again, at least ten floors: 2 s here) the last set holds.
    let within = initialize_with(port, &alice);
    assert_eq!(within.status(), 200, "{}", within.body);
    eventually("tokens are refused once the grace is over", || {
        probe(port, &alice).status() == 503
    });
    let refused = probe(port, &alice);
    assert!(refused.body.contains("--oauth-jwks"), "{}", refused.body);
    assert!(
        refused.header("www-authenticate").is_none(),
        "{}",
        refused.head
    );
    // The issuer is back: tokens are accepted again after its next load.
    std::fs::write(&file, jwks(&[&signer]).to_string()).unwrap();
    eventually("tokens are accepted again", || {
        probe(port, &alice).status() == 400
    });
    let log = gateway.stop();
    assert!(log.contains("cannot load the key set again"), "{log}");
    let signature = alice.rsplit('.').next().unwrap();
    assert!(!log.contains(signature), "the token was logged: {log}");
}

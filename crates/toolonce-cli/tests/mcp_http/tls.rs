//! `https://` upstreams, checked against the trusted roots (a test CA made with openssl).

use super::*;

/// Writes a PEM file with openssl; panics naming what failed.
fn openssl(args: &[&str], dir: &Path) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("`openssl` is required by this test (it makes a test CA): install it");
    assert!(status.success(), "openssl {args:?} failed");
}

/// A CA, and a certificate for `localhost` it signed (all in `dir`).
fn test_ca(dir: &Path, name: &str) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj"];
    let subject = format!("/CN=toolonce test {name}");
    let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
    ca.push(&subject);
    ca.extend(ec);
    ca.extend(["-keyout", &key, "-out", &pem]);
    ca.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    ca.extend(["-addext", "keyUsage=critical,keyCertSign"]);
    openssl(&ca, dir);
    if name == "ca" {
        let mut csr = vec!["req", "-new", "-subj", "/CN=localhost"];
        csr.extend(ec);
        csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
        openssl(&csr, dir);
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            &[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-extfile",
                "server.ext",
                "-out",
                "server.pem",
            ],
            dir,
        );
    }
}

/// HTTPS with the trusted roots of the system's store, which `SSL_CERT_FILE` replaces here: a
/// server whose CA is trusted is reached; one whose CA is not is never sent anything.
#[test]
fn https_upstreams_are_checked_against_the_trusted_roots() {
    let pki = tempfile::tempdir().unwrap();
    test_ca(pki.path(), "ca");
    test_ca(pki.path(), "other");
    let key = pki.path().join("server.key");
    let cert = pki.path().join("server.pem");
    let server = HttpServer::start(
        "sse",
        &[
            ("TLS_KEY", key.to_str().unwrap()),
            ("TLS_CERT", cert.to_str().unwrap()),
        ],
    );
    let url = format!("https://localhost:{}/mcp", server.port);
    let trusted = pki.path().join("ca.pem");
    let mut peer = Spawn::proxy()
        .upstream(&url)
        .env("SSL_CERT_FILE", trusted.to_str().unwrap())
        .start();
    let init = peer.initialize();
    assert_eq!(init["serverInfo"]["name"], "toolonce-http-test", "{init}");
    let write = peer.call("write", json!({"item": "over tls"}));
    assert_eq!(text(&write), "wrote over tls (execution 1)");

    let other = pki.path().join("other.pem");
    let mut untrusted = Spawn::proxy()
        .upstream(&url)
        .env("SSL_CERT_FILE", other.to_str().unwrap())
        .start();
    let write = untrusted.call("write", json!({"item": "untrusted"}));
    assert_eq!(
        write["result"]["_meta"]["toolonce/outcome"], "not_executed",
        "{write}"
    );
    assert!(untrusted.stderr().contains("TLS"), "{}", untrusted.stderr());
    assert_eq!(server.executions().len(), 1);
}

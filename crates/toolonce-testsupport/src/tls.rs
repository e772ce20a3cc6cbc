//! Certificates for TLS tests, made by the `openssl` command.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A certificate authority and a server certificate it signed, in a directory: `ca.crt`,
/// `server.crt` (for the IP address 127.0.0.1 only, no host name) and `server.key`, all PEM.
#[derive(Debug, Clone)]
pub struct TestCertificates {
    dir: PathBuf,
}

impl TestCertificates {
    /// Makes the CA and the server certificate in `dir` (EC P-256, valid two days).
    ///
    /// # Panics
    ///
    /// If the `openssl` command is missing or fails.
    pub fn make(dir: &Path) -> TestCertificates {
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=toolonce test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(dir, &ca);
        let mut csr = vec!["req"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        openssl(dir, &csr);
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap_or_else(|e| panic!("cannot write server.ext in {}: {e}", dir.display()));
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
        );
        TestCertificates {
            dir: dir.to_path_buf(),
        }
    }

    /// The CA's certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The server's certificate.
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    /// The server's private key.
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run openssl ({e}): it makes the test certificates; run \
                 scripts/install-test-deps (Debian package openssl)"
            )
        });
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! The PostgreSQL installation: finding its programs (on `PATH` or in Debian's layout), the
//! OS user that runs them when the tests run as root, and a temporary directory that user can
//! reach.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process::{find_on_path, is_executable};

pub(super) const MISSING_SERVER: &str =
    "postgres/initdb not found: run scripts/install-test-deps (Debian package postgresql)";

/// The OS user that runs PostgreSQL when the tests run as root, since
/// PostgreSQL refuses to run as root.
pub(super) const OS_USER: &str = "postgres";

/// The PostgreSQL programs of one installation.
#[derive(Debug, Clone)]
pub(super) struct PgBins {
    pub(super) initdb: PathBuf,
    pub(super) postgres: PathBuf,
    /// The directory of the real `postgres` binary, where `psql` and
    /// `pg_isready` of the same version usually are.
    pub(super) bindir: PathBuf,
}

impl PgBins {
    /// `initdb` and `postgres` on `PATH`, else in the highest-numbered
    /// `/usr/lib/postgresql/*/bin` (Debian's layout).
    pub(super) fn find() -> PgBins {
        if let (Some(initdb), Some(postgres)) = (find_on_path("initdb"), find_on_path("postgres")) {
            let postgres = fs::canonicalize(&postgres).unwrap_or(postgres);
            let bindir = postgres.parent().map(Path::to_path_buf).unwrap_or_default();
            return PgBins {
                initdb,
                postgres,
                bindir,
            };
        }
        let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let version = name
                    .split('.')
                    .map(str::parse)
                    .collect::<Result<Vec<u32>, _>>()
                    .ok()?;
                let bindir = entry.path().join("bin");
                (is_executable(&bindir.join("initdb")) && is_executable(&bindir.join("postgres")))
                    .then_some((version, bindir))
            })
            .collect();
        versions.sort();
        let (_, bindir) = versions.pop().unwrap_or_else(|| panic!("{MISSING_SERVER}"));
        PgBins {
            initdb: bindir.join("initdb"),
            postgres: bindir.join("postgres"),
            bindir,
        }
    }

    /// A client program (`psql`, `pg_isready`) of the same installation if
    /// it has one, else from `PATH`.
    pub(super) fn client(&self, name: &str) -> Option<PathBuf> {
        let beside = self.bindir.join(name);
        if is_executable(&beside) {
            Some(beside)
        } else {
            find_on_path(name)
        }
    }

    /// Whether the `pg_stat_statements` module is installed.
    pub(super) fn has_pg_stat_statements(&self) -> bool {
        let Some(prefix) = self.bindir.parent() else {
            return false;
        };
        let candidates = [
            prefix.join("lib/pg_stat_statements.so"),
            prefix.join("lib/postgresql/pg_stat_statements.so"),
        ];
        if candidates.iter().any(|p| p.is_file()) {
            return true;
        }
        let Some(pg_config) = self.client("pg_config") else {
            return false;
        };
        Command::new(pg_config)
            .arg("--pkglibdir")
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .is_some_and(|dir| Path::new(&dir).join("pg_stat_statements.so").is_file())
    }
}

/// The uid and gid of the `postgres` OS user.
pub(super) fn os_user_ids() -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id")
            .args([flag, OS_USER])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    match (id("-u"), id("-g")) {
        (Some(uid), Some(gid)) => (uid, gid),
        _ => panic!(
            "the tests run as root and PostgreSQL refuses to, but there is no `{OS_USER}` OS \
             user to run it as: run scripts/install-test-deps (Debian package postgresql \
             creates it)"
        ),
    }
}

/// Where to make the temporary directory: the usual temporary directory,
/// unless the server runs as another user who could not reach it, or the
/// path is so long that the Unix socket path would pass its 107-byte limit.
pub(super) fn temp_base(for_other_user: bool) -> PathBuf {
    let base = std::env::temp_dir();
    let reachable = !for_other_user
        || base.ancestors().all(|dir| {
            dir.metadata()
                .is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
        });
    if reachable && base.as_os_str().len() <= 60 {
        base
    } else {
        PathBuf::from("/tmp")
    }
}

//! A real PostgreSQL server in a temporary data directory.
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::free_port;
use crate::process::{
    LogFile, PORT_ATTEMPTS, Spawned, StartError, Watchdog, find_on_path, is_executable,
    running_as_root, tail, wait_ready,
};

mod install;
mod shm;
mod standby;

use install::{OS_USER, PgBins, os_user_ids, temp_base};
use shm::{shm_attached, shm_segment, wait_segment_detached};

/// How long the postmaster may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `stop()` waits after SIGINT (fast shutdown) before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// How long `kill()` waits for the killed server's backends to exit.
const BACKENDS_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the watchdog does when the test process is gone: `$1` is the
/// postmaster's pid, `$2` the temporary directory, `$3` the data directory.
/// A fast shutdown (SIGINT) first, which also frees the shared memory; if
/// that takes over 10 s, SIGKILL and remove the System V segment whose id
/// line 7 of `postmaster.pid` names.
const PG_ORPHAN_SCRIPT: &str = r#"pidfile="$3/postmaster.pid"
kill -INT "$1" 2>/dev/null
i=0
while [ -e "$pidfile" ] && kill -0 "$1" 2>/dev/null && [ "$i" -lt 100 ]; do
  sleep 0.1
  i=$((i + 1))
done
if [ -e "$pidfile" ]; then
  kill -9 "$1" 2>/dev/null
  shmid=$(sed -n 7p "$pidfile" | { read -r key id; echo "$id"; })
  sleep 1
  [ -n "$shmid" ] && ipcrm -m "$shmid" 2>/dev/null
fi
rm -rf "$2""#;

/// Quotes a value for a libpq connection string.
fn conninfo_quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A PostgreSQL server on a free loopback port, with its own `initdb`'d
/// data directory in a temporary directory, tuned for tests (`fsync` and
/// `full_page_writes` off), trust authentication
/// for the `postgres` superuser, and `pg_stat_statements` preloaded when
/// the installation has it (see
/// [`has_pg_stat_statements`](Self::has_pg_stat_statements)).
///
/// `synchronous_commit` stays on: with `fsync` off a commit costs only a
/// `write()` of the WAL, and a commit that was acknowledged survives
/// [`kill`](Self::kill) and [`restart`](Self::restart) as it would on a
/// production server (`synchronous_commit=off` would lose the last commits
/// on a kill). Only a crash of the whole machine could lose data.
///
/// When the tests run as root, `initdb` and `postgres` run as the
/// `postgres` OS user through `setpriv`, which execs, so the postmaster is
/// still this process's direct child.
///
/// Dropping the value shuts the server down and removes its directory; a
/// watchdog does the same if the test process dies first. All methods take
/// `&self`, so a server in an `Arc` can be killed from another thread.
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    bins: PgBins,
    run_as: Option<(u32, u32)>,
    pg_stat_statements: bool,
    /// `-c` settings beyond the defaults (TLS).
    extra_settings: Vec<String>,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log: LogFile,
    proc: Mutex<Option<Spawned>>,
    dir: TempDir,
}

impl PostgresServer {
    /// Runs `initdb`, starts the server on a free port and waits until it
    /// accepts connections.
    ///
    /// # Panics
    ///
    /// If the PostgreSQL programs are missing (run
    /// `scripts/install-test-deps`), `initdb` fails, or the server is not
    /// ready within 30 s; the message shows the relevant log.
    pub fn start() -> PostgresServer {
        PostgresServer::start_inner(None)
    }

    /// Like [`start`](Self::start), with TLS on (`ssl=on`): the server presents the PEM
    /// certificate (chain) `cert` with the private key `key`. Both are copied into the
    /// server's directory, owned by the server's OS user with mode 0600 as PostgreSQL
    /// demands. Plain connections are still accepted; the client's `sslmode` decides.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), or if the files cannot be copied.
    pub fn start_with_tls(cert: &Path, key: &Path) -> PostgresServer {
        PostgresServer::start_inner(Some((cert, key)))
    }

    fn start_inner(tls: Option<(&Path, &Path)>) -> PostgresServer {
        PostgresServer::start_from(tls, None)
    }

    /// Starts a server whose data directory is `initdb`'s, or a base backup of `primary`
    /// (then it runs as its hot standby).
    fn start_from(tls: Option<(&Path, &Path)>, primary: Option<&PostgresServer>) -> PostgresServer {
        let bins = PgBins::find();
        let run_as = running_as_root().then(os_user_ids);
        let dir = tempfile::Builder::new()
            .prefix("toolonce-pg-")
            .tempdir_in(temp_base(run_as.is_some()))
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let socket_dir = dir.path().join("sock");
        fs::create_dir(&socket_dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", socket_dir.display()));
        if let Some((uid, gid)) = run_as {
            for path in [dir.path(), socket_dir.as_path()] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap_or_else(|e| {
                    panic!("cannot hand {} to the {OS_USER} user: {e}", path.display())
                });
            }
        }
        let mut extra_settings = Vec::new();
        if let Some((cert, key)) = tls {
            for (from, name, setting) in [
                (cert, "server.crt", "ssl_cert_file"),
                (key, "server.key", "ssl_key_file"),
            ] {
                let to = dir.path().join(name);
                fs::copy(from, &to).unwrap_or_else(|e| {
                    panic!("cannot copy {} to {}: {e}", from.display(), to.display())
                });
                fs::set_permissions(&to, fs::Permissions::from_mode(0o600))
                    .unwrap_or_else(|e| panic!("cannot chmod {}: {e}", to.display()));
                if let Some((uid, gid)) = run_as {
                    std::os::unix::fs::chown(&to, Some(uid), Some(gid)).unwrap_or_else(|e| {
                        panic!("cannot hand {} to the {OS_USER} user: {e}", to.display())
                    });
                }
                extra_settings.push(format!("{setting}={}", to.display()));
            }
            extra_settings.push("ssl=on".to_owned());
        }
        let mut server = PostgresServer {
            port: 0,
            extra_settings,
            pg_stat_statements: bins.has_pg_stat_statements(),
            bins,
            run_as,
            data_dir: dir.path().join("data"),
            socket_dir,
            log: LogFile::new(dir.path().join("postgres.log")),
            proc: Mutex::new(None),
            dir,
        };
        match primary {
            Some(primary) => server.base_backup_of(primary),
            None => server.initdb(),
        }
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port();
            match server.spawn() {
                Ok(spawned) => {
                    *server.lock() = Some(spawned);
                    return server;
                }
                Err(StartError::PortInUse(msg)) => last = msg,
                Err(StartError::Failed(msg)) => panic!("cannot start postgres: {msg}"),
            }
        }
        panic!("cannot start postgres: {PORT_ATTEMPTS} ports in a row were taken; last: {last}")
    }

    fn lock(&self) -> MutexGuard<'_, Option<Spawned>> {
        self.proc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A command that runs `program` as the server's OS user, in the
    /// temporary directory, with no `PG*` variables from the environment.
    fn command_as_server_user(&self, program: &Path) -> Command {
        let mut cmd = match self.run_as {
            Some((uid, gid)) => {
                let setpriv = find_on_path("setpriv")
                    .or_else(|| Some(PathBuf::from("/usr/bin/setpriv")).filter(|p| is_executable(p)))
                    .unwrap_or_else(|| {
                        panic!("setpriv not found (Debian package util-linux): it is needed to run PostgreSQL as the {OS_USER} user when the tests run as root")
                    });
                let mut cmd = Command::new(setpriv);
                cmd.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--init-groups")
                    .arg("--")
                    .arg(program);
                cmd
            }
            None => Command::new(program),
        };
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PG") {
                cmd.env_remove(name);
            }
        }
        cmd.env("LC_ALL", "C").current_dir(self.dir.path());
        cmd
    }

    fn initdb(&self) {
        let log_path = self.dir.path().join("initdb.log");
        let log = fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let log_err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let status = self
            .command_as_server_user(&self.bins.initdb)
            .arg("-D")
            .arg(&self.data_dir)
            .args(["-A", "trust", "-U", "postgres", "--no-sync"])
            .args(["-E", "UTF8", "--locale=C"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bins.initdb.display()));
        if !status.success() {
            let text = fs::read_to_string(&log_path).unwrap_or_default();
            panic!("initdb failed ({status}); its output:\n{}", tail(&text, 40));
        }
    }

    /// Starts the postmaster on `self.port` and waits until it is ready.
    fn spawn(&self) -> Result<Spawned, StartError> {
        let failed = |what: &str, e: io::Error| StartError::Failed(format!("{what}: {e}"));
        let (log_file, offset) = self
            .log
            .open_append()
            .map_err(|e| failed("cannot open the postgres log", e))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| failed("cannot open the postgres log", e))?;
        let mut cmd = self.command_as_server_user(&self.bins.postgres);
        cmd.arg("-D")
            .arg(&self.data_dir)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&self.socket_dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off"])
            .args(["-c", "full_page_writes=off"])
            .args(["-c", "max_connections=200"]);
        if self.pg_stat_statements {
            cmd.args(["-c", "shared_preload_libraries=pg_stat_statements"]);
        }
        for setting in &self.extra_settings {
            cmd.arg("-c").arg(setting);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .map_err(|e| failed(&format!("cannot run {}", self.bins.postgres.display()), e))?;
        let mut spawned = Spawned::new(child);
        let pid = spawned.pid().to_string();
        let watchdog = Watchdog::spawn(
            PG_ORPHAN_SCRIPT,
            &[
                OsStr::new(&pid),
                self.dir.path().as_os_str(),
                self.data_dir.as_os_str(),
            ],
        )
        .map_err(|e| failed("cannot spawn the watchdog shell", e))?;
        spawned.set_watchdog(watchdog);
        let pg_isready = self.bins.client("pg_isready");
        wait_ready(
            &mut spawned,
            &format!("postgres on port {}", self.port),
            &self.log,
            offset,
            READY_TIMEOUT,
            |pid| self.is_ready(pid, pg_isready.as_deref()),
        )?;
        Ok(spawned)
    }

    /// Ready: our postmaster (by pid) says `ready` in `postmaster.pid`, the
    /// port accepts TCP connections, and `pg_isready` agrees if present.
    fn is_ready(&self, pid: u32, pg_isready: Option<&Path>) -> bool {
        let Ok(text) = fs::read_to_string(self.data_dir.join("postmaster.pid")) else {
            return false;
        };
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        if lines.first() != Some(&pid.to_string().as_str()) || lines.get(7) != Some(&"ready") {
            return false;
        }
        if TcpStream::connect_timeout(&self.addr(), Duration::from_secs(1)).is_err() {
            return false;
        }
        pg_isready.is_none_or(|bin| {
            Command::new(bin)
                .args(["-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
                .args(["-t", "2", "-p"])
                .arg(self.port.to_string())
                .stdin(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The URL of another database on this server.
    pub fn url_for(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The directory of the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// Everything the server has logged since it was first started.
    pub fn log(&self) -> String {
        self.log.read_since(0)
    }

    /// Whether `pg_stat_statements` is preloaded. A test that counts
    /// statements still runs `CREATE EXTENSION IF NOT EXISTS
    /// pg_stat_statements` in its database first.
    pub fn has_pg_stat_statements(&self) -> bool {
        self.pg_stat_statements
    }

    /// The postmaster's pid, `None` after [`kill`](Self::kill) or
    /// [`stop`](Self::stop).
    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(Spawned::pid)
    }

    /// Whether the postmaster is running.
    pub fn is_running(&self) -> bool {
        self.lock().as_mut().is_some_and(|s| s.try_wait().is_none())
    }

    /// SIGKILLs the postmaster, as a crash would, and waits until its
    /// backends have exited too (none has the shared memory attached). The
    /// data directory stays; [`restart`](Self::restart) recovers from it on
    /// the same port. Does nothing if the server is not running.
    pub fn kill(&self) {
        if let Some(spawned) = self.lock().take() {
            let segment = shm_segment(&self.data_dir);
            spawned.kill();
            wait_segment_detached(segment, BACKENDS_EXIT_TIMEOUT);
        }
    }

    /// Shuts the server down (fast shutdown: SIGINT; SIGKILL after 15 s).
    pub fn stop(&self) {
        let mut guard = self.lock();
        if let Some(spawned) = guard.take() {
            let segment = shm_segment(&self.data_dir);
            if !spawned.terminate("INT", STOP_GRACE) {
                wait_segment_detached(segment, BACKENDS_EXIT_TIMEOUT);
            }
        }
    }

    /// Starts the server again on the same port with the same data
    /// directory (shutting it down first if it runs) and waits until it is
    /// ready. After [`kill`](Self::kill) this runs crash recovery.
    ///
    /// # Panics
    ///
    /// If it is not ready within 30 s.
    pub fn restart(&self) {
        self.stop();
        let mut guard = self.lock();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.spawn() {
                Ok(spawned) => {
                    *guard = Some(spawned);
                    return;
                }
                Err(StartError::PortInUse(_)) if Instant::now() < deadline => {}
                Err(StartError::Failed(msg))
                    if Instant::now() < deadline
                        && (msg.contains("pre-existing shared memory block")
                            || msg.contains("lock file")) => {}
                Err(StartError::PortInUse(msg) | StartError::Failed(msg)) => {
                    panic!("cannot restart postgres on port {}: {msg}", self.port)
                }
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs SQL with `psql` in the `postgres` database and returns its
    /// unaligned, tuples-only output, trimmed: `psql("SELECT 1")` is `"1"`.
    ///
    /// # Panics
    ///
    /// If `psql` is missing or the SQL fails.
    pub fn psql(&self, sql: &str) -> String {
        self.psql_in("postgres", sql)
    }

    /// Like [`psql`](Self::psql), in `database`.
    ///
    /// # Panics
    ///
    /// If `psql` is missing or the SQL fails.
    pub fn psql_in(&self, database: &str, sql: &str) -> String {
        self.try_psql_in(database, sql)
            .unwrap_or_else(|e| panic!("psql on port {} failed: {e}", self.port))
    }

    /// Like [`psql_in`](Self::psql_in), returning psql's error output
    /// instead of panicking when the SQL fails or the server is down.
    ///
    /// # Errors
    ///
    /// psql's stderr when it exits unsuccessfully.
    ///
    /// # Panics
    ///
    /// If `psql` is missing.
    pub fn try_psql_in(&self, database: &str, sql: &str) -> Result<String, String> {
        let psql = self.bins.client("psql").unwrap_or_else(|| {
            panic!(
                "psql not found: run scripts/install-test-deps (Debian package postgresql-client)"
            )
        });
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres dbname={} connect_timeout=10",
            self.port,
            conninfo_quote(database)
        );
        let mut cmd = Command::new(&psql);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PG") {
                cmd.env_remove(name);
            }
        }
        let output = cmd
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
            .arg(conninfo)
            .arg("-c")
            .arg(sql)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", psql.display()));
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout)
                .trim_end()
                .to_owned())
        } else {
            Err(format!(
                "{} ({})",
                String::from_utf8_lossy(&output.stderr).trim_end(),
                output.status
            ))
        }
    }

    /// Creates a database and returns its URL.
    ///
    /// # Panics
    ///
    /// If `name` is not 1 to 63 ASCII letters, digits and underscores, or
    /// the database cannot be created (it exists already, say).
    pub fn create_database(&self, name: &str) -> String {
        assert!(
            !name.is_empty()
                && name.len() <= 63
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "database name {name:?}: use 1 to 63 ASCII letters, digits and underscores"
        );
        self.psql(&format!("CREATE DATABASE \"{name}\""));
        self.url_for(name)
    }

    /// Creates a login role that must give `password` over TCP (SCRAM), while the
    /// `postgres` superuser keeps trust authentication: for tests of wrong passwords. The
    /// rule goes first in `pg_hba.conf` and the configuration is reloaded.
    ///
    /// # Panics
    ///
    /// If `name` is not 1 to 63 ASCII letters, digits and underscores, `password` contains a
    /// single quote, or the role cannot be created.
    pub fn create_user_with_password(&self, name: &str, password: &str) {
        assert!(
            !name.is_empty()
                && name.len() <= 63
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "role name {name:?}: use 1 to 63 ASCII letters, digits and underscores"
        );
        assert!(!password.contains('\''), "a password without single quotes");
        self.psql(&format!(
            "SET password_encryption = 'scram-sha-256'; \
             CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'"
        ));
        let hba = self.data_dir.join("pg_hba.conf");
        let old = fs::read_to_string(&hba)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", hba.display()));
        fs::write(
            &hba,
            format!("host all \"{name}\" 127.0.0.1/32 scram-sha-256\n{old}"),
        )
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", hba.display()));
        self.psql("SELECT pg_reload_conf()");
    }

    /// Creates a database with a name no other call in this process has
    /// used (`test_<pid>_<n>`) and returns its URL: one per test keeps
    /// tests on a [shared](crate::shared_postgres) server apart.
    pub fn create_unique_database(&self) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        self.create_database(&format!("test_{}_{n}", std::process::id()))
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
        // After a kill() without a restart, the segment of the dead server
        // is left behind: nothing has it attached any more, so remove it.
        if let Some(segment) = shm_segment(&self.data_dir)
            && shm_attached(segment) == Some(0)
        {
            let _ = Command::new("ipcrm")
                .arg("-m")
                .arg(segment.1.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

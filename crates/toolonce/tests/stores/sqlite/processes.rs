//! Several processes on one file.

use super::*;

/// The full name of [`multi_process_worker`], for `run_workers`.
pub(super) fn worker_test() -> String {
    conformance::multiprocess::test_name(module_path!(), "multi_process_worker")
}

pub(super) const MP_PATH: &str = "TOOLONCE_SQLITE_PATH";

/// The body of the worker processes of the next test; a no-op in a normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_process_worker() {
    if !conformance::multiprocess::is_worker() {
        return;
    }
    let store = SqliteStore::open(std::env::var(MP_PATH).unwrap()).unwrap();
    conformance::multiprocess::worker(Arc::new(store)).await;
}

#[test]
fn eight_processes_running_the_same_500_operations_execute_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    // Create the schema once up front, so the workers' opening is the common case (the
    // concurrent creation is covered by the next test).
    drop(SqliteStore::open(&path).unwrap());
    conformance::multiprocess::run_workers(
        &worker_test(),
        &[(MP_PATH, path.to_string_lossy().into_owned())],
        8,
        500,
    );
}

#[test]
fn processes_opening_a_new_file_at_once_create_the_schema_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    conformance::multiprocess::run_workers(
        &worker_test(),
        &[(MP_PATH, path.to_string_lossy().into_owned())],
        4,
        20,
    );
}

/// Regression: switching a new file to WAL answered "database is locked" at once (SQLite does
/// not call the busy handler there) while another process was creating the same file and
/// writing to it, so a process opening the store at the wrong moment failed (about 1 run in 25
/// of the test above). Many rounds of more processes make the window likely to be hit.
#[test]
fn processes_opening_new_files_together_never_find_them_locked() {
    for _round in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.db");
        conformance::multiprocess::run_workers(
            &worker_test(),
            &[(MP_PATH, path.to_string_lossy().into_owned())],
            8,
            10,
        );
    }
}

//! Several processes.

use super::*;

const URL_VAR: &str = "TOOLONCE_REDIS_URL";

#[test]
fn eight_processes_running_the_same_500_operations_execute_each_exactly_once() {
    let url = format!("{}?prefix={}", shared_redis().url(), unique_prefix());
    conformance::multiprocess::run_workers(
        &conformance::multiprocess::test_name(module_path!(), "multi_process_worker"),
        &[(URL_VAR, url)],
        8,
        500,
    );
}

/// The body of each worker process of the test above; does nothing in a normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_process_worker() {
    if !conformance::multiprocess::is_worker() {
        return;
    }
    let url = std::env::var(URL_VAR).unwrap();
    let store = RedisStore::connect(&url).await.unwrap();
    conformance::multiprocess::worker(Arc::new(store)).await;
}

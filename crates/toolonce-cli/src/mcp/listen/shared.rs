//! A proxy shared by many clients (the pool for requests of protocol 2026-07-28, which have no
//! session) keeps them apart by giving every request an id of the gateway's own: the server,
//! the proxy's routing tables and the store's in-flight bookkeeping see only those, and the
//! answer goes back under the client's id. So two clients' id 1 are two requests, a client that
//! hangs up mid-call leaves behind an id no later client can have, and a progress token is
//! renamed the same way, so progress reaches only the request that asked for it.
//!
//! What an HTTP server (`--upstream`) sends on the event stream of one request's answer (a log
//! message, a request of its own) belongs to that request, named by the gateway's id, and goes
//! on its client's stream; so does a notification that names a request as its subscription (a
//! `subscriptions/listen` acknowledgement or list change, from either kind of server), under the
//! client's id of that request. What belongs to no request of a known client (a stdio server's log
//! message, any message without a progress token of a request in progress) reaches nobody: the
//! gateway cannot tell whose it is, and another client's data must never be shown to a client.
//! A client's own `notifications/cancelled` has the same problem (its `requestId` is the
//! client's, which any other client may use too); protocol 2026-07-28 cancels a request over
//! HTTP by closing its stream, which the gateway passes on as a cancel of the gateway's id.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use crate::mcp::jsonrpc::{self, IdKey};

/// A new id of the gateway's own for a request of a shared proxy: unique in the gateway
/// process, not only in its proxy, so that no two requests anywhere share one (a server behind
/// several shared proxies, such as one `--upstream` server, never sees the same id twice).
pub(super) fn next_id() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    LAST.fetch_add(1, Ordering::Relaxed) + 1
}

/// The request as the shared proxy gets it: the gateway's `id` in place of the client's, and
/// the gateway's progress token (the same number) in place of the client's, if it asked for
/// progress. `None` if the request cannot be spliced (it is then refused: sent as it came, its
/// answer could be another client's).
pub(super) fn to_upstream(line: &[u8], id: u64, progress: bool) -> Option<Vec<u8>> {
    let id = Value::from(id);
    let line = jsonrpc::with_member(line, &["id"], &id)?;
    if !progress {
        return Some(line);
    }
    jsonrpc::with_member(&line, &["params", "_meta", "progressToken"], &id)
}

/// An answer from the shared proxy with the client's `id` back in place of the gateway's.
pub(super) fn answer_for_client(line: &[u8], id: &Value) -> Option<Vec<u8>> {
    jsonrpc::with_id(line, id)
}

/// A `notifications/progress` with the client's `token` back in place of the gateway's.
pub(super) fn progress_for_client(line: &[u8], token: &Value) -> Option<Vec<u8>> {
    jsonrpc::with_member(line, &["params", "progressToken"], token)
}

/// Where a 2026-07-28 server names the `subscriptions/listen` request a notification belongs to
/// (its acknowledgement, a list change).
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The request a server's message names as its subscription, if it names one: in a shared
/// proxy, the gateway's id of one client's `subscriptions/listen`.
pub(super) fn subscription_of(line: &[u8]) -> Option<IdKey> {
    serde_json::from_slice::<Value>(line)
        .ok()?
        .get("params")?
        .get("_meta")?
        .get(SUBSCRIPTION_ID)
        .map(IdKey::of)
}

/// A message that belongs to one client's request as that client gets it: where it names the
/// request as its subscription, the client's `id` in place of the gateway's; otherwise as it
/// came. (The splice fails only where the member is absent: a subscription id that is there
/// is always replaced, so the gateway's id never reaches a client.)
pub(super) fn related_for_client(line: &[u8], id: &Value) -> Vec<u8> {
    jsonrpc::with_member(line, &["params", "_meta", SUBSCRIPTION_ID], id)
        .unwrap_or_else(|| line.to_vec())
}

/// The progress token of a `notifications/progress` from the server.
pub(super) fn progress_of(line: &[u8]) -> Option<IdKey> {
    serde_json::from_slice::<Value>(line)
        .ok()?
        .pointer("/params/progressToken")
        .map(IdKey::of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_gets_the_gateways_id_and_token_and_the_answer_the_clients_again() {
        let line = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":"p"}}}"#;
        let up = to_upstream(line, 42, true).unwrap();
        let v: Value = serde_json::from_slice(&up).unwrap();
        assert_eq!(v["id"], json!(42));
        assert_eq!(v["params"]["_meta"]["progressToken"], json!(42));
        let answer = br#"{"jsonrpc":"2.0","id":42,"result":{}}"#;
        let back: Value =
            serde_json::from_slice(&answer_for_client(answer, &json!(1)).unwrap()).unwrap();
        assert_eq!(back["id"], json!(1));
        let progress = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":42,"progress":1}}"#;
        assert_eq!(progress_of(progress), Some(IdKey::of(&json!(42))));
        let back: Value =
            serde_json::from_slice(&progress_for_client(progress, &json!("p")).unwrap()).unwrap();
        assert_eq!(back["params"]["progressToken"], json!("p"));
    }

    #[test]
    fn a_notification_of_a_subscription_names_the_clients_own_listen_request() {
        let line = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":42}}}"#;
        assert_eq!(subscription_of(line), Some(IdKey::of(&json!(42))));
        let back: Value =
            serde_json::from_slice(&related_for_client(line, &json!("listen-1"))).unwrap();
        assert_eq!(
            back["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            json!("listen-1")
        );
        // A message that names no subscription goes as it came.
        let log = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"x"}}"#;
        assert_eq!(subscription_of(log), None);
        assert_eq!(related_for_client(log, &json!(1)), log.to_vec());
    }
}

//! The operations this proxy gave up waiting for (the server exited, or did not answer in
//! time), remembered until their lease ends. Their entries stay `running` until then, since
//! the server may or may not have performed them; a duplicate within the lease would read that
//! as "running right now, will take effect once", which this proxy knows to be false. With
//! this, it is told the `unknown`-style truth instead. Bounded (rule 4): at most [`MAX`]
//! operations, the one whose lease ends first dropped to make room.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use toolonce::OperationKey;

/// The most operations remembered at once.
pub(super) const MAX: usize = 4096;

/// Why the proxy stopped waiting, in the words of a duplicate's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Why {
    /// The server exited (or the connection broke) before answering.
    ServerGone,
    /// The server did not answer within the call timeout.
    TimedOut,
}

/// The operations given up, with when their lease ends (at the latest: the lease was last
/// renewed before the proxy gave up).
#[derive(Debug, Default)]
pub(super) struct GivenUp {
    keys: Mutex<HashMap<OperationKey, (Instant, Why)>>,
}

impl GivenUp {
    /// Remembers that the proxy gave up on `key`, whose lease ends by `until`.
    pub(super) fn note(&self, key: &OperationKey, until: Instant, why: Why) {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if keys.len() >= MAX {
            keys.retain(|_, (end, _)| *end > now);
        }
        if keys.len() >= MAX
            && let Some(first) = keys
                .iter()
                .min_by_key(|(_, (end, _))| *end)
                .map(|(k, _)| k.clone())
        {
            keys.remove(&first);
        }
        keys.insert(key.clone(), (until, why));
    }

    /// Why the proxy gave up on `key`, if it did and the lease has not ended yet.
    pub(super) fn why(&self, key: &OperationKey) -> Option<Why> {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        match keys.get(key) {
            Some((end, why)) if *end > Instant::now() => Some(*why),
            Some(_) => {
                keys.remove(key);
                None
            }
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(n: usize) -> OperationKey {
        toolonce::key::derive("s", "t", &serde_json::json!({ "n": n }), None)
            .unwrap()
            .key
    }

    #[test]
    fn a_key_is_remembered_until_its_lease_ends_and_the_map_stays_bounded() {
        let given_up = GivenUp::default();
        let later = Instant::now() + Duration::from_secs(60);
        given_up.note(&key(0), later, Why::TimedOut);
        assert_eq!(given_up.why(&key(0)), Some(Why::TimedOut));
        given_up.note(&key(1), Instant::now(), Why::ServerGone);
        assert_eq!(given_up.why(&key(1)), None, "its lease has ended");
        for n in 2..MAX + 10 {
            given_up.note(
                &key(n),
                later + Duration::from_millis(n as u64),
                Why::ServerGone,
            );
        }
        assert!(given_up.keys.lock().unwrap().len() <= MAX);
        assert_eq!(given_up.why(&key(MAX + 9)), Some(Why::ServerGone));
    }
}

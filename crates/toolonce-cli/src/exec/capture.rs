//! What `exec` keeps of a stream: at most a fixed number of bytes, its head and its tail, with
//! a count of what was dropped between them. The stream itself is echoed live in full; only the
//! stored copy is bounded, so memory stays bounded whatever the command prints and the outcome
//! always fits in the store.

use std::collections::VecDeque;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

/// The head and tail of a stream, at most `limit` bytes together.
pub(crate) struct Capture {
    head: Vec<u8>,
    head_limit: usize,
    tail: VecDeque<u8>,
    tail_limit: usize,
    dropped: u64,
}

impl Capture {
    /// Keeps up to `limit` bytes: the first half (rounded up) and the last half.
    pub(crate) fn new(limit: usize) -> Self {
        let tail_limit = limit / 2;
        Capture {
            head: Vec::new(),
            head_limit: limit - tail_limit,
            tail: VecDeque::new(),
            tail_limit,
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, mut data: &[u8]) {
        let room = self.head_limit - self.head.len();
        let (head, rest) = data.split_at(room.min(data.len()));
        self.head.extend_from_slice(head);
        data = rest;
        if data.len() >= self.tail_limit {
            // The whole tail is replaced: what it held and the start of `data` are dropped.
            let skip = data.len() - self.tail_limit;
            self.dropped += (self.tail.len() + skip) as u64;
            self.tail.clear();
            self.tail.extend(&data[skip..]);
        } else {
            self.tail.extend(data);
            let excess = self.tail.len().saturating_sub(self.tail_limit);
            self.tail.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    /// The kept bytes, with a marker line where bytes were dropped, and how many were.
    pub(crate) fn finish(self) -> (Vec<u8>, u64) {
        let (mut head, mut tail) = (self.head, Vec::from(self.tail));
        let mut dropped = self.dropped;
        if dropped == 0 {
            head.extend_from_slice(&tail);
            return (head, 0);
        }
        // Cut at character boundaries, so that text stays text (readable in `toolonce show`).
        let cut = incomplete_suffix(&head);
        head.truncate(head.len() - cut);
        let skip = tail
            .iter()
            .take(3)
            .take_while(|&&b| b & 0xc0 == 0x80)
            .count();
        tail.drain(..skip);
        dropped += (cut + skip) as u64;
        head.extend_from_slice(marker(dropped).as_bytes());
        head.extend_from_slice(&tail);
        (head, dropped)
    }
}

/// The line put where bytes were dropped.
pub(crate) fn marker(dropped: u64) -> String {
    format!("\n[toolonce: {dropped} bytes of output dropped here]\n")
}

/// How many bytes at the end of `bytes` are the start of a UTF-8 sequence cut short.
fn incomplete_suffix(bytes: &[u8]) -> usize {
    let start = bytes.len().saturating_sub(3);
    for at in (start..bytes.len()).rev() {
        let lead = bytes[at];
        if lead & 0xc0 == 0x80 {
            continue;
        }
        let length = match lead {
            0xf0.. => 4,
            0xe0.. => 3,
            0xc0.. => 2,
            _ => 1,
        };
        let present = bytes.len() - at;
        return if present < length { present } else { 0 };
    }
    0
}

/// Copies `from` to `to` as it arrives and keeps a bounded copy. A failing `to` (a closed pipe)
/// stops the echo, never the capture. Reading ends at end of file, or when `stop` turns true
/// (the command has exited and a background process of its own still holds the pipe).
pub(crate) async fn tee(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    limit: usize,
    mut stop: watch::Receiver<bool>,
) -> Capture {
    let mut capture = Capture::new(limit);
    let mut buf = vec![0u8; 16 * 1024];
    let mut echo = true;
    loop {
        let step = async {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => n,
            };
            if echo {
                echo = to.write_all(&buf[..n]).await.is_ok() && to.flush().await.is_ok();
            }
            Some(n)
        };
        tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => break,
            n = step => match n {
                Some(n) => capture.push(&buf[..n]),
                None => break,
            },
        }
    }
    capture
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(limit: usize, chunks: &[&[u8]]) -> (Vec<u8>, u64) {
        let mut capture = Capture::new(limit);
        for chunk in chunks {
            capture.push(chunk);
        }
        capture.finish()
    }

    #[test]
    fn output_within_the_limit_is_kept_whole() {
        assert_eq!(kept(10, &[b"hello", b" you"]), (b"hello you".to_vec(), 0));
        assert_eq!(kept(10, &[b"0123456789"]), (b"0123456789".to_vec(), 0));
        assert_eq!(kept(0, &[]), (Vec::new(), 0));
    }

    #[test]
    fn longer_output_keeps_head_and_tail_around_a_marker() {
        let expected = [b"abc".as_slice(), marker(4).as_bytes(), b"hij"].concat();
        for chunks in [
            vec![b"abcdefghij".as_slice()],
            vec![b"a", b"bcdefghi", b"j"],
            vec![b"abcd", b"e", b"f", b"g", b"hij"],
        ] {
            assert_eq!(kept(6, &chunks), (expected.clone(), 4), "{chunks:?}");
        }
        let (bytes, dropped) = kept(0, &[b"xyz"]);
        assert_eq!((bytes, dropped), (marker(3).into_bytes(), 3));
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        // "é" is two bytes: a cut through either one moves to its edge.
        let text = "aé".repeat(10);
        let (bytes, dropped) = kept(8, &[text.as_bytes()]);
        let kept_text = String::from_utf8(bytes).expect("still text");
        assert!(kept_text.starts_with("aéa"), "{kept_text}");
        assert!(kept_text.ends_with("\naé"), "{kept_text}");
        assert_eq!(
            kept_text.len() - marker(dropped).len() + dropped as usize,
            text.len()
        );
    }
}

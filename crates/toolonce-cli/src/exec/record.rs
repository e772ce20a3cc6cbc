//! What `exec` stores for a command that ran: its exit code and the exact bytes of its stdout
//! and stderr. A stream is stored as a JSON string when it is valid UTF-8 (readable in
//! `toolonce show`) and as `{"base64": "…"}` otherwise, so any bytes round-trip. A stream longer
//! than `--max-output` is stored as its head and tail around a marker line, with the number of
//! bytes dropped beside it (`stdout_dropped`, `stderr_dropped`, only when not zero). The
//! command line is kept beside them, spelled as [`command_line`] writes it.

use std::ffi::OsStr;

use serde_json::{Map, Value, json};

/// One run of a command, as stored and replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// The exit code; `128 + N` when the command was killed by signal N, as shells report it.
    pub(crate) exit_code: i32,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    /// How many bytes of stdout were left out of `stdout` (where its marker line is).
    pub(crate) stdout_dropped: u64,
    /// How many bytes of stderr were left out of `stderr`.
    pub(crate) stderr_dropped: u64,
    /// The command line, for people reading the store; replays never look at it.
    pub(crate) command: Vec<String>,
}

impl Record {
    pub(crate) fn to_json(&self) -> Value {
        let mut value = json!({
            "exit_code": self.exit_code,
            "stdout": encode_stream(&self.stdout),
            "stderr": encode_stream(&self.stderr),
            "command": self.command,
        });
        for (name, dropped) in [
            ("stdout_dropped", self.stdout_dropped),
            ("stderr_dropped", self.stderr_dropped),
        ] {
            if dropped > 0 {
                value[name] = json!(dropped);
            }
        }
        value
    }

    /// Reads a record back; the error says what is missing or malformed.
    pub(crate) fn from_json(value: &Value) -> Result<Record, String> {
        let exit_code = value
            .get("exit_code")
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok())
            .ok_or("no integer exit_code")?;
        let stream = |name: &str| {
            decode_stream(value.get(name).ok_or(format!("no {name}"))?)
                .map_err(|e| format!("{name}: {e}"))
        };
        let command = value
            .get("command")
            .and_then(Value::as_array)
            .map(|parts| {
                parts
                    .iter()
                    .filter_map(|p| p.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let dropped = |name: &str| value.get(name).and_then(Value::as_u64).unwrap_or(0);
        Ok(Record {
            exit_code,
            stdout: stream("stdout")?,
            stderr: stream("stderr")?,
            stdout_dropped: dropped("stdout_dropped"),
            stderr_dropped: dropped("stderr_dropped"),
            command,
        })
    }
}

/// The command line as a person would type it (POSIX shell quoting where needed), for the
/// entry's description (`toolonce ls` and `show` display it) and a replay's note.
pub(crate) fn command_line<S: AsRef<OsStr>>(command: &[S]) -> String {
    let words: Vec<String> = command
        .iter()
        .map(|word| {
            let word = word.as_ref().to_string_lossy();
            let plain = !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-./=:,+@%^".contains(c));
            if plain {
                word.into_owned()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect();
    words.join(" ")
}

fn encode_stream(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => {
            let mut object = Map::new();
            object.insert("base64".into(), Value::String(base64_encode(bytes)));
            Value::Object(object)
        }
    }
}

fn decode_stream(value: &Value) -> Result<Vec<u8>, String> {
    match value {
        Value::String(text) => Ok(text.clone().into_bytes()),
        Value::Object(object) => match object.get("base64") {
            Some(Value::String(b64)) => base64_decode(b64),
            _ => Err("expected a string or {\"base64\": …}".into()),
        },
        _ => Err("expected a string or {\"base64\": …}".into()),
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (RFC 4648 §4) with padding.
fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let bad = || format!("invalid base64 {text:?}");
    if !text.len().is_multiple_of(4) {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let chunks: Vec<&[u8]> = text.as_bytes().chunks(4).collect();
    for (c, chunk) in chunks.iter().enumerate() {
        let padding = chunk.iter().rev().take_while(|&&b| b == b'=').count();
        if padding > 2 || (padding > 0 && c + 1 != chunks.len()) {
            return Err(bad());
        }
        let mut n = 0u32;
        for (i, &b) in chunk[..4 - padding].iter().enumerate() {
            let digit = ALPHABET.iter().position(|&a| a == b).ok_or_else(bad)?;
            n |= (digit as u32) << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..4 - padding]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_described_as_a_shell_would_take_it() {
        let line = |words: &[&str]| {
            command_line(
                &words
                    .iter()
                    .map(std::ffi::OsString::from)
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            line(&["./deploy.sh", "--env=prod"]),
            "./deploy.sh --env=prod"
        );
        assert_eq!(
            line(&["sh", "-c", "echo it's $HOME", ""]),
            r"sh -c 'echo it'\''s $HOME' ''"
        );
    }

    #[test]
    fn base64_matches_rfc_4648_test_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(plain.as_bytes()), encoded);
            assert_eq!(base64_decode(encoded).unwrap(), plain.as_bytes());
        }
        for bad in ["Zg=", "Z===", "Zg==Zm8=", "Zm9*"] {
            assert!(base64_decode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_byte_value_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        for len in 0..all.len() {
            assert_eq!(
                base64_decode(&base64_encode(&all[..len])).unwrap(),
                &all[..len]
            );
        }
    }

    #[test]
    fn records_keep_text_readable_and_other_bytes_exact() {
        let record = Record {
            exit_code: 3,
            stdout: b"hello\n".to_vec(),
            stderr: vec![0xff, b'x', 0],
            stdout_dropped: 0,
            stderr_dropped: 0,
            command: vec!["sh".into(), "-c".into(), "exit 3".into()],
        };
        let json = record.to_json();
        assert_eq!(json["stdout"], "hello\n");
        assert_eq!(json["stderr"], json!({"base64": "/3gA"}));
        assert!(json.get("stdout_dropped").is_none());
        assert_eq!(Record::from_json(&json).unwrap(), record);
        let cut = Record {
            stdout_dropped: 12,
            ..record
        };
        assert_eq!(cut.to_json()["stdout_dropped"], 12);
        assert_eq!(Record::from_json(&cut.to_json()).unwrap(), cut);
        assert!(Record::from_json(&json!({"exit_code": 0})).is_err());
    }
}

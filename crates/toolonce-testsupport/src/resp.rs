//! A minimal blocking RESP2 client: enough to ping a server, read `INFO`
//! and `CLUSTER INFO`, and let tests poke at keys.

use std::fmt;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A reply from a Redis server (RESP2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A simple string such as `OK` or `PONG`.
    Status(String),
    /// An error reply such as `ERR unknown command`.
    Error(String),
    /// An integer reply.
    Integer(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// A null bulk string or null array.
    Nil,
    /// An array of replies.
    Array(Vec<Reply>),
}

impl Reply {
    /// The reply as text, if it is a status or a bulk string.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Reply::Status(s) => Some(s.clone()),
            Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }
}

/// Readable, in the spirit of `redis-cli`: status and bulk strings as
/// their text, integers as digits, `(nil)`, `(error) MESSAGE`, and arrays
/// as one element a line (nested arrays are flattened, `(empty array)` for
/// none).
impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Status(s) => f.write_str(s),
            Reply::Error(e) => write!(f, "(error) {e}"),
            Reply::Integer(i) => write!(f, "{i}"),
            Reply::Bulk(b) => f.write_str(&String::from_utf8_lossy(b)),
            Reply::Nil => f.write_str("(nil)"),
            Reply::Array(items) if items.is_empty() => f.write_str("(empty array)"),
            Reply::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{item}")?;
                }
                Ok(())
            }
        }
    }
}

/// Sends one command on a fresh connection and reads its reply.
pub(crate) fn request(addr: SocketAddr, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    (&stream).write_all(&encode(args))?;
    read_reply(&mut BufReader::new(&stream))
}

/// Encodes a command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed in the middle of a reply",
        ));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|e| invalid(format!("reply line is not UTF-8: {e}")))
}

fn parse_len(text: &str) -> io::Result<i64> {
    text.parse()
        .map_err(|_| invalid(format!("bad length or integer in reply: {text:?}")))
}

/// Reads one RESP2 reply.
pub(crate) fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(reader)?;
    let (kind, rest) = line.split_at_checked(1).unwrap_or(("", ""));
    match kind {
        "+" => Ok(Reply::Status(rest.to_owned())),
        "-" => Ok(Reply::Error(rest.to_owned())),
        ":" => Ok(Reply::Integer(parse_len(rest)?)),
        "$" => {
            let len = parse_len(rest)?;
            if len < 0 {
                return Ok(Reply::Nil);
            }
            let len = usize::try_from(len).map_err(|e| invalid(e.to_string()))?;
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body)?;
            if !body.ends_with(b"\r\n") {
                return Err(invalid("bulk string not ended by CRLF".to_owned()));
            }
            body.truncate(len);
            Ok(Reply::Bulk(body))
        }
        "*" => {
            let len = parse_len(rest)?;
            if len < 0 {
                return Ok(Reply::Nil);
            }
            (0..len)
                .map(|_| read_reply(reader))
                .collect::<io::Result<Vec<_>>>()
                .map(Reply::Array)
        }
        _ => Err(invalid(format!("unknown RESP reply line: {line:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Reply {
        read_reply(&mut &bytes[..]).unwrap()
    }

    #[test]
    fn encodes_commands() {
        assert_eq!(encode(&["PING"]), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(
            encode(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn parses_every_kind() {
        assert_eq!(parse(b"+PONG\r\n"), Reply::Status("PONG".into()));
        assert_eq!(parse(b"-ERR bad\r\n"), Reply::Error("ERR bad".into()));
        assert_eq!(parse(b":-7\r\n"), Reply::Integer(-7));
        assert_eq!(
            parse(b"$5\r\na\r\nbc\r\n"),
            Reply::Bulk(b"a\r\nbc".to_vec())
        );
        assert_eq!(parse(b"$-1\r\n"), Reply::Nil);
        assert_eq!(parse(b"*-1\r\n"), Reply::Nil);
        let nested = parse(b"*3\r\n:1\r\n*2\r\n$1\r\nx\r\n$-1\r\n+OK\r\n");
        assert_eq!(
            nested,
            Reply::Array(vec![
                Reply::Integer(1),
                Reply::Array(vec![Reply::Bulk(b"x".to_vec()), Reply::Nil]),
                Reply::Status("OK".into()),
            ])
        );
        assert_eq!(nested.to_string(), "1\nx\n(nil)\nOK");
        assert_eq!(parse(b"*0\r\n").to_string(), "(empty array)");
        assert_eq!(parse(b"-ERR x\r\n").to_string(), "(error) ERR x");
    }

    #[test]
    fn rejects_truncated_replies() {
        assert!(read_reply(&mut &b"$5\r\nab"[..]).is_err());
        assert!(read_reply(&mut &b"+OK"[..]).is_err());
        assert!(read_reply(&mut &b"?x\r\n"[..]).is_err());
    }
}

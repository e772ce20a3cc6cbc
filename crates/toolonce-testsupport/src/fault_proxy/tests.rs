//! Tests of the fault proxy against a line echo server: each fault (a dropped, delayed, held
//! reply; refused and closed connections) does what it says, and nothing else.

use super::*;
use std::io::BufRead;
use std::time::Instant;

/// A line echo server: answers each line with `N:line`, `N` counting the lines it served,
/// so a test can see that a request whose reply was dropped did reach it.
fn echo_server() -> (SocketAddr, Arc<Mutex<u64>>) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(Mutex::new(0u64));
    let count = served.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let count = count.clone();
            thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                for line in io::BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    let n = {
                        let mut c = count.lock().unwrap();
                        *c += 1;
                        *c
                    };
                    if writer
                        .write_all(format!("{n}:{line}\n").as_bytes())
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (addr, served)
}

fn connect(proxy: &FaultProxy) -> (TcpStream, io::BufReader<TcpStream>) {
    let stream = TcpStream::connect(proxy.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let reader = io::BufReader::new(stream.try_clone().unwrap());
    (stream, reader)
}

/// Sends a line and reads the answer; `None` when the connection closed instead.
fn ask(
    stream: &mut TcpStream,
    reader: &mut io::BufReader<TcpStream>,
    line: &str,
) -> Option<String> {
    stream.write_all(format!("{line}\n").as_bytes()).ok()?;
    let mut answer = String::new();
    match reader.read_line(&mut answer) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(answer.trim_end().to_owned()),
    }
}

#[test]
fn replies_are_forwarded_unchanged_without_faults() {
    let (target, _) = echo_server();
    let proxy = FaultProxy::start(target);
    assert_eq!(proxy.target(), target);
    assert_ne!(proxy.port(), target.port());
    let (mut s, mut r) = connect(&proxy);
    assert_eq!(ask(&mut s, &mut r, "a").as_deref(), Some("1:a"));
    assert_eq!(ask(&mut s, &mut r, "b").as_deref(), Some("2:b"));
    assert_eq!(proxy.replies(), 2);
    assert_eq!(proxy.dropped(), 0);
}

#[test]
fn the_nth_reply_is_dropped_after_the_server_handled_its_request() {
    let (target, served) = echo_server();
    let proxy = FaultProxy::start(target);
    let (mut s, mut r) = connect(&proxy);
    proxy.drop_reply(2);
    assert_eq!(ask(&mut s, &mut r, "one").as_deref(), Some("1:one"));
    assert_eq!(ask(&mut s, &mut r, "two"), None, "the second reply is lost");
    assert_eq!(
        *served.lock().unwrap(),
        2,
        "the server did handle the request"
    );
    assert_eq!(proxy.dropped(), 1);
    // Only that one: a new connection works, and later replies flow.
    let (mut s, mut r) = connect(&proxy);
    assert_eq!(ask(&mut s, &mut r, "three").as_deref(), Some("3:three"));
    assert_eq!(ask(&mut s, &mut r, "four").as_deref(), Some("4:four"));
    assert_eq!(proxy.dropped(), 1);
}

#[test]
fn replies_are_counted_across_connections() {
    let (target, _) = echo_server();
    let proxy = FaultProxy::start(target);
    let (mut a, mut ra) = connect(&proxy);
    let (mut b, mut rb) = connect(&proxy);
    proxy.drop_reply(1);
    assert_eq!(ask(&mut b, &mut rb, "x"), None);
    assert_eq!(ask(&mut a, &mut ra, "y").as_deref(), Some("2:y"));
}

#[test]
fn delayed_replies_arrive_late_and_intact() {
    let (target, _) = echo_server();
    let proxy = FaultProxy::start(target);
    let (mut s, mut r) = connect(&proxy);
    proxy.delay_replies(Duration::from_millis(300));
    let started = Instant::now();
    assert_eq!(ask(&mut s, &mut r, "slow").as_deref(), Some("1:slow"));
    assert!(started.elapsed() >= Duration::from_millis(300));
    proxy.heal();
    assert_eq!(ask(&mut s, &mut r, "fast").as_deref(), Some("2:fast"));
}

#[test]
fn refused_connections_close_at_once_and_heal_restores_them() {
    let (target, served) = echo_server();
    let proxy = FaultProxy::start(target);
    proxy.refuse_connections(true);
    let (mut s, mut r) = connect(&proxy);
    assert_eq!(ask(&mut s, &mut r, "lost"), None);
    assert_eq!(*served.lock().unwrap(), 0, "nothing reached the server");
    proxy.heal();
    let (mut s, mut r) = connect(&proxy);
    assert_eq!(ask(&mut s, &mut r, "back").as_deref(), Some("1:back"));
}

#[test]
fn close_connections_ends_open_ones_and_new_ones_still_work() {
    let (target, _) = echo_server();
    let proxy = FaultProxy::start(target);
    let (mut s, mut r) = connect(&proxy);
    assert_eq!(ask(&mut s, &mut r, "a").as_deref(), Some("1:a"));
    proxy.close_connections();
    assert_eq!(ask(&mut s, &mut r, "b"), None);
    let (mut s, mut r) = connect(&proxy);
    assert_eq!(ask(&mut s, &mut r, "c").as_deref(), Some("2:c"));
}

#[test]
fn the_reply_to_a_request_with_a_pattern_is_held_or_dropped() {
    let (target, served) = echo_server();
    let proxy = FaultProxy::start(target);
    let (mut s, mut r) = connect(&proxy);
    proxy.hold_reply_to(b"GET");
    assert_eq!(ask(&mut s, &mut r, "a").as_deref(), Some("1:a"));
    let asker = thread::spawn(move || {
        let answer = ask(&mut s, &mut r, "GET k");
        (answer, s, r)
    });
    while proxy.held() == 0 {
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        *served.lock().unwrap(),
        2,
        "the server answered; the answer waits"
    );
    proxy.heal();
    let (answer, mut s, mut r) = asker.join().unwrap();
    assert_eq!(answer.as_deref(), Some("2:GET k"));
    proxy.drop_reply_to(b"DEL");
    assert_eq!(ask(&mut s, &mut r, "b").as_deref(), Some("3:b"));
    assert_eq!(ask(&mut s, &mut r, "DEL k"), None, "its reply is lost");
    assert_eq!(*served.lock().unwrap(), 4, "the server did handle it");
    assert_eq!(proxy.dropped(), 1);
}

#[test]
fn a_dropped_proxy_closes_its_connections() {
    let (target, _) = echo_server();
    let proxy = FaultProxy::start(target);
    let (mut s, mut r) = connect(&proxy);
    assert_eq!(ask(&mut s, &mut r, "a").as_deref(), Some("1:a"));
    drop(proxy);
    assert_eq!(ask(&mut s, &mut r, "b"), None);
}

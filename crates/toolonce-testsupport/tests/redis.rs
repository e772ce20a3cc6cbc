//! A real redis-server and a real cluster: start, answer, kill, restart.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;

use toolonce_testsupport::{RedisCluster, RedisServer, Reply};

fn refused(server: &RedisServer) -> bool {
    TcpStream::connect(server.addr()).is_err_and(|e| e.kind() == ErrorKind::ConnectionRefused)
}

fn process_gone(pid: u32) -> bool {
    // Gone, or a zombie waiting for its reaper.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |stat| stat.split_whitespace().nth(2) == Some("Z"))
}

#[test]
fn redis_starts_answers_dies_and_restarts_on_the_same_port() {
    let redis = RedisServer::start();
    let port = redis.port();
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{port}/"));
    assert_ne!(port, 6379, "must never be the machine's own Redis");

    // A raw RESP exchange, independent of the crate's client.
    let mut stream = TcpStream::connect(redis.addr()).unwrap();
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut pong = [0; 7];
    stream.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
    drop(stream);

    assert_eq!(redis.command(&["SET", "k", "v"]), "OK");
    assert_eq!(redis.command(&["GET", "k"]), "v");
    assert_eq!(redis.command(&["INCR", "n"]), "1");
    assert_eq!(redis.command(&["GET", "missing"]), "(nil)");
    assert_eq!(redis.command(&["RPUSH", "l", "a", "b"]), "2");
    assert_eq!(redis.command(&["LRANGE", "l", "0", "-1"]), "a\nb");
    assert!(redis.command(&["NOSUCHCOMMAND"]).starts_with("(error) ERR"));
    assert_eq!(
        redis.try_command(&["MGET", "k", "missing"]).unwrap(),
        Reply::Array(vec![Reply::Bulk(b"v".to_vec()), Reply::Nil])
    );

    let pid = redis.pid().unwrap();
    redis.kill();
    assert!(!redis.is_running());
    assert!(redis.pid().is_none());
    assert!(refused(&redis), "a killed server must refuse connections");
    assert!(redis.try_command(&["PING"]).is_err());
    assert!(process_gone(pid));

    redis.restart();
    assert_eq!(redis.port(), port);
    assert_ne!(redis.pid(), Some(pid));
    assert_eq!(redis.command(&["PING"]), "PONG");
    assert_eq!(
        redis.command(&["GET", "k"]),
        "(nil)",
        "nothing is kept on disk"
    );

    redis.stop();
    assert!(refused(&redis));
    // Someone holds the port for a moment: restart waits for it.
    let squatter = std::net::TcpListener::bind(redis.addr()).unwrap();
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(500));
        drop(squatter);
    });
    redis.restart();
    release.join().unwrap();
    assert_eq!(redis.command(&["PING"]), "PONG");
    assert!(redis.log().contains("Address already in use"));
    assert!(redis.log().contains("Ready to accept connections"));

    let dir = redis.dir().to_path_buf();
    let pid = redis.pid().unwrap();
    let addr = redis.addr();
    drop(redis);
    assert!(!dir.exists(), "drop removes the directory");
    assert!(process_gone(pid), "drop kills the server");
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
fn extra_arguments_reach_the_server() {
    let redis = RedisServer::start_with(&["--maxmemory", "12345678"]);
    assert_eq!(
        redis.command(&["CONFIG", "GET", "maxmemory"]),
        "maxmemory\n12345678"
    );
}

#[test]
fn cluster_reaches_ok_serves_keys_and_heals_after_a_node_restart() {
    let cluster = RedisCluster::start();
    assert_eq!(cluster.urls().len(), 3);
    for (node, url) in cluster.nodes().iter().zip(cluster.urls()) {
        assert_eq!(url, format!("redis://127.0.0.1:{}/", node.port()));
        assert!(Path::new(&node.dir().join("nodes.conf")).exists());
        let info = node.command(&["CLUSTER", "INFO"]);
        assert!(info.contains("cluster_state:ok"), "{info}");
    }

    assert_eq!(cluster.cli(&["SET", "greeting", "hello"]), "OK");
    assert_eq!(cluster.cli(&["GET", "greeting"]), "hello");
    for i in 0..20 {
        let key = format!("key{i}");
        assert_eq!(cluster.cli(&["SET", &key, &i.to_string()]), "OK");
    }
    // Keys spread over the nodes: each one holds some, and the others
    // redirect with MOVED.
    let mut moved = 0;
    for node in cluster.nodes() {
        assert_ne!(node.command(&["DBSIZE"]), "0");
        for i in 0..20 {
            if node
                .command(&["GET", &format!("key{i}")])
                .starts_with("(error) MOVED")
            {
                moved += 1;
            }
        }
    }
    assert_eq!(
        moved, 40,
        "each key lives on exactly one of the three nodes"
    );

    let node = &cluster.nodes()[2];
    node.kill();
    node.restart();
    cluster.wait_ok();
    // The restarted node came back empty (nothing is kept on disk) but
    // owns its slots again: every key can be written and read.
    for i in 0..20 {
        let key = format!("key{i}");
        assert_eq!(cluster.cli(&["SET", &key, "again"]), "OK");
        assert_eq!(cluster.cli(&["GET", &key]), "again");
    }
}

//! The Redis-protocol id service (issue 16, part 1) driven by real clients
//! against a real idgate process on the test bed's etcd: redis-cli (Debian
//! `redis-tools`) and redis-py (Debian `python3-redis`, run by
//! /usr/bin/python3), plus a raw socket for what clients never send.
//!
//! - every command, pipelines, RESP3, AUTH failures, grants;
//! - bad input (truncated frames, huge lengths, non-integer counts): an
//!   error reply, and other connections unaffected;
//! - ids from RESP (two processes) and from INSERTs never collide;
//! - the connection limit and a graceful shutdown.
//!
//! Under `CI=true` a missing server or tool fails the test.

mod support;

use std::collections::HashSet;
use std::process::Command;
use support::process::{tool, Idgate, Options, Raw};

const RULES: &str = r#"
[[generator]]
name = "orders"
kind = "sequence"
batch = 100
[[generator]]
name = "events"
kind = "snowflake"
"#;

fn options(prefix: &str) -> Options {
    Options {
        rules: RULES.to_string(),
        etcd_prefix: format!("/{prefix}"),
        ..Options::default()
    }
}

/// redis-cli's output for one command (`args` after the connection options).
fn cli(p: &Idgate, auth: &[&str], args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &p.resp.port().to_string(),
            "--no-auth-warning",
        ])
        .args(auth)
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
        + &String::from_utf8_lossy(&out.stderr)
}

const APP: &[&str] = &["--user", "app", "--pass", "secret"];

#[test]
fn redis_cli_every_command() {
    let Some(tb) = support::testbed() else { return };
    if tool("redis-cli", &["--version"]).is_none() {
        return;
    }
    let p = Idgate::start(&tb, &options(&support::unique("resp_cli")));
    assert_eq!(cli(&p, &[], &["PING"]), "PONG");
    assert_eq!(cli(&p, &[], &["PING", "hi"]), "hi");
    assert!(cli(&p, &[], &["INCR", "orders"]).contains("NOAUTH"));
    assert!(cli(
        &p,
        &["--user", "app", "--pass", "nope"],
        &["INCR", "orders"]
    )
    .contains("WRONGPASS"));
    let a: u64 = cli(&p, APP, &["INCR", "orders"]).parse().unwrap();
    let b: u64 = cli(&p, APP, &["INCR", "orders"]).parse().unwrap();
    assert!(b > a, "{a} {b}");
    let last: u64 = cli(&p, APP, &["INCRBY", "orders", "1000"]).parse().unwrap();
    assert!(last >= b + 1000, "{b} {last}");
    let peek: u64 = cli(&p, APP, &["GET", "orders"]).parse().unwrap();
    let c: u64 = cli(&p, APP, &["INCR", "orders"]).parse().unwrap();
    assert!(c >= peek && c > last, "{peek} {c} {last}");
    let ids: Vec<u64> = cli(&p, APP, &["IDGATE.NEXT", "events", "4"])
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 4);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Errors that say why.
    assert!(cli(&p, APP, &["INCR", "nope"]).contains("unknown generator 'nope'"));
    assert!(cli(&p, APP, &["INCRBY", "events", "3"]).contains("snowflake"));
    assert!(cli(&p, APP, &["INCRBY", "orders", "x"]).contains("not an integer"));
    assert!(cli(&p, APP, &["INCRBY", "orders", "0"]).contains("out of range"));
    assert!(cli(&p, APP, &["IDGATE.NEXT", "orders", "100001"]).contains("between 1 and 100000"));
    assert!(cli(&p, APP, &["SET", "a", "b"]).contains("unknown command 'SET'"));
    assert!(cli(&p, APP, &["INCR"]).contains("wrong number of arguments"));
    // Grants.
    let lim = ["--user", "limited", "--pass", "lpw"];
    assert!(cli(&p, &lim, &["INCR", "orders"]).parse::<u64>().is_ok());
    assert!(cli(&p, &lim, &["INCR", "events"]).contains("NOPERM"));
    assert!(cli(&p, &lim, &["IDGATE.NEXT", "events", "2"]).contains("NOPERM"));
    // `AUTH password` is the user named default.
    assert!(cli(&p, &["-a", "dpw"], &["INCR", "orders"])
        .parse::<u64>()
        .is_ok());
    // Housekeeping commands clients send.
    assert_eq!(cli(&p, APP, &["SELECT", "0"]), "OK");
    assert!(cli(&p, APP, &["SELECT", "1"]).contains("out of range"));
    assert!(cli(&p, APP, &["-n", "0", "INCR", "orders"])
        .parse::<u64>()
        .is_ok());
    assert!(cli(&p, APP, &["CLIENT", "ID"]).parse::<u64>().is_ok());
    assert_eq!(cli(&p, APP, &["CLIENT", "SETNAME", "x"]), "OK");
    assert_eq!(cli(&p, APP, &["CLIENT", "GETNAME"]), "");
    assert_eq!(cli(&p, APP, &["COMMAND", "DOCS"]), "");
    // RESP3: redis-cli -3 sends HELLO 3 AUTH user password.
    let hello = cli(
        &p,
        &["-3", "--user", "app", "--pass", "secret"],
        &["HELLO", "3"],
    );
    assert!(
        hello.contains("idgate") && hello.contains("proto"),
        "{hello}"
    );
    let v3: u64 = cli(
        &p,
        &["-3", "--user", "app", "--pass", "secret"],
        &["INCR", "orders"],
    )
    .parse()
    .unwrap();
    assert!(v3 > c);
    // Commands read from stdin are sent as one pipeline (redis-cli's
    // non-interactive mode), answered in order.
    let mut child = Command::new("redis-cli")
        .args(["-p", &p.resp.port().to_string(), "--no-auth-warning"])
        .args(APP)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        for _ in 0..500 {
            stdin.write_all(b"INCR orders\n").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    let piped: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(piped.len(), 500);
    assert!(piped.windows(2).all(|w| w[0] < w[1]));
    assert!(piped[0] > v3);
    // redis-cli --pipe: raw protocol on stdin, all replies counted.
    let mut child = Command::new("redis-cli")
        .args(["-p", &p.resp.port().to_string(), "--pipe"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"*3\r\n$4\r\nAUTH\r\n$3\r\napp\r\n$6\r\nsecret\r\n")
            .unwrap();
        for _ in 0..2000 {
            stdin
                .write_all(b"*2\r\n$4\r\nINCR\r\n$6\r\norders\r\n")
                .unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("errors: 0, replies: 2001"), "{text}");
}

#[test]
fn redis_py_commands_pipelines_errors() {
    let Some(tb) = support::testbed() else { return };
    if tool("/usr/bin/python3", &["-c", "import redis"]).is_none() {
        return;
    }
    let p = Idgate::start(&tb, &options(&support::unique("resp_py")));
    let out = Command::new("/usr/bin/python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/clients/resp_redis_py.py"
        ))
        .arg("127.0.0.1")
        .arg(p.resp.port().to_string())
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "redis-py script failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let ids: Vec<u64> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let set: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(set.len(), ids.len(), "an id was returned twice");
}

#[test]
fn bad_input_gets_an_error_and_harms_no_one_else() {
    let Some(tb) = support::testbed() else { return };
    let p = Idgate::start(&tb, &options(&support::unique("resp_bad")));
    let mut good = Raw::connect(p.resp);
    assert_eq!(good.cmd("AUTH app secret"), "+OK");
    let first: u64 = good.cmd("INCR orders")[1..].parse().unwrap();
    let cases: &[(&[u8], &str)] = &[
        (b"*2147483647\r\n", "invalid multibulk length"),
        (b"*1\r\n$4294967295\r\n", "invalid bulk length"),
        (b"*1\r\n$-5\r\n", "invalid bulk length"),
        (b"*2\r\n:1\r\n", "expected '$'"),
        (b"*1\r\n$4\r\nPINGXX", "not terminated by CRLF"),
        (&[b'x'; 20000], "too big inline request"),
        (
            b"*99999999999999999999999999999999999999999\r\n",
            "invalid multibulk length",
        ),
    ];
    for (bytes, want) in cases {
        let mut bad = Raw::connect(p.resp);
        bad.send(bytes);
        let line = bad.line();
        assert!(
            line.starts_with("-ERR Protocol error") && line.contains(want),
            "{line}"
        );
        assert!(bad.closed());
    }
    // Non-integer and out-of-range counts: a reply, the connection goes on.
    let mut c = Raw::connect(p.resp);
    assert_eq!(c.cmd("AUTH app secret"), "+OK");
    assert!(c.cmd("INCRBY orders 1.5").contains("not an integer"));
    assert!(c
        .cmd("INCRBY orders 18446744073709551616")
        .contains("not an integer"));
    assert!(c.cmd("INCRBY orders 4294967297").contains("out of range"));
    assert!(c.cmd("IDGATE.NEXT orders -3").contains("not an integer"));
    assert!(c.cmd("PING").starts_with("+PONG"));
    // A truncated frame, then the client closes its side: an error reply.
    let mut t = Raw::connect(p.resp);
    t.send(b"*2\r\n$4\r\nINCR\r\n$6\r\nord");
    t.s.shutdown(std::net::Shutdown::Write).unwrap();
    let line = t.line();
    assert!(line.contains("middle of a command"), "{line}");
    // A client that sends half a command and stalls holds nothing up.
    let mut stall = Raw::connect(p.resp);
    stall.send(b"*2\r\n$4\r\nINCR\r\n$16000\r\nabc");
    let next: u64 = good.cmd("INCR orders")[1..].parse().unwrap();
    assert!(next > first);
    assert!(p.log().find("panicked").is_none(), "{}", p.log());
}

#[test]
fn ids_from_resp_inserts_and_two_processes_never_collide() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("resp_mix");
    let rules = format!(
        "{RULES}\n[[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"orders\"\n"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(support::proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE DATABASE `{schema}`"),
            &format!("CREATE TABLE `{schema}`.t (id BIGINT PRIMARY KEY, v INT)"),
        ],
    ));
    let prefix = format!("/{}", support::unique("resp_mix"));
    let opts = Options {
        rules,
        etcd_prefix: prefix,
        ..Options::default()
    };
    let a = Idgate::start(&tb, &opts);
    let b = Idgate::start(&tb, &opts);
    let mut ids: Vec<u64> = Vec::new();
    let mut ca = Raw::connect(a.resp);
    let mut cb = Raw::connect(b.resp);
    assert_eq!(ca.cmd("AUTH app secret"), "+OK");
    assert_eq!(cb.cmd("AUTH app secret"), "+OK");
    let inserts = rt.block_on(async {
        use mysql_async::prelude::Queryable;
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(a.mysql.port())
            .user(Some("app"))
            .pass(Some("secret"))
            .db_name(Some(schema.clone()))
            .prefer_socket(false);
        let mut conn = mysql_async::Conn::new(opts).await.expect("login to idgate");
        let mut out = Vec::new();
        for round in 0..300 {
            conn.query_drop(format!("INSERT INTO t (v) VALUES ({round})"))
                .await
                .expect("insert");
            out.push(conn.last_insert_id().expect("an id"));
            // Interleave: both processes hand out ids over RESP meanwhile.
            for c in [&mut ca, &mut cb] {
                let r = c.cmd("INCR orders");
                ids.push(r[1..].parse().unwrap_or_else(|_| panic!("{r}")));
            }
            if round % 50 == 0 {
                let r = cb.cmd("INCRBY orders 150");
                let last: u64 = r[1..].parse().unwrap();
                ids.extend(last - 149..=last);
            }
        }
        let _ = conn.disconnect().await;
        out
    });
    ids.extend(&inserts);
    let set: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(set.len(), ids.len(), "an id was issued twice");
    rt.block_on(support::proxy::admin(
        &tb,
        0,
        &[&format!("DROP DATABASE IF EXISTS `{schema}`")],
    ));
}

#[test]
fn connection_limit_and_graceful_shutdown() {
    let Some(tb) = support::testbed() else { return };
    let mut opts = options(&support::unique("resp_lim"));
    opts.server_extra = "max_connections = 2\ndrain_timeout_secs = 60".into();
    let mut p = Idgate::start(&tb, &opts);
    let mut one = Raw::connect(p.resp);
    let mut two = Raw::connect(p.resp);
    assert_eq!(one.cmd("PING"), "+PONG");
    assert_eq!(two.cmd("PING"), "+PONG");
    let mut three = Raw::connect(p.resp);
    assert_eq!(three.line(), "-ERR max number of clients reached");
    assert!(three.closed());
    // A slot frees when a client leaves (QUIT).
    assert_eq!(two.cmd("QUIT"), "+OK");
    assert!(two.closed());
    let mut four = Raw::connect(p.resp);
    assert_eq!(four.cmd("PING"), "+PONG");
    // SIGTERM: open connections are closed once idle, the process exits 0.
    let st = p.terminate();
    assert!(st.success(), "{st}\n{}", p.log());
    assert!(one.closed());
    assert!(four.closed());
}

//! The connection limit (error 1040) and graceful shutdown: no new
//! connections, idle sessions closed at once, a session inside a transaction
//! may still COMMIT, the drain timeout cuts the rest; SIGTERM on the real
//! binary exits 0.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use std::time::{Duration, Instant};
use support::proxy::{self, Proxy, ProxyProcess, RawClient};

/// How long a wait for something that takes milliseconds may last before
/// the test fails: far above what a loaded machine needs.
const WAIT: Duration = Duration::from_secs(60);

/// A drain timeout far above [`WAIT`] (and every step of a test).
const LONG_DRAIN_SECS: u64 = 600;
const LONG_DRAIN: Duration = Duration::from_secs(LONG_DRAIN_SECS);

fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

#[tokio::test]
async fn third_connection_over_a_limit_of_two_gets_1040() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start_with(&tb, "max_connections = 2").await;
    let mut a = Conn::new(proxy.opts(None)).await.unwrap();
    let b = Conn::new(proxy.opts(None)).await.unwrap();
    let e = Conn::new(proxy.opts(None)).await.unwrap_err();
    assert_eq!(server_code(&e), Some(1040), "{e}");
    // A raw client sees the error as the first packet, then the close.
    let stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let mut conn = idgate::protocol::packet::PacketConn::new(stream);
    let (seq, _, p) = proxy::read_packet(&mut conn).await.unwrap();
    assert_eq!(seq, 0);
    let err = idgate::protocol::reply::parse_err(&p).unwrap();
    assert_eq!((err.code, err.state.as_str()), (1040, "08004"));
    assert!(proxy::read_packet(&mut conn).await.is_none());

    // The sessions that got in are unaffected.
    let one: Option<u32> = a.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    // A slot that frees up can be used again (once idgate has seen b go).
    b.disconnect().await.unwrap();
    let deadline = Instant::now() + WAIT;
    let mut c = loop {
        match Conn::new(proxy.opts(None)).await {
            Ok(conn) => break conn,
            Err(e) => {
                assert_eq!(server_code(&e), Some(1040), "{e}");
                assert!(Instant::now() < deadline, "a freed slot is reused");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let two: Option<u32> = c.query_first("SELECT 2").await.unwrap();
    assert_eq!(two, Some(2));
    drop((a, c));
    proxy.stop().await;
}

#[tokio::test]
async fn graceful_shutdown_lets_a_transaction_commit_and_closes_idle_sessions() {
    let Some(tb) = support::testbed() else { return };
    let db = support::unique("rl_drain");
    proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE DATABASE {db}"),
            &format!("CREATE TABLE {db}.t (id INT PRIMARY KEY)"),
        ],
    )
    .await;
    // A drain timeout no step of this test comes near: the server must
    // stop because the transaction ended, not because draining ran out.
    let mut proxy =
        Proxy::start_with(&tb, &format!("drain_timeout_secs = {LONG_DRAIN_SECS}")).await;
    let mut tx = Conn::new(proxy.opts(Some(&db))).await.unwrap();
    tx.query_drop("BEGIN").await.unwrap();
    tx.query_drop("INSERT INTO t VALUES (1)").await.unwrap();
    // Idle sessions: one that used a shard, one that never did.
    let mut idle_used = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    idle_used.query("SELECT 1").await;
    let mut idle_fresh = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;

    let t0 = Instant::now();
    proxy.trigger_shutdown();
    // Closed at once, not after the drain timeout (is_closed gives up
    // after 60 s, far below it).
    assert!(idle_used.is_closed().await, "idle session closed");
    assert!(idle_fresh.is_closed().await, "idle session closed");
    assert!(
        t0.elapsed() < LONG_DRAIN,
        "idle sessions are closed at once, not after the drain timeout"
    );
    // No new connections.
    let deadline = Instant::now() + WAIT;
    while Conn::new(proxy.opts(None)).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "new connections are refused while draining"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!proxy.is_finished(), "still draining the transaction");

    // The transaction can go on and commit; then its session is closed.
    tx.query_drop("INSERT INTO t VALUES (2)").await.unwrap();
    tx.query_drop("COMMIT").await.unwrap();
    assert!(
        proxy.wait(WAIT).await,
        "the server stops once the last transaction ended"
    );
    assert!(t0.elapsed() < LONG_DRAIN, "not cut by the drain timeout");
    assert!(
        tx.query_drop("SELECT 1").await.is_err(),
        "closed after COMMIT"
    );

    let mut direct = Conn::new(proxy::direct_opts(&tb, 0, Some(&db)))
        .await
        .unwrap();
    let ids: Vec<u32> = direct.query("SELECT id FROM t ORDER BY id").await.unwrap();
    assert_eq!(ids, vec![1, 2]);
    drop(direct);
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE {db}")]).await;
}

#[tokio::test]
async fn drain_timeout_cuts_a_transaction_that_never_ends() {
    let Some(tb) = support::testbed() else { return };
    let db = support::unique("rl_cut");
    proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE DATABASE {db}"),
            &format!("CREATE TABLE {db}.t (id INT PRIMARY KEY)"),
        ],
    )
    .await;
    let mut proxy = Proxy::start_with(&tb, "drain_timeout_secs = 1").await;
    let mut tx = Conn::new(proxy.opts(Some(&db))).await.unwrap();
    tx.query_drop("BEGIN").await.unwrap();
    tx.query_drop("INSERT INTO t VALUES (1)").await.unwrap();
    let t0 = Instant::now();
    proxy.trigger_shutdown();
    // The transaction never ends: only the drain timeout can stop the
    // server, and not before it has run out (an upper bound would only
    // measure the machine).
    assert!(proxy.wait(WAIT).await, "server stopped");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "stopped after the 1 s drain timeout, took {took:?}"
    );
    assert!(
        tx.query_drop("COMMIT").await.is_err(),
        "the session was cut"
    );
    // Its transaction was rolled back by the shard.
    let mut direct = Conn::new(proxy::direct_opts(&tb, 0, Some(&db)))
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let n: Option<u64> = direct.query_first("SELECT COUNT(*) FROM t").await.unwrap();
        if n == Some(0) {
            break;
        }
        assert!(Instant::now() < deadline, "{n:?} rows after the rollback");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(direct);
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE {db}")]).await;
}

#[tokio::test]
async fn sigterm_stops_the_binary_with_exit_code_0() {
    let Some(tb) = support::testbed() else { return };
    let mut p = ProxyProcess::spawn(&tb, "drain_timeout_secs = 5").await;
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(p.addr.ip().to_string())
        .tcp_port(p.addr.port())
        .user(Some(proxy::USER))
        .pass(Some(proxy::PASSWORD))
        .prefer_socket(false);
    let mut c = Conn::new(opts.clone()).await.unwrap();
    let v: Option<String> = c.query_first("SELECT VERSION()").await.unwrap();
    assert!(v.unwrap().contains("MariaDB"));
    // A session that quits, and one ended by KILL from another.
    let quits = Conn::new(opts.clone()).await.unwrap();
    quits.disconnect().await.unwrap();
    let mut victim = Conn::new(opts.clone()).await.unwrap();
    // The id of the handshake: idgate's session (CONNECTION_ID() is the
    // shard's).
    let victim_id = victim.id();
    c.query_drop(format!("KILL {victim_id}")).await.unwrap();
    // Not dropped before it sees the KILL: a client that closes first ends
    // its session the ordinary way. A statement that was read before the
    // session saw the KILL may still run.
    let t0 = Instant::now();
    while victim.query_drop("SELECT 1").await.is_ok() {
        assert!(t0.elapsed() < WAIT, "the killed session still answers");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(victim);
    // One session stays connected (idle) across the signal.
    p.sigterm();
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < WAIT, "idgate did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(status.code(), Some(0));
    assert!(c.query_drop("SELECT 1").await.is_err());
    let mut log = String::new();
    if let Some(mut err) = p.child.stderr.take() {
        use std::io::Read;
        err.read_to_string(&mut log).unwrap();
    }
    assert!(log.contains("SIGTERM received"), "{log}");
    // At the default level (IDGATE_LOG=info) sessions that open and end
    // the ordinary way (a quit, the drain) write nothing; one that ends
    // any other way writes why.
    assert!(
        log.contains(&format!("conn={victim_id}"))
            && log.contains("session closed: killed by KILL from another session"),
        "{log}"
    );
    assert!(!log.contains("session opened"), "{log}");
    assert!(!log.contains("client quit"), "{log}");
    assert!(
        !log.contains("session closed: server shutting down"),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

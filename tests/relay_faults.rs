//! Failure isolation: a client that leaves mid-result, a shard connection
//! killed mid-query (outside and inside a transaction), and a fake shard that
//! sends garbage or closes mid-result. The affected session gets a MySQL
//! error or is closed; idgate does not panic; other sessions are unaffected.

mod support;

use idgate::protocol::consts::{cap, cmd};
use idgate::protocol::handshake::ServerHandshake;
use idgate::protocol::packet::{frame, PacketConn};
use idgate::protocol::response::Expect;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use support::proxy::{self, Proxy, RawClient};
use support::Testbed;
use tokio::net::TcpListener;

/// Whether shard s0 still has a connection with this id.
async fn shard_has_connection(tb: &Testbed, id: u64) -> bool {
    proxy::shard_has_connection(tb, 0, id).await
}

/// When a wait for something that takes milliseconds gives up: far above
/// any delay a loaded machine causes.
fn deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(60)
}

async fn connection_id(c: &mut Conn) -> u64 {
    c.query_first("SELECT CONNECTION_ID()")
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn client_leaving_mid_result_does_not_disturb_others_or_leak_its_shard_connection() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let mut other = Conn::new(proxy.opts(None)).await.unwrap();
    let other_id = connection_id(&mut other).await;

    for round in 0..3 {
        let mut c = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
        let r = c.query("SELECT CONNECTION_ID()").await;
        let row = &r[3];
        let backend_id: u64 = std::str::from_utf8(&row[1..1 + row[0] as usize])
            .unwrap()
            .parse()
            .unwrap();
        assert!(shard_has_connection(&tb, backend_id).await);
        // ~100 MB of rows; read a few packets and leave.
        c.send(b"\x03SELECT REPEAT('x', 1000) FROM mysql.seq_1_to_100000")
            .await;
        for _ in 0..20 {
            c.read().await.expect("rows are coming");
        }
        drop(c);

        // Other sessions keep working meanwhile.
        let one: Option<u32> = other.query_first("SELECT 1").await.unwrap();
        assert_eq!(one, Some(1));
        assert_eq!(connection_id(&mut other).await, other_id);

        // The abandoned shard connection is closed, not handed to anyone.
        let until = deadline();
        while shard_has_connection(&tb, backend_id).await {
            assert!(
                tokio::time::Instant::now() < until,
                "round {round}: shard connection {backend_id} still open"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut fresh = Conn::new(proxy.opts(None)).await.unwrap();
        let fresh_id = connection_id(&mut fresh).await;
        assert_ne!(fresh_id, backend_id);
        assert_ne!(fresh_id, other_id);
    }
    assert!(!proxy.is_finished());
    proxy.stop().await;
}

/// Runs `sql` (a long `SELECT SLEEP(..)`) on `c` while a side connection
/// kills `victim` on the shard, once the shard shows it running `sql` (a
/// KILL before the query got there would hit an idle connection instead).
async fn kill_during(tb: &Testbed, c: &mut Conn, sql: &str, victim: u64) -> mysql_async::Error {
    let tb2 = tb.clone();
    let running = sql.to_string();
    let killer = tokio::spawn(async move {
        let mut side = Conn::new(proxy::direct_opts(&tb2, 0, None)).await.unwrap();
        let until = deadline();
        loop {
            let n: Option<u64> = side
                .exec_first(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO = ?",
                    (victim, running.as_str()),
                )
                .await
                .unwrap();
            if n == Some(1) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "shard connection {victim} never ran {running}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        side.query_drop(format!("KILL {victim}")).await.unwrap();
        let _ = side.disconnect().await;
    });
    let r = tokio::time::timeout(Duration::from_secs(120), c.query_drop(sql))
        .await
        .expect("the query ends once its shard connection is killed");
    killer.await.unwrap();
    r.expect_err("a killed query fails")
}

#[tokio::test]
async fn killed_shard_connection_outside_a_transaction_is_reopened() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let mut bystander = Conn::new(proxy.opts(None)).await.unwrap();
    let bystander_id = connection_id(&mut bystander).await;
    let mut c = Conn::new(proxy.opts(None)).await.unwrap();
    let victim = connection_id(&mut c).await;
    let e = kill_during(&tb, &mut c, "SELECT SLEEP(600)", victim).await;
    assert!(
        matches!(e, mysql_async::Error::Server(_)),
        "a MySQL error, not a dropped socket: {e}"
    );
    // The next statement works on a new shard connection, at once.
    let one: Option<u32> = c.query_first("SELECT 1").await.expect("next statement");
    assert_eq!(one, Some(1));
    assert_ne!(connection_id(&mut c).await, victim);
    assert_eq!(connection_id(&mut bystander).await, bystander_id);
    proxy.stop().await;
}

#[tokio::test]
async fn killed_shard_connection_while_idle_is_reopened() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let mut c = Conn::new(proxy.opts(None)).await.unwrap();
    let victim = connection_id(&mut c).await;
    proxy::admin(&tb, 0, &[&format!("KILL {victim}")]).await;
    // At once, and after the idle check interval (once the shard has
    // closed the connection: idgate then reopens it before the statement).
    for wait in [0, 1500] {
        if wait > 0 {
            proxy::wait_closed(&tb, 0, victim).await;
        }
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let r: Result<Option<u32>, _> = c.query_first("SELECT 1").await;
        match r {
            Ok(v) => assert_eq!(v, Some(1)),
            Err(e) if wait == 0 => {
                // A statement sent on the dead connection may fail once, with
                // an error (never a hang or a panic).
                assert!(matches!(e, mysql_async::Error::Server(_)), "{e}");
            }
            Err(e) => panic!("after {wait} ms: {e}"),
        }
    }
    assert_ne!(connection_id(&mut c).await, victim);
    proxy.stop().await;
}

/// A reopened shard connection gets the session's SET statements back
/// (user variables, sql_mode, time zone), in order, before anything else.
#[tokio::test]
async fn reopened_shard_connection_keeps_the_sessions_settings() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let mut c = Conn::new(proxy.opts(None)).await.unwrap();
    for set in [
        "SET @v = 42",
        "SET SESSION sql_mode = 'ANSI_QUOTES'",
        "SET time_zone = '+03:00'",
        "SET @v = @v + 1",
        "SET GLOBAL wait_timeout = @@GLOBAL.wait_timeout",
    ] {
        c.query_drop(set).await.unwrap();
    }
    let want: Option<(i64, String, String)> = c
        .query_first("SELECT @v, @@sql_mode, @@time_zone")
        .await
        .unwrap();
    assert_eq!(
        want,
        Some((43, "ANSI_QUOTES".to_string(), "+03:00".to_string()))
    );
    let victim = connection_id(&mut c).await;
    // Once the shard has closed it and the connection has been idle longer
    // than idgate's idle check (1 s), idgate reopens it before the next
    // statement.
    proxy::kill_and_wait_closed(&tb, 0, victim).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let got: Option<(i64, String, String)> = c
        .query_first("SELECT @v, @@sql_mode, @@time_zone")
        .await
        .unwrap();
    assert_ne!(connection_id(&mut c).await, victim);
    assert_eq!(got, want);
    proxy.stop().await;
}

/// Session state idgate cannot replay (a SET inside a multi-statement query)
/// makes the reopen fail and the session end, rather than continue with
/// the server's default settings.
#[tokio::test]
async fn unreplayable_session_state_ends_the_session_on_reopen() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let mut c = Conn::new(proxy.opts(None)).await.unwrap();
    c.query_drop("SET @w = 7; SELECT 1").await.unwrap();
    let victim = connection_id(&mut c).await;
    // Closed by the shard and idle past idgate's idle check (1 s).
    proxy::kill_and_wait_closed(&tb, 0, victim).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r: Result<Option<i64>, _> = c.query_first("SELECT @w").await;
    let e = r.expect_err("the session's state is gone");
    assert!(e.to_string().contains("could not be restored"), "{e}");
    proxy.stop().await;
}

#[tokio::test]
async fn killed_shard_connection_inside_a_transaction_closes_the_session() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let db = support::unique("rf_tx");
    proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE DATABASE {db}"),
            &format!("CREATE TABLE {db}.t (id INT PRIMARY KEY)"),
        ],
    )
    .await;
    let mut bystander = Conn::new(proxy.opts(None)).await.unwrap();
    let mut c = Conn::new(proxy.opts(Some(&db))).await.unwrap();
    let victim = connection_id(&mut c).await;
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("INSERT INTO t VALUES (1)").await.unwrap();
    let e = kill_during(&tb, &mut c, "SELECT SLEEP(600)", victim).await;
    assert!(matches!(e, mysql_async::Error::Server(_)), "{e}");
    // The transaction is gone: the session must not go on as if it were not.
    let next = c.query_drop("INSERT INTO t VALUES (2)").await;
    assert!(
        next.is_err(),
        "the session is closed after losing its transaction"
    );
    // Nothing of the transaction was committed.
    let n: Option<u64> = bystander
        .query_first(format!("SELECT COUNT(*) FROM {db}.t"))
        .await
        .unwrap();
    assert_eq!(n, Some(0));
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE {db}")]).await;
    proxy.stop().await;
}

// ---------------------------------------------------------------------------
// A fake shard: speaks just enough of the protocol to log idgate in, then
// misbehaves on command.

/// What the fake shard does with a query, chosen by its text.
async fn fake_reply(conn: &mut PacketConn, sql: &str) -> bool {
    let mut out = Vec::new();
    let coldef = |out: &mut Vec<u8>, seq| {
        let mut p = Vec::new();
        for s in [&b"def"[..], b"", b"", b"", b"1", b""] {
            p.push(s.len() as u8);
            p.extend_from_slice(s);
        }
        p.extend_from_slice(&[0x0c, 63, 0, 1, 0, 0, 0, 8, 0x81, 0, 0, 0, 0]);
        frame(out, seq, &p);
    };
    if sql.starts_with("SET") {
        // A `SET` marked `replay_breaks` closes the connection the second
        // time it is seen: when idgate first replays it.
        if sql.contains("replay_breaks") && REPLAY_BREAKS_SEEN.fetch_add(1, Ordering::SeqCst) == 1 {
            return false;
        }
        frame(&mut out, 1, &[0, 0, 0, 2, 0, 0, 0]);
    } else if sql.contains("garbage") {
        frame(&mut out, 1, &[0xfc, 0x01]); // a cut-short column count
        out.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0x00]);
    } else if sql.contains("close") {
        frame(&mut out, 1, &[1]);
        coldef(&mut out, 2);
        conn.write_raw(&out).await.ok();
        return false;
    } else if sql.contains("big_then_drop") {
        // Enough rows that idgate passes some on before the shard goes away.
        frame(&mut out, 1, &[1]);
        coldef(&mut out, 2);
        frame(&mut out, 3, &[0xfe, 0, 0, 2, 0]);
        let mut row = vec![0xfc, 0xe8, 0x03];
        row.extend_from_slice(&[b'r'; 1000]);
        for i in 0..200u8 {
            frame(&mut out, 4u8.wrapping_add(i), &row);
        }
        conn.write_raw(&out).await.ok();
        return false;
    } else if sql.starts_with("INSERT") {
        // One row, id 5.
        frame(&mut out, 1, &[0, 1, 5, 2, 0, 0, 0]);
    } else if sql.contains("LAST_INSERT_ID") {
        // Closes instead of answering.
        return false;
    } else if sql.contains("out_of_order") {
        frame(&mut out, 1, &[1]);
        coldef(&mut out, 7);
        frame(&mut out, 8, &[0xfe, 0, 0, 2, 0]);
        frame(&mut out, 9, &[1, b'1']);
        frame(&mut out, 10, &[0xfe, 0, 0, 2, 0]);
    } else {
        // SELECT 1, properly (no DEPRECATE_EOF offered).
        frame(&mut out, 1, &[1]);
        coldef(&mut out, 2);
        frame(&mut out, 3, &[0xfe, 0, 0, 2, 0]);
        frame(&mut out, 4, &[1, b'1']);
        frame(&mut out, 5, &[0xfe, 0, 0, 2, 0]);
    }
    conn.write_raw(&out).await.is_ok()
}

/// How many times the fake shards saw a `SET` marked `replay_breaks`.
static REPLAY_BREAKS_SEEN: AtomicU32 = AtomicU32::new(0);

/// How the fake shard greets a connection.
#[derive(Debug, Clone, Copy)]
enum Greeting {
    Handshake,
    /// Not a MySQL server at all.
    Http,
    /// A handshake of protocol version 9.
    WrongVersion,
}

/// Starts a fake shard on a free port; returns its address.
async fn fake_shard(garbage_greeting: Greeting) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut id = 100u32;
        while let Ok((s, _)) = l.accept().await {
            id += 1;
            tokio::spawn(async move {
                let mut c = PacketConn::new(s);
                match garbage_greeting {
                    Greeting::Http => {
                        // Read as a packet header: a 5 MiB packet that never
                        // comes. Kept open until idgate gives up (its connect
                        // timeout) and closes, however long that takes.
                        let _ = c.write_raw(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
                        let mut buf = Vec::new();
                        while let Ok(Some(_)) = c.read_packet(&mut buf, 1 << 24).await {}
                        return;
                    }
                    Greeting::WrongVersion => {
                        let _ = c.write_packet(0, &[9, b'x', 0, 1, 2, 3, 4]).await;
                        return;
                    }
                    Greeting::Handshake => {}
                }
                let hs = ServerHandshake {
                    server_version: b"5.5.5-10.11.99-MariaDB-fake".to_vec(),
                    connection_id: id,
                    scramble: (b'a'..b'a' + 20).collect(),
                    capabilities: cap::SUPPORTED & !cap::DEPRECATE_EOF,
                    ext_capabilities: 0,
                    charset: 45,
                    status: 2,
                    auth_plugin: b"mysql_native_password".to_vec(),
                };
                let _ = c.write_packet(0, &hs.encode()).await;
                let mut buf = Vec::new();
                if !matches!(c.read_packet(&mut buf, 1 << 20).await, Ok(Some(_))) {
                    return;
                }
                let _ = c.write_packet(2, &[0, 0, 0, 2, 0, 0, 0]).await;
                loop {
                    match c.read_packet(&mut buf, 1 << 24).await {
                        Ok(Some(_)) if buf.first() == Some(&cmd::QUERY) => {
                            let sql = String::from_utf8_lossy(&buf[1..]).into_owned();
                            if !fake_reply(&mut c, &sql).await {
                                return;
                            }
                        }
                        Ok(Some(_)) if buf.first() == Some(&cmd::PING) => {
                            let _ = c.write_packet(1, &[0, 0, 0, 2, 0, 0, 0]).await;
                        }
                        _ => return,
                    }
                }
            });
        }
    });
    addr
}

/// idgate in front of the fake shard at `shard`, giving up on logging in
/// to it after `connect_timeout_ms`.
fn fake_config(shard: &str, connect_timeout_ms: u64) -> idgate::config::Config {
    fake_config_with(shard, connect_timeout_ms, "")
}

/// [`fake_config`] with `backend` lines added to `[backend]`.
fn fake_config_with(shard: &str, connect_timeout_ms: u64, backend: &str) -> idgate::config::Config {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\
         [[users]]\nname = \"{}\"\npassword = \"{}\"\n\
         [backend]\nuser = \"x\"\npassword = \"y\"\nconnect_timeout_ms = {connect_timeout_ms}\n{backend}\n\
         [[shards]]\nname = \"fake\"\naddress = \"{shard}\"\n",
        proxy::USER,
        proxy::PASSWORD
    );
    idgate::config::Config::parse(&text, "fake").unwrap()
}

/// A connect timeout no login reaches, where the timeout is not what a test
/// is about: a fake shard answers at once, but a loaded machine may take
/// seconds to run it.
const LONG_CONNECT_TIMEOUT_MS: u64 = 60_000;

#[tokio::test]
async fn fake_shard_sending_garbage_or_closing_mid_result() {
    let addr = fake_shard(Greeting::Handshake).await;
    let proxy = Proxy::start_config(fake_config(&addr, LONG_CONNECT_TIMEOUT_MS), true).await;
    let mut bystander = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    let good = bystander.query("SELECT 1").await;
    assert_eq!(good.len(), 5, "{good:?}");
    for caps in [proxy::CLIENT_CAPS, proxy::CLIENT_CAPS | cap::DEPRECATE_EOF] {
        let mut c = RawClient::app(proxy.addr, caps).await;
        assert!(
            c.greeting.capabilities & cap::DEPRECATE_EOF == 0,
            "idgate offers only what the shard has"
        );
        for bad in ["SELECT 'garbage'", "SELECT 'close'"] {
            let r = c.query(bad).await;
            let e = proxy::err_of(&r).unwrap_or_else(|| panic!("{bad}: no error: {r:?}"));
            assert_eq!(e.code, 2013, "{bad}: {e}");
            assert!(e.message.contains("fake"), "names the shard: {e}");
            // The session goes on with a new shard connection.
            assert_eq!(c.query("SELECT 1").await, good, "after {bad}");
        }
        assert_eq!(bystander.query("SELECT 1").await, good);
    }
    assert!(!proxy.is_finished());
    proxy.stop().await;
}

/// idgate, multiplexed with one pooled connection (takers wait for it),
/// in front of a fresh fake shard, and two sessions logged in to it.
async fn two_sessions_on_one_pooled_connection() -> (Proxy, RawClient, RawClient) {
    let addr = fake_shard(Greeting::Handshake).await;
    let cfg = fake_config_with(
        &addr,
        LONG_CONNECT_TIMEOUT_MS,
        "multiplex = true\npool_max = 1\npool_wait_timeout_ms = 60000",
    );
    let proxy = Proxy::start_config(cfg, true).await;
    let a = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    let b = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    (proxy, a, b)
}

/// `SELECT 1` on `c` succeeds: the fake shard's one-row result (column
/// count, column, EOF, row, EOF). Returns the packets.
async fn select_one(c: &mut RawClient) -> Vec<Vec<u8>> {
    let r = c.query("SELECT 1").await;
    assert!(proxy::err_of(&r).is_none(), "{:?}", proxy::err_of(&r));
    assert_eq!(r.len(), 5, "{r:?}");
    r
}

/// Multiplexed, one pooled connection: a session's INSERT leaves its
/// `LAST_INSERT_ID()` on the connection, and the next session to take it
/// has the value read first. The fake shard closes the connection instead
/// of answering that read: idgate closes it and takes another, and the
/// taker's statement, not sent yet, succeeds (another session's value
/// must not fail it).
#[tokio::test]
async fn a_connection_breaking_while_another_sessions_value_is_read_is_replaced() {
    let (proxy, mut a, mut b) = two_sessions_on_one_pooled_connection().await;
    let ok = a.query("INSERT INTO t (v) VALUES (1)").await;
    assert_eq!((ok.len(), ok[0][0]), (1, 0), "an OK: {ok:?}");
    let stats = &proxy.shared.pools[0].stats;
    let created = || stats.created.load(Ordering::Relaxed);
    assert_eq!(created(), 1);
    let r = select_one(&mut b).await;
    assert_eq!(
        stats.lid_reads.load(Ordering::Relaxed),
        1,
        "a's value was read for it"
    );
    assert_eq!(created(), 2, "the broken connection was replaced");
    // a goes on too.
    assert_eq!(a.query("SELECT 1").await, r);
    assert!(!proxy.is_finished());
    proxy.stop().await;
}

/// A connection taken from the pool that breaks before the taker's
/// statement is sent, while another session's state on it is reset or
/// while the taker's own `SET`s are replayed on it, is closed and
/// replaced: the statement runs on a new connection. (The fake shard
/// closes the connection on COM_RESET_CONNECTION, and on the first replay
/// of a `SET` marked `replay_breaks`.)
#[tokio::test]
async fn a_connection_breaking_while_it_is_made_ready_is_replaced() {
    let (proxy, mut a, mut b) = two_sessions_on_one_pooled_connection().await;
    let stats = &proxy.shared.pools[0].stats;
    let created = || stats.created.load(Ordering::Relaxed);
    let ok = a
        .query("SET time_zone = '+03:00' /* replay_breaks */")
        .await;
    assert_eq!((ok.len(), ok[0][0]), (1, 0), "an OK: {ok:?}");
    assert_eq!(created(), 1);
    // a's time zone is on the connection it gave back: b resets it first.
    select_one(&mut b).await;
    assert_eq!(stats.restored.load(Ordering::Relaxed), 1, "reset for b");
    assert_eq!(
        created(),
        2,
        "the connection that broke at the reset was replaced"
    );
    // a's SET is replayed on b's connection; the first replay breaks it.
    select_one(&mut a).await;
    assert_eq!(
        created(),
        3,
        "the connection that broke at the replay was replaced"
    );
    assert_eq!(
        REPLAY_BREAKS_SEEN.load(Ordering::SeqCst),
        3,
        "sent, replayed, replayed"
    );
    assert!(!proxy.is_finished());
    proxy.stop().await;
}

#[tokio::test]
async fn shard_that_is_not_a_mysql_server() {
    // The HTTP "shard" never completes a login: every attempt ends with the
    // (short) connect timeout. The other greeting fails the login at once.
    for (greeting, code, connect_timeout_ms) in [
        (Greeting::Http, 2003, 2000),
        (Greeting::WrongVersion, 2013, LONG_CONNECT_TIMEOUT_MS),
    ] {
        let addr = fake_shard(greeting).await;
        let proxy = Proxy::start_config(fake_config(&addr, connect_timeout_ms), false).await;
        let mut c = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
        // PING needs no shard connection.
        let pong = c.command(&[cmd::PING], Expect::Single).await;
        assert_eq!(pong[0][0], 0);
        for _ in 0..2 {
            let r = c.query("SELECT 1").await;
            let e = proxy::err_of(&r).expect("an error");
            assert_eq!(e.code, code, "{greeting:?}: {e}");
            assert!(e.message.contains("fake"), "names the shard: {e}");
        }
        assert!(!proxy.is_finished());
        proxy.stop().await;
    }
    // A shard that is not listening at all.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    // (Refused at once, whatever the timeout.)
    let proxy2 = Proxy::start_config(fake_config(&closed, LONG_CONNECT_TIMEOUT_MS), false).await;
    let mut c2 = RawClient::app(proxy2.addr, proxy::CLIENT_CAPS).await;
    let r = c2.query("SELECT 1").await;
    let e = proxy::err_of(&r).expect("an error");
    assert_eq!(e.code, 2003, "{e}");
    assert!(e.message.contains(&closed), "names the address: {e}");
    assert!(!proxy2.is_finished());
    proxy2.stop().await;
}

/// A shard whose reply has sequence ids out of order.
#[tokio::test]
async fn fake_shard_with_sequence_ids_out_of_order() {
    let addr = fake_shard(Greeting::Handshake).await;
    let proxy = Proxy::start_config(fake_config(&addr, LONG_CONNECT_TIMEOUT_MS), true).await;
    let mut c = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    // reply_after checks the sequence ids the client sees.
    let r = c.query("SELECT 'out_of_order'").await;
    let e = proxy::err_of(&r).expect("an error");
    assert_eq!(e.code, 2013, "{e}");
    assert_eq!(c.query("SELECT 1").await.len(), 5);
    proxy.stop().await;
}

/// A shard that goes away after idgate has passed on part of a result set:
/// the client gets rows, then an ERR packet whose sequence id follows them.
#[tokio::test]
async fn fake_shard_closing_after_part_of_a_result_was_relayed() {
    let addr = fake_shard(Greeting::Handshake).await;
    let proxy = Proxy::start_config(fake_config(&addr, LONG_CONNECT_TIMEOUT_MS), true).await;
    let mut c = RawClient::app(proxy.addr, proxy::CLIENT_CAPS).await;
    // reply_after checks the sequence ids the client sees.
    let r = c.query("SELECT 'big_then_drop'").await;
    assert!(r.len() > 3, "some rows were relayed");
    let e = proxy::err_of(&r).expect("an error after the rows");
    assert_eq!(e.code, 2013, "{e}");
    assert_eq!(c.query("SELECT 1").await.len(), 5);
    proxy.stop().await;
}

/// `KILL` names idgate sessions (the id of the handshake), never a shard's
/// thread: `KILL QUERY` ends the running statement of that session only,
/// `KILL` closes it, an unknown id is error 1094 and nothing is relayed (a
/// shard connection whose thread id is named stays alive), another user's
/// session is error 1095.
#[tokio::test]
async fn kill_names_idgate_sessions_and_never_reaches_another_connection() {
    let Some(tb) = support::testbed() else { return };
    let p = Proxy::start(&tb).await;
    let mut a = Conn::new(p.opts(None)).await.unwrap();
    let mut b = Conn::new(p.opts(None)).await.unwrap();
    let a_id = a.id();
    assert_ne!(
        a_id,
        connection_id(&mut a).await as u32,
        "the handshake id is idgate's"
    );
    // KILL QUERY: A's long statement ends, A goes on.
    let sleeping = tokio::spawn(async move {
        let r: Result<Option<i64>, _> = a.query_first("SELECT SLEEP(600)").await;
        (a, r)
    });
    // Again until it lands (a KILL QUERY before the statement reached the
    // shard finds nothing to end).
    let until = deadline();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        b.query_drop(format!("KILL QUERY {a_id}")).await.unwrap();
        if sleeping.is_finished() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "KILL QUERY ended the statement"
        );
    }
    let (mut a, r) = sleeping.await.unwrap();
    match r {
        Err(mysql_async::Error::Server(e)) => assert_eq!(e.code, 1317, "{e:?}"),
        Ok(v) => assert_eq!(v, Some(1), "SLEEP interrupted"),
        Err(e) => panic!("unexpected: {e}"),
    }
    let one: Option<i64> = a.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1), "the session goes on after KILL QUERY");
    // An id that is a shard thread, not an idgate session: refused, and that
    // connection is untouched.
    let mut d = Conn::new(proxy::direct_opts(&tb, 0, None)).await.unwrap();
    let thread = connection_id(&mut d).await;
    let err = b.query_drop(format!("KILL {thread}")).await.unwrap_err();
    assert!(
        matches!(&err, mysql_async::Error::Server(e) if e.code == 1094),
        "{err}"
    );
    assert!(
        shard_has_connection(&tb, thread).await,
        "nothing was relayed"
    );
    let _ = d.disconnect().await;
    // Another user's session.
    let mut other = Conn::new(
        p.opts(None)
            .user(Some(proxy::USER2))
            .pass(Some(proxy::PASSWORD2)),
    )
    .await
    .unwrap();
    let err = other.query_drop(format!("KILL {a_id}")).await.unwrap_err();
    assert!(
        matches!(&err, mysql_async::Error::Server(e) if e.code == 1095),
        "{err}"
    );
    // KILL: A is closed, B is not.
    let a_thread = connection_id(&mut a).await;
    b.query_drop(format!("KILL {a_id}")).await.unwrap();
    let until = deadline();
    while a.query_drop("SELECT 1").await.is_ok() {
        assert!(
            tokio::time::Instant::now() < until,
            "the killed session is closed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let until = deadline();
    while shard_has_connection(&tb, a_thread).await {
        assert!(
            tokio::time::Instant::now() < until,
            "its shard connection is closed too"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let one: Option<i64> = b.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    // Killing oneself: error 1927, then the session ends.
    let b_id = b.id();
    let err = b.query_drop(format!("KILL {b_id}")).await.unwrap_err();
    assert!(
        matches!(&err, mysql_async::Error::Server(e) if e.code == 1927),
        "{err}"
    );
    drop(other);
    p.stop().await;
}

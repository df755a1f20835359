//! Prepared statements through idgate compared with a direct connection:
//! mysql_async's prepare/execute/close (it always resends parameter types),
//! and raw COM_STMT_* packets for what drivers do differently: executes that
//! do not resend types (also after idgate reconnected to the shard and had to
//! prepare the statement again), long data, reset, unknown and closed ids.

mod support;

use idgate::protocol::consts::{cap, cmd};
use idgate::protocol::reply;
use idgate::protocol::response::Expect;
use idgate::protocol::stmt::{encode_execute, types, ParamType};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Value};
use std::time::Duration;
use support::proxy::{self, Event, Proxy, RawClient};

/// One prepared-statement step of the differential script.
enum Step {
    /// Text statement (set-up).
    Text(&'static str),
    /// Prepare `sql` (statement slot `slot`) and record its metadata.
    Prepare(usize, &'static str),
    /// Execute the statement in `slot` with these parameters.
    Exec(usize, Vec<Value>),
    /// Close the statement in `slot`.
    Close(usize),
}

fn params(v: &[Value]) -> Params {
    if v.is_empty() {
        Params::Empty
    } else {
        Params::Positional(v.to_vec())
    }
}

fn script() -> Vec<Step> {
    use Step::*;
    let mut s = vec![
        Text("SET SESSION sql_mode = ''"),
        Text(
            "CREATE TABLE p (id BIGINT AUTO_INCREMENT PRIMARY KEY, i INT, u BIGINT UNSIGNED, \
             f DOUBLE, s VARCHAR(8), b BLOB, d DECIMAL(12,4), dt DATETIME(6), tm TIME(3), \
             n INT NULL, j JSON, UNIQUE KEY (s))",
        ),
        Text("CREATE PROCEDURE pp(IN x INT) BEGIN SELECT x AS a; SELECT x * 2 AS b, 'q'; END"),
        Prepare(
            0,
            "INSERT INTO p (i, u, f, s, b, d, dt, tm, n, j) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ),
    ];
    for k in 0..60i64 {
        s.push(Exec(
            0,
            vec![
                Value::Int(k * 1000 - 30_000),
                Value::UInt(u64::MAX - k as u64),
                Value::Double(k as f64 / 3.0),
                Value::Bytes(format!("s{k}").into_bytes()),
                Value::Bytes(vec![k as u8, 0, 255, b'\'']),
                Value::Bytes(format!("{k}.{k:04}").into_bytes()),
                Value::Date(2024, 2, 29, 23, 59, (k % 60) as u8, 123_456),
                Value::Time(k % 2 == 0, 1, 2, 3, 4, 500_000),
                if k % 3 == 0 {
                    Value::NULL
                } else {
                    Value::Int(k)
                },
                Value::Bytes(format!("{{\"k\": {k}}}").into_bytes()),
            ],
        ));
    }
    s.extend([
        // All NULL.
        Exec(0, vec![Value::NULL; 10]),
        // Duplicate key.
        Exec(
            0,
            vec![
                Value::Int(1),
                Value::UInt(1),
                Value::Double(1.0),
                Value::Bytes(b"s1".to_vec()),
                Value::NULL,
                Value::NULL,
                Value::NULL,
                Value::NULL,
                Value::NULL,
                Value::NULL,
            ],
        ),
        // Truncation warning (sql_mode is not strict).
        Exec(
            0,
            vec![
                Value::Int(1),
                Value::UInt(1),
                Value::Double(1.0),
                Value::Bytes(b"far too long".to_vec()),
                Value::NULL,
                Value::Bytes(b"nonsense".to_vec()),
                Value::NULL,
                Value::NULL,
                Value::NULL,
                Value::NULL,
            ],
        ),
        Prepare(1, "SELECT * FROM p WHERE id > ? ORDER BY id LIMIT ?"),
        Exec(1, vec![Value::Int(0), Value::Int(100)]),
        Exec(1, vec![Value::Int(50), Value::Int(5)]),
        // Another parameter type for the same placeholder.
        Exec(1, vec![Value::Bytes(b"57".to_vec()), Value::UInt(2)]),
        Exec(1, vec![Value::NULL, Value::Int(3)]),
        Prepare(2, "SELECT ?, ?, ?, ?, ?, ? + 1, CONCAT(?, 'x')"),
        Exec(
            2,
            vec![
                Value::Int(-5),
                Value::Double(2.5),
                Value::Bytes("ütf8 🎉".as_bytes().to_vec()),
                Value::NULL,
                Value::Date(2001, 1, 1, 0, 0, 0, 0),
                Value::UInt(41),
                Value::Bytes(b"ab".to_vec()),
            ],
        ),
        Prepare(3, "UPDATE p SET s = ? WHERE id = ?"),
        Exec(
            3,
            vec![Value::Bytes(b"toolongvalue".to_vec()), Value::Int(2)],
        ),
        Exec(3, vec![Value::Bytes(b"ok".to_vec()), Value::Int(99_999)]),
        Close(3),
        // Closed and prepared again.
        Prepare(3, "UPDATE p SET s = ? WHERE id = ?"),
        Exec(3, vec![Value::Bytes(b"again".to_vec()), Value::Int(4)]),
        Prepare(4, "SELEC ?"),
        Prepare(4, "SELECT * FROM no_such_table WHERE id = ?"),
        Prepare(4, "CALL pp(?)"),
        Exec(4, vec![Value::Int(21)]),
        Exec(4, vec![Value::Int(-1)]),
        Prepare(5, "DELETE FROM p WHERE id > ?"),
        Exec(5, vec![Value::Int(55)]),
        Prepare(6, "SELECT COUNT(*), SUM(i), MAX(dt), MIN(tm) FROM p"),
        Exec(6, vec![]),
        Close(0),
        Close(1),
        Close(2),
    ]);
    s
}

/// Runs the script on `conn` and returns one record per step.
async fn run_script(conn: &mut Conn, schema: &str) -> Vec<(String, Vec<Event>)> {
    let mut slots: Vec<Option<mysql_async::Statement>> = vec![None; 8];
    let mut out = Vec::new();
    for step in script() {
        let (label, ev) = match step {
            Step::Text(sql) => (sql.to_string(), proxy::run_text(conn, sql, schema).await),
            Step::Prepare(slot, sql) => {
                let ev = match conn.prep(sql).await {
                    Ok(st) => {
                        let ev = vec![
                            Event::Ok {
                                affected_rows: st.num_params() as u64,
                                last_insert_id: None,
                                warnings: 0,
                                info: "prepared".into(),
                            },
                            Event::Columns(proxy::columns(st.params(), schema)),
                            Event::Columns(proxy::columns(&st.columns(), schema)),
                        ];
                        slots[slot] = Some(st);
                        ev
                    }
                    Err(e) => vec![proxy::error_event(e, schema)],
                };
                (format!("prepare {sql}"), ev)
            }
            Step::Exec(slot, values) => {
                let st = slots[slot].clone().expect("statement prepared");
                let ev = proxy::run_exec(conn, &st, params(&values), schema).await;
                (format!("execute #{slot} {values:?}"), ev)
            }
            Step::Close(slot) => {
                let st = slots[slot].take().expect("statement prepared");
                conn.close(st).await.expect("close");
                (format!("close #{slot}"), Vec::new())
            }
        };
        out.push((label, ev));
    }
    out
}

#[tokio::test]
async fn prepared_statements_through_idgate_equal_direct() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let a = support::unique("rp_direct");
    let b = support::unique("rp_idgate");
    proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE DATABASE {a}"),
            &format!("CREATE DATABASE {b}"),
        ],
    )
    .await;
    // No statement cache: every prep is a COM_STMT_PREPARE, every close a COM_STMT_CLOSE.
    let mut direct = Conn::new(proxy::direct_opts(&tb, 0, Some(&a)).stmt_cache_size(0))
        .await
        .unwrap();
    let mut through = Conn::new(proxy.opts(Some(&b)).stmt_cache_size(0))
        .await
        .unwrap();
    let want = run_script(&mut direct, &a).await;
    let got = run_script(&mut through, &b).await;
    assert!(
        want.iter()
            .any(|(_, ev)| matches!(ev.last(), Some(Event::Err { code: 1062, .. }))),
        "the script exercises a duplicate key"
    );
    let mismatches: Vec<String> = want
        .iter()
        .zip(&got)
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("{}\n  direct: {:?}\n  idgate: {:?}", w.0, w.1, g.1))
        .collect();
    drop(direct);
    drop(through);
    proxy::admin(
        &tb,
        0,
        &[&format!("DROP DATABASE {a}"), &format!("DROP DATABASE {b}")],
    )
    .await;
    proxy.stop().await;
    assert!(
        mismatches.is_empty(),
        "{} steps differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

// ---------------------------------------------------------------------------
// Raw COM_STMT_* packets.

const LONGLONG: ParamType = [types::LONGLONG, 0];
const VAR_STRING: ParamType = [0xfd, 0];

fn prepare_packet(sql: &str) -> Vec<u8> {
    let mut p = vec![cmd::STMT_PREPARE];
    p.extend_from_slice(sql.as_bytes());
    p
}

/// The statement id in a prepare-OK reply.
fn stmt_id_of(reply: &[Vec<u8>]) -> u32 {
    let ok = &reply[0];
    assert_eq!(ok[0], 0, "prepare OK: {:?}", proxy::err_of(reply));
    u32::from_le_bytes([ok[1], ok[2], ok[3], ok[4]])
}

/// The reply without the statement id of a prepare-OK (ids differ by design).
fn without_stmt_id(mut reply: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    if reply[0][0] == 0 {
        reply[0][1..5].fill(0);
    }
    reply
}

/// COM_STMT_EXECUTE with types bound.
fn execute_with_types(id: u32, flags: u8, params: &[(ParamType, Option<&[u8]>)]) -> Vec<u8> {
    let mut p = vec![cmd::STMT_EXECUTE];
    encode_execute(id, flags, 1, params, &mut p);
    p
}

/// COM_STMT_EXECUTE with new-params-bound = 0: NULL bitmap and values only
/// (a (LONGLONG, VAR_STRING) statement).
fn execute_without_types(id: u32, n: i64, s: &[u8]) -> Vec<u8> {
    let mut p = vec![cmd::STMT_EXECUTE];
    p.extend_from_slice(&id.to_le_bytes());
    p.push(0);
    p.extend_from_slice(&1u32.to_le_bytes());
    p.push(0); // NULL bitmap for 2 params
    p.push(0); // new-params-bound = 0
    p.extend_from_slice(&n.to_le_bytes());
    p.push(s.len() as u8);
    p.extend_from_slice(s);
    p
}

/// A pair of raw clients: one direct to shard s0, one through idgate, same
/// capabilities, so replies can be compared byte for byte.
async fn raw_pair(tb: &support::Testbed, proxy: &Proxy, caps: u32) -> (RawClient, RawClient) {
    (
        RawClient::direct(tb, 0, caps).await,
        RawClient::app(proxy.addr, caps).await,
    )
}

#[tokio::test]
async fn executes_without_types_match_direct() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    for caps in [proxy::CLIENT_CAPS, proxy::CLIENT_CAPS | cap::DEPRECATE_EOF] {
        let (mut d, mut g) = raw_pair(&tb, &proxy, caps).await;
        let sql = "SELECT ? AS a, CONCAT(?, 'x') AS b";
        let rd = d.command(&prepare_packet(sql), Expect::Prepare).await;
        let rg = g.command(&prepare_packet(sql), Expect::Prepare).await;
        let (idd, idg) = (stmt_id_of(&rd), stmt_id_of(&rg));
        assert_eq!(without_stmt_id(rd), without_stmt_id(rg), "prepare reply");

        let five = 5i64.to_le_bytes();
        let typed = |id| {
            execute_with_types(
                id,
                0,
                &[(LONGLONG, Some(&five[..])), (VAR_STRING, Some(&b"ab"[..]))],
            )
        };
        let want = d.command(&typed(idd), Expect::Results).await;
        let got = g.command(&typed(idg), Expect::Results).await;
        assert_eq!(want, got, "execute with types");
        assert!(want.iter().any(|p| p.windows(3).any(|w| w == b"abx")));

        for n in 6..9 {
            let want = d
                .command(&execute_without_types(idd, n, b"cd"), Expect::Results)
                .await;
            let got = g
                .command(&execute_without_types(idg, n, b"cd"), Expect::Results)
                .await;
            assert_eq!(want, got, "execute without types ({n})");
            assert!(proxy::err_of(&want).is_none());
        }

        // Unknown and closed statement ids: 1243 like the server's own.
        let want = d
            .command(&execute_without_types(999_999, 1, b"x"), Expect::Results)
            .await;
        let got = g
            .command(&execute_without_types(999_999, 1, b"x"), Expect::Results)
            .await;
        let (we, ge) = (proxy::err_of(&want).unwrap(), proxy::err_of(&got).unwrap());
        assert_eq!(ge.code, 1243);
        assert_eq!(
            (we.code, &we.state, &we.message),
            (ge.code, &ge.state, &ge.message)
        );

        for (c, id) in [(&mut d, idd), (&mut g, idg)] {
            let mut close = vec![cmd::STMT_CLOSE];
            close.extend_from_slice(&id.to_le_bytes());
            c.send(&close).await; // no reply
        }
        let want = d
            .command(&execute_without_types(idd, 1, b"x"), Expect::Results)
            .await;
        let got = g
            .command(&execute_without_types(idg, 1, b"x"), Expect::Results)
            .await;
        let (we, ge) = (proxy::err_of(&want).unwrap(), proxy::err_of(&got).unwrap());
        assert_eq!(ge.code, 1243, "{ge}");
        assert_eq!(we.code, ge.code);
        // Closing an unknown id has no reply either: the session goes on.
        let mut close = vec![cmd::STMT_CLOSE];
        close.extend_from_slice(&424_242u32.to_le_bytes());
        g.send(&close).await;
        assert_eq!(
            g.query("SELECT 1").await,
            d.query("SELECT 1").await,
            "session still works"
        );
    }
    proxy.stop().await;
}

#[tokio::test]
async fn execute_without_types_after_the_shard_connection_was_reopened() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    for caps in [proxy::CLIENT_CAPS, proxy::CLIENT_CAPS | cap::DEPRECATE_EOF] {
        let (mut d, mut g) = raw_pair(&tb, &proxy, caps).await;
        let sql = "SELECT ? AS a, CONCAT(?, 'x') AS b";
        let idd = stmt_id_of(&d.command(&prepare_packet(sql), Expect::Prepare).await);
        let idg = stmt_id_of(&g.command(&prepare_packet(sql), Expect::Prepare).await);
        let five = 5i64.to_le_bytes();
        let typed = |id| {
            execute_with_types(
                id,
                0,
                &[(LONGLONG, Some(&five[..])), (VAR_STRING, Some(&b"ab"[..]))],
            )
        };
        assert_eq!(
            d.command(&typed(idd), Expect::Results).await,
            g.command(&typed(idg), Expect::Results).await
        );
        // The shard connection goes away while idle; idgate reconnects,
        // prepares the statement again and must supply the types itself.
        let rows = g.query("SELECT CONNECTION_ID()").await;
        let backend_id = text_first_value(&rows, g.deprecate_eof());
        // Once the shard has closed it and it has been idle longer than
        // idgate's idle check (1 s), idgate reopens it.
        proxy::kill_and_wait_closed(&tb, 0, backend_id.parse().unwrap()).await;
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let want = d
            .command(&execute_without_types(idd, 77, b"ef"), Expect::Results)
            .await;
        let got = g
            .command(&execute_without_types(idg, 77, b"ef"), Expect::Results)
            .await;
        assert_eq!(want, got, "execute without types after reconnect");
        assert!(got.iter().any(|p| p.windows(3).any(|w| w == b"efx")));
        let after = g.query("SELECT CONNECTION_ID()").await;
        assert_ne!(
            text_first_value(&after, g.deprecate_eof()),
            backend_id,
            "a new shard connection"
        );
    }
    proxy.stop().await;
}

/// The first column of the first row of a text result set.
fn text_first_value(reply: &[Vec<u8>], deprecate_eof: bool) -> String {
    let row = &reply[if deprecate_eof { 2 } else { 3 }];
    let n = row[0] as usize;
    String::from_utf8(row[1..1 + n].to_vec()).unwrap()
}

#[tokio::test]
async fn long_data_and_statement_reset_match_direct() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let (mut d, mut g) = raw_pair(&tb, &proxy, proxy::CLIENT_CAPS | cap::DEPRECATE_EOF).await;
    let sql = "SELECT ? AS blob_param, ? AS n";
    let rd = d.command(&prepare_packet(sql), Expect::Prepare).await;
    let rg = g.command(&prepare_packet(sql), Expect::Prepare).await;
    let (idd, idg) = (stmt_id_of(&rd), stmt_id_of(&rg));

    let long_data = |id: u32, chunk: &[u8]| {
        let mut p = vec![cmd::STMT_SEND_LONG_DATA];
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&0u16.to_le_bytes());
        p.extend_from_slice(chunk);
        p
    };
    let blob: ParamType = [0xfc, 0];
    let one = 1i64.to_le_bytes();
    for (c, id) in [(&mut d, idd), (&mut g, idg)] {
        c.send(&long_data(id, b"abc")).await;
        c.send(&long_data(id, &[0u8, 255, b'd'])).await;
    }
    // The long-data parameter is left out of the values.
    let exec = |id: u32| {
        let mut p = vec![cmd::STMT_EXECUTE];
        p.extend_from_slice(&id.to_le_bytes());
        p.push(0);
        p.extend_from_slice(&1u32.to_le_bytes());
        p.push(0);
        p.push(1);
        p.extend_from_slice(&blob);
        p.extend_from_slice(&LONGLONG);
        p.extend_from_slice(&one);
        p
    };
    let want = d.command(&exec(idd), Expect::Results).await;
    let got = g.command(&exec(idg), Expect::Results).await;
    assert_eq!(want, got, "execute with long data");
    assert!(got.iter().any(|p| p.windows(6).any(|w| w == b"abc\0\xffd")));

    // Long data again, then COM_STMT_RESET discards it.
    let reset = |id: u32| {
        let mut p = vec![cmd::STMT_RESET];
        p.extend_from_slice(&id.to_le_bytes());
        p
    };
    for (c, id) in [(&mut d, idd), (&mut g, idg)] {
        c.send(&long_data(id, b"discarded")).await;
    }
    let want = d.command(&reset(idd), Expect::Single).await;
    let got = g.command(&reset(idg), Expect::Single).await;
    assert_eq!(want, got, "COM_STMT_RESET");
    assert_eq!(got[0][0], reply::OK);
    let typed = |id| {
        execute_with_types(
            id,
            0,
            &[
                (VAR_STRING, Some(&b"fresh"[..])),
                (LONGLONG, Some(&one[..])),
            ],
        )
    };
    let want = d.command(&typed(idd), Expect::Results).await;
    let got = g.command(&typed(idg), Expect::Results).await;
    assert_eq!(want, got, "execute after reset");
    assert!(!got.iter().any(|p| p.windows(9).any(|w| w == b"discarded")));

    // Reset of an unknown statement: 1243 from both.
    let want = d.command(&reset(31337), Expect::Single).await;
    let got = g.command(&reset(31337), Expect::Single).await;
    let (we, ge) = (proxy::err_of(&want).unwrap(), proxy::err_of(&got).unwrap());
    assert_eq!((we.code, ge.code), (1243, 1243));
    assert_eq!(we.message, ge.message);
    proxy.stop().await;
}

// ---------------------------------------------------------------------------
// Split packets: payloads of 16 MiB and more, both ways.

/// Pseudo-random bytes (xorshift), reproducible.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[tokio::test]
async fn twenty_mib_blobs_cross_idgate_both_ways() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let db = support::unique("rp_big");
    proxy::admin(&tb, 0, &[&format!("CREATE DATABASE {db}")]).await;
    let mut c = Conn::new(proxy.opts(Some(&db))).await.unwrap();
    c.query_drop("CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB)")
        .await
        .unwrap();
    const MIB: usize = 1 << 20;

    // Text: a 20 MiB INSERT statement (letters only, so no escaping).
    let text: Vec<u8> = noise(20 * MIB, 1)
        .into_iter()
        .map(|b| b'a' + b % 26)
        .collect();
    let mut sql = b"INSERT INTO big VALUES (1, '".to_vec();
    sql.extend_from_slice(&text);
    sql.extend_from_slice(b"')");
    c.query_drop(String::from_utf8(sql).unwrap()).await.unwrap();
    assert_eq!(c.affected_rows(), 1);

    // Binary protocol: a 20 MiB parameter (mysql_async sends it as long data).
    let bin = noise(20 * MIB + 3, 2);
    c.exec_drop("INSERT INTO big VALUES (2, ?)", (bin.clone(),))
        .await
        .unwrap();

    // Read back both ways: 20 MiB rows are split packets from the shard.
    let back: Option<Vec<u8>> = c
        .query_first("SELECT b FROM big WHERE id = 1")
        .await
        .unwrap();
    assert!(back.as_deref() == Some(&text[..]), "text row 1 differs");
    let back: Option<Vec<u8>> = c
        .exec_first("SELECT b FROM big WHERE id = ?", (2,))
        .await
        .unwrap();
    assert!(back.as_deref() == Some(&bin[..]), "binary row 2 differs");
    let both: Vec<(i32, Vec<u8>)> = c.query("SELECT id, b FROM big ORDER BY id").await.unwrap();
    assert_eq!(both.len(), 2);
    assert!(both[0].1 == text && both[1].1 == bin);

    // What idgate wrote equals what a direct connection reads.
    let mut direct = Conn::new(proxy::direct_opts(&tb, 0, Some(&db)))
        .await
        .unwrap();
    let sums: Vec<(i32, String)> = direct
        .query("SELECT id, SHA2(b, 256) FROM big ORDER BY id")
        .await
        .unwrap();
    let through: Vec<(i32, String)> = c
        .query("SELECT id, SHA2(b, 256) FROM big ORDER BY id")
        .await
        .unwrap();
    assert_eq!(sums, through);
    let lens: Vec<(i32, u64)> = direct
        .query("SELECT id, LENGTH(b) FROM big ORDER BY id")
        .await
        .unwrap();
    assert_eq!(lens, vec![(1, 20 * MIB as u64), (2, 20 * MIB as u64 + 3)]);
    drop(direct);
    drop(c);
    proxy::admin(&tb, 0, &[&format!("DROP DATABASE {db}")]).await;
    proxy.stop().await;
}

/// Payloads of exactly 16 MiB - 1 bytes end with an empty packet; one byte
/// more needs a second packet. Both directions, raw, compared with direct.
#[tokio::test]
async fn packets_at_the_16_mib_boundary_match_direct() {
    let Some(tb) = support::testbed() else { return };
    let proxy = Proxy::start(&tb).await;
    let (mut d, mut g) = raw_pair(&tb, &proxy, proxy::CLIENT_CAPS | cap::DEPRECATE_EOF).await;
    const MAX: usize = 0xff_ffff;
    // A row whose packet is exactly MAX bytes: 4-byte length prefix + value.
    for n in [MAX - 4, MAX - 3, MAX - 5] {
        let sql = format!("SELECT REPEAT('r', {n})");
        let want = d.query(&sql).await;
        let got = g.query(&sql).await;
        assert!(want == got, "row of {n} bytes differs");
        assert!(got.iter().any(|p| p.len() == n + 4), "row of {n} bytes");
    }
    // A COM_QUERY payload of exactly MAX bytes and of MAX + 1.
    for total in [MAX, MAX + 1, 2 * MAX + 7] {
        let head = "SELECT LENGTH('";
        let tail = "')";
        let fill = total - 1 - head.len() - tail.len();
        let sql = format!("{head}{}{tail}", "q".repeat(fill));
        assert_eq!(sql.len() + 1, total);
        let want = d.query(&sql).await;
        let got = g.query(&sql).await;
        assert_eq!(want, got, "query payload of {total} bytes");
        let value = fill.to_string();
        assert!(got.iter().any(|p| p.ends_with(value.as_bytes())));
    }
    // A COM_STMT_EXECUTE over 16 MiB (sent whole, not as long data).
    let sql = "SELECT LENGTH(?), SHA2(?, 256)";
    let rd = d.command(&prepare_packet(sql), Expect::Prepare).await;
    let rg = g.command(&prepare_packet(sql), Expect::Prepare).await;
    let (idd, idg) = (stmt_id_of(&rd), stmt_id_of(&rg));
    let big = noise(17 * 1024 * 1024, 3);
    let blob: ParamType = [0xfc, 0];
    let exec = |id| execute_with_types(id, 0, &[(blob, Some(&big[..])), (blob, Some(&big[..]))]);
    let want = d.command(&exec(idd), Expect::Results).await;
    let got = g.command(&exec(idg), Expect::Results).await;
    assert!(proxy::err_of(&got).is_none(), "{:?}", proxy::err_of(&got));
    assert_eq!(want, got, "34 MiB execute");
    proxy.stop().await;
}

//! Sequences in SQL (issue 16, part 4): `NEXTVAL(idgate.g)`, `NEXT VALUE
//! FOR`, `LASTVAL`/`PREVIOUS VALUE FOR`, `SETVAL`, answered by idgate from
//! its generators, against the test bed's MariaDB and etcd, with
//! mysql_async and PyMySQL.
//!
//! The differential tests run the same statements against a real MariaDB
//! `CREATE SEQUENCE` on shard 0 (direct) and against idgate's generator,
//! and compare what a client sees: column names, types, flags, NULLs,
//! per-session LASTVAL, prepared statements, INSERT values.

mod support;

use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row, Value};
use support::proxy::{self, Proxy, ADMIN, ADMIN_PASSWORD};

const LIMITED: &str = "limited";
const LIMITED_PASSWORD: &str = "lpw";

fn rules(schema: &str) -> String {
    format!(
        "[[generator]]\nname = \"orders\"\nkind = \"sequence\"\nbatch = 50\n\n\
         [[generator]]\nname = \"events\"\nkind = \"snowflake\"\n\n\
         [[table]]\nname = \"{schema}.orders\"\ncolumn = \"id\"\ngenerator = \"orders\"\n\n\
         [[table]]\nname = \"{schema}.spread\"\ncolumn = \"id\"\ngenerator = \"orders\"\nshard_key = \"id\"\nsharding = \"mod\"\n"
    )
}

/// idgate with the rules above, a user `limited` with a grant for
/// `orders` only, and the schema with `orders` (rule), `spread` (sharded
/// by id), `plain` (no rule) and a MariaDB sequence `s` on shard 0.
async fn setup(tag: &str) -> Option<(support::Testbed, Proxy, String)> {
    let tb = support::testbed()?;
    let schema = support::unique(tag);
    proxy::create_schema(&tb, &schema).await;
    let text = format!(
        "{}[[users]]\nname = \"{LIMITED}\"\npassword = \"{LIMITED_PASSWORD}\"\ngenerators = [\"orders\"]\n",
        proxy::config_text_etcd(&tb, &format!("/{schema}"))
    );
    let cfg = idgate::config::Config::parse(&text, "test").expect("test config is valid");
    let p = Proxy::start_config_rules(cfg, &rules(&schema)).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    for t in ["orders", "spread", "plain"] {
        c.query_drop(format!(
            "CREATE TABLE {t} (id BIGINT PRIMARY KEY, v INT NOT NULL)"
        ))
        .await
        .unwrap();
    }
    let _ = c.disconnect().await;
    proxy::admin(
        &tb,
        0,
        &[
            &format!("CREATE SEQUENCE `{schema}`.s"),
            &format!("CREATE TABLE `{schema}`.direct (id BIGINT PRIMARY KEY, v INT NOT NULL)"),
        ],
    )
    .await;
    Some((tb, p, schema))
}

async fn app(p: &Proxy, schema: &str) -> Conn {
    Conn::new(p.opts(Some(schema))).await.unwrap()
}

async fn direct(tb: &support::Testbed, schema: &str) -> Conn {
    Conn::new(proxy::direct_opts(tb, 0, Some(schema)))
        .await
        .unwrap()
}

/// A column as a client sees it: name, type, flags that matter, length.
fn shape(row: &Row) -> Vec<(String, ColumnType, bool, bool, u32)> {
    row.columns_ref()
        .iter()
        .map(|c| {
            (
                c.name_str().into_owned(),
                c.column_type(),
                c.flags().contains(ColumnFlags::NOT_NULL_FLAG),
                c.flags().contains(ColumnFlags::UNSIGNED_FLAG),
                c.column_length(),
            )
        })
        .collect()
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::NULL => None,
        Value::Int(i) => Some(*i),
        Value::UInt(u) => Some(*u as i64),
        Value::Bytes(b) => Some(std::str::from_utf8(b).unwrap().parse().unwrap()),
        other => panic!("not an integer: {other:?}"),
    }
}

fn values(row: &Row) -> Vec<Option<i64>> {
    (0..row.len())
        .map(|i| int(&row.as_ref(i).unwrap().clone()))
        .collect()
}

async fn one(c: &mut Conn, sql: &str) -> Row {
    c.query_first::<Row, _>(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or_else(|| panic!("{sql}: no row"))
}

/// The same statements through idgate (`idgate.orders`) and on MariaDB
/// (`schema.s`): the same column names (with the sequence's name
/// replaced), types, flags and lengths, and the same value relations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differential_text() {
    let Some((tb, p, schema)) = setup("seqdiff").await else {
        return;
    };
    let mut ig = app(&p, &schema).await;
    let mut db = direct(&tb, &schema).await;
    let ours = "idgate.orders";
    let theirs = format!("`{schema}`.s");
    for sql in [
        "SELECT LASTVAL(SEQ)",
        "SELECT PREVIOUS VALUE FOR SEQ",
        "SELECT NEXTVAL(SEQ)",
        "SELECT NEXT VALUE FOR SEQ, LASTVAL(SEQ)",
        "SELECT lastval(SEQ), nextval(SEQ), NEXTVAL(SEQ), lastval(SEQ)",
        "SELECT NEXTVAL(SEQ) AS id",
    ] {
        let a = one(&mut ig, &sql.replace("SEQ", ours)).await;
        let b = one(&mut db, &sql.replace("SEQ", &theirs)).await;
        let named = |s: Vec<(String, ColumnType, bool, bool, u32)>, from: &str| {
            s.into_iter()
                .map(|(n, t, nn, u, l)| (n.replace(from, "SEQ"), t, nn, u, l))
                .collect::<Vec<_>>()
        };
        assert_eq!(named(shape(&a), ours), named(shape(&b), &theirs), "{sql}");
        let (va, vb) = (values(&a), values(&b));
        // NULL where MariaDB has NULL; equal where MariaDB's are equal,
        // increasing where MariaDB's increase.
        assert_eq!(
            va.iter().map(Option::is_none).collect::<Vec<_>>(),
            vb.iter().map(Option::is_none).collect::<Vec<_>>(),
            "{sql}: {va:?} {vb:?}"
        );
        for i in 1..va.len() {
            if let (Some(a0), Some(a1), Some(b0), Some(b1)) = (va[i - 1], va[i], vb[i - 1], vb[i]) {
                assert_eq!(a0.cmp(&a1), b0.cmp(&b1), "{sql}: {va:?} {vb:?}");
            }
        }
    }
    // LASTVAL is per session: a new session has none, on both.
    let mut ig2 = app(&p, &schema).await;
    let mut db2 = direct(&tb, &schema).await;
    let a = one(&mut ig2, "SELECT LASTVAL(idgate.orders)").await;
    let b = one(&mut db2, &format!("SELECT LASTVAL({theirs})")).await;
    assert_eq!((values(&a), values(&b)), (vec![None], vec![None]));
    // ... and the first session's is the last value it took.
    let n = values(&one(&mut ig, "SELECT NEXTVAL(idgate.orders)").await)[0];
    let _ = one(&mut ig2, "SELECT NEXTVAL(idgate.orders)").await;
    assert_eq!(
        values(&one(&mut ig, "SELECT LASTVAL(idgate.orders)").await)[0],
        n
    );
    // COM_RESET_CONNECTION: what MariaDB does with LASTVAL, idgate does.
    let _ = one(&mut db, &format!("SELECT NEXTVAL({theirs})")).await;
    ig.reset().await.unwrap();
    db.reset().await.unwrap();
    let a = values(&one(&mut ig, "SELECT LASTVAL(idgate.orders)").await);
    let b = values(&one(&mut db, &format!("SELECT LASTVAL({theirs})")).await);
    assert_eq!(a[0].is_none(), b[0].is_none(), "after a reset: {a:?} {b:?}");
    // Inside INSERT values, each row a fresh value, LASTVAL the last.
    for (c, seq, table) in [
        (&mut ig, ours, "plain"),
        (&mut db, theirs.as_str(), "direct"),
    ] {
        c.query_drop(format!(
            "INSERT INTO {table} (id, v) VALUES (NEXTVAL({seq}), 1), (NEXT VALUE FOR {seq}, 2)"
        ))
        .await
        .unwrap();
        let ids: Vec<(i64, i32)> = c
            .query(format!("SELECT id, v FROM {table} ORDER BY v"))
            .await
            .unwrap();
        assert_eq!(ids.len(), 2);
        assert!(ids[0].0 < ids[1].0, "{table}: {ids:?}");
        let last = values(&one(c, &format!("SELECT LASTVAL({seq})")).await)[0];
        assert_eq!(last, Some(ids[1].0), "{table}");
    }
    let _ = (ig.disconnect().await, ig2.disconnect().await);
    let _ = (db.disconnect().await, db2.disconnect().await);
    proxy::teardown(&tb, p, &schema).await;
}

/// Prepared statements: every execute takes a fresh value; the column
/// definitions match MariaDB's (binary protocol).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differential_prepared() {
    let Some((tb, p, schema)) = setup("seqprep").await else {
        return;
    };
    let mut ig = app(&p, &schema).await;
    let mut db = direct(&tb, &schema).await;
    let theirs = format!("`{schema}`.s");
    let mut shapes = Vec::new();
    for (c, seq) in [(&mut ig, "idgate.orders"), (&mut db, theirs.as_str())] {
        let last = c.prep(format!("SELECT LASTVAL({seq})")).await.unwrap();
        let r: Row = c.exec_first(&last, ()).await.unwrap().unwrap();
        assert_eq!(values(&r), vec![None], "{seq}");
        let next = c
            .prep(format!("SELECT NEXTVAL({seq}), LASTVAL({seq})"))
            .await
            .unwrap();
        let mut seen = Vec::new();
        for _ in 0..3 {
            let r: Row = c.exec_first(&next, ()).await.unwrap().unwrap();
            let v = values(&r);
            assert_eq!(v[0], v[1], "{seq}: {v:?}");
            seen.push(v[0].unwrap());
            shapes.push(
                shape(&r)
                    .into_iter()
                    .map(|(n, t, nn, u, l)| (n.replace(seq, "SEQ"), t, nn, u, l))
                    .collect::<Vec<_>>(),
            );
        }
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seq}: {seen:?}");
        let r: Row = c.exec_first(&last, ()).await.unwrap().unwrap();
        assert_eq!(values(&r), vec![Some(seen[2])], "{seq}");
        // Inside a prepared INSERT, with a bound value beside it.
        let table = if seq.starts_with("idgate") {
            "orders"
        } else {
            "direct"
        };
        let ins = c
            .prep(format!(
                "INSERT INTO {table} (id, v) VALUES (NEXTVAL({seq}), ?)"
            ))
            .await
            .unwrap();
        for v in 10..13 {
            c.exec_drop(&ins, (v,)).await.unwrap();
        }
        let rows: Vec<(i64, i32)> = c
            .query(format!(
                "SELECT id, v FROM {table} WHERE v >= 10 ORDER BY v"
            ))
            .await
            .unwrap();
        assert_eq!(rows.len(), 3, "{table}");
        assert!(rows.windows(2).all(|w| w[0].0 < w[1].0), "{rows:?}");
        assert!(rows[0].0 > seen[2], "{rows:?} after {seen:?}");
        let r: Row = c.exec_first(&last, ()).await.unwrap().unwrap();
        assert_eq!(values(&r), vec![Some(rows[2].0)], "{seq}");
    }
    assert_eq!(shapes[0], shapes[3]);
    let _ = (ig.disconnect().await, db.disconnect().await);
    proxy::teardown(&tb, p, &schema).await;
}

/// In INSERTs through idgate: into the rule table (the value is an
/// explicit id: ids generated afterwards are above it), a table without
/// rule, a table sharded by its id (the row lands on the value's shard),
/// in a multi-statement query, and in `SET @v = NEXTVAL(...)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inserts_routing_and_multi_statements() {
    let Some((tb, p, schema)) = setup("seqins").await else {
        return;
    };
    let mut c = app(&p, &schema).await;
    c.query_drop("INSERT INTO orders (id, v) VALUES (NEXTVAL(idgate.orders), 1)")
        .await
        .unwrap();
    let taken = values(&one(&mut c, "SELECT LASTVAL(idgate.orders)").await)[0].unwrap();
    c.query_drop("INSERT INTO orders (v) VALUES (2)")
        .await
        .unwrap();
    let rows: Vec<(i64, i32)> = c
        .query("SELECT id, v FROM orders ORDER BY v")
        .await
        .unwrap();
    assert_eq!(rows[0], (taken, 1));
    assert!(rows[1].0 > taken, "{rows:?}");
    // Sharded by id: each row on the shard its value says (mod 2).
    c.query_drop(
        "INSERT INTO spread (id, v) VALUES (NEXTVAL(idgate.orders), 1), (NEXTVAL(idgate.orders), 2)",
    )
    .await
    .unwrap();
    let ids: Vec<i64> = c.query("SELECT id FROM spread ORDER BY id").await.unwrap();
    assert_eq!(ids.len(), 2);
    for id in &ids {
        let mut d = Conn::new(proxy::direct_opts(&tb, (*id % 2) as usize, Some(&schema)))
            .await
            .unwrap();
        let n: Option<i64> = d
            .query_first(format!("SELECT COUNT(*) FROM spread WHERE id = {id}"))
            .await
            .unwrap();
        assert_eq!(n, Some(1), "id {id} on shard {}", id % 2);
        let _ = d.disconnect().await;
    }
    // A routed SELECT with LASTVAL in its WHERE.
    let found: Option<i64> = c
        .query_first("SELECT v FROM spread WHERE id = LASTVAL(idgate.orders)")
        .await
        .unwrap();
    assert_eq!(found, Some(2));
    // Several statements in one query: values in text order.
    let mut r = c
        .query_iter("SELECT NEXTVAL(idgate.orders); SELECT LASTVAL(idgate.orders), 7")
        .await
        .unwrap();
    let first: Vec<Row> = r.collect().await.unwrap();
    let second: Vec<Row> = r.collect().await.unwrap();
    drop(r);
    assert_eq!(values(&first[0])[0], values(&second[0])[0]);
    // The shard answers them: the columns keep the calls' names.
    assert_eq!(
        first[0].columns_ref()[0].name_str(),
        "NEXTVAL(idgate.orders)"
    );
    assert_eq!(
        second[0].columns_ref()[0].name_str(),
        "LASTVAL(idgate.orders)"
    );
    // SET takes one value; the variable keeps it.
    c.query_drop("SET @v = NEXT VALUE FOR idgate.orders")
        .await
        .unwrap();
    let v: Option<i64> = c.query_first("SELECT @v").await.unwrap();
    assert_eq!(
        v,
        values(&one(&mut c, "SELECT LASTVAL(idgate.orders)").await)[0]
    );
    // A snowflake generator too.
    let e = values(
        &one(
            &mut c,
            "SELECT NEXTVAL(idgate.events), NEXTVAL(idgate.events)",
        )
        .await,
    );
    assert!(e[0].unwrap() < e[1].unwrap(), "{e:?}");
    let _ = c.disconnect().await;
    proxy::teardown(&tb, p, &schema).await;
}

fn code(e: mysql_async::Error) -> (u16, String) {
    match e {
        mysql_async::Error::Server(s) => (s.code, s.message),
        other => panic!("not a server error: {other}"),
    }
}

/// Grants, the admin privilege for SETVAL, unknown generators, calls
/// idgate cannot evaluate as MariaDB does: each refused with its code and
/// a message naming what is wrong, and nothing taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_setval() {
    let Some((tb, p, schema)) = setup("seqref").await else {
        return;
    };
    let mut lim = Conn::new(p.opts_as(LIMITED, LIMITED_PASSWORD, Some(&schema)))
        .await
        .unwrap();
    assert!(values(&one(&mut lim, "SELECT NEXTVAL(idgate.orders)").await)[0].is_some());
    let (n, m) = code(
        lim.query_drop("SELECT NEXTVAL(idgate.events)")
            .await
            .unwrap_err(),
    );
    assert_eq!(n, 1142, "{m}");
    assert!(
        m.contains("'limited'") && m.contains("`idgate`.`events`"),
        "{m}"
    );
    let (n, m) = code(
        lim.query_drop("SELECT PREVIOUS VALUE FOR idgate.events")
            .await
            .unwrap_err(),
    );
    assert!(n == 1142 && m.starts_with("SELECT command denied"), "{m}");
    // Prepared: refused at prepare.
    let (n, _) = code(lim.prep("SELECT NEXTVAL(idgate.events)").await.unwrap_err());
    assert_eq!(n, 1142);
    let _ = lim.disconnect().await;

    let mut c = app(&p, &schema).await;
    for (sql, want, name) in [
        ("SELECT NEXTVAL(idgate.nope)", 4091, "nope"),
        ("SELECT NEXTVAL(`IDGATE`.`nope`)", 4091, "nope"),
        ("SELECT SETVAL(idgate.orders, 5000)", 1227, "SETVAL"),
        (
            "SELECT NEXTVAL(idgate.orders) FROM orders",
            1235,
            "NEXTVAL(idgate.orders)",
        ),
        (
            "UPDATE orders SET v = NEXTVAL(idgate.orders)",
            1235,
            "UPDATE",
        ),
        (
            "INSERT INTO plain (id, v) SELECT NEXTVAL(idgate.orders), 1",
            1235,
            "INSERT",
        ),
    ] {
        let (n, m) = code(c.query_drop(sql).await.unwrap_err());
        assert_eq!(n, want, "{sql}: {m}");
        assert!(m.contains(name), "{sql}: {m}");
    }
    // Nothing was taken by the refused statements.
    assert_eq!(
        values(&one(&mut c, "SELECT LASTVAL(idgate.orders)").await),
        vec![None]
    );
    // Any case and quoting MariaDB accepts.
    let a = values(&one(&mut c, "SELECT NEXTVAL(IDGATE.ORDERS)").await)[0].unwrap();
    let b = values(&one(&mut c, "SELECT nextval(`idgate`.`orders`)").await)[0].unwrap();
    assert!(b > a);
    let _ = c.disconnect().await;

    // SETVAL is IDGATE SET FLOOR for the admin: the next id is above it.
    let mut dba = Conn::new(p.opts_as(ADMIN, ADMIN_PASSWORD, Some(&schema)))
        .await
        .unwrap();
    let floor = b + 100_000;
    let r = one(&mut dba, &format!("SELECT SETVAL(idgate.orders, {floor})")).await;
    assert_eq!(values(&r), vec![Some(floor)]);
    let next = values(&one(&mut dba, "SELECT NEXTVAL(idgate.orders)").await)[0].unwrap();
    assert!(next > floor, "{next} after SETVAL {floor}");
    // ... with its checks: the headroom below max.
    let (n, m) = code(
        dba.query_drop("SELECT SETVAL(idgate.orders, 9223372036854775806)")
            .await
            .unwrap_err(),
    );
    assert!(n == 1210 && m.contains("floor_headroom"), "{m}");
    let _ = dba.disconnect().await;
    proxy::teardown(&tb, p, &schema).await;
}

/// PyMySQL (the test bed installs it) sees the column as MariaDB
/// describes NEXTVAL: type 8 (LONGLONG), nullable, and LASTVAL per session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pymysql() {
    let Some((tb, p, schema)) = setup("seqpy").await else {
        return;
    };
    let script = format!(
        r#"
import pymysql
c = pymysql.connect(host="127.0.0.1", port={port}, user="app", password="secret", database="{schema}")
cur = c.cursor()
cur.execute("SELECT LASTVAL(idgate.orders)")
assert cur.fetchone() == (None,)
cur.execute("SELECT NEXTVAL(idgate.orders)")
(n,) = cur.fetchone()
d = cur.description[0]
assert d[0] == "NEXTVAL(idgate.orders)" and d[1] == 8 and d[6] is True, d
cur.execute("INSERT INTO plain (id, v) VALUES (NEXT VALUE FOR idgate.orders, 1)")
cur.execute("SELECT id FROM plain")
(i,) = cur.fetchone()
assert i > n, (i, n)
cur.execute("SELECT PREVIOUS VALUE FOR idgate.orders")
assert cur.fetchone() == (i,)
print("ok")
"#,
        port = p.addr.port()
    );
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(script)
            .output()
            .expect("run /usr/bin/python3")
    })
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    proxy::teardown(&tb, p, &schema).await;
}

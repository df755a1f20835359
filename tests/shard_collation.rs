//! Tables sharded by a string key are placed by the key's collation (issue
//! 20): keys MariaDB finds equal land on one shard, so the unique key
//! refuses the same duplicates, and keyed reads and writes find the same
//! rows, as on one unsharded table.
//!
//! Differential: the same random sequence of statements runs through idgate
//! on a table hash-sharded by `code` (over two and over three real shards)
//! and directly on one unsharded MariaDB table with the same collation;
//! every outcome must be equal. Keys come in case, accent, trailing space,
//! expansion (`ß`/`ss`) and width variants, through INSERT, keyed
//! SELECT/UPDATE/DELETE, IN lists, integers written for the string column,
//! text and prepared. Every row is then checked on its shard with the
//! formula the README gives DBAs. An integer column hashed the same way
//! finds `'42'`, `' 42'` and `'42.0'` where 42 is.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Value};
use support::proxy::{self, Proxy};
use support::Testbed;

const COLLATIONS: &[(&str, &str)] = &[
    ("utf8mb4", "utf8mb4_general_ci"),
    ("utf8mb4", "utf8mb4_unicode_ci"),
    ("utf8mb4", "utf8mb4_bin"),
    ("latin1", "latin1_swedish_ci"),
];

/// Words and the variants applications write of them.
fn keys() -> Vec<String> {
    let words = [
        "code05",
        "bob@x.io",
        "eclair",
        "Éclair",
        "strasse",
        "Straße",
        "apple",
        "Äpfel",
        "o",
        "ö",
        "aa",
        "Å",
        "x",
        "mail1@x.io",
        "müller",
        "MUELLER",
        "naïve",
        "ｃｏｄｅ",
        "42",
        "042",
    ];
    let mut out = Vec::new();
    for w in words {
        out.push(w.to_string());
        out.push(w.to_uppercase());
        out.push(format!("{w} "));
        out.push(format!("{}  ", w.to_lowercase()));
        let mut title: Vec<char> = w.chars().collect();
        if let Some(c) = title.first_mut() {
            *c = c.to_uppercase().next().unwrap_or(*c);
        }
        out.push(title.into_iter().collect());
    }
    out.sort();
    out.dedup();
    out
}

/// A deterministic generator, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''"))
}

/// What one statement did, comparable across the two sides.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Rows(Vec<(String, i64)>),
    Affected(u64),
    Error(u16),
}

async fn run(c: &mut Conn, sql: &str, params: Option<Vec<Value>>) -> Outcome {
    let select = sql.starts_with("SELECT");
    let r = match (&params, select) {
        (None, true) => c.query::<(String, i64), _>(sql).await.map(Outcome::Rows),
        (Some(p), true) => c
            .exec::<(String, i64), _, _>(sql, Params::Positional(p.clone()))
            .await
            .map(Outcome::Rows),
        (None, false) => c
            .query_drop(sql)
            .await
            .map(|_| Outcome::Affected(c.affected_rows())),
        (Some(p), false) => c
            .exec_drop(sql, Params::Positional(p.clone()))
            .await
            .map(|_| Outcome::Affected(c.affected_rows())),
    };
    match r {
        Ok(Outcome::Rows(mut rows)) => {
            // Which of several equal keys' spellings a row shows is the
            // row's own; the order of rows with equal v is not fixed.
            rows.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
            Outcome::Rows(rows)
        }
        Ok(o) => o,
        Err(mysql_async::Error::Server(e)) => Outcome::Error(e.code),
        Err(e) => panic!("{sql}: {e}"),
    }
}

fn config(tb: &Testbed, prefix: &str) -> idgate::config::Config {
    // s2 is the test bed's third shard.
    let text = proxy::config_text_etcd(tb, prefix).replacen(
        "[allocator]",
        &format!(
            "[[shards]]\nname = \"s2\"\naddress = \"{}\"\n[allocator]",
            tb.third
        ),
        1,
    );
    idgate::config::Config::parse(&text, "test").expect("test config")
}

fn shard_opts(tb: &Testbed, shard: usize, db: &str) -> mysql_async::OptsBuilder {
    if shard < 2 {
        return proxy::direct_opts(tb, shard, Some(db));
    }
    let (host, port) = tb.third.rsplit_once(':').expect("host:port");
    proxy::direct_opts(tb, 0, Some(db))
        .ip_or_hostname(host)
        .tcp_port(port.parse().expect("port"))
}

async fn on_shards(tb: &Testbed, n: usize, sql: &str) {
    for s in 0..n {
        let mut c = Conn::new(shard_opts(tb, s, "mysql")).await.unwrap();
        c.query_drop(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let _ = c.disconnect().await;
    }
}

/// One collation over `n` shards.
async fn differential(tb: &Testbed, charset: &str, coll: &str, n: usize, seed: u64) {
    let schema = support::unique("coll");
    let reference = format!("{schema}_ref");
    on_shards(tb, n, &format!("CREATE DATABASE `{schema}`")).await;
    let table = format!(
        "(id BIGINT UNSIGNED PRIMARY KEY, code VARCHAR(32) COLLATE {coll} NOT NULL, v BIGINT NOT NULL, UNIQUE KEY (code)) DEFAULT CHARSET {charset} COLLATE {coll}"
    );
    let numbers =
        "(id BIGINT UNSIGNED PRIMARY KEY, k BIGINT NOT NULL, v BIGINT NOT NULL, UNIQUE KEY (k))";
    on_shards(tb, n, &format!("CREATE TABLE `{schema}`.acct {table}")).await;
    on_shards(tb, n, &format!("CREATE TABLE `{schema}`.num {numbers}")).await;
    proxy::admin(
        tb,
        0,
        &[
            &format!("CREATE DATABASE `{reference}`"),
            &format!(
                "CREATE TABLE `{reference}`.acct {}",
                table.replace("PRIMARY KEY,", "PRIMARY KEY AUTO_INCREMENT,")
            ),
        ],
    )
    .await;
    let list: Vec<String> = (0..n).map(|s| format!("\"s{s}\"")).collect();
    let rules = format!(
        "[[generator]]\nname = \"seq\"\nkind = \"sequence\"\nbatch = 100\n\n\
         [[table]]\nname = \"{schema}.acct\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"code\"\nsharding = \"hash\"\nshards = [{l}]\n\n\
         [[table]]\nname = \"{schema}.num\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"k\"\nsharding = \"hash\"\nshards = [{l}]\n",
        l = list.join(", ")
    );
    let p = Proxy::start_config_rules(config(tb, &format!("/{schema}")), &rules).await;
    let mut via = Conn::new(p.opts(Some(&schema))).await.unwrap();
    let mut direct = Conn::new(proxy::direct_opts(tb, 0, Some(&reference)))
        .await
        .unwrap();
    for c in [&mut via, &mut direct] {
        c.query_drop("SET NAMES utf8mb4").await.unwrap();
    }

    let keys = keys();
    let mut rng = Rng(seed);
    let mut v = 0i64;
    for ops in 0..260 {
        let k = &keys[rng.below(keys.len())];
        v += 1;
        let (sql, params): (String, Option<Vec<Value>>) = match rng.below(10) {
            0..=2 => (
                format!("INSERT INTO acct (code, v) VALUES ({}, {v})", lit(k)),
                None,
            ),
            3 => (
                "INSERT INTO acct (code, v) VALUES (?, ?)".into(),
                Some(vec![Value::from(k.as_str()), Value::from(v)]),
            ),
            4 => (
                format!("SELECT code, v FROM acct WHERE code = {}", lit(k)),
                None,
            ),
            5 => (
                "SELECT code, v FROM acct WHERE code = ?".into(),
                Some(vec![Value::from(k.as_str())]),
            ),
            6 => {
                let a = &keys[rng.below(keys.len())];
                let b = &keys[rng.below(keys.len())];
                (
                    format!(
                        "SELECT code, v FROM acct WHERE code IN ({}, {}, {})",
                        lit(k),
                        lit(a),
                        lit(b)
                    ),
                    None,
                )
            }
            7 => (
                format!("UPDATE acct SET v = v + 1000 WHERE code = {}", lit(k)),
                None,
            ),
            8 if rng.below(3) == 0 => (
                "DELETE FROM acct WHERE code = ?".into(),
                Some(vec![Value::from(k.as_str())]),
            ),
            8 => (format!("DELETE FROM acct WHERE code = {}", lit(k)), None),
            _ => match rng.below(3) {
                // An integer for the string column: stored as its text;
                // looked up, it matches every string that reads as it.
                0 => (format!("INSERT INTO acct (code, v) VALUES (42, {v})"), None),
                1 => ("SELECT code, v FROM acct WHERE code = 42".into(), None),
                _ => (
                    "SELECT code, v FROM acct WHERE code = ?".into(),
                    Some(vec![Value::Int(42)]),
                ),
            },
        };
        let want = run(&mut direct, &sql, params.clone()).await;
        let got = run(&mut via, &sql, params.clone()).await;
        assert_eq!(
            got, want,
            "{coll} over {n} shards, statement {ops}: {sql} {params:?}"
        );
    }
    let all = run(&mut direct, "SELECT code, v FROM acct", None).await;
    assert_eq!(run(&mut via, "SELECT code, v FROM acct", None).await, all);
    let Outcome::Rows(all) = all else {
        panic!("rows")
    };
    assert!(all.len() >= 8, "{coll}: only {} rows stored", all.len());

    // Each row is where the DBA's formula says.
    let formula = if coll.ends_with("_bin") {
        "CRC32(RTRIM(code))"
    } else {
        "CRC32(WEIGHT_STRING(RTRIM(code)))"
    };
    let mut total = 0;
    let mut used = 0;
    for s in 0..n {
        let mut c = Conn::new(shard_opts(tb, s, &schema)).await.unwrap();
        let wrong: u64 = c
            .query_first(format!(
                "SELECT COUNT(*) FROM acct WHERE {formula} % {n} <> {s}"
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(wrong, 0, "{coll}: shard s{s} holds rows of other shards");
        let here: u64 = c
            .query_first("SELECT COUNT(*) FROM acct")
            .await
            .unwrap()
            .unwrap();
        total += here;
        used += usize::from(here > 0);
        let _ = c.disconnect().await;
    }
    assert_eq!(total as usize, all.len());
    assert_eq!(used, n, "{coll}: every shard holds some keys");

    // An integer column hashed: strings are read as the integer they hold.
    via.query_drop("INSERT INTO num (k, v) VALUES (42, 1), (7, 2), (1000, 3)")
        .await
        .unwrap();
    for (key, v) in [
        ("'42'", 1),
        ("' 42'", 1),
        ("'42.0'", 1),
        ("'+7'", 2),
        ("'1e3'", 3),
    ] {
        let got: Vec<i64> = via
            .query(format!("SELECT v FROM num WHERE k = {key}"))
            .await
            .unwrap();
        assert_eq!(got, [v], "{coll}: k = {key}");
    }
    let dup = via
        .query_drop("INSERT INTO num (k, v) VALUES ('42.0', 9)")
        .await
        .unwrap_err();
    assert!(
        matches!(dup, mysql_async::Error::Server(ref e) if e.code == 1062),
        "{dup}"
    );
    let not_a_number = via
        .query_drop("INSERT INTO num (k, v) VALUES ('abc', 9)")
        .await
        .unwrap_err();
    assert!(
        not_a_number.to_string().contains("num") && not_a_number.to_string().contains("'abc'"),
        "{not_a_number}"
    );

    let _ = via.disconnect().await;
    let _ = direct.disconnect().await;
    p.stop().await;
    on_shards(tb, n, &format!("DROP DATABASE `{schema}`")).await;
    proxy::admin(tb, 0, &[&format!("DROP DATABASE `{reference}`")]).await;
}

#[tokio::test]
async fn string_keys_are_placed_by_their_collation() {
    let Some(tb) = support::testbed() else { return };
    for (i, (charset, coll)) in COLLATIONS.iter().enumerate() {
        for n in [2, 3] {
            differential(&tb, charset, coll, n, 0x5eed + (i * 10 + n) as u64).await;
        }
    }
}

#[tokio::test]
async fn a_collation_idgate_cannot_fold_is_refused_by_name() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("collno");
    on_shards(&tb, 2, &format!("CREATE DATABASE `{schema}`")).await;
    on_shards(
        &tb,
        2,
        &format!("CREATE TABLE `{schema}`.acct (id BIGINT UNSIGNED PRIMARY KEY, code VARCHAR(32) COLLATE utf8mb4_spanish_ci NOT NULL, v INT)"),
    )
    .await;
    let rules = format!(
        "[[generator]]\nname = \"seq\"\nkind = \"sequence\"\n\n\
         [[table]]\nname = \"{schema}.acct\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"code\"\nsharding = \"hash\"\nshards = [\"s0\", \"s1\"]\n"
    );
    let p = Proxy::start_config_rules(config(&tb, &format!("/{schema}")), &rules).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    for sql in [
        "INSERT INTO acct (code, v) VALUES ('llama', 1)",
        "SELECT v FROM acct WHERE code = 'llama'",
    ] {
        let e = c.query_drop(sql).await.unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("acct") && text.contains("`code`") && text.contains("utf8mb4_spanish_ci"),
            "{sql}: {text}"
        );
    }
    // A scatter that binds no key does not need the collation.
    let n: Vec<i64> = c.query("SELECT COUNT(*) FROM acct").await.unwrap();
    assert_eq!(n, [0]);
    let _ = c.disconnect().await;
    p.stop().await;
    on_shards(&tb, 2, &format!("DROP DATABASE `{schema}`")).await;
}

/// Words where collations disagree with bytes (issue 21's measurements).
const WORDS: &[&str] = &[
    "apple", "Apple", "APPLE ", "éclair", "eclair", "Eclair", "a", "A", "Ä", "Å", "á", "o", "Ö",
    "ö", "ø", "ss", "ß", "SS", "s", "strasse", "Straße", "b", "B ", "", " ", "z", "Z", "þ", "ae",
    "æ", "1", "10", "9", "_", "-", "'", "naïve", "naive", "ﬁ", "fi",
];

/// The same rows through idgate (sharded by id over two shards) and in one
/// unsharded table: every page of the ordered rows, ascending and
/// descending, and MIN/MAX, equal in the text and binary protocols.
async fn scattered_order(tb: &Testbed, charset: &str, coll: &str, seed: u64) {
    let schema = support::unique("collord");
    let reference = format!("{schema}_ref");
    proxy::create_schema(tb, &schema).await;
    let table = format!(
        "(id BIGINT UNSIGNED PRIMARY KEY, note VARCHAR(64) COLLATE {coll} NULL) DEFAULT CHARSET {charset} COLLATE {coll}"
    );
    on_shards(tb, 2, &format!("CREATE TABLE `{schema}`.t {table}")).await;
    proxy::admin(
        tb,
        0,
        &[
            &format!("CREATE DATABASE `{reference}`"),
            &format!("CREATE TABLE `{reference}`.t {table}"),
        ],
    )
    .await;
    let rules = format!(
        "[[generator]]\nname = \"seq\"\nkind = \"sequence\"\n\n\
         [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n"
    );
    let p = Proxy::start_config_rules(config(tb, &format!("/{schema}")), &rules).await;
    let mut via = Conn::new(p.opts(Some(&schema))).await.unwrap();
    let mut direct = Conn::new(proxy::direct_opts(tb, 0, Some(&reference)))
        .await
        .unwrap();
    let mut rng = Rng(seed);
    let mut rows = Vec::new();
    for id in 1..=300u64 {
        let note = match rng.below(WORDS.len() + 2) {
            // A latin1 column stores only latin1 characters (strict mode).
            n if n < WORDS.len() && (charset != "latin1" || WORDS[n].chars().all(|c| c <= 'ÿ')) => {
                lit(WORDS[n])
            }
            _ => "NULL".to_string(),
        };
        rows.push(format!("({id}, {note})"));
    }
    let insert = format!("INSERT INTO t (id, note) VALUES {}", rows.join(", "));
    for c in [&mut via, &mut direct] {
        c.query_drop("SET NAMES utf8mb4").await.unwrap();
        c.query_drop(&insert).await.unwrap();
    }
    // Both shards hold rows.
    for s in 0..2 {
        let mut c = Conn::new(shard_opts(tb, s, &schema)).await.unwrap();
        let n: u64 = c
            .query_first("SELECT COUNT(*) FROM t")
            .await
            .unwrap()
            .unwrap();
        assert!(n > 100, "shard s{s}: {n} rows");
        let _ = c.disconnect().await;
    }
    type Row = (u64, Option<String>);
    let mut queries = vec![
        "SELECT id, note FROM t ORDER BY note, id LIMIT 80".to_string(),
        "SELECT id, note FROM t ORDER BY note DESC, id DESC LIMIT 80".to_string(),
        "SELECT id, note FROM t ORDER BY note, id".to_string(),
        "SELECT id, note FROM t ORDER BY note DESC, id".to_string(),
        "SELECT id, note FROM t ORDER BY 2, 1 DESC LIMIT 50".to_string(),
        "SELECT id, note AS n FROM t ORDER BY n, id LIMIT 30".to_string(),
    ];
    // A COLLATE clause orders by the collation it names.
    let other = match (charset, coll) {
        // (`COLLATE latin1_bin` on an expression sorts '' before ' ' in
        // MariaDB, unlike the column: idgate refuses it.)
        ("latin1", _) => "latin1_swedish_ci",
        (_, "utf8mb4_unicode_ci") => "utf8mb4_general_ci",
        _ => "utf8mb4_unicode_ci",
    };
    queries.push(format!(
        "SELECT id, note COLLATE {other} AS n FROM t ORDER BY n, id LIMIT 90"
    ));
    queries.push(format!(
        "SELECT id, note COLLATE {other} AS n FROM t ORDER BY n DESC, id LIMIT 90"
    ));
    // Pages that cross runs of equal keys.
    for offset in (0..300).step_by(23) {
        queries.push(format!(
            "SELECT id, note FROM t ORDER BY note, id LIMIT 17 OFFSET {offset}"
        ));
    }
    for q in &queries {
        let want: Vec<Row> = direct.query(q.as_str()).await.unwrap();
        let got: Vec<Row> = via.query(q.as_str()).await.unwrap();
        assert_eq!(got, want, "{coll}, text: {q}");
        let got: Vec<Row> = via.exec(q.as_str(), ()).await.unwrap();
        assert_eq!(got, want, "{coll}, binary: {q}");
    }
    // MIN and MAX: a value the collation finds equal to MariaDB's.
    for f in ["MIN", "MAX"] {
        let q = format!("SELECT {f}(note) FROM t");
        for binary in [false, true] {
            let got: Option<String> = if binary {
                via.exec_first(q.as_str(), ()).await.unwrap().flatten()
            } else {
                via.query_first(q.as_str()).await.unwrap().flatten()
            };
            let got = got.expect("a value");
            let same: Option<i64> = direct
                .query_first(format!("SELECT {f}(note) = {} FROM t", lit(&got)))
                .await
                .unwrap();
            assert_eq!(same, Some(1), "{coll}: {f}(note) through idgate is {got:?}");
        }
    }
    let _ = via.disconnect().await;
    let _ = direct.disconnect().await;
    proxy::teardown(tb, p, &schema).await;
    proxy::admin(tb, 0, &[&format!("DROP DATABASE `{reference}`")]).await;
}

#[tokio::test]
async fn scattered_order_by_follows_the_collation() {
    let Some(tb) = support::testbed() else { return };
    for (i, (charset, coll)) in COLLATIONS.iter().enumerate() {
        scattered_order(&tb, charset, coll, 0xc011 + i as u64).await;
    }
}

#[tokio::test]
async fn an_order_idgate_cannot_reproduce_is_refused() {
    let Some(tb) = support::testbed() else { return };
    let schema = support::unique("collexpr");
    proxy::create_schema(&tb, &schema).await;
    on_shards(
        &tb,
        2,
        &format!("CREATE TABLE `{schema}`.t (id BIGINT UNSIGNED PRIMARY KEY, note VARCHAR(20) COLLATE utf8mb4_unicode_ci, sp VARCHAR(20) COLLATE utf8mb4_spanish_ci)"),
    )
    .await;
    let rules = format!(
        "[[generator]]\nname = \"seq\"\nkind = \"sequence\"\n\n\
         [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"id\"\nsharding = \"mod\"\nshards = [\"s0\", \"s1\"]\n"
    );
    let p = Proxy::start_config_rules(config(&tb, &format!("/{schema}")), &rules).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("INSERT INTO t (id, note, sp) VALUES (1, 'a', 'a'), (2, 'b', 'b')")
        .await
        .unwrap();
    for q in [
        // An expression: its collation is not a column's.
        "SELECT id, CONCAT(note, 'x') AS k FROM t ORDER BY k LIMIT 5",
        // A collation idgate does not reproduce.
        "SELECT id, sp FROM t ORDER BY sp LIMIT 5",
        "SELECT MIN(sp) FROM t",
    ] {
        let e = c.query_drop(q).await.unwrap_err().to_string();
        assert!(e.contains("collation"), "{q}: {e}");
    }
    // Numbers and plain columns still merge.
    let ids: Vec<u64> = c
        .query("SELECT id FROM t ORDER BY id DESC LIMIT 5")
        .await
        .unwrap();
    assert_eq!(ids, [2, 1]);
    let _ = c.disconnect().await;
    proxy::teardown(&tb, p, &schema).await;
}

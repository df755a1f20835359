//! `LOAD DATA LOCAL INFILE` into a rule table sharded over the test bed's
//! two MariaDB shards (issue 17), with the `mariadb` client and
//! `mysqlimport --local`, each compared with the same file loaded directly
//! into an AUTO_INCREMENT table on one shard: the rows (in id order), the
//! `Records / Deleted / Skipped / Warnings` line, `SHOW WARNINGS` (codes and
//! messages, without the row numbers, which count each shard's rows), and
//! `LAST_INSERT_ID()`. Then atomicity when a shard fails, refusals, and a
//! client that does not send files.
//!
//! Generated ids are not compared one by one: AUTO_INCREMENT itself leaves
//! gaps after a LOAD (InnoDB reserves ids in intervals), so rows are
//! compared in id order, and explicit ids by value.

mod support;

use idgate::config::Config;
use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use std::path::Path;
use std::process::Output;
use support::proxy::{self, Proxy};
use tokio::process::Command;

const COLUMNS: &str =
    "a VARCHAR(64) CHARACTER SET utf8mb4, b INT, c VARCHAR(64) CHARACTER SET utf8mb4";

/// Rules for the tables `t0..t{n}`, each sharded by id over s0 and s1 with
/// its own generator (so each starts at 1 as a fresh AUTO_INCREMENT does),
/// and `one`, a rule table on the default shard only.
fn rules(schema: &str, n: usize) -> String {
    let mut r = String::new();
    for i in 0..n {
        r.push_str(&format!(
            "[[generator]]\nname = \"g{i}\"\nkind = \"sequence\"\nbatch = 1000\n\n\
             [[table]]\nname = \"{schema}.t{i}\"\ncolumn = \"id\"\ngenerator = \"g{i}\"\nshard_key = \"id\"\nsharding = \"mod\"\n\n"
        ));
    }
    r.push_str(&format!(
        "[[generator]]\nname = \"gone\"\nkind = \"sequence\"\n\n\
         [[table]]\nname = \"{schema}.one\"\ncolumn = \"id\"\ngenerator = \"gone\"\n\n\
         [[generator]]\nname = \"gbc\"\nkind = \"sequence\"\n\n\
         [[table]]\nname = \"{schema}.bc\"\ncolumn = \"id\"\ngenerator = \"gbc\"\nbroadcast = true\n\n\
         [[generator]]\nname = \"gbyb\"\nkind = \"sequence\"\n\n\
         [[table]]\nname = \"{schema}.byb\"\ncolumn = \"id\"\ngenerator = \"gbyb\"\nshard_key = \"b\"\nsharding = \"mod\"\n"
    ));
    r
}

/// Runs the `mariadb` client against `addr` on `db` without TLS, feeding `stdin`.
async fn mariadb(
    addr: &str,
    db: &str,
    user: &str,
    password: &str,
    args: &[&str],
    stdin: &str,
) -> Output {
    let all: Vec<&str> = std::iter::once("--skip-ssl")
        .chain(args.iter().copied())
        .collect();
    support::process::mariadb_cli(addr, user, password, db, &all, stdin).await
}

/// The two sides of a comparison: idgate (schema `schema`, sharded
/// tables) and one shard directly (schema `reference`, AUTO_INCREMENT).
struct Sides {
    tb: support::Testbed,
    p: Proxy,
    schema: String,
    reference: String,
}

impl Sides {
    async fn new(tb: support::Testbed, tables: usize, server_extra: &str) -> Sides {
        let schema = support::unique("ld");
        let reference = support::unique("ldref");
        for shard in 0..2 {
            proxy::admin(
                &tb,
                shard,
                &[&format!("CREATE DATABASE `{schema}` CHARACTER SET utf8mb4")],
            )
            .await;
        }
        proxy::admin(
            &tb,
            0,
            &[&format!(
                "CREATE DATABASE `{reference}` CHARACTER SET utf8mb4"
            )],
        )
        .await;
        let text = format!(
            "{}[allocator]\nstore = \"etcd\"\netcd_endpoints = [\"{}\"]\netcd_prefix = \"/{schema}\"\n",
            proxy::config_text(&tb, "127.0.0.1:0", server_extra),
            tb.etcd
        );
        let cfg = Config::parse(&text, "test").expect("test config is valid");
        let p = Proxy::start_config_rules(cfg, &rules(&schema, tables)).await;
        let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
        let mut r = Conn::new(proxy::direct_opts(&tb, 0, Some(&reference)))
            .await
            .unwrap();
        for i in 0..tables {
            c.query_drop(format!(
                "CREATE TABLE t{i} (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, {COLUMNS})"
            ))
            .await
            .unwrap();
            r.query_drop(format!(
                "CREATE TABLE t{i} (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, {COLUMNS})"
            ))
            .await
            .unwrap();
        }
        for t in ["one", "bc", "byb"] {
            c.query_drop(format!(
                "CREATE TABLE {t} (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, {COLUMNS})"
            ))
            .await
            .unwrap();
            r.query_drop(format!(
                "CREATE TABLE {t} (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, {COLUMNS})"
            ))
            .await
            .unwrap();
        }
        Sides {
            tb,
            p,
            schema,
            reference,
        }
    }

    /// `script` through idgate, and directly on the reference schema.
    async fn both(&self, args: &[&str], script: &str) -> (Output, Output) {
        let via = mariadb(
            &self.p.addr.to_string(),
            &self.schema,
            proxy::USER,
            proxy::PASSWORD,
            args,
            script,
        )
        .await;
        let direct = mariadb(
            &self.tb.shards[0],
            &self.reference,
            &self.tb.user,
            &self.tb.password,
            args,
            script,
        )
        .await;
        (via, direct)
    }

    async fn teardown(self) {
        self.p.stop().await;
        for shard in 0..2 {
            proxy::admin(
                &self.tb,
                shard,
                &[&format!("DROP DATABASE IF EXISTS `{}`", self.schema)],
            )
            .await;
        }
        proxy::admin(
            &self.tb,
            0,
            &[&format!("DROP DATABASE IF EXISTS `{}`", self.reference)],
        )
        .await;
    }

    /// Ids of `table` on shard `shard` (idgate's side).
    async fn ids_on(&self, shard: usize, table: &str) -> Vec<u64> {
        let mut c = Conn::new(proxy::direct_opts(&self.tb, shard, Some(&self.schema)))
            .await
            .unwrap();
        let ids = c
            .query(format!("SELECT id FROM {table} ORDER BY id"))
            .await
            .unwrap();
        let _ = c.disconnect().await;
        ids
    }
}

/// What the client printed, with the schema names made equal and the row
/// numbers of warnings taken out (each shard counts its own rows).
fn normal(o: &Output, s: &Sides) -> (String, String) {
    let clean = |b: &[u8]| {
        let t = String::from_utf8_lossy(b)
            .replace(&s.schema, "<db>")
            .replace(&s.reference, "<db>");
        let re_row = |line: &str| match line.find(" at row ") {
            Some(i) => line[..i].to_string(),
            None => match line.find("Row ") {
                // "Row 7 doesn't contain data for all columns"
                Some(i) => {
                    let rest = &line[i + 4..];
                    let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
                    format!("{}Row N{}", &line[..i], &rest[digits..])
                }
                None => line.to_string(),
            },
        };
        t.lines().map(re_row).collect::<Vec<_>>().join("\n")
    };
    (clean(&o.stdout), clean(&o.stderr))
}

/// Warnings are listed per shard: compared as sorted lines.
fn sorted_warnings(out: &str) -> (String, Vec<String>) {
    let mut rest = Vec::new();
    let mut warnings = Vec::new();
    for l in out.lines() {
        if l.starts_with("Warning\t") || l.starts_with("Note\t") || l.starts_with("Error\t") {
            warnings.push(l.to_string());
        } else {
            rest.push(l);
        }
    }
    warnings.sort();
    (rest.join("\n"), warnings)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p.display().to_string()
}

/// One differential case: `pre` statements, then the load of `file` into
/// `table` (`verb`: "", "REPLACE" or "IGNORE"; `tail` after the table),
/// then what is compared.
struct Case<'a> {
    pre: &'a str,
    file: &'a [u8],
    verb: &'a str,
    tail: &'a str,
}

async fn differential(s: &Sides, dir: &Path, table: &str, case: &Case<'_>) {
    let path = write(dir, &format!("{table}.data"), case.file);
    let script = format!(
        "{pre}\nLOAD DATA LOCAL INFILE '{path}' {verb} INTO TABLE {table} {tail};\n\
         SHOW WARNINGS;\n\
         SELECT a AS first_generated FROM {table} WHERE id = LAST_INSERT_ID() AND id <> 0;\n\
         SELECT COUNT(*) FROM {table};\n",
        pre = case.pre,
        verb = case.verb,
        tail = case.tail
    );
    let (via, direct) = s
        .both(&["--local-infile=1", "--batch", "-vv"], &script)
        .await;
    let (vo, ve) = normal(&via, s);
    let (dout, de) = normal(&direct, s);
    assert!(direct.status.success(), "direct run failed: {de}\n{dout}");
    assert_eq!(ve, de, "{table}: stderr");
    // The rows, in id order.
    let q = format!("SELECT id, a, b, c FROM {table}");
    type R = (u64, Option<String>, Option<i64>, Option<String>);
    let mut c = Conn::new(s.p.opts(Some(&s.schema))).await.unwrap();
    let mut via: Vec<R> = c.query(&q).await.unwrap();
    let mut r = Conn::new(proxy::direct_opts(&s.tb, 0, Some(&s.reference)))
        .await
        .unwrap();
    let mut direct: Vec<R> = r.query(&q).await.unwrap();
    via.sort_by_key(|r| r.0);
    direct.sort_by_key(|r| r.0);
    let strip = |v: Vec<R>| -> Vec<_> { v.into_iter().map(|(_, a, b, c)| (a, b, c)).collect() };
    let (via, direct) = (strip(via), strip(direct));
    if via != direct {
        let keep = std::env::temp_dir().join(format!("load_data_{table}.data"));
        std::fs::write(&keep, case.file).unwrap();
        let first = via.iter().zip(&direct).position(|(a, b)| a != b);
        panic!(
            "{table}: rows in id order differ (file kept at {}), first at {first:?}:\nidgate: {:?}\ndirect: {:?}",
            keep.display(),
            first.and_then(|i| via.get(i)),
            first.and_then(|i| direct.get(i))
        );
    }
    let (vrest, vw) = sorted_warnings(&vo);
    let (drest, dw) = sorted_warnings(&dout);
    assert_eq!(vw, dw, "{table}: SHOW WARNINGS");
    if vrest != drest {
        let diff: Vec<String> = vrest
            .lines()
            .zip(drest.lines())
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("idgate: {a}\ndirect: {b}"))
            .collect();
        panic!(
            "{table}: output differs:\n{}\n--- idgate:\n{vrest}",
            diff.join("\n")
        );
    }
    assert!(vrest.contains("Records: "), "{vrest}");
}

/// Every row of `table` is on the shard its id maps to (mod 2), and both
/// shards have rows.
async fn placed(s: &Sides, table: &str) {
    let mut seen = [0usize; 2];
    for (shard, count) in seen.iter_mut().enumerate() {
        for id in s.ids_on(shard, table).await {
            assert_eq!(id % 2, shard as u64, "{table}: id {id} on shard s{shard}");
            *count += 1;
        }
    }
    assert!(
        seen[0] > 0 && seen[1] > 0,
        "{table}: rows on both shards: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_a_direct_load_into_auto_increment() {
    let Some(tb) = support::testbed() else { return };
    let s = Sides::new(tb, 7, "").await;
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        // Quotes, escapes, CRLF, empty fields, NULLs, multi-byte
        // characters, a line in an enclosed field, a short line, a long
        // line, no terminator at the end.
        Case {
            pre: "",
            file: "\\N,\"plain\",1,x\r\n\
                   0,\"with \"\"quotes\"\", and, commas\",2,\"y\"\r\n\
                   NULL,\"esc \\\"q\\\" \\\\ back \\t tab\",3,z\r\n\
                   \\N,\"\",,\\N\r\n\
                   \\N,\"multi é中😀\",5,\"Ωμέγα\"\r\n\
                   \\N,\"line\r\nbreak inside\",6,w\r\n\
                   \\N,bad line with too few fields\r\n\
                   \\N,\"too many\",8,v,extra,fields\r\n\
                   \\N,\"b is no number\",x8,v\r\n\
                   \\N,\"last without terminator\",9,u"
                .as_bytes(),
            verb: "",
            tail: "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' LINES TERMINATED BY '\\r\\n' (id, a, b, c)",
        },
        // Tab-separated defaults, IGNORE 1 LINES, @var and SET; the file
        // has no id field (idgate adds one).
        Case {
            pre: "",
            file: b"header\tcols\there\nx1\talpha\t10\nx2\tbeta\t\\N\nx3\tga\\tmma\t30\nx4\tdelta\t40\nx5\teps\t50\n",
            verb: "",
            tail: "IGNORE 1 LINES (@skip, a, @b) SET b = @b * 2, c = UPPER(a)",
        },
        // Explicit ids mixed with generated ones; no column list (the
        // table's order: id first); LINES STARTING BY.
        Case {
            pre: "",
            file: b"junk>1005|explicit-a|1|p\n>\\N|gen-b|2|q\nskipped line\n>2000|explicit-c|3|r\n>0|gen-d|4|s\n>\\N|gen-e|5|t\n>1001|explicit-f|6|u\n",
            verb: "",
            tail: "FIELDS TERMINATED BY '|' LINES STARTING BY '>'",
        },
        // REPLACE over existing rows.
        Case {
            pre: "INSERT INTO t3 (id, a, b) VALUES (2, 'old-two', 0), (3, 'old-three', 0), (4, 'old-four', 0);",
            file: b"2,new-two,20\n\\N,gen,30\n3,new-three,40\n\\N,gen2,50\n",
            verb: "REPLACE",
            tail: "FIELDS TERMINATED BY ',' (id, a, b)",
        },
        // IGNORE duplicates.
        Case {
            pre: "INSERT INTO t4 (id, a, b) VALUES (2, 'old-two', 0), (3, 'old-three', 0), (4, 'old-four', 0);",
            file: b"2,new-two,20\n\\N,gen,30\n3,new-three,40\n\\N,gen2,50\n",
            verb: "IGNORE",
            tail: "FIELDS TERMINATED BY ',' (id, a, b)",
        },
        // NO_AUTO_VALUE_ON_ZERO: 0 is an explicit id.
        Case {
            pre: "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO');",
            file: b"0,zero,1\n\\N,gen,2\n\\N,gen2,3\n\\N,gen3,4\n",
            verb: "",
            tail: "FIELDS TERMINATED BY ',' (id, a, b)",
        },
        // The id column last in the list; the escape character is the
        // enclosure; CHARACTER SET given.
        Case {
            pre: "",
            file: b"\"fie\"\"ld1\";1;0\n\"x\\y\";2;0\n\"three\";3;\"7\"\n\"four\";4;0\n",
            verb: "",
            tail: "CHARACTER SET utf8mb4 FIELDS TERMINATED BY ';' ENCLOSED BY '\"' ESCAPED BY '\"' (a, b, id)",
        },
    ];
    for (i, case) in cases.iter().enumerate() {
        differential(&s, dir.path(), &format!("t{i}"), case).await;
    }
    for t in ["t0", "t1", "t2", "t3", "t4", "t6"] {
        placed(&s, t).await;
    }
    // Explicit ids are kept as written.
    let mut c = Conn::new(s.p.opts(Some(&s.schema))).await.unwrap();
    let explicit: Vec<(u64, String)> = c
        .query("SELECT id, a FROM t2 WHERE a LIKE 'explicit%' ORDER BY id")
        .await
        .unwrap();
    assert_eq!(
        explicit,
        vec![
            (1001, "explicit-f".to_string()),
            (1005, "explicit-a".to_string()),
            (2000, "explicit-c".to_string())
        ]
    );
    // Explicit ids raised the generator's floor: a later INSERT's id is above them.
    c.query_drop("INSERT INTO t2 (a) VALUES ('after')")
        .await
        .unwrap();
    let after: Option<u64> = c.query_first("SELECT LAST_INSERT_ID()").await.unwrap();
    assert!(after.unwrap() > 2000, "{after:?}");
    drop(c);
    s.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_file_streams_in_bounded_packets() {
    let Some(tb) = support::testbed() else { return };
    // A small buffer: the shards get many packets each.
    let s = Sides::new(tb, 1, "load_buffer = 4096").await;
    let dir = tempfile::tempdir().unwrap();
    let mut file = String::new();
    for i in 0..20_000 {
        file.push_str(&format!("\\N\trow-{i}\t{i}\t{}\n", "x".repeat(i % 50)));
    }
    let case = Case {
        pre: "",
        file: file.as_bytes(),
        verb: "",
        tail: "",
    };
    differential(&s, dir.path(), "t0", &case).await;
    placed(&s, "t0").await;
    // A broadcast table: every copy gets every row, with the same ids; the
    // client is told about one copy.
    let case = Case {
        pre: "",
        file: b"\\N\tone\t1\n\\N\ttwo\t2\n40\tforty\t40\n\\N\tfour\t4\n",
        verb: "",
        tail: "(id, a, b)",
    };
    differential(&s, dir.path(), "bc", &case).await;
    let (c0, c1) = (s.ids_on(0, "bc").await, s.ids_on(1, "bc").await);
    assert_eq!(c0.len(), 4);
    assert_eq!(c0, c1, "both copies");
    // A table sharded by another integer column: each row goes by its b.
    let case = Case {
        pre: "",
        file: b"\\N\tone\t1\n\\N\ttwo\t2\n40\tforty\t41\n\\N\tfour\t 4\n\\N\tfive\t5.4\n",
        verb: "",
        tail: "(id, a, b)",
    };
    differential(&s, dir.path(), "byb", &case).await;
    for shard in 0..2u64 {
        let mut c = Conn::new(proxy::direct_opts(&s.tb, shard as usize, Some(&s.schema)))
            .await
            .unwrap();
        let bs: Vec<i64> = c.query("SELECT b FROM byb").await.unwrap();
        assert!(
            !bs.is_empty() && bs.iter().all(|b| b.rem_euclid(2) as u64 == shard),
            "s{shard}: {bs:?}"
        );
    }
    // Its shard key must be a field of the file.
    let out = mariadb(
        &s.p.addr.to_string(),
        &s.schema,
        proxy::USER,
        proxy::PASSWORD,
        &["--local-infile=1"],
        &format!(
            "LOAD DATA LOCAL INFILE '{}' INTO TABLE byb (id, a, @b) SET b = @b;\n",
            dir.path().join("byb.data").display()
        ),
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("SET clause assigns shard key column b"),
        "{err}"
    );
    s.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_when_a_shard_fails() {
    let Some(tb) = support::testbed() else { return };
    let s = Sides::new(tb, 3, "load_buffer = 4096").await;
    let dir = tempfile::tempdir().unwrap();
    let run = |table: &str, path: &str| {
        format!(
            "LOAD DATA LOCAL INFILE '{path}' INTO TABLE {table} FIELDS TERMINATED BY ',' (id, a, b);\nSELECT 'session goes on';\n"
        )
    };
    let count = |table: &'static str| {
        let s = &s;
        async move {
            let mut n = 0;
            for shard in 0..2 {
                n += s.ids_on(shard, table).await.len();
            }
            n
        }
    };
    // 1. A row that shard s1's trigger refuses, after many rows sent to both.
    proxy::admin(
        &s.tb,
        1,
        &[&format!(
            "CREATE TRIGGER `{}`.refuse BEFORE INSERT ON `{}`.t0 FOR EACH ROW IF NEW.b = 13 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by trigger'; END IF",
            s.schema, s.schema
        )],
    )
    .await;
    let mut file = String::new();
    for i in 0..3000u64 {
        let b = if i == 2999 { 13 } else { i % 10 };
        file.push_str(&format!("{},r{i},{b}\n", 10 + 2 * i + (i == 2999) as u64));
    }
    // The trigger's row is the last, with an odd id (shard s1).
    let path = write(dir.path(), "t0.data", file.as_bytes());
    let (via, _) = s
        .both(
            &["--local-infile=1", "--batch", "--force"],
            &run("t0", &path),
        )
        .await;
    let err = String::from_utf8_lossy(&via.stderr);
    assert!(err.contains("refused by trigger"), "{err}");
    assert!(String::from_utf8_lossy(&via.stdout).contains("session goes on"));
    assert_eq!(count("t0").await, 0, "nothing loaded on any shard");

    // 2. The table missing on shard s1: its LOAD fails at once.
    proxy::admin(&s.tb, 1, &[&format!("DROP TABLE `{}`.t1", s.schema)]).await;
    let file: String = (1..=200).map(|i| format!("\\N,r{i},{i}\n")).collect();
    let path = write(dir.path(), "t1.data", file.as_bytes());
    let (via, _) = s
        .both(
            &["--local-infile=1", "--batch", "--force"],
            &run("t1", &path),
        )
        .await;
    let err = String::from_utf8_lossy(&via.stderr);
    assert!(err.contains("ERROR 1146"), "{err}");
    assert!(String::from_utf8_lossy(&via.stdout).contains("session goes on"));
    assert_eq!(s.ids_on(0, "t1").await.len(), 0);

    // 3. idgate's own refusal (an id it cannot place) after rows were sent.
    let mut file: String = (1..=3000).map(|i| format!("\\N,r{i},{i}\n")).collect();
    file.push_str("99999999999999999999999,bad,1\n");
    let path = write(dir.path(), "t2.data", file.as_bytes());
    let (via, _) = s
        .both(
            &["--local-infile=1", "--batch", "--force"],
            &run("t2", &path),
        )
        .await;
    let err = String::from_utf8_lossy(&via.stderr);
    assert!(
        err.contains("row 3001 of the file") && err.contains("nothing was loaded"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&via.stdout).contains("session goes on"));
    assert_eq!(count("t2").await, 0);
    // The same session loads a good file afterwards.
    let good = write(dir.path(), "good.data", b"\\N,ok,1\n\\N,ok,2\n");
    let (via, _) = s
        .both(&["--local-infile=1", "--batch"], &run("t2", &good))
        .await;
    assert!(
        via.status.success(),
        "{}",
        String::from_utf8_lossy(&via.stderr)
    );
    assert_eq!(count("t2").await, 2);
    s.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysqlimport_local_and_refusals() {
    let Some(tb) = support::testbed() else { return };
    let s = Sides::new(tb, 1, "").await;
    let dir = tempfile::tempdir().unwrap();
    // mysqlimport names the table after the file.
    let path = write(
        dir.path(),
        "t0.txt",
        b"\\N,one,1\n\\N,two,2\n7,seven,7\n\\N,four,4\n",
    );
    let import = |addr: String, db: String, user: String, pw: String| {
        let path = path.clone();
        async move {
            let (host, port) = addr.rsplit_once(':').unwrap();
            Command::new("mysqlimport")
                .args([
                    "--no-defaults",
                    "--local",
                    "--protocol=TCP",
                    "--skip-ssl",
                    "--fields-terminated-by=,",
                    "--columns=id,a,b",
                ])
                .arg(format!("--host={host}"))
                .arg(format!("--port={port}"))
                .arg(format!("--user={user}"))
                .arg(format!("--password={pw}"))
                .arg(db)
                .arg(path)
                .output()
                .await
                .expect("mysqlimport is installed (mariadb-client)")
        }
    };
    let via = import(
        s.p.addr.to_string(),
        s.schema.clone(),
        proxy::USER.into(),
        proxy::PASSWORD.into(),
    )
    .await;
    let direct = import(
        s.tb.shards[0].clone(),
        s.reference.clone(),
        s.tb.user.clone(),
        s.tb.password.clone(),
    )
    .await;
    let (vo, ve) = normal(&via, &s);
    let (dout, de) = normal(&direct, &s);
    assert!(via.status.success(), "{ve}");
    assert_eq!((vo.as_str(), ve.as_str()), (dout.as_str(), de.as_str()));
    assert!(
        vo.contains("Records: 4  Deleted: 0  Skipped: 0  Warnings: 0"),
        "{vo}"
    );
    placed(&s, "t0").await;

    // A client that does not allow LOCAL INFILE gets MariaDB's error.
    let script = format!("LOAD DATA LOCAL INFILE '{path}' INTO TABLE t0;\n");
    let (via, direct) = s.both(&["--local-infile=0", "--batch"], &script).await;
    let (_, ve) = normal(&via, &s);
    let (_, de) = normal(&direct, &s);
    assert!(de.contains("ERROR"), "{de}");
    assert_eq!(ve, de);

    // A file the client cannot read: the client's own error, as directly.
    let script =
        "LOAD DATA LOCAL INFILE '/nonexistent/ld.txt' INTO TABLE t0;\nSELECT COUNT(*) FROM t0;\n";
    let (via, direct) = s
        .both(&["--local-infile=1", "--batch", "--force"], script)
        .await;
    assert_eq!(normal(&via, &s), normal(&direct, &s));

    // Refused, with the table named: without LOCAL, LOAD XML, SET of the
    // id column, a row without an id field where one must be generated.
    let short = write(dir.path(), "short.txt", b"a,1,\\N\nb\n");
    for (sql, want) in [
        (format!("LOAD DATA INFILE '{path}' INTO TABLE t0"), "use LOAD DATA LOCAL INFILE"),
        (format!("LOAD XML LOCAL INFILE '{path}' INTO TABLE t0"), "LOAD XML is not supported"),
        (
            format!("LOAD DATA LOCAL INFILE '{path}' INTO TABLE t0 FIELDS TERMINATED BY ',' (@i, a, b) SET id = @i"),
            "SET clause assigns column id",
        ),
        (
            format!("LOAD DATA LOCAL INFILE '{short}' INTO TABLE t0 FIELDS TERMINATED BY ',' (a, b, id)"),
            "row 2 of the file has no field for the id column",
        ),
    ] {
        let out = mariadb(
            &s.p.addr.to_string(),
            &s.schema,
            proxy::USER,
            proxy::PASSWORD,
            &["--local-infile=1", "--batch"],
            &format!("{sql};\n"),
        )
        .await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want) && err.contains(&format!("{}.t0", s.schema)), "{sql}: {err}");
    }
    // Several statements in one query (only a client with multi-statements sends it).
    let mut c = Conn::new(s.p.opts(Some(&s.schema))).await.unwrap();
    let e = c
        .query_drop(format!(
            "LOAD DATA LOCAL INFILE '{path}' INTO TABLE t0; SELECT 1"
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("1235") && e.contains("as a query of its own"),
        "{e}"
    );
    let n: Option<u64> = c.query_first("SELECT COUNT(*) FROM t0").await.unwrap();
    assert_eq!(n, Some(4), "the session goes on");
    drop(c);
    let ids = [s.ids_on(0, "t0").await, s.ids_on(1, "t0").await].concat();
    assert_eq!(ids.len(), 4, "the refused loads added nothing");

    // A rule table on one shard, inside a transaction that is rolled back.
    let one = write(dir.path(), "one.txt", b"\\N,x,1\n\\N,y,2\n");
    let script = format!(
        "BEGIN;\nLOAD DATA LOCAL INFILE '{one}' INTO TABLE one FIELDS TERMINATED BY ',' (id, a, b);\n\
         SELECT COUNT(*) FROM one;\nROLLBACK;\nSELECT COUNT(*) FROM one;\n\
         LOAD DATA LOCAL INFILE '{one}' INTO TABLE one FIELDS TERMINATED BY ',' (id, a, b);\nSELECT a FROM one ORDER BY id;\n"
    );
    let (via, direct) = s
        .both(&["--local-infile=1", "--batch", "-vv"], &script)
        .await;
    assert!(
        via.status.success(),
        "{}",
        String::from_utf8_lossy(&via.stderr)
    );
    assert_eq!(normal(&via, &s), normal(&direct, &s));
    // A sharded table inside a transaction (XA across the shards), rolled
    // back, then committed.
    let script = format!(
        "BEGIN;\nLOAD DATA LOCAL INFILE '{one}' INTO TABLE t0 FIELDS TERMINATED BY ',' (id, a, b);\n\
         SELECT COUNT(*) FROM t0;\nROLLBACK;\nSELECT COUNT(*) FROM t0;\n\
         BEGIN;\nLOAD DATA LOCAL INFILE '{one}' INTO TABLE t0 FIELDS TERMINATED BY ',' (id, a, b);\nCOMMIT;\n\
         SELECT COUNT(*) FROM t0;\n"
    );
    let (via, direct) = s
        .both(&["--local-infile=1", "--batch", "-vv"], &script)
        .await;
    assert!(
        via.status.success(),
        "{}",
        String::from_utf8_lossy(&via.stderr)
    );
    let strip = |o: &Output| {
        let (out, err) = normal(o, &s);
        let out: Vec<String> = out
            .lines()
            .map(|l| match l.find(" (") {
                Some(i) if l.ends_with(" sec)") => l[..i].to_string(),
                _ => l.to_string(),
            })
            .collect();
        (out.join("\n"), err)
    };
    assert_eq!(strip(&via), strip(&direct));
    s.teardown().await;
}

/// A small deterministic generator (xorshift): the same files every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Files of random lines over the bytes that matter to the cutter
/// (terminators, enclosures, escapes, `N`/`NULL`, CR, multi-byte
/// characters), in four formats, loaded directly and through idgate: the
/// rows MariaDB reads from the whole file equal the rows the shards read
/// from idgate's re-emitted streams, in order, with the same warnings.
/// The column list has no id (idgate adds the id field in front of each
/// row), so any mistake in where a row starts or ends shows in the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_files_cut_as_mariadb_cuts_them() {
    let Some(tb) = support::testbed() else { return };
    const CASES: usize = 24;
    let s = Sides::new(tb, CASES, "load_buffer = 4096").await;
    let dir = tempfile::tempdir().unwrap();
    let formats = [
        "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' (a, b, c)",
        "(a, b, c)",
        "FIELDS TERMINATED BY ',' ENCLOSED BY '\"' ESCAPED BY '\"' LINES TERMINATED BY '\\r\\n' (a, b, c)",
        "FIELDS TERMINATED BY ';;' ENCLOSED BY '\"' LINES STARTING BY 'xy' TERMINATED BY '\\n' (a, @v, c) SET b = LENGTH(@v)",
    ];
    let alphabet: [&[u8]; 16] = [
        b"a",
        b"b",
        b",",
        b"\t",
        b"\"",
        b"\\",
        b"\n",
        b"\r",
        b"N",
        b"NULL",
        b" ",
        "é".as_bytes(),
        b";",
        b"x",
        b"y",
        b"7",
    ];
    let mut rng = Rng(0x5eed_1d6a_7e17);
    for case in 0..CASES {
        let mut file = Vec::new();
        for _ in 0..30 {
            for _ in 0..rng.below(14) {
                file.extend_from_slice(alphabet[rng.below(alphabet.len())]);
            }
            file.extend_from_slice(if case % 4 == 2 { b"\r\n" } else { b"\n" });
        }
        // Each shard keeps max_error_count (64) warnings: more would be
        // listed through idgate than by one server.
        let c = Case {
            pre: "SET SESSION max_error_count = 65535;",
            file: &file,
            verb: "",
            tail: formats[case % formats.len()],
        };
        differential(&s, dir.path(), &format!("t{case}"), &c).await;
    }
    s.teardown().await;
}

//! Routing analysis: every bound form, escapes under both modes, SET of the
//! key, DELETE/UPDATE forms, every scatter refusal, ORDER BY/LIMIT and the
//! shard text, DDL, malformed input; the fast path compared with sqlparser
//! on a corpus and on generated statements.

use std::sync::Arc;

use proptest::prelude::*;

use super::prep::MAX_OPERATORS;
use super::*;
use crate::shard::merge::{Agg, ColumnRef, MergeSpec, OrderKey};

/// `t`, `sbtest1` sharded by `id`; `u` by `uid`; `db.s` by `k`; others not.
fn key(schema: Option<&str>, table: &str) -> Option<Arc<str>> {
    match (schema, table) {
        (None | Some("db"), "t" | "sbtest1") => Some("id".into()),
        (None | Some("db"), "u") => Some("uid".into()),
        (Some("db"), "s") => Some("k".into()),
        _ => None,
    }
}

const M: Modes = Modes {
    no_backslash_escapes: false,
    ansi_quotes: false,
};
const NBE: Modes = Modes {
    no_backslash_escapes: true,
    ansi_quotes: false,
};
const ANSI: Modes = Modes {
    no_backslash_escapes: false,
    ansi_quotes: true,
};

/// sqlparser's analysis; the fast path's too when it takes the statement,
/// which must be the same.
fn both_in(sql: &str, modes: Modes) -> Analysis {
    let parsed = analyze_with(sql, modes, &key, Engine::ParserOnly)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or_else(|| panic!("{sql}: no analysis"));
    if let Some(f) = analyze_with(sql, modes, &key, Engine::FastOnly).unwrap_or(None) {
        assert_eq!(f, parsed, "fast path differs on {sql}");
    }
    assert_eq!(analyze(sql, modes, &key).as_ref(), Ok(&parsed), "{sql}");
    parsed
}

/// Both paths refuse the statement the same way.
fn both_err(sql: &str) -> RouteError {
    let e = analyze_with(sql, M, &key, Engine::ParserOnly).expect_err(sql);
    assert_eq!(analyze(sql, M, &key).as_ref().err(), Some(&e), "{sql}");
    e
}

fn both(sql: &str) -> Analysis {
    both_in(sql, M)
}

/// As [`both`], and the fast path must take it.
fn fast_in(sql: &str, modes: Modes) -> Analysis {
    let a = both_in(sql, modes);
    assert!(
        analyze_with(sql, modes, &key, Engine::FastOnly)
            .ok()
            .flatten()
            .is_some(),
        "fast path declined {sql}"
    );
    a
}

fn fast(sql: &str) -> Analysis {
    fast_in(sql, M)
}

/// The bound of the first table.
fn bound(a: &Analysis) -> KeyBound {
    a.tables.first().map(|t| t.key.clone()).expect("a table")
}

fn int(v: i128) -> KeyArg {
    KeyArg::Value(KeyValue::Int(v))
}

fn s(v: &[u8]) -> KeyArg {
    KeyArg::Value(KeyValue::Str(v.to_vec()))
}

fn vals(v: Vec<KeyArg>) -> KeyBound {
    KeyBound::Values(v)
}

fn tu(schema: Option<&str>, table: &str, key: KeyBound, in_subquery: bool) -> TableUse {
    TableUse {
        schema: schema.map(str::to_string),
        table: table.to_string(),
        key,
        in_subquery,
    }
}

fn reason(sql: &str) -> String {
    match both(sql).scatter {
        Err(r) => r,
        Ok(spec) => panic!("{sql} scatters as {spec:?}"),
    }
}

fn spec(sql: &str) -> MergeSpec {
    both(sql).scatter.unwrap_or_else(|r| panic!("{sql}: {r}"))
}

fn pos(i: usize, desc: bool) -> OrderKey {
    OrderKey {
        column: ColumnRef::Position(i),
        desc,
    }
}

fn name(n: &str, desc: bool) -> OrderKey {
    OrderKey {
        column: ColumnRef::Name(n.to_string()),
        desc,
    }
}

#[test]
fn point_select() {
    let a = fast("SELECT c FROM sbtest1 WHERE id=5");
    assert_eq!(a.kind, StmtKind::Select);
    assert_eq!(
        a.tables,
        vec![tu(None, "sbtest1", vals(vec![int(5)]), false)]
    );
    assert!(!a.sets_shard_key);
    assert_eq!(a.scatter, Ok(MergeSpec::default()));
    assert_eq!(a.shard_sql, None);
}

#[test]
fn equality_forms() {
    for sql in [
        "SELECT * FROM t WHERE id = 5",
        "SELECT * FROM t WHERE 5 = id",
        "SELECT * FROM t WHERE `id` = 5",
        "SELECT * FROM t WHERE ID = 5",
        "SELECT * FROM t WHERE t.id = 5",
        "SELECT * FROM t WHERE `t`.`id` = 5",
        "SELECT * FROM t AS a WHERE a.id = 5",
        "SELECT * FROM t a WHERE 5 = a.id",
        "SELECT * FROM db.t WHERE db.t.id = 5",
        "select * from t where x > 1 and id = 5 and y like 'a%'",
        "SELECT * FROM t WHERE x BETWEEN 1 AND 9 AND id = 5",
        "SELECT * FROM t WHERE id = 5 AND (x = 1 OR y = 2)",
        "SELECT * FROM t WHERE id = 5 /*M!100100 AND x = 1 */",
        "SELECT * FROM t WHERE id = 5 -- OR 1\n",
        "SELECT * FROM t WHERE id = 5 # OR 1",
        "SELECT * FROM t WHERE id = 5;",
    ] {
        assert_eq!(bound(&fast(sql)), vals(vec![int(5)]), "{sql}");
    }
    for sql in [
        "SELECT * FROM t WHERE (id = 5)",
        "SELECT * FROM t WHERE (x = 1 AND (id = 5))",
        "SELECT * FROM t JOIN u ON t.id = u.uid WHERE t.id = 5",
        "SELECT * FROM t WHERE id = 5 AND EXISTS (SELECT 1 FROM u WHERE u.uid = t.id)",
    ] {
        assert_eq!(bound(&both(sql)), vals(vec![int(5)]), "{sql}");
    }
}

#[test]
fn in_lists_and_params() {
    assert_eq!(
        bound(&fast("SELECT * FROM t WHERE id IN (1, 2, 3)")),
        vals(vec![int(1), int(2), int(3)])
    );
    assert_eq!(
        bound(&fast("SELECT * FROM t WHERE x = ? AND id = ?")),
        vals(vec![KeyArg::Param(1)])
    );
    assert_eq!(
        bound(&fast("SELECT * FROM t WHERE ? = id")),
        vals(vec![KeyArg::Param(0)])
    );
    assert_eq!(
        bound(&fast("SELECT * FROM t WHERE id IN (?, 7, ?, NULL, -3)")),
        vals(vec![
            KeyArg::Param(0),
            int(7),
            KeyArg::Param(1),
            KeyArg::Value(KeyValue::Null),
            int(-3)
        ])
    );
    // Parameters are counted over the whole statement, SET list included.
    let a = fast("UPDATE t SET c = ?, d = ? WHERE id = ?");
    assert_eq!(bound(&a), vals(vec![KeyArg::Param(2)]));
    // The binding with the fewest values wins; the first on a tie.
    assert_eq!(
        bound(&fast("SELECT * FROM t WHERE id IN (1, 2) AND id = 3")),
        vals(vec![int(3)])
    );
    assert_eq!(
        bound(&fast("SELECT * FROM t WHERE id = 3 AND id = 4")),
        vals(vec![int(3)])
    );
}

#[test]
fn literal_values() {
    let b = |sql: &str| bound(&fast(sql));
    assert_eq!(b("SELECT * FROM t WHERE id = -5"), vals(vec![int(-5)]));
    assert_eq!(b("SELECT * FROM t WHERE id = - 5"), vals(vec![int(-5)]));
    assert_eq!(b("SELECT * FROM t WHERE id = +7"), vals(vec![int(7)]));
    assert_eq!(b("SELECT * FROM t WHERE id = 007"), vals(vec![int(7)]));
    assert_eq!(
        b("SELECT * FROM t WHERE id = 170141183460469231731687303715884105727"),
        vals(vec![int(i128::MAX)])
    );
    assert_eq!(
        b("SELECT * FROM t WHERE id = NULL"),
        vals(vec![KeyArg::Value(KeyValue::Null)])
    );
    assert_eq!(b("SELECT * FROM t WHERE id = 'abc'"), vals(vec![s(b"abc")]));
    assert_eq!(
        b("SELECT * FROM t WHERE id = \"abc\""),
        vals(vec![s(b"abc")])
    );
    assert_eq!(
        b("SELECT * FROM t WHERE id = _utf8mb4'x'"),
        vals(vec![s(b"x")])
    );
    assert_eq!(
        b("SELECT * FROM t WHERE id = _binary 'x'"),
        vals(vec![s(b"x")])
    );
    assert_eq!(b("SELECT * FROM t WHERE id = N'x'"), vals(vec![s(b"x")]));
    assert_eq!(
        b("SELECT * FROM t WHERE id = _latin1'e'"),
        vals(vec![s(b"e")])
    );
    assert_eq!(
        b("SELECT * FROM t WHERE id = 'é'"),
        vals(vec![s("é".as_bytes())])
    );
    // Anything else leaves the key unbound.
    for sql in [
        "SELECT * FROM t WHERE id = _latin1'é'",
        "SELECT * FROM t WHERE id = 5 + 1",
        "SELECT * FROM t WHERE id = abs(5)",
        "SELECT * FROM t WHERE id = 0x1F",
        "SELECT * FROM t WHERE id = x'1F'",
        "SELECT * FROM t WHERE id = b'01'",
        "SELECT * FROM t WHERE id = 1.0",
        "SELECT * FROM t WHERE id = 1e3",
        "SELECT * FROM t WHERE id = TRUE",
        "SELECT * FROM t WHERE id = 'a' COLLATE utf8mb4_bin",
        "SELECT * FROM t WHERE id = 'a' 'b'",
        "SELECT * FROM t WHERE id = other",
        "SELECT * FROM t WHERE id = - -5",
        "SELECT * FROM t WHERE id = 5--1",
        "SELECT * FROM t WHERE id = 1701411834604692317316873037158841057280",
        "SELECT * FROM t WHERE id IN (1, x)",
        "SELECT * FROM t WHERE id IN (1, (2))",
        "SELECT * FROM t WHERE id NOT IN (1)",
        "SELECT * FROM t WHERE NOT id = 5",
        "SELECT * FROM t WHERE id != 5",
        "SELECT * FROM t WHERE id <=> 5",
        "SELECT * FROM t WHERE id >= 5",
        "SELECT * FROM t WHERE id BETWEEN 1 AND 5",
        "SELECT * FROM t WHERE BINARY id = 'a'",
        "SELECT * FROM t WHERE (id) = 5",
    ] {
        assert_eq!(bound(&both(sql)), KeyBound::Unbound, "{sql}");
    }
}

#[test]
fn unbound_forms() {
    for sql in [
        "SELECT * FROM t",
        "SELECT * FROM t WHERE id = 5 OR x = 1",
        "SELECT * FROM t WHERE x = 1 OR id = 5",
        "SELECT * FROM t WHERE (id = 5 OR id = 6)",
        "SELECT * FROM t WHERE id = 5 AND x = 1 OR y = 2",
        "SELECT * FROM t WHERE id = 5 XOR x = 1",
        "SELECT * FROM t WHERE id = 5 || x = 1",
        "SELECT * FROM t WHERE id = 5 && x = 1",
        "SELECT * FROM t WHERE id = 5 AND x || y",
        "SELECT * FROM t WHERE id = 5 /*!40101 OR 1=1 */",
        "SELECT * FROM t a WHERE t.id = 5",
        "SELECT * FROM t WHERE T.id = 5",
        "SELECT * FROM t WHERE u.id = 5",
        "SELECT * FROM t WHERE db.t.id = 5",
        "SELECT * FROM t WHERE id IN (SELECT uid FROM u)",
        "SELECT * FROM t WHERE id = (SELECT 5)",
        "SELECT * FROM t WHERE x IN (SELECT uid FROM u WHERE id = 5)",
    ] {
        assert_eq!(bound(&both(sql)), KeyBound::Unbound, "{sql}");
    }
}

#[test]
fn escapes_under_both_modes() {
    let b = |sql: &str, m: Modes| bound(&fast_in(sql, m));
    assert_eq!(
        b(r"SELECT * FROM t WHERE id = 'a\'b'", M),
        vals(vec![s(b"a'b")])
    );
    assert_eq!(
        b("SELECT * FROM t WHERE id = 'a''b'", M),
        vals(vec![s(b"a'b")])
    );
    assert_eq!(
        b(r#"SELECT * FROM t WHERE id = "a\"b""a""#, M),
        vals(vec![s(b"a\"b\"a")])
    );
    assert_eq!(
        b(r"SELECT * FROM t WHERE id = '\0\b\n\r\t\Z\\\%\_\x\''", M),
        vals(vec![s(b"\0\x08\n\r\t\x1a\\\\%\\_x'")])
    );
    // NO_BACKSLASH_ESCAPES: `\` is an ordinary character; `''` still quotes.
    assert_eq!(
        b(r"SELECT * FROM t WHERE id = 'C:\dir\'", NBE),
        vals(vec![s(br"C:\dir\")])
    );
    assert_eq!(
        b(r"SELECT * FROM t WHERE id = 'a\''b' AND x = 'q\'", NBE),
        vals(vec![s(br"a\'b")])
    );
    assert_eq!(
        b(r#"SELECT * FROM t WHERE id = "\n""#, NBE),
        vals(vec![s(br"\n")])
    );
    // ANSI_QUOTES: "..." is an identifier.
    assert_eq!(
        b(r#"SELECT * FROM "t" WHERE "t"."id" = 'x'"#, ANSI),
        vals(vec![s(b"x")])
    );
    assert_eq!(
        bound(&fast_in(r#"SELECT * FROM t WHERE id = "x""#, ANSI)),
        KeyBound::Unbound
    );
    // The same text in the default mode: a string, and `\'` escapes.
    assert_eq!(
        b(r"SELECT * FROM t WHERE id = 'a\''", M),
        vals(vec![s(b"a'")])
    );
}

#[test]
fn subqueries_derived_tables_ctes_joins() {
    let a = both("SELECT * FROM u WHERE uid IN (SELECT uid FROM t WHERE id = 3) AND uid = 4");
    assert_eq!(
        a.tables,
        vec![
            tu(None, "u", vals(vec![int(4)]), false),
            tu(None, "t", vals(vec![int(3)]), true)
        ]
    );
    let a = both("SELECT (SELECT MAX(uid) FROM u) AS m, c FROM t WHERE id = 1");
    assert_eq!(
        a.tables,
        vec![
            tu(None, "u", KeyBound::Unbound, true),
            tu(None, "t", vals(vec![int(1)]), false)
        ]
    );
    let a = both("SELECT * FROM (SELECT * FROM t WHERE id = 2) AS d WHERE d.id = 3");
    assert_eq!(a.tables, vec![tu(None, "t", vals(vec![int(2)]), true)]);
    let a = both(
        "WITH x AS (SELECT * FROM t WHERE id = 1) SELECT * FROM x JOIN u ON x.id = u.uid WHERE u.uid = 9",
    );
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", vals(vec![int(1)]), true),
            tu(None, "u", vals(vec![int(9)]), false)
        ]
    );
    // A name the CTE does not cover is a table.
    let a = both("SELECT * FROM db.x WHERE k IN (WITH x AS (SELECT 1 AS k) SELECT k FROM x)");
    assert_eq!(
        a.tables,
        vec![tu(Some("db"), "x", KeyBound::Unbound, false)]
    );
    let a = both("SELECT * FROM t JOIN u ON t.id = u.uid LEFT JOIN db.s ON s.k = t.x WHERE t.id = 5 AND s.k IN (1, 2)");
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", vals(vec![int(5)]), false),
            tu(None, "u", KeyBound::Unbound, false),
            tu(Some("db"), "s", vals(vec![int(1), int(2)]), false)
        ]
    );
    // Unqualified: the key of whichever table has it.
    let a = both("SELECT * FROM t, u WHERE uid = 2 AND id = 1");
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", vals(vec![int(1)]), false),
            tu(None, "u", vals(vec![int(2)]), false)
        ]
    );
    let a = both("SELECT * FROM t AS a JOIN t AS b ON a.x = b.x WHERE a.id = 1");
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", vals(vec![int(1)]), false),
            tu(None, "t", KeyBound::Unbound, false)
        ]
    );
    let a = both("SELECT a FROM t WHERE id = 1 UNION ALL SELECT b FROM u WHERE uid = 2");
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", vals(vec![int(1)]), false),
            tu(None, "u", vals(vec![int(2)]), false)
        ]
    );
}

#[test]
fn update_set_key() {
    let a = fast("UPDATE sbtest1 SET k=k+1 WHERE id=5");
    assert_eq!(a.kind, StmtKind::Update);
    assert!(!a.sets_shard_key);
    assert_eq!(bound(&a), vals(vec![int(5)]));
    assert_eq!(a.scatter, Ok(MergeSpec::default()));
    for sql in [
        "UPDATE t SET id = 5 WHERE id = 4",
        "UPDATE t SET c = 1, ID = 5",
        "UPDATE t SET t.id = 5",
        "UPDATE t SET `id` = 5",
        "UPDATE t AS a SET a.id = 1 WHERE a.id = 2",
        "UPDATE LOW_PRIORITY IGNORE t SET id = 1",
        "UPDATE t SET other.id = 1",
    ] {
        assert!(fast(sql).sets_shard_key, "{sql}");
    }
    for sql in [
        "UPDATE t JOIN u ON t.x = u.x SET u.uid = 1 WHERE t.id = 5",
        "UPDATE t, u SET uid = 2 WHERE t.id = 1",
        "UPDATE t a, u b SET b.uid = 2",
        "UPDATE t SET (id) = (5)",
    ] {
        if let Ok(Some(a)) = analyze_with(sql, M, &key, Engine::ParserOnly) {
            assert!(a.sets_shard_key, "{sql}");
        } else {
            assert!(sql.contains("(id)"), "{sql}");
        }
    }
    for sql in [
        "UPDATE t SET c = 1 WHERE id = 5",
        "UPDATE t SET c = id WHERE id = 5",
        "UPDATE t AS a SET a.c = 1",
        "UPDATE t, u SET t.c = 1 WHERE t.id = u.uid",
        "UPDATE t JOIN u ON t.x = u.x SET t.uid = 1",
    ] {
        assert!(!both(sql).sets_shard_key, "{sql}");
    }
    let a = both("UPDATE t, db.s AS x SET t.c = 1 WHERE t.id = x.k AND t.id = 5 AND x.k = 6");
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", vals(vec![int(5)]), false),
            tu(Some("db"), "s", vals(vec![int(6)]), false)
        ]
    );
    let a = both("UPDATE t SET c = (SELECT MAX(uid) FROM u) WHERE id = 1");
    assert_eq!(a.tables[1], tu(None, "u", KeyBound::Unbound, true));
    assert_eq!(
        both("UPDATE t SET c = 1 WHERE x = 2 ORDER BY y LIMIT 1").scatter,
        Err("UPDATE with LIMIT (each shard would apply the limit)".to_string())
    );
}

#[test]
fn delete_forms() {
    let a = fast("DELETE FROM sbtest1 WHERE id = 7");
    assert_eq!(a.kind, StmtKind::Delete);
    assert_eq!(
        a.tables,
        vec![tu(None, "sbtest1", vals(vec![int(7)]), false)]
    );
    assert_eq!(
        bound(&fast(
            "DELETE LOW_PRIORITY QUICK IGNORE FROM db.t WHERE id IN (1, 2)"
        )),
        vals(vec![int(1), int(2)])
    );
    assert_eq!(bound(&fast("DELETE FROM t")), KeyBound::Unbound);
    let a = both("DELETE t FROM t JOIN u ON t.id = u.uid WHERE u.uid = 3");
    assert_eq!(a.kind, StmtKind::Delete);
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", KeyBound::Unbound, false),
            tu(None, "u", vals(vec![int(3)]), false)
        ]
    );
    let a = both("DELETE FROM t, u USING t JOIN u ON t.x = u.x WHERE t.id = 1");
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", vals(vec![int(1)]), false),
            tu(None, "u", KeyBound::Unbound, false)
        ]
    );
    let a = both("DELETE t, u FROM t, u WHERE t.id = u.uid AND u.uid = 4");
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", KeyBound::Unbound, false),
            tu(None, "u", vals(vec![int(4)]), false)
        ]
    );
    let a = both("DELETE FROM t WHERE id IN (SELECT uid FROM u WHERE uid = 1)");
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", KeyBound::Unbound, false),
            tu(None, "u", vals(vec![int(1)]), true)
        ]
    );
    assert_eq!(
        both("DELETE FROM t WHERE x = 1 LIMIT 10").scatter,
        Err("DELETE with LIMIT (each shard would apply the limit)".to_string())
    );
    assert_eq!(
        both("DELETE FROM t WHERE id = 1 RETURNING id").scatter,
        Ok(MergeSpec::default())
    );
}

#[test]
fn scatter_refusals() {
    for (sql, why) in [
        ("SELECT a, COUNT(*) FROM t GROUP BY a", "GROUP BY"),
        ("SELECT COUNT(*) FROM t GROUP BY a WITH ROLLUP", "GROUP BY"),
        ("SELECT DISTINCT a FROM t", "DISTINCT"),
        ("SELECT DISTINCTROW a FROM t", "DISTINCT"),
        ("SELECT a FROM t HAVING a > 1", "HAVING"),
        (
            "SELECT AVG(a) FROM t",
            "AVG() (only COUNT, SUM, MIN and MAX combine across shards)",
        ),
        (
            "SELECT GROUP_CONCAT(a) FROM t",
            "GROUP_CONCAT() (only COUNT, SUM, MIN and MAX combine across shards)",
        ),
        (
            "SELECT STD(a) FROM t",
            "STD() (only COUNT, SUM, MIN and MAX combine across shards)",
        ),
        (
            "SELECT COUNT(DISTINCT a) FROM t",
            "COUNT(DISTINCT ...) (values on different shards may repeat)",
        ),
        (
            "SELECT SUM(DISTINCT a) FROM t",
            "SUM(DISTINCT ...) (values on different shards may repeat)",
        ),
        (
            "SELECT ROW_NUMBER() OVER (ORDER BY a) FROM t",
            "window functions",
        ),
        ("SELECT SUM(a) OVER () FROM t", "window functions"),
        (
            "SELECT a FROM t WINDOW w AS (ORDER BY a)",
            "window functions",
        ),
        (
            "SELECT a FROM t ORDER BY RANK() OVER (ORDER BY a)",
            "window functions",
        ),
        ("SELECT a FROM t UNION SELECT a FROM u", "UNION"),
        ("SELECT a FROM t UNION ALL SELECT a FROM u", "UNION ALL"),
        (
            "SELECT COUNT(*) + 1 FROM t",
            "COUNT() inside an expression (COUNT(*) + 1)",
        ),
        (
            "SELECT a, COUNT(*) FROM t",
            "column a next to an aggregate without GROUP BY",
        ),
        (
            "SELECT t.a, MAX(b) FROM t",
            "column t.a next to an aggregate without GROUP BY",
        ),
        (
            "SELECT *, COUNT(*) FROM t",
            "* next to an aggregate without GROUP BY",
        ),
        (
            "SELECT a + 1, MIN(b) FROM t",
            "a + 1 next to an aggregate without GROUP BY (only constants can be)",
        ),
        ("SELECT a FROM t ORDER BY COUNT(*)", "COUNT() in ORDER BY"),
        (
            "SELECT a FROM t ORDER BY c",
            "ORDER BY c, which is not a column, alias or position of the select list",
        ),
        (
            "SELECT a FROM t ORDER BY u.b",
            "ORDER BY u.b, which is not a column, alias or position of the select list",
        ),
        (
            "SELECT a FROM t ORDER BY a + 1",
            "ORDER BY a + 1, which is not a column, alias or position of the select list",
        ),
        (
            "SELECT a FROM t ORDER BY 2",
            "ORDER BY position 2, beyond the select list",
        ),
        (
            "SELECT a FROM t ORDER BY 0",
            "ORDER BY position 0, beyond the select list",
        ),
        ("SELECT a FROM t ORDER BY ?", "ORDER BY a parameter"),
        (
            "SELECT a FROM t ORDER BY 'a'",
            "ORDER BY 'a', which is not a column, alias or position of the select list",
        ),
        (
            "SELECT a FROM t LIMIT 1 + 1",
            "LIMIT 1 + 1 (only integer literals)",
        ),
        (
            "SELECT a FROM t LIMIT 18446744073709551615 OFFSET 1",
            "LIMIT offset + count beyond 2^64",
        ),
        (
            "SELECT a FROM t LIMIT 18446744073709551616",
            "LIMIT 18446744073709551616 (out of range)",
        ),
        ("SELECT a FROM t FETCH FIRST 5 ROWS ONLY", "FETCH FIRST"),
        ("SELECT a INTO @x FROM t", "SELECT ... INTO"),
        ("SELECT SQL_CALC_FOUND_ROWS a FROM t", "SQL_CALC_FOUND_ROWS"),
        (
            "(SELECT a FROM t) ORDER BY a",
            "ORDER BY or LIMIT outside a parenthesized SELECT",
        ),
    ] {
        assert_eq!(reason(sql), why, "{sql}");
    }
}

#[test]
fn merge_specs() {
    assert_eq!(
        spec("SELECT a, b FROM t ORDER BY b DESC, 1"),
        MergeSpec {
            order_by: vec![pos(1, true), pos(0, false)],
            ..MergeSpec::default()
        }
    );
    // Alias first, then column; qualified or not; expressions by text.
    let order = |sql: &str| spec(sql).order_by;
    assert_eq!(
        order("SELECT a AS x, b FROM t ORDER BY x"),
        vec![pos(0, false)]
    );
    assert_eq!(
        order("SELECT a AS b, b AS a FROM t ORDER BY a"),
        vec![pos(1, false)]
    );
    assert_eq!(
        order("SELECT t.a FROM t ORDER BY a ASC"),
        vec![pos(0, false)]
    );
    assert_eq!(order("SELECT a FROM t ORDER BY t.a"), vec![pos(0, false)]);
    assert_eq!(
        order("SELECT x AS y FROM t ORDER BY x"),
        vec![pos(0, false)]
    );
    assert_eq!(
        order("SELECT a + 1 AS s, b FROM t ORDER BY a+1"),
        vec![pos(0, false)]
    );
    assert_eq!(
        order("SELECT b, LOWER(a) FROM t ORDER BY LOWER(a) DESC"),
        vec![pos(1, true)]
    );
    // After a `*` positions are unknown: names.
    assert_eq!(
        order("SELECT * FROM t ORDER BY a DESC"),
        vec![name("a", true)]
    );
    assert_eq!(
        order("SELECT t.* FROM t ORDER BY t.a"),
        vec![name("a", false)]
    );
    assert_eq!(
        order("SELECT *, b AS x FROM t ORDER BY x, 2"),
        vec![name("x", false), pos(1, false)]
    );
    assert_eq!(order("SELECT a, * FROM t ORDER BY a"), vec![pos(0, false)]);
    assert_eq!(
        spec("SELECT COUNT(*), SUM(x) AS s, MIN(y), MAX(z), 1, 'k', ? FROM t WHERE y > 0"),
        MergeSpec {
            aggregates: Some(vec![
                Agg::Count,
                Agg::Sum,
                Agg::Min,
                Agg::Max,
                Agg::First,
                Agg::First,
                Agg::First
            ]),
            // The columns MIN and MAX read, for their collation.
            agg_columns: vec![
                None,
                None,
                Some("y".into()),
                Some("z".into()),
                None,
                None,
                None
            ],
            ..MergeSpec::default()
        }
    );
    assert_eq!(
        spec("SELECT MAX(DISTINCT a) FROM t").aggregates,
        Some(vec![Agg::Max])
    );
    // One row per shard: ORDER BY does not matter, LIMIT still applies.
    assert_eq!(
        fast("SELECT COUNT(*) FROM t ORDER BY 1 LIMIT 1").scatter,
        Ok(MergeSpec {
            aggregates: Some(vec![Agg::Count]),
            limit: Some(1),
            ..MergeSpec::default()
        })
    );
    assert_eq!(spec("SELECT 1"), MergeSpec::default());
    assert_eq!(
        spec("SELECT a FROM t WHERE id = 1 FOR UPDATE"),
        MergeSpec::default()
    );
    assert_eq!(
        spec("SELECT a FROM t WHERE id = 1 LOCK IN SHARE MODE"),
        MergeSpec::default()
    );
    assert_eq!(spec("(SELECT a FROM t WHERE id = 1)"), MergeSpec::default());
    assert!(spec("SELECT a FROM t").is_concat());
}

#[test]
fn limits_and_shard_sql() {
    let a = fast("SELECT c FROM t ORDER BY c LIMIT 10");
    assert_eq!(
        a.scatter,
        Ok(MergeSpec {
            order_by: vec![pos(0, false)],
            limit: Some(10),
            ..MergeSpec::default()
        })
    );
    assert_eq!(a.shard_sql, None);
    let a = fast("SELECT c FROM t ORDER BY c LIMIT 5, 10");
    assert_eq!(
        a.scatter.as_ref().map(|s| (s.limit, s.offset)),
        Ok((Some(10), 5))
    );
    assert_eq!(
        a.shard_sql.as_deref(),
        Some("SELECT c FROM t ORDER BY c LIMIT 15")
    );
    let a = fast("SELECT c FROM t ORDER BY c LIMIT 10 OFFSET 5 FOR UPDATE");
    assert_eq!(
        a.scatter.as_ref().map(|s| (s.limit, s.offset)),
        Ok((Some(10), 5))
    );
    assert_eq!(
        a.shard_sql.as_deref(),
        Some("SELECT c FROM t ORDER BY c LIMIT 15 FOR UPDATE")
    );
    let sql = "SELECT /* c */ c\n  FROM `t` -- x\n ORDER BY 1 DESC LIMIT 20 ,  10 -- tail\n";
    assert_eq!(
        fast(sql).shard_sql.as_deref(),
        Some("SELECT /* c */ c\n  FROM `t` -- x\n ORDER BY 1 DESC LIMIT 30 -- tail\n")
    );
    let sql = "SELECT c FROM t WHERE name = 'LIMIT 1, 2' LIMIT 1, 2;";
    assert_eq!(
        fast(sql).shard_sql.as_deref(),
        Some("SELECT c FROM t WHERE name = 'LIMIT 1, 2' LIMIT 3;")
    );
    // Through sqlparser, also after an executable comment and on another line.
    let sql = "SELECT /*!40001 SQL_NO_CACHE */ c FROM t\nJOIN u ON u.uid = t.x\nLIMIT 4 OFFSET 2";
    assert_eq!(
        both(sql).shard_sql.as_deref(),
        Some("SELECT /*!40001 SQL_NO_CACHE */ c FROM t\nJOIN u ON u.uid = t.x\nLIMIT 6")
    );
    assert_eq!(fast("SELECT c FROM t LIMIT 0, 10").shard_sql, None);
    assert_eq!(fast("SELECT c FROM t LIMIT 10 OFFSET 0").shard_sql, None);
    let a = fast("SELECT COUNT(*) FROM t LIMIT 1, 1");
    assert_eq!(
        a.shard_sql.as_deref(),
        Some("SELECT COUNT(*) FROM t LIMIT 2")
    );
}

#[test]
fn limits_with_parameters() {
    use super::{Limit, LimitArg};
    let lim = |count, offset, start, end| Limit {
        count,
        offset,
        start,
        end,
    };
    // Both paths: the numbers as written, their range, and a spec whose
    // limit is left for the execute.
    let sql = "SELECT c FROM t WHERE x > ? ORDER BY c LIMIT ?, ?";
    let a = fast(sql);
    let at = sql.find("LIMIT ").expect("LIMIT") + 6;
    let l = lim(LimitArg::Param(2), Some(LimitArg::Param(1)), at, at + 4);
    assert_eq!(a.limit, Some(l));
    assert_eq!(&sql[l.start..l.end], "?, ?");
    assert_eq!(a.shard_sql, None);
    assert_eq!(
        a.scatter.as_ref().map(|s| (s.limit, s.offset)),
        Ok((None, 0))
    );
    assert!(l.rebound());
    assert_eq!(l.resolve(&|i| Some(i as u64 * 10)), Some((20, 10)));
    assert_eq!(l.resolve(&|i| (i != 1).then_some(3)), None);
    let sql = "SELECT c FROM t ORDER BY c LIMIT ? OFFSET 4 FOR UPDATE";
    let l = fast(sql).limit.expect("a limit");
    let at = sql.find("LIMIT ").expect("LIMIT") + 6;
    assert_eq!(
        l,
        lim(LimitArg::Param(0), Some(LimitArg::Value(4)), at, at + 10)
    );
    assert_eq!(l.resolve(&|_| Some(7)), Some((7, 4)));
    let sql = "SELECT /*!40001 SQL_NO_CACHE */ c FROM t\nJOIN u ON u.uid = t.x\nLIMIT 5 OFFSET ?";
    let a = both(sql);
    let l = a.limit.expect("a limit");
    assert_eq!(&sql[l.start..l.end], "5 OFFSET ?");
    assert_eq!(l.count, LimitArg::Value(5));
    assert_eq!(l.offset, Some(LimitArg::Param(0)));
    // Literals only: the spec has them; only an offset needs rebinding.
    let l = fast("SELECT c FROM t LIMIT 3").limit.expect("a limit");
    assert_eq!(l.literal(), Some((3, 0)));
    assert!(!l.rebound());
    assert!(fast("SELECT c FROM t LIMIT 3 OFFSET 1")
        .limit
        .is_some_and(|l| l.rebound()));
    assert!(!fast("SELECT c FROM t LIMIT 3 OFFSET 0")
        .limit
        .is_some_and(|l| l.rebound()));
}

#[test]
fn ddl() {
    let ddl = |sql: &str| {
        let a = both(sql);
        assert_eq!(a.kind, StmtKind::Ddl, "{sql}");
        assert!(!a.sets_shard_key);
        assert_eq!(a.scatter, Ok(MergeSpec::default()));
        a.tables
            .iter()
            .map(|t| {
                assert!(t.in_subquery || t.key == KeyBound::Unbound, "{sql}");
                format!(
                    "{}{}{}",
                    t.schema
                        .as_deref()
                        .map(|s| format!("{s}."))
                        .unwrap_or_default(),
                    t.table,
                    if t.in_subquery { "(sub)" } else { "" }
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(ddl("CREATE TABLE t (id BIGINT PRIMARY KEY, c TEXT)"), ["t"]);
    assert_eq!(ddl("CREATE TABLE IF NOT EXISTS db.`t` (id INT)"), ["db.t"]);
    assert_eq!(ddl("CREATE TABLE t2 LIKE t"), ["t2", "t"]);
    assert_eq!(ddl("CREATE TABLE t2 (LIKE t)"), ["t2", "t"]);
    assert_eq!(
        ddl("CREATE TABLE x AS SELECT * FROM t WHERE id = 1"),
        ["x", "t(sub)"]
    );
    assert_eq!(ddl("ALTER TABLE t ADD COLUMN x INT"), ["t"]);
    assert_eq!(
        ddl("ALTER TABLE t ADD COLUMN x INT, RENAME TO db.t3"),
        ["t", "db.t3"]
    );
    assert_eq!(ddl("DROP TABLE a, b"), ["a", "b"]);
    assert_eq!(ddl("DROP TABLE IF EXISTS db.t"), ["db.t"]);
    assert_eq!(ddl("DROP TEMPORARY TABLE t"), ["t"]);
    assert_eq!(ddl("TRUNCATE t"), ["t"]);
    assert_eq!(ddl("TRUNCATE TABLE db.t"), ["db.t"]);
    assert_eq!(ddl("CREATE INDEX i ON t (c)"), ["t"]);
    assert_eq!(ddl("CREATE UNIQUE INDEX i ON db.t (c, d)"), ["db.t"]);
    assert_eq!(ddl("DROP INDEX i ON t"), ["t"]);
    assert_eq!(
        ddl("RENAME TABLE a TO b, c TO db.d"),
        ["a", "b", "c", "db.d"]
    );
    // MariaDB DDL sqlparser cannot parse: target names from tokens.
    assert_eq!(ddl("/*!40000 ALTER TABLE `t` DISABLE KEYS */"), ["t"]);
    assert_eq!(
        ddl("ALTER ONLINE IGNORE TABLE IF EXISTS db.t ADD COLUMN x INT, ALGORITHM=INPLACE, LOCK=NONE"),
        ["db.t"]
    );
    assert_eq!(
        ddl("ALTER TABLE t RENAME COLUMN a TO b, ENGINE=Aria"),
        ["t"]
    );
    assert_eq!(ddl("ALTER TABLE t ENGINE=Aria, RENAME TO t4"), ["t", "t4"]);
    assert_eq!(
        ddl("CREATE OR REPLACE TABLE t (id INT) ENGINE=InnoDB PARTITION BY HASH(id) PARTITIONS 4"),
        ["t"]
    );
    assert_eq!(
        ddl("CREATE TEMPORARY TABLE IF NOT EXISTS t2 (LIKE db.t) ENGINE=Aria"),
        ["t2", "db.t"]
    );
    assert_eq!(
        ddl("CREATE OR REPLACE UNIQUE INDEX i USING BTREE ON t (c) ALGORITHM=INPLACE"),
        ["t"]
    );
    assert_eq!(
        ddl("DROP INDEX IF EXISTS i ON db.t ALGORITHM=INPLACE"),
        ["db.t"]
    );
    for sql in [
        "ALTER TABLE",
        "ALTER DATABASE d CHARACTER SET utf8mb4 x",
        "CREATE TABLE t (a INT) ENGINE=X SELECT 1 x y",
    ] {
        assert!(matches!(both_err(sql), RouteError::Syntax { .. }), "{sql}");
    }
}

#[test]
fn other_statements() {
    let a = both("INSERT INTO t (id) SELECT uid FROM u WHERE uid = 2");
    assert_eq!(a.kind, StmtKind::Other);
    assert_eq!(
        a.tables,
        vec![
            tu(None, "t", KeyBound::Unbound, false),
            tu(None, "u", vals(vec![int(2)]), true)
        ]
    );
    let a = both("INSERT INTO t (id, c) VALUES (1, 'x')");
    assert_eq!((a.kind, a.tables.len()), (StmtKind::Other, 1));
    let a = both("CREATE VIEW v AS SELECT * FROM t");
    assert_eq!(a.kind, StmtKind::Other);
    assert!(a.tables.iter().any(|x| x.table == "t"));
    for sql in [
        "SET @a = 1",
        "SHOW TABLES",
        "BEGIN",
        "SHOW ENGINE INNODB STATUS",
        "FLUSH LOGS xyz",
    ] {
        let a = both(sql);
        assert_eq!(a.kind, StmtKind::Other, "{sql}");
        assert!(a.tables.is_empty(), "{sql}");
    }
}

#[test]
fn malformed_input_is_an_error() {
    for sql in [
        "",
        "   ",
        "/* only a comment */",
        "SELECT * FROM t WHERE id = 'abc",
        "SELECT * FROM t WHERE id = 1 /* never closed",
        "SELECT FROM WHERE",
        "SELECT * FROM t WHERE",
        "SELECT * FROM t WHERE id =",
        "SELECT * FROM t WHERE id IN ()",
        "SELECT * FROM t WHERE id IN (1,,2)",
        "SELECT * FROM t WHERE (id = 1",
        "SELECT 1; SELECT 2",
        "UPDATE t SET WHERE id = 1",
        "DELETE t WHERE",
        "CREATE TABLE",
        "SELECT * FROM t LIMIT 1 ROWS EXAMINED 10",
    ] {
        for m in [M, NBE, ANSI] {
            for e in [Engine::Auto, Engine::ParserOnly] {
                let r = analyze_with(sql, m, &key, e);
                assert!(
                    matches!(r, Err(RouteError::Syntax { .. })),
                    "{sql:?} {e:?}: {r:?}"
                );
            }
        }
    }
    // sqlparser builds one tree level per operator of a chain, and its
    // walks recurse: a long chain is refused before parsing; the fast path
    // takes the same chain without a tree.
    let mut sql = String::from("SELECT * FROM t WHERE x = 1");
    for _ in 0..MAX_OPERATORS {
        sql.push_str(" AND x = 1");
    }
    let e = analyze_with(&sql, M, &key, Engine::ParserOnly).err();
    assert!(matches!(e, Some(RouteError::Unsupported { .. })));
    let sql = format!("{sql} AND id = 3");
    let a = analyze_with(&sql, M, &key, Engine::FastOnly).ok().flatten();
    assert_eq!(a.map(|a| bound(&a)), Some(vals(vec![int(3)])));
    assert!(analyze(&sql, M, &key).is_ok());

    let e = analyze(r#"SELECT * FROM "a""b""#, ANSI, &key).unwrap_err();
    assert!(matches!(e, RouteError::Unsupported { .. }), "{e:?}");
    assert_eq!(e.code(), 1235);
    assert_eq!(RouteError::syntax("x").code(), 1064);
    assert!(e.to_string().contains("ANSI_QUOTES"));
}

/// Statements both paths must agree on (each is valid MariaDB).
const CORPUS: &[&str] = &[
    "SELECT c FROM sbtest1 WHERE id=?",
    "SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ?",
    "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN ? AND ?",
    "SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c",
    "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c",
    "UPDATE sbtest1 SET k=k+1 WHERE id=?",
    "UPDATE sbtest1 SET c=? WHERE id=?",
    "DELETE FROM sbtest1 WHERE id=?",
    "select `c` , t.d AS e from `db`.`t` as x where x.id in ( 1 , -2 , '3' ) order by e desc , 1 limit 3 , 4",
    "SELECT t.* FROM t WHERE t.id = 1 LOCK IN SHARE MODE",
    "SELECT *, c AS d FROM t WHERE id = N'k' ORDER BY d LIMIT 5 OFFSET 5",
    "SELECT MIN(id), MAX(t.id) AS m, COUNT(*) c, SUM(x) FROM t WHERE id IN (?, ?)",
    "SELECT a FROM t WHERE id = _utf8mb4'q' AND b LIKE 'x%' ESCAPE '!' FOR UPDATE",
    "SELECT a FROM t WHERE id = 1 AND MATCH (a) AGAINST ('x' IN BOOLEAN MODE)",
    "SELECT a FROM t WHERE id = 1 AND SUBSTRING(a FROM 1 FOR 2) = 'ab'",
    "SELECT a FROM t WHERE id = 1 AND a IS NOT NULL AND b NOT BETWEEN 1 AND 2 AND c IN (1, 2)",
    "SELECT a FROM t WHERE id = 1 AND x = @v",
    "SELECT a FROM t WHERE x = 'it''s' AND id = 'a\\'b'",
    "SELECT a FROM t WHERE id = 1 /* AND OR */ AND /*! x = 1 AND */ y = 2",
    "SELECT a FROM t WHERE id = 1 AND (b OR c)",
    "SELECT a FROM t WHERE id = 1 AND a = (SELECT 1)",
    "SELECT a b FROM t c WHERE c.id = 1",
    "SELECT a FROM t WHERE id = 5 GROUP BY a",
    "SELECT a FROM t WHERE id = 5 HAVING a > 1",
    "SELECT a FROM t WHERE id = 5 ORDER BY a LIMIT ?",
    "SELECT a FROM t WHERE id = 5 UNION SELECT a FROM t WHERE id = 6",
    "SELECT a FROM t USE INDEX (i) WHERE id = 5",
    "SELECT a FROM t PARTITION (p0) WHERE id = 5",
    "SELECT a FROM t WHERE id = 5 ORDER BY a NULLS FIRST",
    "SELECT SQL_NO_CACHE a FROM t WHERE id = 5",
    "SELECT HIGH_PRIORITY a FROM t WHERE id = 5",
    "SELECT a FROM t WHERE id = 5 FOR UPDATE SKIP LOCKED",
    "SELECT COUNT(a) AS n FROM t WHERE id = 5 ORDER BY n",
    "SELECT a, COUNT(b) FROM t WHERE id = 5",
    "SELECT a FROM t WHERE CASE WHEN id = 1 AND x THEN 1 END AND id = 2",
    "UPDATE t SET a = CASE WHEN b AND c THEN 1 ELSE 2 END WHERE id = 1",
    "UPDATE t SET a = (SELECT 1) WHERE id = 1",
    "UPDATE t SET a = 1 WHERE id = 1 ORDER BY a LIMIT 1",
    "UPDATE t SET a = a | 1, b = b & 2 WHERE id = 1",
    "UPDATE t a SET a.c = 1 WHERE a.id IN (1, 2)",
    "UPDATE IGNORE t SET c = 1 WHERE id = 9",
    "DELETE FROM t WHERE id = 1 ORDER BY a LIMIT 1",
    "DELETE FROM t WHERE id = 1 AND x IN (SELECT uid FROM u)",
    "DELETE QUICK FROM db.t WHERE db.t.id = 1",
    "SELECT `id` FROM `sbtest1` WHERE `id` = 10 AND `k` <> 0",
    "SELECT c FROM t WHERE id = 1 AND c = '\\\\' AND d = '\\%'",
    "SELECT c FROM t WHERE (id, c) IN ((1, 'a'))",
    "SELECT c FROM t WHERE id IN (1) AND id IN (2, 3)",
    "SELECT 1 FROM t WHERE id = 1",
    "SELECT id FROM t WHERE id = -0",
    "SELECT c FROM t WHERE id = ? AND c = ? LIMIT 10",
];

#[test]
fn fast_path_agrees_with_sqlparser_on_the_corpus() {
    let mut taken = 0;
    for sql in CORPUS {
        // Under NO_BACKSLASH_ESCAPES a `\'` ends a string.
        let modes: &[Modes] = if sql.contains('\\') { &[M] } else { &[M, NBE] };
        for &m in modes {
            both_in(sql, m);
            if analyze_with(sql, m, &key, Engine::FastOnly)
                .ok()
                .flatten()
                .is_some()
            {
                taken += 1;
            }
        }
    }
    // The fast path takes the common shapes of the corpus, not just a few.
    assert!(taken >= 40, "fast path took {taken}");
}

/// A random spelling of a fast-path statement: case, spacing, comments,
/// quoting.
fn spelled() -> impl Strategy<Value = String> {
    let space = prop_oneof![
        Just(" ".to_string()),
        Just("  ".to_string()),
        Just("\n\t".to_string()),
        Just(" /* c */ ".to_string()),
        Just(" -- c\n".to_string()),
        Just(" # c\n".to_string()),
    ];
    let kw = |w: &'static str| {
        prop_oneof![
            Just(w.to_string()),
            Just(w.to_lowercase()),
            Just(format!("{}{}", &w[..1], w[1..].to_lowercase())),
        ]
    };
    let col = prop_oneof![
        Just("id"),
        Just("`id`"),
        Just("ID"),
        Just("t.id"),
        Just("`t`.`id`"),
        Just("c"),
        Just("x.id"),
    ];
    let value = prop_oneof![
        (-1000i64..1000).prop_map(|v| v.to_string()),
        Just("?".to_string()),
        Just("NULL".to_string()),
        Just("'a\\'b'".to_string()),
        Just("'x''y'".to_string()),
        Just("_utf8mb4'k'".to_string()),
        Just("N'n'".to_string()),
        Just("0x1F".to_string()),
        Just("1.5".to_string()),
        Just("'a' 'b'".to_string()),
        Just("- 3".to_string()),
    ];
    let term = prop_oneof![
        (col.clone(), value.clone()).prop_map(|(c, v)| format!("{c} = {v}")),
        (col.clone(), value.clone()).prop_map(|(c, v)| format!("{v}={c}")),
        (col.clone(), prop::collection::vec(value.clone(), 1..4))
            .prop_map(|(c, v)| format!("{c} IN ({})", v.join(", "))),
        (col.clone(), value.clone()).prop_map(|(c, v)| format!("{c} > {v}")),
        Just("x BETWEEN 1 AND 2".to_string()),
        Just("f(a, b) = 2".to_string()),
        Just("(a = 1 OR b = 2)".to_string()),
    ];
    let where_ = prop::option::of(prop::collection::vec(term, 1..4));
    let items = prop_oneof![
        Just("*"),
        Just("c"),
        Just("c AS d, e"),
        Just("t.*"),
        Just("COUNT(*)"),
        Just("COUNT(*), MAX(id) m"),
        Just("c, SUM(k)"),
    ];
    let order = prop_oneof![
        Just(""),
        Just(" ORDER BY c"),
        Just(" ORDER BY 1 DESC"),
        Just(" ORDER BY d, 2"),
        Just(" ORDER BY z"),
    ];
    let limit = prop_oneof![
        Just(""),
        Just(" LIMIT 10"),
        Just(" LIMIT 3, 10"),
        Just(" LIMIT 10 OFFSET 3"),
    ];
    let table = prop_oneof![
        Just("t"),
        Just("`t`"),
        Just("db.t"),
        Just("t AS x"),
        Just("t x")
    ];
    let kind = 0..3u8;
    (
        kind,
        items,
        table,
        where_,
        order,
        limit,
        space,
        kw("SELECT"),
        kw("WHERE"),
        kw("AND"),
    )
        .prop_map(
            |(kind, items, table, where_, order, limit, sp, select, wh, and)| {
                let cond = where_
                    .map(|w| format!("{sp}{wh}{sp}{}", w.join(&format!("{sp}{and}{sp}"))))
                    .unwrap_or_default();
                match kind {
                    0 => format!("{select}{sp}{items}{sp}FROM {table}{cond}{order}{limit}"),
                    1 => format!("UPDATE {table} SET c = c + 1, d = ?{cond}"),
                    _ => format!(
                        "DELETE FROM {}{cond}",
                        table.split(' ').next().unwrap_or("t")
                    ),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn fast_path_matches_sqlparser(sql in spelled()) {
        let parsed = analyze_with(&sql, M, &key, Engine::ParserOnly);
        let fast = analyze_with(&sql, M, &key, Engine::FastOnly);
        let parsed = parsed.map_err(|e| TestCaseError::fail(format!("{sql}: {e}")))?;
        match fast {
            Ok(Some(f)) => prop_assert_eq!(Some(f), parsed, "{}", sql),
            other => prop_assert!(false, "fast path declined {}: {:?}", sql, other),
        }
    }

    #[test]
    fn any_text_gives_an_answer_not_a_panic(sql in "\\PC{0,80}", m in 0..4u8) {
        let modes = Modes { no_backslash_escapes: m & 1 == 1, ansi_quotes: m & 2 == 2 };
        for e in [Engine::Auto, Engine::FastOnly, Engine::ParserOnly] {
            let _ = analyze_with(&sql, modes, &key, e);
        }
    }

    #[test]
    fn sql_like_text_gives_an_answer_not_a_panic(
        parts in prop::collection::vec(prop_oneof![
            Just("SELECT"), Just("UPDATE"), Just("DELETE"), Just("FROM"), Just("WHERE"),
            Just("t"), Just("id"), Just("="), Just("IN"), Just("("), Just(")"), Just(","),
            Just("?"), Just("'x"), Just("'"), Just("\\"), Just("\""), Just("`"), Just("/*!"),
            Just("*/"), Just("--"), Just("#"), Just("\n"), Just("LIMIT"), Just("1"), Just("AND"),
            Just("OR"), Just("SET"), Just("ORDER BY"), Just("*"), Just(";"), Just("."),
            Just("COUNT("), Just("_utf8mb4"), Just("N"), Just("-"), Just("|"), Just("LOCK"),
        ], 0..24),
        m in 0..4u8,
    ) {
        let sql = parts.join(" ");
        let modes = Modes { no_backslash_escapes: m & 1 == 1, ansi_quotes: m & 2 == 2 };
        for e in [Engine::Auto, Engine::FastOnly, Engine::ParserOnly] {
            let _ = analyze_with(&sql, modes, &key, e);
        }
    }
}

#[test]
fn collate_clauses_name_the_ordering_collation() {
    let s = spec("SELECT id, note COLLATE utf8mb4_unicode_ci AS n FROM t ORDER BY n LIMIT 5");
    assert_eq!(
        s.item_collations,
        [None, Some("utf8mb4_unicode_ci".to_string())]
    );
    assert!(spec("SELECT id, note FROM t ORDER BY note LIMIT 5")
        .item_collations
        .is_empty());
    // With a `*`, positions are not known: no COLLATE is used (refused later).
    assert!(
        spec("SELECT *, note COLLATE utf8mb4_bin AS n FROM t ORDER BY n LIMIT 5")
            .item_collations
            .is_empty()
    );
}

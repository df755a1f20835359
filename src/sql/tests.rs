//! Unit tests: exact rewritten SQL for every form, on both parsers.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::rules::RuleSet;

pub(crate) const RULES: &str = r#"
[[generator]]
name = "orders"
kind = "sequence"
[[generator]]
name = "events"
kind = "snowflake"
[[table]]
name = "shop.orders"
column = "id"
generator = "orders"
[[table]]
name = "events"
column = "id"
generator = "events"
[[table]]
name = "shop.items"
column = "item_id"
generator = "orders"
"#;

pub(crate) fn rules() -> RuleSet {
    RuleSet::from_toml(Path::new("t.toml"), RULES, &["s0"], &|_| Ok(())).unwrap()
}

pub(crate) fn columns(schema: &str, table: &str) -> Option<Arc<[String]>> {
    let cols: &[&str] = match (schema, table) {
        ("shop", "orders") => &["id", "sku", "qty"],
        ("shop", "items") => &["name", "item_id"],
        ("shop", "events") => &["id", "kind"],
        _ => return None,
    };
    Some(cols.iter().map(|s| s.to_string()).collect())
}

fn ctx() -> PlanCtx<'static> {
    PlanCtx {
        schema: Some("shop"),
        no_auto_value_on_zero: false,
        no_backslash_escapes: false,
        ansi_quotes: false,
        columns: &columns,
        mentions: None,
    }
}

fn plan_with(sql: &str, c: &PlanCtx<'_>, engine: Engine) -> Result<Plan, SqlError> {
    plan_query_with(sql, &rules(), c, engine)
}

/// Renders with ids 101, 102, ... on the given engine.
fn render_on(sql: &str, c: &PlanCtx<'_>, engine: Engine, lid: Option<u64>) -> String {
    match plan_with(sql, c, engine).unwrap() {
        Plan::Passthrough => sql.to_string(),
        Plan::Rewrite(r) => {
            let ids: Vec<u64> = (0..r.total_ids() as u64).map(|i| 101 + i).collect();
            r.render_to_string(&ids, lid).unwrap()
        }
        other => panic!("{other:?}"),
    }
}

/// Rewrites with the auto engine and checks the fast path and sqlparser
/// agree when both handle the statement.
fn rw_ctx(sql: &str, c: &PlanCtx<'_>) -> String {
    let auto = render_on(sql, c, Engine::Auto, None);
    let fast = plan_with(sql, c, Engine::FastOnly);
    if fast.is_ok() {
        assert_eq!(
            render_on(sql, c, Engine::FastOnly, None),
            auto,
            "fast path differs"
        );
    }
    if plan_with(sql, c, Engine::SqlParserOnly).is_ok() {
        assert_eq!(
            render_on(sql, c, Engine::SqlParserOnly, None),
            auto,
            "sqlparser path differs"
        );
    }
    auto
}

fn rw(sql: &str) -> String {
    rw_ctx(sql, &ctx())
}

fn err(sql: &str) -> SqlError {
    plan_query(sql, &rules(), &ctx()).unwrap_err()
}

fn rewrite(sql: &str) -> QueryRewrite {
    match plan_query(sql, &rules(), &ctx()).unwrap() {
        Plan::Rewrite(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn passthrough() {
    for sql in [
        "SELECT 1",
        "  /* c */ select * from shop.orders where id = 3",
        "INSERT INTO other (id) VALUES (NULL)",
        "INSERT INTO shop.other VALUES (1), (2)",
        "UPDATE shop.orders SET qty = 2 WHERE id = 1",
        "SELECT 'last_insert_id()'",
        "SELECT 1; SELECT 2",
        "",
        "  -- only a comment\n",
        "INSERT INTO orders (id) VALUES (NULL)", // bare `orders` rule does not exist; schema `other`
    ] {
        let c = PlanCtx {
            schema: Some("other"),
            ..ctx()
        };
        assert_eq!(
            plan_query(sql, &rules(), &c).unwrap(),
            Plan::Passthrough,
            "{sql}"
        );
    }
    // Case-sensitive table names.
    assert_eq!(
        plan_query("INSERT INTO Orders (id) VALUES (NULL)", &rules(), &ctx()).unwrap(),
        Plan::Passthrough
    );
}

#[test]
fn column_omitted() {
    assert_eq!(
        rw("INSERT INTO orders (sku, qty) VALUES ('a', 1)"),
        "INSERT INTO orders (sku, qty, `id`) VALUES ('a', 1, LAST_INSERT_ID(101))"
    );
    assert_eq!(
        rw("insert into shop.orders(sku,qty) values('a',1),('b',2) , ('c', 3)"),
        "insert into shop.orders(sku,qty, `id`) values('a',1, LAST_INSERT_ID(101)),('b',2, 102) , ('c', 3, 103)"
    );
    assert_eq!(
        rw("INSERT INTO `shop`.`orders` (`sku`) VALUE ('x')"),
        "INSERT INTO `shop`.`orders` (`sku`, `id`) VALUE ('x', LAST_INSERT_ID(101))"
    );
}

#[test]
fn generated_values_in_the_column() {
    assert_eq!(
        rw("INSERT INTO orders (id, sku) VALUES (NULL, 'a'), (DEFAULT, 'b'), (0, 'c'), ('0', 'd'), (7, 'e'), (id + 1, 'f')"),
        "INSERT INTO orders (id, sku) VALUES (LAST_INSERT_ID(101), 'a'), (102, 'b'), (103, 'c'), (104, 'd'), (7, 'e'), ((@idgate_v98 := id + 1), 'f')"
    );
    // Literals as MariaDB stores them: 0.4 and ' 0' are 0 (generated),
    // 33.5 is 34, 0x21 is 33; expressions and variables are captured.
    let sql = "INSERT INTO orders (id, sku) VALUES (0.4, 'a'), (' 0', 'b'), (33.5, 'c'), (0x21, 'd'), (@v, 'e'), ((SELECT 60), 'f')";
    let r = rewrite(sql);
    assert_eq!(
        rw(sql),
        "INSERT INTO orders (id, sku) VALUES (LAST_INSERT_ID(101), 'a'), (102, 'b'), (33.5, 'c'), (0x21, 'd'), ((@idgate_v88 := @v), 'e'), ((@idgate_v99 := (SELECT 60)), 'f')"
    );
    assert_eq!(r.statements()[0].explicit, vec![34, 33]);
    assert_eq!(r.statements()[0].captures, vec![88, 99]);
    assert_eq!(r.statements()[0].last_captured, Some(99));
    // ON DUPLICATE KEY UPDATE of the id: captured, except VALUES(id).
    assert_eq!(
        rw("INSERT INTO orders (id, sku) VALUES (5, 'a') ON DUPLICATE KEY UPDATE id = id + 500, sku = 'b', orders.id = VALUES(id), id = IF(sku = 'x', 1, 2)"),
        "INSERT INTO orders (id, sku) VALUES (5, 'a') ON DUPLICATE KEY UPDATE id = (@idgate_v74 := id + 500), sku = 'b', orders.id = VALUES(id), id = (@idgate_v124 := IF(sku = 'x', 1, 2))"
    );
    let r = rewrite("INSERT INTO orders (id, sku) VALUES (5, 'a'), (NULL, 'b'), (9, 'c')");
    let s = &r.statements()[0];
    assert_eq!(s.explicit, vec![5, 9]);
    assert_eq!(s.last_explicit(), Some(9));
    assert_eq!(s.generated, 1);
    assert_eq!(
        r.demands(),
        &[IdDemand {
            generator: "orders".into(),
            count: 1
        }]
    );
    assert_eq!(
        r.render_to_string(&[77], None).unwrap(),
        "INSERT INTO orders (id, sku) VALUES (5, 'a'), (LAST_INSERT_ID(77), 'b'), (9, 'c')"
    );
    // Only explicit ids: nothing generated, still a rewrite (for observe).
    let r = rewrite("INSERT INTO orders (ID, sku) VALUES (5, 'a')");
    assert_eq!(r.total_ids(), 0);
    assert_eq!(r.statements()[0].explicit, vec![5]);
    assert_eq!(
        r.render_to_string(&[], None).unwrap(),
        "INSERT INTO orders (ID, sku) VALUES (5, 'a')"
    );
}

#[test]
fn no_auto_value_on_zero() {
    let c = PlanCtx {
        no_auto_value_on_zero: true,
        ..ctx()
    };
    assert_eq!(
        rw_ctx(
            "INSERT INTO orders (id, sku) VALUES (0, 'a'), (NULL, 'b')",
            &c
        ),
        "INSERT INTO orders (id, sku) VALUES (0, 'a'), (LAST_INSERT_ID(101), 'b')"
    );
}

#[test]
fn no_column_list() {
    assert_eq!(
        rw("INSERT INTO orders VALUES (NULL, 'a', 1), (5, 'b', 2)"),
        "INSERT INTO orders VALUES (LAST_INSERT_ID(101), 'a', 1), (5, 'b', 2)"
    );
    assert_eq!(
        rw("INSERT INTO items VALUES ('n', 0)"),
        "INSERT INTO items VALUES ('n', LAST_INSERT_ID(101))"
    );
    assert_eq!(
        rw("INSERT INTO orders VALUES (), ()"),
        "INSERT INTO orders (`id`) VALUES (LAST_INSERT_ID(101)), (102)"
    );
    assert_eq!(
        rw("INSERT INTO orders () VALUES ()"),
        "INSERT INTO orders (`id`) VALUES (LAST_INSERT_ID(101))"
    );
    assert_eq!(
        plan_query("INSERT INTO orders VALUES (1, 'a')", &rules(), &ctx())
            .unwrap_err()
            .code(),
        1136
    );
    // Unknown column order: ask the caller.
    let none = |_: &str, _: &str| None;
    let c = PlanCtx {
        columns: &none,
        mentions: None,
        ..ctx()
    };
    assert_eq!(
        plan_query("INSERT INTO orders VALUES (NULL, 'a', 1)", &rules(), &c).unwrap(),
        Plan::NeedColumns {
            schema: "shop".into(),
            table: "orders".into()
        }
    );
    // No database selected for a bare rule.
    let c = PlanCtx {
        schema: None,
        ..ctx()
    };
    assert_eq!(
        plan_query("INSERT INTO events VALUES (NULL, 'a')", &rules(), &c)
            .unwrap_err()
            .code(),
        1046
    );
    // A bare rule with a column list needs no schema.
    assert_eq!(
        rw_ctx("INSERT INTO events (kind) VALUES ('a')", &c),
        "INSERT INTO events (kind, `id`) VALUES ('a', LAST_INSERT_ID(101))"
    );
}

#[test]
fn insert_set() {
    assert_eq!(
        rw("INSERT INTO orders SET sku = 'a', qty = 1"),
        "INSERT INTO orders SET sku = 'a', qty = 1, `id` = LAST_INSERT_ID(101)"
    );
    assert_eq!(
        rw("INSERT INTO orders SET id = NULL, sku = 'a'"),
        "INSERT INTO orders SET id = LAST_INSERT_ID(101), sku = 'a'"
    );
    assert_eq!(
        rw("INSERT INTO orders SET sku = concat('a', 'b') /* c */ ON DUPLICATE KEY UPDATE qty = qty + 1"),
        "INSERT INTO orders SET sku = concat('a', 'b'), `id` = LAST_INSERT_ID(101) /* c */ ON DUPLICATE KEY UPDATE qty = qty + 1"
    );
    assert_eq!(
        rewrite("INSERT INTO orders SET id = 12").statements()[0].explicit,
        vec![12]
    );
}

#[test]
fn modifiers_and_clauses() {
    assert_eq!(
        rw("REPLACE LOW_PRIORITY INTO orders (sku) VALUES ('a')"),
        "REPLACE LOW_PRIORITY INTO orders (sku, `id`) VALUES ('a', LAST_INSERT_ID(101))"
    );
    assert_eq!(
        rw("INSERT /*+ MAX_EXECUTION_TIME(1) */ HIGH_PRIORITY IGNORE orders (sku) VALUES ('a')"),
        "INSERT /*+ MAX_EXECUTION_TIME(1) */ HIGH_PRIORITY IGNORE orders (sku, `id`) VALUES ('a', LAST_INSERT_ID(101))"
    );
    assert_eq!(
        rw("INSERT DELAYED INTO orders PARTITION (p0, p1) (sku) VALUES ('a')"),
        "INSERT DELAYED INTO orders PARTITION (p0, p1) (sku, `id`) VALUES ('a', LAST_INSERT_ID(101))"
    );
    assert_eq!(
        rw("INSERT INTO orders PARTITION (p0) VALUES ()"),
        "INSERT INTO orders PARTITION (p0) (`id`) VALUES (LAST_INSERT_ID(101))"
    );
    assert_eq!(
        rw("INSERT INTO orders (sku, qty) VALUES ('a', 1), ('b', 2) ON DUPLICATE KEY UPDATE qty = VALUES(qty), id = LAST_INSERT_ID(id)"),
        "INSERT INTO orders (sku, qty, `id`) VALUES ('a', 1, LAST_INSERT_ID(101)), ('b', 2, 102) ON DUPLICATE KEY UPDATE qty = VALUES(qty), id = LAST_INSERT_ID(id)"
    );
    assert_eq!(
        rw("INSERT INTO orders (sku, qty) VALUES ('a', 1) AS new ON DUPLICATE KEY UPDATE qty = new.qty"),
        "INSERT INTO orders (sku, qty, `id`) VALUES ('a', 1, LAST_INSERT_ID(101)) AS new ON DUPLICATE KEY UPDATE qty = new.qty"
    );
    assert_eq!(
        rw("INSERT INTO orders (sku, qty) VALUES ('a', 1) AS new(s, q) ON DUPLICATE KEY UPDATE qty = q"),
        "INSERT INTO orders (sku, qty, `id`) VALUES ('a', 1, LAST_INSERT_ID(101)) AS new(s, q, `id`) ON DUPLICATE KEY UPDATE qty = q"
    );
    assert_eq!(
        rw("INSERT INTO orders (sku) VALUES ('a') RETURNING id, sku"),
        "INSERT INTO orders (sku, `id`) VALUES ('a', LAST_INSERT_ID(101)) RETURNING id, sku"
    );
    assert_eq!(
        rw("INSERT INTO orders (orders.sku, shop.orders.qty) VALUES ('a', 1)"),
        "INSERT INTO orders (orders.sku, shop.orders.qty, `id`) VALUES ('a', 1, LAST_INSERT_ID(101))"
    );
    assert_eq!(
        rw("INSERT INTO orders (sku) VALUES ROW('a'), ROW('b')"),
        "INSERT INTO orders (sku, `id`) VALUES ROW('a', LAST_INSERT_ID(101)), ROW('b', 102)"
    );
}

#[test]
fn text_is_kept_byte_exact() {
    let sql = "INSERT INTO orders (sku, qty) VALUES ('c\\\\d''\\'', _utf8mb4'é' COLLATE utf8mb4_bin), (X'41', b'1') # tail";
    assert_eq!(
        rw(sql),
        "INSERT INTO orders (sku, qty, `id`) VALUES ('c\\\\d''\\'', _utf8mb4'é' COLLATE utf8mb4_bin, LAST_INSERT_ID(101)), (X'41', b'1', 102) # tail"
    );
    assert_eq!(
        rw("INSERT INTO orders (sku) VALUES ('ü), (') , ('\"x\"')\n-- c\n"),
        "INSERT INTO orders (sku, `id`) VALUES ('ü), (', LAST_INSERT_ID(101)) , ('\"x\"', 102)\n-- c\n"
    );
    assert_eq!(
        rw("INSERT INTO orders (sku) VALUES (\n  'é'\n), ('ß')"),
        "INSERT INTO orders (sku, `id`) VALUES (\n  'é'\n, LAST_INSERT_ID(101)), ('ß', 102)"
    );
}

#[test]
fn multi_statement() {
    let r = rewrite("SET @a = 1; INSERT INTO orders (sku) VALUES ('a'), ('b'); INSERT INTO events (kind) VALUES ('k'); SELECT 2");
    assert_eq!(r.statements().len(), 4);
    assert_eq!(
        r.demands(),
        &[
            IdDemand {
                generator: "orders".into(),
                count: 2
            },
            IdDemand {
                generator: "events".into(),
                count: 1
            }
        ]
    );
    assert_eq!(r.statements()[2].first_slot, 2);
    assert_eq!(
        r.render_to_string(&[1, 2, 900], None).unwrap(),
        "SET @a = 1; INSERT INTO orders (sku, `id`) VALUES ('a', LAST_INSERT_ID(1)), ('b', 2); INSERT INTO events (kind, `id`) VALUES ('k', LAST_INSERT_ID(900)); SELECT 2"
    );
    assert!(r.render_to_string(&[1, 2], None).is_err());
}

#[test]
fn last_insert_id() {
    let sql = "SELECT LAST_INSERT_ID(), @@identity, @@session.last_insert_id AS x, last_insert_id() + 1, LAST_INSERT_ID(5)";
    let r = rewrite(sql);
    assert_eq!(r.total_ids(), 0);
    assert_eq!(
        r.render_to_string(&[], Some(42)).unwrap(),
        "SELECT 42 AS `LAST_INSERT_ID()`, 42 AS `@@identity`, 42 AS x, 42 + 1, LAST_INSERT_ID(5)"
    );
    assert_eq!(r.render_to_string(&[], None).unwrap(), sql);
    assert!(r.statements()[0].changes_last_insert_id);
    // After an INSERT in the same query, its first id; inside the INSERT, the previous value.
    let r = rewrite("INSERT INTO orders (sku, qty) VALUES ('a', LAST_INSERT_ID()); SELECT LAST_INSERT_ID() FROM dual");
    assert_eq!(
        r.render_to_string(&[7], Some(3)).unwrap(),
        "INSERT INTO orders (sku, qty, `id`) VALUES ('a', 3, LAST_INSERT_ID(7)); SELECT 7 AS `LAST_INSERT_ID()` FROM dual"
    );
    // Child rows referencing the parent's id.
    assert_eq!(
        rewrite("INSERT INTO lines (order_id) VALUES (LAST_INSERT_ID())")
            .render_to_string(&[], Some(9))
            .unwrap(),
        "INSERT INTO lines (order_id) VALUES (9)"
    );
    // After SET last_insert_id, the backend answers.
    let r = rewrite("SET @@last_insert_id = 5; SELECT @@last_insert_id");
    assert_eq!(
        r.render_to_string(&[], Some(1)).unwrap(),
        "SET @@last_insert_id = 5; SELECT @@last_insert_id"
    );
    // Not in DDL (a view would freeze the value), nor in strings.
    assert_eq!(
        plan_query("CREATE VIEW v AS SELECT LAST_INSERT_ID()", &rules(), &ctx()).unwrap(),
        Plan::Passthrough
    );
    assert_eq!(
        plan_query(
            "SELECT 'LAST_INSERT_ID()', `last_insert_id`",
            &rules(),
            &ctx()
        )
        .unwrap(),
        Plan::Passthrough
    );
    // A stored function `db.last_insert_id()` is not the builtin.
    assert_eq!(
        plan_query("SELECT db.last_insert_id()", &rules(), &ctx()).unwrap(),
        Plan::Passthrough
    );
}

#[test]
fn refusals() {
    for (sql, code, needle) in [
        ("INSERT INTO orders (id, sku) SELECT id, sku FROM old", 1235, "INSERT ... SELECT on table shop.orders"),
        ("INSERT INTO orders SELECT * FROM old", 1235, "shop.orders"),
        ("INSERT INTO orders (sku) (SELECT sku FROM old)", 1235, "shop.orders"),
        ("INSERT INTO orders TABLE old", 1235, "shop.orders"),
        ("INSERT INTO orders (sku) VALUES ('a'", 1064, "shop.orders"),
        ("INSERT INTO orders (sku) VALUES ('a)", 1064, "shop.orders"),
        ("INSERT INTO orders (sku) VALUES ('a'), ('b', 2)", 1136, "row 2"),
        ("INSERT /*! IGNORE */ INTO orders (sku) VALUES ('a')", 1235, "executable comments"),
        ("LOAD DATA INFILE '/tmp/x' INTO TABLE shop.orders", 1235, "LOAD DATA on table shop.orders"),
        ("PREPARE s FROM 'INSERT INTO orders (sku) VALUES (?)'", 1235, "SQL-level PREPARE"),
        ("EXECUTE IMMEDIATE 'INSERT INTO shop.orders (sku) VALUES (1)'", 1235, "EXECUTE IMMEDIATE"),
        ("CREATE PROCEDURE p() BEGIN SELECT 1; INSERT INTO orders (sku) VALUES ('a'); END", 1235, "stored program"),
        ("CREATE DEFINER = 'a'@'%' TRIGGER t AFTER INSERT ON x FOR EACH ROW INSERT INTO shop.orders (sku) VALUES (1)", 1235, "stored program"),
        ("BEGIN NOT ATOMIC INSERT INTO orders (sku) VALUES ('a'); END", 1235, "compound"),
        ("CREATE PROCEDURE p() UPDATE orders SET id = 5 WHERE sku = 'a'", 1235, "UPDATE of the id column"),
        ("ALTER EVENT e DO INSERT INTO orders (id, sku) VALUES (5, 'a')", 1235, "stored program"),
        ("CREATE TRIGGER tr BEFORE INSERT ON orders FOR EACH ROW SET NEW.id = 5", 1235, "assigns NEW.id"),
        ("CREATE TRIGGER IF NOT EXISTS shop.tr BEFORE UPDATE ON shop.`orders` FOR EACH ROW BEGIN SET @a = 1, NEW.`ID` := 5; END", 1235, "assigns NEW.id"),
        ("SET @q = 'x'; PREPARE s FROM @q", 1235, "query of its own"),
        ("SELECT 1; EXECUTE IMMEDIATE CONCAT('SELECT ', 1)", 1235, "query of its own"),
        ("INSERT INTO orders (sku) VALUES ('a') garbage here", 1064, "shop.orders"),
        ("CREATE PROCEDURE p() BEGIN PREPARE s FROM 'INSERT INTO orders (id, sku) VALUES (5, ''a'')'; EXECUTE s; END", 1235, "shop.orders"),
        ("CREATE PROCEDURE p() BEGIN EXECUTE IMMEDIATE 'UPDATE shop.orders SET id = 9'; END", 1235, "shop.orders"),
        ("CREATE PROCEDURE p(q TEXT) BEGIN PREPARE s FROM q; EXECUTE s; END", 1235, "inside a stored program"),
        ("BEGIN NOT ATOMIC EXECUTE IMMEDIATE CONCAT('INSERT INTO orders ', 'VALUES (1)'); END", 1235, "inside a stored program"),
        ("CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO EXECUTE IMMEDIATE @q", 1235, "inside a stored program"),
    ] {
        let e = err(sql);
        assert_eq!(e.code(), code, "{sql}: {e}");
        assert!(e.to_string().contains(needle), "{sql}: {e}");
    }
    // A broken statement before a rule-table INSERT does not hide it.
    assert_eq!(
        rw("INSERT ; INSERT INTO orders (sku) VALUES ('a')"),
        "INSERT ; INSERT INTO orders (sku, `id`) VALUES ('a', LAST_INSERT_ID(101))"
    );
    // INSERT ... SELECT is refused before asking for the column order.
    let none = |_: &str, _: &str| None;
    let c = PlanCtx {
        columns: &none,
        mentions: None,
        ..ctx()
    };
    assert_eq!(
        plan_query("INSERT INTO orders SELECT 1", &rules(), &c)
            .unwrap_err()
            .code(),
        1235
    );
    // Not rule tables: allowed.
    for sql in [
        "INSERT INTO other SELECT * FROM orders",
        "PREPARE s FROM 'INSERT INTO other (a) VALUES (?)'",
        "CREATE PROCEDURE p() BEGIN INSERT INTO other VALUES (1); END",
        "CREATE PROCEDURE p() UPDATE orders SET qty = 2",
        "CREATE PROCEDURE p() BEGIN PREPARE s FROM 'SELECT * FROM orders'; EXECUTE s; DEALLOCATE PREPARE s; END",
        "CREATE PROCEDURE p() BEGIN EXECUTE s USING @a; END",
        "ALTER TABLE orders ADD COLUMN note TEXT",
        "ALTER EVENT e DO INSERT INTO other VALUES (1)",
        // A trigger on a rule table that reads the id or sets other columns.
        "CREATE TRIGGER tr BEFORE INSERT ON orders FOR EACH ROW BEGIN IF NEW.id = 0 THEN SET NEW.qty = 1; END IF; END",
        "CREATE TRIGGER tr BEFORE INSERT ON orders FOR EACH ROW SET @x = CAST(NEW.sku AS CHAR CHARACTER SET utf8), @y = NEW.id",
        "CREATE TRIGGER tr BEFORE INSERT ON other FOR EACH ROW SET NEW.id = 5",
        // A dynamic source first in its query (the front end reads it).
        "PREPARE s FROM @q; EXECUTE s",
        "EXECUTE IMMEDIATE CONCAT('SELECT ', 1)",
        "CREATE TABLE orders2 (id BIGINT PRIMARY KEY)",
        "LOAD DATA INFILE '/tmp/x' INTO TABLE other",
        "BEGIN; COMMIT",
    ] {
        assert_eq!(
            plan_query(sql, &rules(), &ctx()).unwrap(),
            Plan::Passthrough,
            "{sql}"
        );
    }
}

#[test]
fn sql_modes() {
    let nbe = PlanCtx {
        no_backslash_escapes: true,
        ..ctx()
    };
    assert_eq!(
        rw_ctx("INSERT INTO orders (sku) VALUES ('a\\'), ('b')", &nbe),
        "INSERT INTO orders (sku, `id`) VALUES ('a\\', LAST_INSERT_ID(101)), ('b', 102)"
    );
    let ansi = PlanCtx {
        ansi_quotes: true,
        ..ctx()
    };
    assert_eq!(
        rw_ctx(
            "INSERT INTO \"orders\" (\"sku\", \"id\") VALUES ('a', NULL)",
            &ansi
        ),
        "INSERT INTO \"orders\" (\"sku\", \"id\") VALUES ('a', LAST_INSERT_ID(101))"
    );
}

#[test]
fn prepared() {
    let plan = |sql: &str| match plan_prepare(sql, &rules(), &ctx()).unwrap() {
        PreparePlan::Rewrite(r) => r,
        other => panic!("{other:?}"),
    };
    use ParamSource::*;
    // Column omitted.
    let p = plan("INSERT INTO orders (sku, qty) VALUES (?, ?), (?, 3)");
    assert_eq!(
        p.backend_sql,
        "INSERT INTO orders (sku, qty, `id`) VALUES (?, ?, LAST_INSERT_ID(?)), (?, 3, ?)"
    );
    assert_eq!(p.client_params, 3);
    assert_eq!(
        p.params,
        vec![Client(0), Client(1), Generated(0), Client(2), Generated(1)]
    );
    let ex = p.execute(&|_| BoundId::Other, false);
    assert_eq!(ex.demand, 2);
    assert_eq!(
        ex.backend_params(&p, &[50, 51]).unwrap(),
        vec![
            BackendParam::Client(0),
            BackendParam::Client(1),
            BackendParam::Id(50),
            BackendParam::Client(2),
            BackendParam::Id(51)
        ]
    );
    assert!(ex.backend_params(&p, &[50]).is_err());

    // The client's `?` in the id column, then a literal NULL.
    let p = plan("INSERT INTO orders (id, sku) VALUES (?, ?), (NULL, ?)");
    assert_eq!(
        p.backend_sql,
        "INSERT INTO orders (id, sku) VALUES (IFNULL(?, IFNULL(?, LAST_INSERT_ID(?))), ?), (IFNULL(?, LAST_INSERT_ID(?)), ?)"
    );
    assert_eq!(p.client_params, 3);
    assert_eq!(
        p.params,
        vec![
            ClientUnlessAuto { param: 0, slot: 0 },
            GeneratedPlainOrNull(0),
            GeneratedFirstOrNull(0),
            Client(1),
            GeneratedPlainOrNull(1),
            GeneratedFirstOrNull(1),
            Client(2)
        ]
    );
    // Client sends NULL: both slots generated, slot 0 first.
    let ex = p.execute(&|_| BoundId::Null, false);
    assert_eq!(ex.demand, 2);
    use BackendParam::{Client as C, Id, Null};
    assert_eq!(
        ex.backend_params(&p, &[8, 9]).unwrap(),
        vec![Null, Null, Id(8), C(1), Id(9), Null, C(2)]
    );
    // Client sends 0 under NO_AUTO_VALUE_ON_ZERO: explicit 0, slot 1 first.
    let ex = p.execute(&|_| BoundId::Int(0), true);
    assert_eq!(ex.demand, 1);
    assert_eq!(ex.observed, vec![0]);
    assert_eq!(
        ex.backend_params(&p, &[8]).unwrap(),
        vec![C(0), Null, Null, C(1), Null, Id(8), C(2)]
    );
    // Client sends 0 normally: generated.
    assert_eq!(p.execute(&|_| BoundId::Int(0), false).demand, 2);
    // Client sends 77: explicit.
    let ex = p.execute(&|_| BoundId::Int(77), false);
    assert_eq!((ex.demand, ex.last_explicit()), (1, Some(77)));

    // A literal generated id that is statically first, then a client `?`.
    let p = plan("INSERT INTO orders (id, sku) VALUES (DEFAULT, ?), (?, 'x'), (5, 'y')");
    assert_eq!(
        p.backend_sql,
        "INSERT INTO orders (id, sku) VALUES (LAST_INSERT_ID(?), ?), (IFNULL(?, ?), 'x'), (5, 'y')"
    );
    assert_eq!(p.client_params, 2);
    let ex = p.execute(&|_| BoundId::Null, false);
    assert_eq!(ex.observed, vec![5]);
    assert_eq!(
        ex.backend_params(&p, &[1, 2]).unwrap(),
        vec![Id(1), C(0), Null, Id(2)]
    );

    // INSERT ... SET with `?`s.
    let p = plan("INSERT INTO orders SET sku = ?, qty = ?");
    assert_eq!(
        p.backend_sql,
        "INSERT INTO orders SET sku = ?, qty = ?, `id` = LAST_INSERT_ID(?)"
    );
    assert_eq!(p.params, vec![Client(0), Client(1), Generated(0)]);

    // Not a rule table, or several statements: unchanged.
    assert_eq!(
        plan_prepare("INSERT INTO other VALUES (?)", &rules(), &ctx()).unwrap(),
        PreparePlan::Passthrough
    );
    assert_eq!(
        plan_prepare("SELECT LAST_INSERT_ID()", &rules(), &ctx()).unwrap(),
        PreparePlan::Passthrough
    );
    assert!(plan_prepare("INSERT INTO orders SELECT * FROM x", &rules(), &ctx()).is_err());
}

/// Renders with ids 101, 102, ... and each statement reported as
/// [`StmtInfo::report`] decides on a MariaDB 10.5+ shard; also checks both
/// parsers agree.
fn tracked(sql: &str) -> (String, Vec<Report>) {
    let on = |engine: Engine| -> Option<(String, Vec<Report>)> {
        let Plan::Rewrite(r) = plan_with(sql, &ctx(), engine).ok()? else {
            return None;
        };
        let alone = r.statements().len() == 1;
        let upserts = Upserts {
            track: true,
            returning: true,
        };
        let reports: Vec<Report> = r
            .statements()
            .iter()
            .map(|s| s.report(upserts, alone))
            .collect();
        let ids: Vec<u64> = (0..r.total_ids() as u64).map(|i| 101 + i).collect();
        let mut out = String::new();
        r.render_with(&ids, None, &|i| reports[i], &mut out)
            .unwrap();
        Some((out, reports))
    };
    let auto = on(Engine::Auto).expect("a rewrite");
    for engine in [Engine::FastOnly, Engine::SqlParserOnly] {
        if let Some(other) = on(engine) {
            assert_eq!(other, auto, "{engine:?} differs: {sql}");
        }
    }
    auto
}

#[test]
fn upserts_are_tracked() {
    const SAVE: &str =
        "LAST_INSERT_ID(IF((@idgate_lid := LAST_INSERT_ID()) = (@idgate_at := 101), 101, 101))";
    // One row, ON DUPLICATE KEY UPDATE.
    let (sql, r) = tracked(
        "INSERT INTO orders (sku) VALUES ('a') ON DUPLICATE KEY UPDATE qty = qty + 1 -- end",
    );
    assert_eq!(r, [Report::Track]);
    assert_eq!(
        sql,
        format!("INSERT INTO orders (sku, `id`) VALUES ('a', {SAVE}) ON DUPLICATE KEY UPDATE qty = qty + 1, `id` = IF(VALUES(`id`) >= 101, IF(LAST_INSERT_ID(`id`), `id`, `id`), `id`) -- end")
    );
    // SET form.
    let (sql, _) = tracked("INSERT INTO orders SET sku = 'a' ON DUPLICATE KEY UPDATE qty = 1");
    assert_eq!(
        sql,
        format!("INSERT INTO orders SET sku = 'a', `id` = {SAVE} ON DUPLICATE KEY UPDATE qty = 1, `id` = IF(VALUES(`id`) >= 101, IF(LAST_INSERT_ID(`id`), `id`, `id`), `id`)")
    );
    // Several rows: later ids join the register; the assignment names the
    // last row's id. A RETURNING of the client's own: not tracked.
    let (sql, r) = tracked(
        "INSERT IGNORE INTO orders (id, sku) VALUES (NULL, 'a'), (7, 'b'), (0, 'c') ON DUPLICATE KEY UPDATE qty = VALUES(qty)",
    );
    assert_eq!(r, [Report::Track]);
    assert_eq!(
        sql,
        format!("INSERT IGNORE INTO orders (id, sku) VALUES ({SAVE}, 'a'), (7, 'b'), (IF(LAST_INSERT_ID() = 0, LAST_INSERT_ID(102), 102), 'c') ON DUPLICATE KEY UPDATE qty = VALUES(qty), `id` = IF(VALUES(`id`) >= 101 AND LAST_INSERT_ID() = VALUES(`id`) OR VALUES(`id`) = 102 AND LAST_INSERT_ID() = 0, IF(LAST_INSERT_ID(IF(VALUES(`id`) = 102, `id`, 0)), `id`, `id`), `id`)")
    );
    let (sql, r) = tracked(
        "INSERT INTO orders (sku) VALUES ('a'), ('b') ON DUPLICATE KEY UPDATE qty = 1 RETURNING id",
    );
    assert_eq!(r, [Report::Plain]);
    assert_eq!(
        sql,
        "INSERT INTO orders (sku, `id`) VALUES ('a', 101), ('b', 102) ON DUPLICATE KEY UPDATE qty = 1 RETURNING id"
    );
    // INSERT IGNORE: one row saves only; several rows get RETURNING, before
    // trailing comments.
    let (sql, r) = tracked("INSERT IGNORE INTO orders (sku) VALUES ('a')");
    assert_eq!(r, [Report::Track]);
    assert_eq!(
        sql,
        format!("INSERT IGNORE INTO orders (sku, `id`) VALUES ('a', {SAVE})")
    );
    let (sql, r) = tracked("INSERT IGNORE orders (sku) VALUES ('a'), ('b') /* c */ ");
    assert_eq!(r, [Report::Returning]);
    assert_eq!(
        sql,
        format!("INSERT IGNORE orders (sku, `id`) VALUES ('a', {SAVE}), ('b', 102) RETURNING `id` /* c */ ")
    );
    // Plain INSERT/REPLACE, a statement that uses LAST_INSERT_ID itself, a
    // row alias, several statements: as before.
    assert_eq!(
        tracked("INSERT INTO orders (sku) VALUES ('ignore')").1,
        [Report::Wrap]
    );
    assert_eq!(
        tracked(
            "INSERT INTO orders (sku) VALUES ('a') ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)"
        )
        .1,
        [Report::Plain]
    );
    assert_eq!(
        tracked("INSERT INTO orders (sku) VALUES ('a') AS n ON DUPLICATE KEY UPDATE qty = n.qty").1,
        [Report::Plain]
    );
    let (sql, r) = tracked("INSERT IGNORE INTO orders (sku) VALUES ('a'); SELECT 1");
    assert_eq!(r, [Report::Plain, Report::Wrap]);
    assert_eq!(
        sql,
        "INSERT IGNORE INTO orders (sku, `id`) VALUES ('a', 101); SELECT 1"
    );
    // Explicit ids only: nothing to track.
    assert_eq!(
        tracked("INSERT INTO orders (id, sku) VALUES (5, 'a') ON DUPLICATE KEY UPDATE qty = 1").1,
        [Report::Wrap]
    );
}

#[test]
fn upserts_split_per_shard_are_tracked_per_part() {
    let rules = RuleSet::from_toml(
        Path::new("t.toml"),
        "[[generator]]\nname = \"g\"\nkind = \"sequence\"\n\
         [[table]]\nname = \"shop.orders\"\ncolumn = \"id\"\ngenerator = \"g\"\nshard_key = \"id\"\nsharding = \"mod\"\n",
        &["s0", "s1"],
        &|_| Ok(()),
    )
    .unwrap();
    let Plan::Rewrite(r) = plan_query(
        "INSERT IGNORE INTO orders (sku) VALUES ('a'), ('b'), ('c') ON DUPLICATE KEY UPDATE qty = 1",
        &rules,
        &ctx(),
    )
    .unwrap() else {
        panic!("a rewrite")
    };
    assert_eq!(r.statements()[0].rows.len(), 3);
    // One shard's part of one row, and of two: tracked on their own rows.
    let mut out = String::new();
    r.render_rows(0, &[1], &[101, 102, 103], Report::Track, &mut out)
        .unwrap();
    assert_eq!(
        out,
        "INSERT IGNORE INTO orders (sku, `id`) VALUES ('b', LAST_INSERT_ID(IF((@idgate_lid := LAST_INSERT_ID()) = (@idgate_at := 102), 102, 102))) ON DUPLICATE KEY UPDATE qty = 1, `id` = IF(VALUES(`id`) >= 102, IF(LAST_INSERT_ID(`id`), `id`, `id`), `id`)"
    );
    out.clear();
    r.render_rows(0, &[0, 2], &[101, 102, 103], Report::Track, &mut out)
        .unwrap();
    assert_eq!(
        out,
        "INSERT IGNORE INTO orders (sku, `id`) VALUES ('a', LAST_INSERT_ID(IF((@idgate_lid := LAST_INSERT_ID()) = (@idgate_at := 101), 101, 101))), ('c', IF(LAST_INSERT_ID() = 0, LAST_INSERT_ID(103), 103)) ON DUPLICATE KEY UPDATE qty = 1, `id` = IF(VALUES(`id`) >= 101 AND LAST_INSERT_ID() = VALUES(`id`) OR VALUES(`id`) = 103 AND LAST_INSERT_ID() = 0, IF(LAST_INSERT_ID(IF(VALUES(`id`) = 103, `id`, 0)), `id`, `id`), `id`)"
    );
    // A part of an INSERT IGNORE of several rows: RETURNING.
    let Plan::Rewrite(r) = plan_query(
        "INSERT IGNORE INTO orders (sku) VALUES ('a'), ('b'), ('c')",
        &rules,
        &ctx(),
    )
    .unwrap() else {
        panic!("a rewrite")
    };
    out.clear();
    r.render_rows(0, &[0, 2], &[101, 102, 103], Report::Returning, &mut out)
        .unwrap();
    assert_eq!(
        out,
        "INSERT IGNORE INTO orders (sku, `id`) VALUES ('a', LAST_INSERT_ID(IF((@idgate_lid := LAST_INSERT_ID()) = (@idgate_at := 101), 101, 101))), ('c', 103) RETURNING `id`"
    );
}

#[test]
fn prepared_upserts_are_tracked() {
    let upserts = Upserts {
        track: true,
        returning: true,
    };
    let plan = |sql: &str| match plan_prepare_with(sql, &rules(), &ctx(), upserts).unwrap() {
        PreparePlan::Rewrite(r) => r,
        other => panic!("{other:?}"),
    };
    use ParamSource::*;
    let p = plan("INSERT INTO orders (sku) VALUES (?), (?) ON DUPLICATE KEY UPDATE qty = ?");
    assert_eq!(p.report, Report::Track);
    assert_eq!(
        p.backend_sql,
        "INSERT INTO orders (sku, `id`) VALUES (?, LAST_INSERT_ID(IF((@idgate_lid := LAST_INSERT_ID()) = (@idgate_at := ?), ?, ?))), (?, IF(LAST_INSERT_ID() = 0, LAST_INSERT_ID(?), ?)) ON DUPLICATE KEY UPDATE qty = ?, `id` = IF(VALUES(`id`) >= ? AND LAST_INSERT_ID() = VALUES(`id`) OR VALUES(`id`) = ? AND LAST_INSERT_ID() = 0, IF(LAST_INSERT_ID(IF(VALUES(`id`) = ?, `id`, 0)), `id`, `id`), `id`)"
    );
    assert_eq!(
        p.params,
        vec![
            Client(0),
            Generated(0),
            Generated(0),
            Generated(0),
            Client(1),
            Generated(1),
            Generated(1),
            Client(2),
            FirstGenerated,
            Generated(1),
            Generated(1)
        ]
    );
    let ex = p.execute(&|_| BoundId::Other, false);
    use BackendParam::{Client as C, Id, Null};
    assert_eq!(
        ex.backend_params(&p, &[8, 9]).unwrap(),
        vec![
            C(0),
            Id(8),
            Id(8),
            Id(8),
            C(1),
            Id(9),
            Id(9),
            C(2),
            Id(8),
            Id(9),
            Id(9)
        ]
    );
    // The client's `?` in the id column: the first generated one decides
    // at execute which branch is bound; an explicit value tracks nothing.
    let p = plan("INSERT INTO orders (id, sku) VALUES (?, ?) ON DUPLICATE KEY UPDATE qty = 1");
    assert_eq!(
        p.backend_sql,
        "INSERT INTO orders (id, sku) VALUES (IFNULL(?, IFNULL(IF(? IS NULL, NULL, LAST_INSERT_ID(IF((@idgate_lid := LAST_INSERT_ID()) = (@idgate_at := ?), ?, ?))), ?)), ?) ON DUPLICATE KEY UPDATE qty = 1, `id` = IF(VALUES(`id`) >= ?, IF(LAST_INSERT_ID(`id`), `id`, `id`), `id`)"
    );
    let ex = p.execute(&|_| BoundId::Null, false);
    assert_eq!(
        ex.backend_params(&p, &[8]).unwrap(),
        vec![Null, Id(8), Id(8), Id(8), Id(8), Null, C(1), Id(8)]
    );
    let ex = p.execute(&|_| BoundId::Int(5), false);
    assert_eq!(
        ex.backend_params(&p, &[]).unwrap(),
        vec![C(0), Null, Null, Null, Null, Null, C(1), Null]
    );
    // Several rows of INSERT IGNORE: RETURNING (the client is told no columns).
    let p = plan("INSERT IGNORE INTO orders (sku) VALUES (?), (?)");
    assert_eq!(p.report, Report::Returning);
    assert_eq!(
        p.backend_sql,
        "INSERT IGNORE INTO orders (sku, `id`) VALUES (?, LAST_INSERT_ID(IF((@idgate_lid := LAST_INSERT_ID()) = (@idgate_at := ?), ?, ?))), (?, ?) RETURNING `id`"
    );
    // Shards that cannot track (MySQL), or plan_prepare: plain ids.
    let p = match plan_prepare(
        "INSERT IGNORE INTO orders (sku) VALUES (?)",
        &rules(),
        &ctx(),
    )
    .unwrap()
    {
        PreparePlan::Rewrite(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(p.report, Report::Plain);
    assert_eq!(
        p.backend_sql,
        "INSERT IGNORE INTO orders (sku, `id`) VALUES (?, ?)"
    );
    // The client's own LAST_INSERT_ID: plain ids, theirs kept.
    let p =
        plan("INSERT INTO orders (sku) VALUES (LAST_INSERT_ID(?)) ON DUPLICATE KEY UPDATE qty = 1");
    assert_eq!(p.report, Report::Plain);
    assert_eq!(
        p.backend_sql,
        "INSERT INTO orders (sku, `id`) VALUES (LAST_INSERT_ID(?), ?) ON DUPLICATE KEY UPDATE qty = 1"
    );
}

#[test]
fn captured_ids_beside_generated_ones_are_refused_when_sharded_by_another_column() {
    let rules = RuleSet::from_toml(
        Path::new("t.toml"),
        "[[generator]]\nname = \"g\"\nkind = \"sequence\"\n\
         [[table]]\nname = \"shop.items\"\ncolumn = \"id\"\ngenerator = \"g\"\nshard_key = \"order_id\"\nsharding = \"mod\"\n",
        &["s0", "s1"],
        &|_| Ok(()),
    )
    .unwrap();
    let plan = |sql: &str| plan_query(sql, &rules, &ctx());
    let e = plan("INSERT INTO items (id, order_id) VALUES (@v, 1), (NULL, 2)").unwrap_err();
    assert_eq!(e.code(), 1235);
    assert!(e.to_string().contains("shop.items"), "{e}");
    // Alone, each is fine.
    assert!(matches!(
        plan("INSERT INTO items (id, order_id) VALUES (@v, 1), ((SELECT 9), 2)"),
        Ok(Plan::Rewrite(_))
    ));
    assert!(matches!(
        plan("INSERT INTO items (id, order_id) VALUES (NULL, 1), (7.5, 2)"),
        Ok(Plan::Rewrite(_))
    ));
}

#[test]
fn updates_of_the_id_column_are_captured() {
    let r = rewrite("UPDATE orders SET qty = 1, id = id + 1000 WHERE sku = 'a' LIMIT 5");
    assert_eq!(
        r.statements()[0].update_id.as_ref().map(|h| &*h.generator),
        Some("orders")
    );
    assert_eq!(
        rw("UPDATE orders SET qty = 1, id = id + 1000 WHERE sku = 'a' LIMIT 5"),
        "UPDATE orders SET qty = 1, id = id + 1000, `id` = IF((@idgate_hi := GREATEST(COALESCE(CAST(@idgate_hi AS DECIMAL(20,0)), 0), `id`)) < 0, `id`, `id`) WHERE sku = 'a' LIMIT 5"
    );
    assert_eq!(
        rw("UPDATE LOW_PRIORITY shop.orders AS o SET o.id = 7"),
        "UPDATE LOW_PRIORITY shop.orders AS o SET o.id = 7, `id` = IF((@idgate_hi := GREATEST(COALESCE(CAST(@idgate_hi AS DECIMAL(20,0)), 0), `id`)) < 0, `id`, `id`)"
    );
    // Not the id column, or not a rule table: untouched.
    assert!(matches!(
        plan_query("UPDATE orders SET qty = 1 WHERE id = 3", &rules(), &ctx()),
        Ok(Plan::Passthrough)
    ));
    assert!(matches!(
        plan_query("UPDATE customers SET id = 1", &rules(), &ctx()),
        Ok(Plan::Passthrough)
    ));
    let e = plan_query(
        "UPDATE orders o JOIN customers c ON c.x = o.y SET o.id = 5",
        &rules(),
        &ctx(),
    )
    .unwrap_err();
    assert_eq!(e.code(), 1235);
    let e = plan_query(
        "PREPARE s FROM 'UPDATE orders SET id = 5'",
        &rules(),
        &ctx(),
    )
    .unwrap_err();
    assert_eq!(e.code(), 1235);
}

/// `passes_in_every_mode`: true only for statements `plan_query` passes
/// through under every quoting mode (so a session forwards them before
/// it knows its sql_mode).
#[test]
fn passes_in_every_mode_only_when_every_mode_passes() {
    let cases = [
        ("SELECT 1", true),
        ("  /* note */ select k FROM shop.orders WHERE id = 1", true),
        ("SHOW TABLES", true),
        ("SET time_zone = '+00:00'", true),
        ("BEGIN", true),
        ("COMMIT", true),
        ("(SELECT 1)", true),
        ("", true),
        ("-- only a comment\n", true),
        ("\"INSERT INTO orders (sku) VALUES ('a')\"", true),
        ("DELETE FROM shop.orders WHERE id = 1", true),
        ("INSERT INTO shop.orders (sku) VALUES ('a')", false),
        ("insert into t (a) values (1)", false),
        ("REPLACE INTO shop.orders (sku) VALUES ('a')", false),
        ("UPDATE shop.orders SET id = 5", false),
        ("SELECT LAST_INSERT_ID()", false),
        ("SELECT @@identity", false),
        (
            "SELECT 1; INSERT INTO shop.orders (sku) VALUES ('a')",
            false,
        ),
        ("SELECT ';'", false),
        ("CREATE TABLE t (id INT)", false),
        (
            "PREPARE s FROM 'INSERT INTO shop.orders (sku) VALUES (?)'",
            false,
        ),
        (
            "EXECUTE IMMEDIATE 'INSERT INTO shop.orders (sku) VALUES (1)'",
            false,
        ),
        ("LOAD DATA INFILE 'f' INTO TABLE shop.orders", false),
        (
            "BEGIN NOT ATOMIC INSERT INTO shop.orders (sku) VALUES ('a'); END",
            false,
        ),
        ("l: BEGIN NOT ATOMIC END", false),
        (
            "/*!50000 INSERT INTO shop.orders (sku) VALUES ('a') */",
            false,
        ),
    ];
    for (sql, want) in cases {
        assert_eq!(plan::passes_in_every_mode(sql), want, "{sql}");
        let m = Some(crate::sql::statement::mentions::Mentions::of(
            sql.as_bytes(),
        ));
        assert_eq!(plan::passes_in_every_mode_with(sql, m), want, "{sql}");
        if !want {
            continue;
        }
        for (ansi_quotes, no_backslash_escapes) in
            [(false, false), (true, false), (false, true), (true, true)]
        {
            let c = PlanCtx {
                ansi_quotes,
                no_backslash_escapes,
                ..ctx()
            };
            assert_eq!(
                plan_query(sql, &rules(), &c).unwrap(),
                Plan::Passthrough,
                "{sql} (ansi_quotes {ansi_quotes}, no_backslash_escapes {no_backslash_escapes})"
            );
        }
    }
}

#[test]
fn set_statement_for_a_rule_table_write_is_refused() {
    // MariaDB's per-statement variables: the statement under them would
    // run without idgate's ids (or with explicit ids idgate never saw).
    for (sql, table) in [
        (
            "SET STATEMENT max_statement_time = 5 FOR INSERT INTO orders (qty) VALUES (1)",
            "shop.orders",
        ),
        (
            "set statement sql_mode = 'for', x = (1) for insert into orders (id) values (7)",
            "shop.orders",
        ),
        (
            "SET STATEMENT a = 1 FOR UPDATE orders SET id = 9 WHERE id = 1",
            "shop.orders",
        ),
        (
            "SELECT 1; SET STATEMENT a = 1 FOR REPLACE INTO events (v) VALUES (1)",
            "shop.events",
        ),
    ] {
        match err(sql) {
            SqlError::Unsupported { table: t, what, .. } => {
                assert_eq!(t, table, "{sql}");
                assert!(what.contains("SET STATEMENT"), "{what}");
            }
            e => panic!("{sql}: {e:?}"),
        }
    }
    // Anything else under it is forwarded as it is.
    for sql in [
        "SET STATEMENT max_statement_time = 5 FOR SELECT * FROM orders",
        "SET STATEMENT a = 1 FOR INSERT INTO other.t (id) VALUES (1)",
        "SET STATEMENT a = 1 FOR UPDATE orders SET qty = 2 WHERE id = 1",
        "SET sql_mode = 'for'",
    ] {
        assert_eq!(
            plan_query(sql, &rules(), &ctx()).unwrap(),
            Plan::Passthrough,
            "{sql}"
        );
    }
}

/// `rules()` with the views of a shard: `shop.v` renames the id, `shop.v2`
/// is over `v`, `shop.ro` is read-only, `shop.pv` is over another table,
/// `other.ev` is over the bare rule `events`.
fn rules_with_views() -> RuleSet {
    use crate::rules::views::ViewCatalog;
    let mut r = rules();
    let views = [
        ("shop", "v", "select `shop`.`orders`.`id` AS `oid`,`shop`.`orders`.`sku` AS `sku` from `shop`.`orders`", true),
        ("shop", "v2", "select `shop`.`v`.`oid` AS `top`,`shop`.`v`.`sku` AS `sku` from `shop`.`v`", true),
        ("shop", "ro", "select `shop`.`orders`.`id` AS `id` from `shop`.`orders`", false),
        ("shop", "pv", "select `shop`.`plain`.`id` AS `id` from `shop`.`plain`", true),
        ("other", "ev", "select `e`.`id` AS `id` from `other`.`events` `e`", true),
    ]
    .iter()
    .map(|(s, n, d, u)| viewdef::read(s, n, d, *u))
    .collect();
    r.attach_views(Arc::new(ViewCatalog::new(views)));
    r
}

#[test]
fn writes_through_guarded_views() {
    let r = rules_with_views();
    assert_eq!(r.views().len(), 3, "{:?}", r.views());
    let plan = |sql: &str| plan_query(sql, &r, &ctx());
    for (sql, view) in [
        ("INSERT INTO v (sku) VALUES ('a')", "shop.v"),
        ("REPLACE INTO shop.v2 SET sku = 'a'", "shop.v2"),
        ("INSERT INTO other.ev (id) VALUES (1)", "other.ev"),
        ("SELECT 1; INSERT INTO v (sku) VALUES ('a')", "shop.v"),
        ("UPDATE v SET sku = 'b', oid = 7", "shop.v"),
        ("UPDATE shop.v2 t SET t.top = 7 WHERE sku = 'a'", "shop.v2"),
        ("SELECT 1; UPDATE v SET oid = oid + 1", "shop.v"),
        ("LOAD DATA INFILE '/x' INTO TABLE v (sku)", "shop.v"),
        (
            "BEGIN NOT ATOMIC INSERT INTO v (sku) VALUES ('a'); END",
            "shop.v",
        ),
        ("CREATE PROCEDURE p() UPDATE v SET oid = 5", "shop.v"),
        ("PREPARE s FROM 'INSERT INTO v (sku) VALUES (?)'", "shop.v"),
    ] {
        let e = plan(sql).unwrap_err();
        assert_eq!(e.code(), 1235, "{sql}: {e}");
        let m = e.to_string();
        assert!(m.contains(&format!("view {view} ")), "{sql}: {m}");
        assert!(m.contains("rule table"), "{sql}: {m}");
    }
    for sql in [
        "INSERT INTO ro (id) VALUES (1)",
        "INSERT INTO pv (id) VALUES (1)",
        "INSERT INTO other.v (sku) VALUES ('a')",
        "UPDATE v SET sku = 'b' WHERE oid = 3",
        "DELETE FROM v WHERE oid = 3",
        "SELECT oid FROM v",
        "UPDATE pv SET id = 4",
    ] {
        assert!(
            matches!(plan(sql), Ok(Plan::Passthrough)),
            "{sql}: {:?}",
            plan(sql)
        );
    }
    // Without views nothing changes.
    assert!(matches!(
        plan_query("INSERT INTO v (sku) VALUES ('a')", &rules(), &ctx()),
        Ok(Plan::Passthrough)
    ));
}

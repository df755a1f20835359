//! Rule matching on shards that fold table names (`lower_case_table_names
//! = 1`, the test bed's s3: as on Windows, macOS and some managed
//! services), against the real server: idgate reads the setting at start
//! and matches rule tables case-insensitively there, so `INSERT INTO
//! ORDERS` gets its id and an explicit id written to `Shop.Orders` is
//! observed, as they would be for `orders`. On shards that do not fold,
//! names stay case-sensitive (rules_load and sql tests).

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use support::proxy::{self, Proxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_tables_match_in_any_case_where_the_shard_folds_names() {
    let Some(tb) = support::testbed() else { return };
    // The folding server as the default shard s0.
    let mut folded = tb.clone();
    folded.shards[0] = tb.folded.clone();
    let schema = support::unique("tcase");
    proxy::create_schema(&folded, &schema).await;
    let rules = format!(
        "[[generator]]\nname = \"orders\"\nkind = \"sequence\"\nbatch = 20\n\n\
         [[table]]\nname = \"{schema}.orders\"\ncolumn = \"id\"\ngenerator = \"orders\"\n"
    );
    let p = Proxy::start_rules(&folded, &rules, &format!("/{schema}")).await;
    assert!(
        p.shared.rules.load().is_some_and(|r| r.folds_names()),
        "idgate read lower_case_table_names = 1 from s0"
    );
    let upper = schema.to_uppercase();
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("CREATE TABLE ORDERS (id BIGINT PRIMARY KEY, v INT)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO Orders (v) VALUES (1)")
        .await
        .unwrap();
    let first = c.last_insert_id().expect("an id generated for Orders");
    assert!(first >= 1);
    // An explicit id through another spelling is observed.
    c.query_drop(format!(
        "INSERT INTO `{upper}`.ORDERS (id, v) VALUES (500000, 2)"
    ))
    .await
    .unwrap();
    c.query_drop("INSERT INTO orders (v) VALUES (3)")
        .await
        .unwrap();
    let next = c.last_insert_id().expect("an id generated for orders");
    assert!(next > 500_000, "{next}");
    // No column list: the columns are looked up under this spelling.
    c.query_drop("INSERT INTO ORDERS VALUES (NULL, 4)")
        .await
        .unwrap();
    let last = c.last_insert_id().expect("an id generated for ORDERS");
    assert!(last > next, "{last}");
    let ids: Vec<u64> = c.query("SELECT id FROM orders ORDER BY id").await.unwrap();
    assert_eq!(ids, [first, 500_000, next, last]);
    drop(c);
    proxy::teardown(&folded, p, &schema).await;
}

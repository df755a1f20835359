//! PHP's mysqlnd as a real client: `tests/clients/php/ids.php` inserts
//! generated and explicit ids with PDO (emulated prepares: the text
//! protocol; server-side prepares: COM_STMT_PREPARE/EXECUTE, a NULL id
//! bound) and mysqli (a query, a prepared statement with a NULL id bound),
//! a multi-row INSERT among them, once against MariaDB directly (an
//! AUTO_INCREMENT table) and once through idgate (a rule table). PHP is
//! where applications connect per request, so its drivers must report the
//! stored id as MariaDB's do: on both sides every `lastInsertId()` and
//! `insert_id` of a statement that generated ids is the first row's stored
//! id and `LAST_INSERT_ID()` after it, every generated id is above every id
//! stored before it, and an explicit id is reported as written and leaves
//! `LAST_INSERT_ID()` alone.
//!
//! The script needs `/usr/bin/php` with pdo_mysql and mysqli (apt packages
//! php-cli, php-mysql; `scripts/test.sh` installs them). Under `CI=true`
//! a missing one fails the test; otherwise it is SKIPPED.

mod support;

use serde_json::Value;
use support::drivers::Sides;

const PHP: &str = "/usr/bin/php";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/php/ids.php");

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("a string: {v}"))
}

fn num(v: &Value) -> u64 {
    text(v)
        .parse()
        .unwrap_or_else(|e| panic!("a number: {v}: {e}"))
}

/// What must hold on either side, MariaDB's or idgate's.
fn check_side(run: &Value, side: &str) {
    let rows = run["rows"].as_array().expect("rows");
    let id_of = |k: &str| {
        rows.iter()
            .find(|r| text(&r[0]) == k)
            .map(|r| num(&r[1]))
            .unwrap_or_else(|| panic!("{side}: no row {k}: {run}"))
    };
    let steps = run["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 10, "{side}: {run}");
    for s in steps {
        let name = text(&s["name"]);
        let generated: Vec<&str> = s["generated"]
            .as_array()
            .unwrap()
            .iter()
            .map(text)
            .collect();
        let (insert_id, before, after) = (
            num(&s["insertId"]),
            num(&s["lidBefore"]),
            num(&s["lidAfter"]),
        );
        match generated.first() {
            Some(first) => {
                assert_ne!(insert_id, 0, "{side}, {name}: an id was generated");
                assert_eq!(
                    insert_id,
                    id_of(first),
                    "{side}, {name}: the first row's id"
                );
                assert_eq!(after, insert_id, "{side}, {name}: LAST_INSERT_ID()");
                let max_before = num(&s["maxBefore"]);
                for k in &generated {
                    assert!(
                        id_of(k) > max_before,
                        "{side}, {name}: row {k} got {}, but {max_before} was stored before",
                        id_of(k)
                    );
                }
            }
            None => assert_eq!(after, before, "{side}, {name}: LAST_INSERT_ID() unchanged"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdo_and_mysqli_report_the_stored_ids_as_with_mariadb() {
    let Some(tb) = support::testbed() else { return };
    // php with both extensions (under `CI=true` their absence fails).
    let probe = "exit(extension_loaded('pdo_mysql') && extension_loaded('mysqli') ? 0 : 1);";
    if support::process::tool(PHP, &["-r", probe]).is_none() {
        return;
    }
    let sides = Sides::new(&tb, "cphp").await;
    let (direct, through) = sides.run(&tb, PHP, SCRIPT).await;
    check_side(&direct, "directly");
    check_side(&through, "through idgate");
    // The same steps, the same rows, and the explicit ids reported alike.
    let shape = |run: &Value| -> Vec<(String, Option<String>)> {
        run["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let explicit = s["generated"].as_array().unwrap().is_empty();
                (
                    text(&s["name"]).to_string(),
                    explicit.then(|| text(&s["insertId"]).to_string()),
                )
            })
            .collect()
    };
    assert_eq!(shape(&direct), shape(&through));
    let keys = |run: &Value| -> Vec<String> {
        run["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| text(&r[0]).to_string())
            .collect()
    };
    assert_eq!(keys(&direct), keys(&through));
    sides.finish(&tb).await;
}

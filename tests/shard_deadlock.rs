//! The distributed deadlock detector on the test bed's two real MariaDB
//! shards: a lock cycle across shards (that neither MariaDB can see) is
//! broken by rolling back its youngest transaction, whose client gets
//! MariaDB's own deadlock error (1213, 40001); the other transaction goes
//! on. Cycles within one shard stay InnoDB's; plain lock waits are left
//! alone; without waits the detector does not touch the shards.

mod support;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};
use std::sync::atomic::Ordering;
use std::time::Duration;
use support::proxy::{self, Proxy};

const DEADLOCK: &str = "Deadlock found when trying to get lock; try restarting transaction";

fn rules(schema: &str) -> String {
    format!(
        "[[generator]]\nname = \"seq\"\nkind = \"sequence\"\nbatch = 50\n\n\
         [[table]]\nname = \"{schema}.t\"\ncolumn = \"id\"\ngenerator = \"seq\"\nshard_key = \"id\"\nsharding = \"mod\"\n"
    )
}

/// A proxy with `t` sharded by `id mod 2` over s0 and s1, rows 1..=8 with
/// `c = 0`: 2, 4, 6, 8 on s0, 1, 3, 5, 7 on s1 (not 0: an id of 0 is
/// generated, as with AUTO_INCREMENT).
async fn setup(tb: &support::Testbed) -> (Proxy, String) {
    let schema = support::unique("dlock");
    proxy::create_schema(tb, &schema).await;
    let p = Proxy::start_rules(tb, &rules(&schema), &format!("/{schema}")).await;
    let mut c = Conn::new(p.opts(Some(&schema))).await.unwrap();
    c.query_drop("CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY, c INT NOT NULL)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO t (id, c) VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0), (8, 0)")
        .await
        .unwrap();
    let _ = c.disconnect().await;
    (p, schema)
}

/// A session through idgate that waits for locks longer than any test runs
/// (so a timeout, 1205, cannot pass for the detector's work): far above the
/// 60 s the tests wait for a statement to start waiting.
async fn session(p: &Proxy, schema: &str) -> Conn {
    let mut c = Conn::new(p.opts(Some(schema))).await.unwrap();
    c.query_drop("SET innodb_lock_wait_timeout = 600")
        .await
        .unwrap();
    c
}

async fn direct(tb: &support::Testbed, shard: usize, schema: &str) -> Conn {
    Conn::new(proxy::direct_opts(tb, shard, Some(schema)))
        .await
        .unwrap()
}

/// `(id, c)` of every row on `shard`, read directly.
async fn rows_on(tb: &support::Testbed, shard: usize, schema: &str) -> Vec<(u64, i64)> {
    let mut d = direct(tb, shard, schema).await;
    let rows = d.query("SELECT id, c FROM t ORDER BY id").await.unwrap();
    let _ = d.disconnect().await;
    rows
}

/// Runs `sql` on `c` in a task of its own (it may block on a lock).
fn spawn_query(
    mut c: Conn,
    sql: &'static str,
) -> tokio::task::JoinHandle<(Conn, Result<(), mysql_async::Error>)> {
    tokio::spawn(async move {
        let r = c.query_drop(sql).await;
        (c, r)
    })
}

/// Executes `sql` as a prepared statement with `params` on `c` in a task of
/// its own.
fn spawn_exec(
    mut c: Conn,
    sql: &'static str,
    params: (i64, i64),
) -> tokio::task::JoinHandle<(Conn, Result<(), mysql_async::Error>)> {
    tokio::spawn(async move {
        let r = c.exec_drop(sql, params).await;
        (c, r)
    })
}

/// Waits until `n` statements wait for a lock on table `t` of `schema` on
/// `shard` (read from the shard; other tests' waits do not count). Polls
/// gently: InnoDB refreshes these tables only after 100 ms without readers,
/// and the detector reads them too.
async fn until_waiting(tb: &support::Testbed, shard: usize, schema: &str, n: u64) {
    let mut d = direct(tb, shard, schema).await;
    let table = format!("`{schema}`.`t`");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let waiting: u64 = d
            .exec_first(
                "SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS w \
                 JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.requested_lock_id \
                 WHERE l.lock_table = ?",
                (table.clone(),),
            )
            .await
            .unwrap()
            .unwrap();
        if waiting >= n {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no statement started waiting on shard {shard}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let _ = d.disconnect().await;
}

/// The server error of `r`: (code, SQLSTATE, message).
fn server_error(r: &Result<(), mysql_async::Error>) -> Option<(u16, String, String)> {
    match r {
        Err(mysql_async::Error::Server(e)) => Some((e.code, e.state.clone(), e.message.clone())),
        _ => None,
    }
}

fn assert_deadlock(r: &Result<(), mysql_async::Error>, who: &str) {
    assert_eq!(
        server_error(r),
        Some((1213, "40001".to_string(), DEADLOCK.to_string())),
        "{who}: {r:?}"
    );
}

/// No XA branch of this proxy's is left prepared on either shard.
async fn assert_no_prepared_branch(tb: &support::Testbed, p: &Proxy, schema: &str) {
    let tag = p.shared.xa_tag.as_bytes().to_vec();
    for shard in 0..2 {
        let mut d = direct(tb, shard, schema).await;
        let pending: Vec<Row> = d.query("XA RECOVER").await.unwrap();
        let ours = pending
            .iter()
            .filter(|r| {
                r.get::<Vec<u8>, _>(3)
                    .is_some_and(|x| x.windows(tag.len()).any(|w| w == tag))
            })
            .count();
        let _ = d.disconnect().await;
        assert_eq!(ours, 0, "a branch left prepared on shard {shard}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_between_two_transactions_across_shards_rolls_back_the_younger() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut a = session(&p, &schema).await;
    let mut b = session(&p, &schema).await;
    a.query_drop("BEGIN").await.unwrap();
    a.query_drop("UPDATE t SET c = 10 WHERE id = 2")
        .await
        .unwrap();
    // B starts later: the younger transaction. It writes on both shards.
    b.query_drop("BEGIN").await.unwrap();
    b.query_drop("UPDATE t SET c = 20 WHERE id = 1")
        .await
        .unwrap();
    b.query_drop("UPDATE t SET c = 20 WHERE id = 4")
        .await
        .unwrap();
    // A waits on s1 for B; then B waits on s0 for A: a cycle over both
    // shards. B's statement is a prepared one (COM_STMT_EXECUTE).
    let a_wait = spawn_query(a, "UPDATE t SET c = 10 WHERE id = 1");
    until_waiting(&tb, 1, &schema, 1).await;
    let b_wait = spawn_exec(b, "UPDATE t SET c = ? WHERE id = ?", (20, 2));
    let (mut b, b_result) = b_wait.await.unwrap();
    let (mut a, a_result) = a_wait.await.unwrap();
    assert_deadlock(&b_result, "the younger transaction is the victim");
    assert!(a_result.is_ok(), "the other one goes on: {a_result:?}");
    assert_eq!(p.shared.deadlocks_resolved.load(Ordering::Relaxed), 1);
    a.query_drop("COMMIT").await.unwrap();
    // A's writes are there; B's are rolled back on both shards.
    assert_eq!(
        rows_on(&tb, 0, &schema).await,
        [(2, 10), (4, 0), (6, 0), (8, 0)]
    );
    assert_eq!(
        rows_on(&tb, 1, &schema).await,
        [(1, 10), (3, 0), (5, 0), (7, 0)]
    );
    // The victim is out of its transaction and works as after a deadlock
    // MariaDB detects itself.
    let in_txn: u64 = b
        .query_first("SELECT @@in_transaction")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(in_txn, 0);
    b.query_drop("BEGIN").await.unwrap();
    b.query_drop("UPDATE t SET c = 21 WHERE id = 4")
        .await
        .unwrap();
    b.query_drop("UPDATE t SET c = 21 WHERE id = 3")
        .await
        .unwrap();
    b.query_drop("COMMIT").await.unwrap();
    assert_eq!(rows_on(&tb, 0, &schema).await[1], (4, 21));
    assert_eq!(rows_on(&tb, 1, &schema).await[1], (3, 21));
    assert_no_prepared_branch(&tb, &p, &schema).await;
    drop((a, b));
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_between_two_autocommit_writes_on_both_shards() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut h = session(&p, &schema).await;
    let a = session(&p, &schema).await;
    let b = session(&p, &schema).await;
    // H holds row 1 (s1). A's write locks row 2 on s0 and waits on s1 for
    // row 1, before it gets to row 3 (rows are locked in key order).
    h.query_drop("BEGIN").await.unwrap();
    h.query_drop("UPDATE t SET c = c + 100 WHERE id = 1")
        .await
        .unwrap();
    let a_wait = spawn_query(a, "UPDATE t SET c = c + 1 WHERE id IN (1, 2, 3)");
    until_waiting(&tb, 1, &schema, 1).await;
    // B's write locks row 3 on s1 and waits on s0 for A's row 2.
    let b_wait = spawn_query(b, "UPDATE t SET c = c + 10 WHERE id IN (2, 3)");
    until_waiting(&tb, 0, &schema, 1).await;
    // H lets A have row 1; A then waits for B's row 3 on s1: a cycle.
    h.query_drop("COMMIT").await.unwrap();
    let (b, b_result) = b_wait.await.unwrap();
    let (a, a_result) = a_wait.await.unwrap();
    assert_deadlock(&b_result, "the younger write is the victim");
    assert!(a_result.is_ok(), "the older write goes on: {a_result:?}");
    assert_eq!(p.shared.deadlocks_resolved.load(Ordering::Relaxed), 1);
    // A's write is committed on both shards; nothing of B's is anywhere.
    assert_eq!(
        rows_on(&tb, 0, &schema).await,
        [(2, 1), (4, 0), (6, 0), (8, 0)]
    );
    assert_eq!(
        rows_on(&tb, 1, &schema).await,
        [(1, 101), (3, 1), (5, 0), (7, 0)]
    );
    // The victim retries, as a driver would on 1213.
    let mut b = b;
    b.query_drop("UPDATE t SET c = c + 10 WHERE id IN (2, 3)")
        .await
        .unwrap();
    assert_eq!(rows_on(&tb, 0, &schema).await[0], (2, 11));
    assert_eq!(rows_on(&tb, 1, &schema).await[1], (3, 11));
    assert_no_prepared_branch(&tb, &p, &schema).await;
    drop((a, b, h));
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_between_plain_transactions_reading_for_update() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut a = session(&p, &schema).await;
    let mut b = session(&p, &schema).await;
    // autocommit = 0: plain transactions, one write shard each, reads
    // FOR UPDATE on the other shard.
    a.query_drop("SET autocommit = 0").await.unwrap();
    b.query_drop("SET autocommit = 0").await.unwrap();
    a.query_drop("UPDATE t SET c = 10 WHERE id = 2")
        .await
        .unwrap();
    b.query_drop("UPDATE t SET c = 20 WHERE id = 1")
        .await
        .unwrap();
    let a_wait = spawn_query(a, "SELECT c FROM t WHERE id = 1 FOR UPDATE");
    until_waiting(&tb, 1, &schema, 1).await;
    let b_wait = spawn_query(b, "SELECT c FROM t WHERE id = 2 FOR UPDATE");
    let (mut b, b_result) = b_wait.await.unwrap();
    let (mut a, a_result) = a_wait.await.unwrap();
    assert_deadlock(&b_result, "the younger transaction is the victim");
    assert!(a_result.is_ok(), "{a_result:?}");
    a.query_drop("COMMIT").await.unwrap();
    assert_eq!(rows_on(&tb, 0, &schema).await[0], (2, 10));
    assert_eq!(
        rows_on(&tb, 1, &schema).await[0],
        (1, 0),
        "B's write is rolled back"
    );
    // B goes on with autocommit still off, in a new transaction.
    b.query_drop("UPDATE t SET c = 22 WHERE id = 1")
        .await
        .unwrap();
    b.query_drop("COMMIT").await.unwrap();
    assert_eq!(rows_on(&tb, 1, &schema).await[0], (1, 22));
    assert_eq!(p.shared.deadlocks_resolved.load(Ordering::Relaxed), 1);
    drop((a, b));
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_within_one_shard_is_left_to_innodb() {
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut a = session(&p, &schema).await;
    let mut b = session(&p, &schema).await;
    a.query_drop("BEGIN").await.unwrap();
    a.query_drop("UPDATE t SET c = 10 WHERE id = 2")
        .await
        .unwrap();
    b.query_drop("BEGIN").await.unwrap();
    b.query_drop("UPDATE t SET c = 20 WHERE id = 4")
        .await
        .unwrap();
    let a_wait = spawn_query(a, "UPDATE t SET c = 10 WHERE id = 4");
    until_waiting(&tb, 0, &schema, 1).await;
    let b_result = b.query_drop("UPDATE t SET c = 20 WHERE id = 2").await;
    let (mut a, a_result) = a_wait.await.unwrap();
    // InnoDB breaks it at once and picks its own victim; the message is the
    // one idgate copies for its victims.
    let errors: Vec<_> = [&a_result, &b_result]
        .into_iter()
        .filter_map(server_error)
        .collect();
    assert_eq!(
        errors,
        [(1213, "40001".to_string(), DEADLOCK.to_string())],
        "a: {a_result:?}, b: {b_result:?}"
    );
    assert_eq!(
        p.shared.deadlocks_resolved.load(Ordering::Relaxed),
        0,
        "not the detector's"
    );
    for c in [&mut a, &mut b] {
        let _ = c.query_drop("COMMIT").await;
    }
    drop((a, b));
    proxy::teardown(&tb, p, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_detector_reads_the_shards_only_while_a_statement_waits() {
    use idgate::frontend::txn::watchlist::{state, state_of};
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut a = session(&p, &schema).await;
    let mut b = session(&p, &schema).await;
    // Two transactions holding locks on both shards, idle between
    // statements: nothing waits, the detector does not look.
    a.query_drop("BEGIN").await.unwrap();
    a.query_drop("UPDATE t SET c = 10 WHERE id IN (1, 2)")
        .await
        .unwrap();
    b.query_drop("BEGIN").await.unwrap();
    b.query_drop("UPDATE t SET c = 20 WHERE id IN (3, 4)")
        .await
        .unwrap();
    // A session marks its round trip over just after relaying the reply,
    // and a look that saw a statement of the set-up still running (a slow
    // machine makes one take longer than the interval) counts itself just
    // after it read the registry: let both settle before counting.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while p
        .shared
        .watch
        .snapshot()
        .iter()
        .any(|v| v.slots.iter().any(|s| state_of(s.word) != state::IDLE))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a round trip still under way"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before = p.shared.deadlock_scans.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        p.shared.deadlock_scans.load(Ordering::Relaxed),
        before,
        "no scan while nothing waits"
    );
    // A plain lock wait (no cycle): the detector looks, and kills nothing.
    let b_wait = spawn_query(b, "UPDATE t SET c = 20 WHERE id = 2");
    until_waiting(&tb, 0, &schema, 1).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while p.shared.deadlock_scans.load(Ordering::Relaxed) == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the detector never looked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.query_drop("COMMIT").await.unwrap();
    let (mut b, b_result) = b_wait.await.unwrap();
    assert!(
        b_result.is_ok(),
        "a lock wait is not a deadlock: {b_result:?}"
    );
    b.query_drop("COMMIT").await.unwrap();
    assert_eq!(p.shared.deadlocks_resolved.load(Ordering::Relaxed), 0);
    assert_eq!(rows_on(&tb, 0, &schema).await[0], (2, 20));
    assert_eq!(rows_on(&tb, 1, &schema).await[0], (1, 10));
    drop((a, b));
    proxy::teardown(&tb, p, &schema).await;
}

/// The race the registry guards against, played by hand with the detector's
/// own steps: the detector claims a round trip that is waiting, but the
/// statement finishes before the KILL arrives. The client gets the
/// statement's result; the session holds its next command back until the
/// KILL is answered, so the KILL lands on the idle connection (MariaDB
/// forgets it at the next command) and the transaction goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_that_lands_after_the_statement_finished_is_harmless() {
    use idgate::frontend::txn::watchlist::{state, state_of};
    let Some(tb) = support::testbed() else { return };
    let (p, schema) = setup(&tb).await;
    let mut a = session(&p, &schema).await;
    a.query_drop("BEGIN").await.unwrap();
    a.query_drop("UPDATE t SET c = 5 WHERE id = 1")
        .await
        .unwrap();
    // H (a direct client) holds row 2 on s0; A's UPDATE of it waits.
    let mut h = direct(&tb, 0, &schema).await;
    h.query_drop("BEGIN").await.unwrap();
    h.query_drop("SELECT c FROM t WHERE id = 2 FOR UPDATE")
        .await
        .unwrap();
    let a_wait = spawn_query(a, "UPDATE t SET c = 7 WHERE id = 2");
    until_waiting(&tb, 0, &schema, 1).await;
    // Claim A's waiting round trip on s0, as the detector does before a KILL.
    let view = p
        .shared
        .watch
        .snapshot()
        .into_iter()
        .find(|v| state_of(v.slots[0].word) == state::RUNNING)
        .expect("A's round trip on s0 is registered");
    let slot = view.slots[0];
    assert!(view.entry.claim(0, slot.word));
    view.entry.mark_victim();
    // The statement gets its lock and finishes before the KILL is sent.
    h.query_drop("COMMIT").await.unwrap();
    let (a, a_result) = a_wait.await.unwrap();
    assert!(a_result.is_ok(), "the statement's own result: {a_result:?}");
    assert_eq!(a.affected_rows(), 1);
    // A's next command is held back while the KILL is under way.
    let a_next = spawn_query(a, "UPDATE t SET c = 8 WHERE id = 4");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!a_next.is_finished(), "A's next command waits for the KILL");
    let command: Option<String> = h
        .exec_first(
            "SELECT COMMAND FROM information_schema.PROCESSLIST WHERE ID = ?",
            (slot.conn,),
        )
        .await
        .unwrap();
    assert_eq!(command.as_deref(), Some("Sleep"), "nothing sent to s0 yet");
    // The KILL arrives late, on the idle connection; then it is answered.
    h.query_drop(format!("KILL QUERY {}", slot.conn))
        .await
        .unwrap();
    view.entry.release(0, slot.word);
    let (mut a, next_result) = a_next.await.unwrap();
    assert!(
        next_result.is_ok(),
        "the next statement is not hit: {next_result:?}"
    );
    a.query_drop("COMMIT").await.unwrap();
    assert_eq!(rows_on(&tb, 0, &schema).await[..2], [(2, 7), (4, 8)]);
    assert_eq!(rows_on(&tb, 1, &schema).await[0], (1, 5));
    assert_eq!(p.shared.deadlocks_resolved.load(Ordering::Relaxed), 0);
    let _ = h.disconnect().await;
    drop(a);
    proxy::teardown(&tb, p, &schema).await;
}

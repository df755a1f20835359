//! The shards' views, read into the rules in force
//! ([`crate::rules::views`]): at start-up (with the probe of the shards),
//! after DDL through idgate that may create, change or rename a view, and
//! with each reload of the rules (`IDGATE RELOAD RULES`, `kill -HUP`: also
//! how views made on a shard directly are learned).
//!
//! Every shard is read (`information_schema.VIEWS`), all at once, each on
//! a connection of idgate's own. A shard that does not answer keeps the views known
//! from it before (the catalog only grows then, never loses a guard for
//! lack of an answer).

use crate::backend::BackendError;
use crate::frontend::shared::Shared;
use crate::rules::views::{ViewCatalog, ViewDef};
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// The views of one shard, outside MariaDB's own schemas.
const VIEWS: &str = "SELECT TABLE_SCHEMA, TABLE_NAME, VIEW_DEFINITION, IS_UPDATABLE \
     FROM information_schema.VIEWS \
     WHERE TABLE_SCHEMA NOT IN ('mysql', 'sys', 'information_schema', 'performance_schema')";

/// Runs `futures` concurrently on this task; their outputs in order.
async fn all<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in futures.iter_mut().zip(outs.iter_mut()) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outs.into_iter().flatten().collect()
}

/// Whether DDL `sql` (run through idgate; one that may bring rows under
/// a name, `write/adopted.rs`) may have made, changed or renamed a view:
/// it says `VIEW` or renames, or some view is guarded already (a new
/// table may take a dropped view's name). DDL is rare; a needless reading
/// costs one query per shard.
pub fn may_change_views(sql: &[u8], guarded: bool) -> bool {
    guarded
        || sql.windows(4).any(|w| w.eq_ignore_ascii_case(b"VIEW"))
        || sql.windows(6).any(|w| w.eq_ignore_ascii_case(b"RENAME"))
}

impl Shared {
    /// Reads every shard's views and gives them to the rules in force
    /// (nothing to do when idgate runs without rules). A shard that fails is logged and keeps what
    /// was known of it. One reading at a time; a request that waited
    /// through a reading that began after it is served by that one, so a
    /// burst of DDL (or a client repeating one) costs one reading.
    pub async fn read_views(&self) {
        if !self.rules.is_some() {
            return;
        }
        let mine = self.rules.views_asked.ask();
        let _one = self.rules.reading_views.lock().await;
        let Some(upto) = self.rules.views_asked.start(mine) else {
            // Read meanwhile, by a reading that began after this request.
            return;
        };
        let before = self.rules.views();
        // Every shard at once: a shard that does not answer costs its
        // connect timeout once, not once per shard before it.
        let mut views: Vec<ViewDef> = Vec::new();
        let mut failed = false;
        let reads = all((0..self.config.shards.len()).map(|shard| self.shard_views(shard))).await;
        for (shard, read) in reads.into_iter().enumerate() {
            match read {
                Ok(v) => views.extend(v),
                Err(e) => {
                    failed = true;
                    tracing::warn!(
                        shard = %self.config.shards[shard].name,
                        "views not read ({e}): the views known before stay guarded"
                    );
                }
            }
        }
        if failed {
            views.extend(before.views().iter().cloned());
        }
        let catalog = ViewCatalog::new(views);
        let read = catalog.views().len();
        let changed = self.rules.set_views(catalog);
        self.rules.views_asked.done(upto);
        if changed {
            let guarded = self.rules.load().map_or(0, |r| r.views().len());
            tracing::info!(
                views = read,
                guarded,
                "the shards' views read: writes of ids through the guarded ones (updatable, over a rule table) are refused"
            );
        }
    }

    /// One shard's views.
    async fn shard_views(&self, shard: usize) -> Result<Vec<ViewDef>, BackendError> {
        let mut c = self.side_connection(shard).await?;
        let rows = c.query_rows(VIEWS).await;
        let _ = c.send(&[crate::protocol::consts::cmd::QUIT]).await;
        Ok(rows?
            .into_iter()
            .filter_map(|r| {
                let mut r = r.into_iter();
                let schema = r.next()??;
                let name = r.next()??;
                let definition = r.next()?.unwrap_or_default();
                let updatable = r.next()?.is_some_and(|u| u.eq_ignore_ascii_case("YES"));
                if definition.is_empty() && updatable {
                    // MariaDB shows a definition only to an account with
                    // SHOW VIEW on it: what the view reads is unknown.
                    tracing::warn!(
                        shard = %self.config.shards[shard].name,
                        view = %format!("{schema}.{name}"),
                        "the view's definition is hidden from the [backend] account (grant it SHOW VIEW): writes through it are not checked"
                    );
                }
                Some(crate::sql::viewdef::read(
                    &schema,
                    &name,
                    &definition,
                    updatable,
                ))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::{all, may_change_views};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn all_runs_at_once_and_keeps_the_order() {
        let start = tokio::time::Instant::now();
        let out = all([30u64, 10, 20].into_iter().map(|ms| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            ms
        }))
        .await;
        assert_eq!(out, vec![30, 10, 20]);
        // The slowest, not the sum (the clock is paused: exact).
        assert_eq!(start.elapsed(), Duration::from_millis(30));
    }

    #[test]
    fn which_ddl_reads_the_views_again() {
        for sql in [
            "CREATE VIEW v AS SELECT 1",
            "create or replace algorithm=merge view v as select * from t",
            "ALTER VIEW v AS SELECT 2",
            "RENAME TABLE a TO b",
            "ALTER TABLE a RENAME TO b",
        ] {
            assert!(may_change_views(sql.as_bytes(), false), "{sql}");
        }
        assert!(!may_change_views(b"CREATE TABLE t (id INT)", false));
        assert!(may_change_views(b"CREATE TABLE t (id INT)", true));
    }
}

//! Recovery from the XA commit log (`xalog.rs`): every idgate looks at
//! `XA RECOVER` on every shard when it starts and every 10 s after, and
//! finishes the branches of dead servers: commit where a commit was
//! recorded, roll back where none was.

use crate::backend::BackendError;
use crate::frontend::shared::Shared;
use crate::frontend::txn::xalog::{Recovered, XaLog};
use std::collections::BTreeSet;
use std::sync::Arc;
use tracing::{info, warn};

/// With routing on and an allocator to keep records in: opens the commit
/// log (xids made from now on carry its prefix) and finishes the branches
/// earlier incarnations left, in the background. Without it, xids carry
/// the server tag and a dead idgate's branches are ended by hand.
pub async fn start(shared: &Arc<Shared>) {
    if !shared.routing || shared.xa_log.initialized() {
        return;
    }
    let Some(allocator) = shared.allocator.as_ref() else {
        return;
    };
    let log = match XaLog::open(allocator.store()).await {
        Ok(log) => Arc::new(log),
        Err(e) => {
            warn!("no XA commit log (cannot lease an XA node id: {e}); a multi-shard commit interrupted by an idgate crash must be ended by hand (XA RECOVER)");
            return;
        }
    };
    info!(prefix = log.prefix(), "XA commit log open");
    if shared.xa_log.set(log.clone()).is_err() {
        return;
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        while !log.is_closed() {
            let done = recover(&log, &shared).await;
            if done != Recovered::default() {
                info!(
                    committed = done.committed,
                    rolled_back = done.rolled_back,
                    "XA recovery pass finished"
                );
            }
            shared
                .xa_recoveries
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::select! {
                _ = tokio::time::sleep(RECOVERY_EVERY) => {}
                _ = shared.xa_recover_now.notified() => {}
                _ = log.close_now.notified() => {}
            }
        }
    });
}

/// How often every idgate looks for branches of dead servers (one
/// `XA RECOVER` per shard).
const RECOVERY_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Gives the commit log's node id back (clean shutdown).
pub async fn stop(shared: &Shared) {
    if let Some(log) = shared.xa_log.get() {
        log.close().await;
    }
}

/// Finishes, on every shard, the prepared branches of dead servers
/// (see [`XaLog::is_dead`]): commit where a commit was recorded, roll
/// back where none was. A shard that cannot be reached is logged and
/// left for the next pass.
pub async fn recover(log: &XaLog, shared: &Shared) -> Recovered {
    let mut done = Recovered::default();
    let mut committed_xids = BTreeSet::new();
    let mut complete = true;
    for shard in 0..shared.config.shards.len() {
        match recover_shard(log, shared, shard, &mut committed_xids).await {
            Ok(r) => {
                done.committed += r.committed;
                done.rolled_back += r.rolled_back;
            }
            Err(e) => {
                complete = false;
                warn!(shard = %shared.config.shards[shard].name, "XA recovery skipped this shard: {e}");
            }
        }
    }
    if complete {
        for xid in committed_xids {
            if let Err(e) = log.forget(&xid).await {
                warn!(%xid, "cannot delete the XA commit record: {e}");
            }
        }
    }
    done
}

async fn recover_shard(
    log: &XaLog,
    shared: &Shared,
    shard: usize,
    committed_xids: &mut BTreeSet<String>,
) -> Result<Recovered, String> {
    let name = &shared.config.shards[shard].name;
    let mut conn = shared
        .side_connection(shard)
        .await
        .map_err(|e| e.to_string())?;
    let rows = conn
        .query_rows("XA RECOVER")
        .await
        .map_err(|e| e.to_string())?;
    let mut done = Recovered::default();
    // Columns: formatID, gtrid_length, bqual_length, data.
    for xid in rows
        .into_iter()
        .filter_map(|r| r.into_iter().nth(3).flatten())
    {
        if !log.is_dead(&xid).await.map_err(|e| e.to_string())? {
            continue;
        }
        let commit = log.decided(&xid).await.map_err(|e| e.to_string())?;
        let verb = if commit { "COMMIT" } else { "ROLLBACK" };
        match conn.query_rows(&format!("XA {verb} '{xid}'")).await {
            Ok(_) => {}
            // Unknown xid: finished meanwhile.
            Err(BackendError::Server { err, .. }) if err.code == 1397 => {}
            Err(e) => return Err(e.to_string()),
        }
        info!(shard = %name, %xid, "XA recovery: {} a branch left prepared by an earlier idgate", if commit { "committed" } else { "rolled back" });
        if commit {
            done.committed += 1;
            committed_xids.insert(xid);
        } else {
            done.rolled_back += 1;
        }
    }
    Ok(done)
}

//! The accept loop: connection limit and graceful shutdown.
//!
//! `run(listener, shared, shutdown)` serves until `shutdown` resolves, then
//! stops accepting, tells every session to finish (sessions close when idle
//! and outside a transaction) and waits up to the drain timeout before
//! cutting the rest. With routing on, the distributed deadlock detector
//! (`frontend::deadlock`) runs alongside for as long.

use crate::frontend::txn::deadlock;
use crate::frontend::{session, Shared};
use crate::protocol::codes;
use crate::protocol::packet::PacketConn;
use crate::protocol::reply;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{error, info, warn};

/// Aborts a task when dropped (also when `run` itself is dropped).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves clients on `listener` until `shutdown` completes.
pub async fn run(listener: TcpListener, shared: Arc<Shared>, shutdown: impl Future<Output = ()>) {
    crate::frontend::txn::recovery::start(&shared).await;
    let limit = Arc::new(Semaphore::new(shared.config.server.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut sessions = JoinSet::new();
    let mut backoff = Duration::from_millis(5);
    // The deadlock detector runs as long as the server (through the drain:
    // sessions finishing their transactions can still deadlock).
    let _detector = shared
        .deadlock_detection
        .then(|| AbortOnDrop(tokio::spawn(deadlock::run(shared.clone()))));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => r,
            Some(done) = sessions.join_next(), if !sessions.is_empty() => {
                if let Err(e) = done {
                    if e.is_panic() {
                        error!("a session panicked: {e}");
                    }
                }
                continue;
            }
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff = Duration::from_millis(5);
                stream
            }
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                warn!("accept failed: {e}; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        match limit.clone().try_acquire_owned() {
            Ok(permit) => {
                let shared = shared.clone();
                let stop = stop_rx.clone();
                sessions.spawn(async move {
                    session::serve(shared, stream, stop).await;
                    drop(permit);
                });
            }
            Err(_) => {
                sessions.spawn(async move {
                    let mut conn = PacketConn::new(stream);
                    let err = reply::err_packet(&codes::ER_CON_COUNT_ERROR, "Too many connections");
                    let _ = conn.write_packet(0, &err).await;
                    conn.shutdown().await;
                });
            }
        }
    }
    drop(listener);
    let drain = Duration::from_secs(shared.config.server.drain_timeout_secs);
    info!(
        sessions = sessions.len(),
        "shutting down: no new connections; draining for up to {drain:?}"
    );
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(drain, async {
        while sessions.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            sessions = sessions.len(),
            "drain timeout reached; closing the remaining sessions"
        );
        sessions.shutdown().await;
    }
    crate::frontend::txn::recovery::stop(&shared).await;
    info!("stopped");
}

//! The accept loop of the Redis-protocol listener: connection limit and
//! graceful shutdown, as `crate::server` does for MySQL clients.
//!
//! `run(listener, service, shutdown)` serves until `shutdown` resolves,
//! then stops accepting and tells every connection to stop: each answers
//! the commands it has already read, then closes. Connections still open
//! after the drain timeout are cut.

use super::{session, Service};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{error, info, warn};

/// Serves Redis-protocol clients on `listener` until `shutdown` completes.
pub async fn run(listener: TcpListener, service: Arc<Service>, shutdown: impl Future<Output = ()>) {
    let limit = Arc::new(Semaphore::new(service.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut backoff = Duration::from_millis(5);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            r = listener.accept() => r,
            Some(done) = conns.join_next(), if !conns.is_empty() => {
                if let Err(e) = done {
                    if e.is_panic() {
                        error!("a Redis-protocol connection panicked: {e}");
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
                warn!("resp: accept failed: {e}; retrying in {backoff:?}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match limit.clone().try_acquire_owned() {
            Ok(permit) => {
                let service = service.clone();
                let stop = stop_rx.clone();
                conns.spawn(session::serve(service, stream, stop, permit));
            }
            Err(_) => {
                conns.spawn(async move {
                    let mut stream = stream;
                    let _ = stream
                        .write_all(b"-ERR max number of clients reached\r\n")
                        .await;
                    let _ = stream.shutdown().await;
                });
            }
        }
    }
    drop(listener);
    info!(
        connections = conns.len(),
        "resp: shutting down: no new connections; draining for up to {:?}", service.drain
    );
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(service.drain, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            connections = conns.len(),
            "resp: drain timeout reached; closing the remaining connections"
        );
        conns.shutdown().await;
    }
    info!("resp: stopped");
}

//! The accept loop: connection limit and graceful shutdown.
//!
//! `run(listener, shared, shutdown)` serves until `shutdown` resolves, then
//! stops accepting, tells every session to finish (sessions close when idle
//! and outside a transaction) and waits up to the drain timeout before
//! cutting the rest (the loop itself is [`crate::listener::serve`]). With routing on, the distributed deadlock detector
//! (`frontend::deadlock`) runs alongside for as long; on an etcd store, so
//! does the resharding pause follower (`frontend::pause::follow`), whose
//! member record is removed once the sessions are drained.

use crate::frontend::txn::deadlock;
use crate::frontend::Shared;
use crate::listener::{self, Accepted, Limits};
use crate::protocol::codes;
use crate::protocol::packet::PacketConn;
use crate::protocol::reply;
use crate::workers::Workers;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Aborts a task when dropped (also when `run` itself is dropped).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Re-reads the client certificate and key on every SIGHUP: new
/// connections get the new certificate, sessions keep theirs. A file that
/// does not load leaves the old certificate in use (logged).
fn reload_on_sighup(tls: Arc<crate::tls::ClientTls>) -> Option<AbortOnDrop> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("no SIGHUP handler, the TLS certificate is not reloaded: {e}");
            return None;
        }
    };
    Some(AbortOnDrop(tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match tls.reload() {
                Ok(()) => tracing::info!(
                    cert = %tls.cert_path().display(),
                    "SIGHUP: TLS certificate reloaded"
                ),
                Err(e) => {
                    tracing::error!("SIGHUP: TLS certificate not reloaded, the old one stays: {e}")
                }
            }
        }
    })))
}

/// The session threads `server.session_threads` asks for (none: the
/// sessions run on the shared runtime, also when the threads cannot be
/// started, which is logged).
fn session_threads(shared: &Shared) -> Option<Workers> {
    match shared.config.server.session_threads {
        0 => None,
        n => match Workers::start(n) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::error!(
                    "cannot start {n} session threads (server.session_threads): {e}; \
                     sessions run on the shared runtime"
                );
                None
            }
        },
    }
}

/// Serves clients on `listener` until `shutdown` completes.
pub async fn run(listener: TcpListener, shared: Arc<Shared>, shutdown: impl Future<Output = ()>) {
    // Registered before the first client is accepted: a SIGHUP sent once
    // a client got in is never the default action (exit).
    let _tls_reload = shared.client_tls.clone().and_then(reload_on_sighup);
    crate::frontend::txn::recovery::start(&shared).await;
    // The deadlock detector runs as long as the server (through the drain:
    // sessions finishing their transactions can still deadlock).
    let _detector = shared
        .deadlock_detection
        .then(|| AbortOnDrop(tokio::spawn(deadlock::run(shared.clone()))));
    // The shard connection pools' upkeep (idle expiry, pool_min_idle).
    let _pools = AbortOnDrop(tokio::spawn(crate::frontend::session::pooled::maintain(
        shared.clone(),
    )));
    // Resharding cutovers: this idgate joins the members and follows the
    // pause epochs (`frontend/pause`; an etcd store only).
    let pause = crate::frontend::pause::follow::start(shared.clone()).map(AbortOnDrop);
    let limits = Limits {
        max_connections: shared.config.server.max_connections,
        drain: Duration::from_secs(shared.config.server.drain_timeout_secs),
        name: "mysql",
    };
    let nodelay_inherited = listener::set_nodelay(&listener);
    let workers = session_threads(&shared).map(Arc::new);
    shared.session_threads.store(workers.clone());
    let serve_shared = shared.clone();
    let serve = move |stream: Accepted, peer, permit, stop| {
        let shared = serve_shared.clone();
        // Boxed: a session's future is about 10 KiB, which the runtime
        // would otherwise copy several times as it spawns and ends it.
        Box::pin(async move {
            let Some(stream) = stream.register_or_log(peer) else {
                return;
            };
            let client = PacketConn::accepted(stream, peer, nodelay_inherited);
            crate::frontend::engine::serve(shared, client, stop).await;
            drop(permit);
        })
    };
    let refuse = |stream: Accepted| async move {
        let Ok(stream) = stream.register() else {
            return;
        };
        let mut conn = PacketConn::new(stream);
        let err = reply::err_packet(&codes::ER_CON_COUNT_ERROR, "Too many connections");
        let _ = conn.write_packet(0, &err).await;
        conn.shutdown().await;
    };
    listener::serve(listener, limits, workers, shutdown, serve, refuse).await;
    shared.session_threads.store(None);
    drop(pause);
    crate::frontend::pause::follow::leave(&shared).await;
    crate::frontend::txn::recovery::stop(&shared).await;
}

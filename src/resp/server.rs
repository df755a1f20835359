//! The Redis-protocol listener: its connections and refusals, on the
//! accept loop the MySQL listener uses too ([`crate::listener::serve`]).
//!
//! `run(listener, service, shutdown)` serves until `shutdown` resolves,
//! then stops accepting and tells every connection to stop: each answers
//! the commands it has already read, then closes. Connections still open
//! after the drain timeout are cut.

use super::{session, Service};
use crate::listener::{self, Accepted, Limits};
use std::future::Future;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// Serves Redis-protocol clients on `listener` until `shutdown` completes.
pub async fn run(listener: TcpListener, service: Arc<Service>, shutdown: impl Future<Output = ()>) {
    let limits = Limits {
        max_connections: service.max_connections,
        drain: service.drain,
        name: "resp",
    };
    let serve = move |stream: Accepted, peer: std::net::SocketAddr, permit, stop| {
        let service = service.clone();
        async move {
            let Some(stream) = stream.register_or_log(peer) else {
                return;
            };
            let _ = stream.set_nodelay(true);
            session::serve(service, stream, peer, stop, permit).await
        }
    };
    let refuse = |stream: Accepted| async move {
        let Ok(mut stream) = stream.register() else {
            return;
        };
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        let _ = stream.shutdown().await;
    };
    listener::serve(listener, limits, None, shutdown, serve, refuse).await;
}

//! idgate's own client connections to the shards.
//!
//! - [`conn`]: connect and log in to a shard, send commands, run private queries.
//! - [`lidclaim`]: a session's `LAST_INSERT_ID()` left unread on a pooled
//!   connection (multiplexing), read only when somebody needs it.
//! - [`pool`]: the shared pool of logged-in connections per shard (cap,
//!   waiting line, idle expiry).
//! - [`relay`]: pass a shard's reply to the client packet by packet.

pub mod conn;
pub mod lidclaim;
pub mod pool;
pub mod relay;

pub use conn::{BackendConn, BackendError, ConnectParams};

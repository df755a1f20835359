//! The client side: one task per client connection.
//!
//! - [`shared`]: state shared by all sessions (config, users, what the shards announce).
//! - [`login`]: the handshake and authentication of a client.
//! - [`session`]: the command loop and per-session state.
//! - [`stmt`]: the session's prepared statements and their ids on each shard.

pub mod login;
pub mod session;
pub mod shared;
pub mod stmt;

pub use session::Session;
pub use shared::Shared;

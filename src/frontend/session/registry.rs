//! Every session of the server, by idgate connection id: what `KILL` from
//! another session needs of each (its login user, its shard connections'
//! thread ids, a kill flag and a wake-up). `kill.rs` runs the `KILL`.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// What a session exposes to `KILL` from other sessions.
#[derive(Debug)]
pub struct Control {
    /// The login user (changed by COM_CHANGE_USER).
    pub(in crate::frontend) user: Mutex<String>,
    /// MariaDB's thread id of the session's connection to each shard.
    pub(in crate::frontend) threads: Mutex<Vec<Option<u32>>>,
    pub(in crate::frontend) killed: AtomicBool,
    /// Wakes the session when it is killed (a stored permit if it is busy).
    pub(in crate::frontend) wake: Notify,
}

impl Control {
    /// Records the thread id of the session's connection to `shard`.
    pub fn set_thread(&self, shard: usize, thread: Option<u32>) {
        if let Some(t) = self.threads.lock().get_mut(shard) {
            *t = thread;
        }
    }

    /// Records a new login user.
    pub fn set_user(&self, user: &str) {
        *self.user.lock() = user.to_string();
    }

    /// Whether another session killed this one.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Completes when the session is killed (see [`Control::is_killed`]).
    pub async fn killed(&self) {
        self.wake.notified().await
    }
}

/// Every session of the server, by idgate connection id.
#[derive(Debug, Default)]
pub struct Registry {
    sessions: Mutex<HashMap<u32, Arc<Control>>>,
}

impl Registry {
    /// Registers session `id`; it is removed when the guard is dropped.
    pub fn register(self: &Arc<Self>, id: u32, user: &str, shards: usize) -> Registered {
        let control = Arc::new(Control {
            user: Mutex::new(user.to_string()),
            threads: Mutex::new(vec![None; shards]),
            killed: AtomicBool::new(false),
            wake: Notify::new(),
        });
        self.sessions.lock().insert(id, control.clone());
        Registered {
            registry: self.clone(),
            id,
            control,
        }
    }

    pub(in crate::frontend) fn get(&self, id: u32) -> Option<Arc<Control>> {
        self.sessions.lock().get(&id).cloned()
    }

    /// Sessions registered now.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    /// Whether no session is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A session's registration; dropping it unregisters the session.
#[derive(Debug)]
pub struct Registered {
    registry: Arc<Registry>,
    id: u32,
    /// The session's control block.
    pub control: Arc<Control>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.sessions.lock().remove(&self.id);
    }
}

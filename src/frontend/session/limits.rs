//! Limits against abuse at login: sessions per user (`[[users]]
//! max_connections`, error 1203), and (from [`crate::throttle`], which the
//! Redis listener shares) a growing delay for an address after repeated
//! failed logins.

pub use crate::throttle::{
    delay_for, LoginThrottle, FIRST_DELAY, FREE_FAILURES, MAX_ADDRESSES, MAX_DELAY, QUIET_PERIOD,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a client may take to send each packet of its login.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Sessions open per `[[users]]` entry (by index), across the process.
#[derive(Debug)]
pub struct UserSlots {
    open: Vec<AtomicUsize>,
}

/// One session's place under its user's `max_connections`: given back when
/// dropped, however the session ends.
#[derive(Debug)]
pub struct UserSlot {
    slots: Arc<UserSlots>,
    user: usize,
}

impl UserSlots {
    /// Counters for `users` accounts.
    pub fn new(users: usize) -> Arc<UserSlots> {
        Arc::new(UserSlots {
            open: (0..users).map(|_| AtomicUsize::new(0)).collect(),
        })
    }

    /// A slot for user `user` if fewer than `max` (`None`: no limit) of its
    /// sessions are open; otherwise `Err(max)`.
    pub fn acquire(self: &Arc<Self>, user: usize, max: Option<usize>) -> Result<UserSlot, usize> {
        let Some(counter) = self.open.get(user) else {
            return Err(0);
        };
        let limit = max.unwrap_or(usize::MAX);
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .map_err(|_| limit)?;
        Ok(UserSlot {
            slots: self.clone(),
            user,
        })
    }

    /// Sessions of user `user` open now.
    pub fn open(&self, user: usize) -> usize {
        self.open.get(user).map_or(0, |c| c.load(Ordering::Acquire))
    }
}

impl UserSlot {
    /// The `[[users]]` index this slot counts for.
    pub fn user(&self) -> usize {
        self.user
    }
}

impl Drop for UserSlot {
    fn drop(&mut self) {
        if let Some(c) = self.slots.open.get(self.user) {
            c.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_per_user_and_free_on_drop() {
        let s = UserSlots::new(2);
        let a = s.acquire(0, Some(2)).unwrap();
        let b = s.acquire(0, Some(2)).unwrap();
        assert_eq!(s.acquire(0, Some(2)).unwrap_err(), 2);
        // Another user has its own count; no limit means none.
        let _c = s.acquire(1, None).unwrap();
        assert_eq!(s.open(0), 2);
        drop(a);
        assert_eq!(s.open(0), 1);
        let _d = s.acquire(0, Some(2)).unwrap();
        drop(b);
        assert_eq!(s.open(0), 1);
        assert!(s.acquire(9, None).is_err());
    }
}

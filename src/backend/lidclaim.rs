//! A session's `LAST_INSERT_ID()` left unread on a pooled connection.
//!
//! With multiplexing, a session whose INSERT generated an id gives its
//! connection back right after the statement, and MariaDB keeps the value
//! on that connection. Reading it there and then (`SELECT LAST_INSERT_ID()`)
//! costs a round trip on every such INSERT, although almost no session ever
//! asks for it by name (drivers take it from the OK packet, which idgate
//! relays). So the read is put off: the connection goes back carrying a
//! [`LidClaim`], the session keeps the matching [`LidOwed`], and the value
//! is read only when somebody must know it:
//!
//! - the session takes that connection back: nothing to read, the value is
//!   on the connection it holds again (the common case, since the pool hands
//!   a session the connection it gave back first);
//! - another session takes it: it reads the value before it uses the
//!   connection, and settles the claim;
//! - the pool closes it: idgate reads the value before COM_QUIT;
//! - the session asks for it by name while the connection is idle: it reads
//!   the value there.
//!
//! A claim whose connection broke before the value was read is settled as
//! lost (the value went with the connection, as it would for a session
//! holding that connection itself). A session that no longer needs the value
//! (it ended, or a newer statement changed its value) drops its [`LidOwed`]
//! and the claim is abandoned: whoever takes the connection reads nothing.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Where a claim stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    /// The value is on the connection, unread.
    Pending,
    /// It was read.
    Known(u64),
    /// Its connection broke or was dropped before it was read.
    Lost,
    /// The session does not need it any more.
    Abandoned,
}

#[derive(Debug)]
struct Cell {
    state: Mutex<ClaimState>,
    settled: Notify,
}

impl Cell {
    /// Moves a pending claim to `to` and wakes whoever waits for it.
    fn settle(&self, to: ClaimState) {
        let mut s = self.state.lock();
        if *s == ClaimState::Pending {
            *s = to;
            drop(s);
            self.settled.notify_waiters();
        }
    }
}

/// The connection's side: carried by the connection that holds the value.
/// Dropped unsettled, the claim is lost.
#[derive(Debug)]
pub struct LidClaim(Arc<Cell>);

/// The session's side. Dropped, the claim is abandoned.
#[derive(Debug)]
pub struct LidOwed(Arc<Cell>);

/// A new pending claim: the connection's side and the session's.
pub fn claim() -> (LidClaim, LidOwed) {
    let cell = Arc::new(Cell {
        state: Mutex::new(ClaimState::Pending),
        settled: Notify::new(),
    });
    (LidClaim(cell.clone()), LidOwed(cell))
}

impl LidClaim {
    /// Whether the session still waits for the value (it must be read
    /// before the connection is used or closed).
    pub fn wanted(&self) -> bool {
        *self.0.state.lock() == ClaimState::Pending
    }

    /// The value was read: `Some(v)`, or could not be (`None`: lost).
    pub fn settle(self, value: Option<u64>) {
        self.0
            .settle(value.map_or(ClaimState::Lost, ClaimState::Known));
    }

    /// Whether `owed` is this claim's session side.
    pub fn is(&self, owed: &LidOwed) -> bool {
        Arc::ptr_eq(&self.0, &owed.0)
    }
}

impl Drop for LidClaim {
    fn drop(&mut self) {
        self.0.settle(ClaimState::Lost);
    }
}

impl LidOwed {
    /// Where the claim stands now.
    pub fn state(&self) -> ClaimState {
        *self.0.state.lock()
    }

    /// Waits up to `timeout` for the claim to be settled (another session
    /// took the connection and reads the value); its state then.
    pub async fn settled(&self, timeout: Duration) -> ClaimState {
        let wait = async {
            loop {
                let notified = self.0.settled.notified();
                tokio::pin!(notified);
                // Registered before the state is looked at: a settlement in
                // between still wakes it.
                notified.as_mut().enable();
                let s = self.state();
                if s != ClaimState::Pending {
                    return s;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .unwrap_or_else(|_| self.state())
    }
}

impl Drop for LidOwed {
    fn drop(&mut self) {
        self.0.settle(ClaimState::Abandoned);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_claim_is_read_once_and_its_session_told() {
        let (c, owed) = claim();
        assert!(c.wanted());
        assert!(c.is(&owed));
        let waiter = tokio::spawn(async move { owed.settled(Duration::from_secs(60)).await });
        tokio::task::yield_now().await;
        c.settle(Some(42));
        assert_eq!(waiter.await.ok(), Some(ClaimState::Known(42)));
    }

    #[test]
    fn a_dropped_connection_loses_the_value_and_a_gone_session_abandons_it() {
        let (c, owed) = claim();
        drop(c);
        assert_eq!(owed.state(), ClaimState::Lost);
        let (c, owed) = claim();
        drop(owed);
        assert!(!c.wanted());
        // Settling an abandoned claim changes nothing.
        c.settle(Some(7));
        let (c, owed) = claim();
        c.settle(None);
        assert_eq!(owed.state(), ClaimState::Lost);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_claim_nobody_settles_ends_at_the_timeout() {
        let (_c, owed) = claim();
        let s = owed.settled(Duration::from_secs(5)).await;
        assert_eq!(s, ClaimState::Pending);
    }
}

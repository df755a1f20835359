//! Ids idgate cannot know before the shard stores them: an INSERT whose id
//! is an expression, a variable or a subquery (`VALUES (@v, ...)`, `(SELECT
//! 60)`, `50+1`). The planner wraps each such value as `(@idgate_v<n> :=
//! value)` (an assignment passes the value and its type through, so the
//! shard stores exactly what it would have); after the statement, before
//! the client gets its reply, idgate reads the variables back from the
//! shards the statement ran on and observes every value on the generator,
//! so no id issued later equals one of them. A `SELECT` of session
//! variables names no table: the statement's warnings stay for `SHOW
//! WARNINGS`.
//!
//! An UPDATE that sets a rule table's id column records the highest id it
//! stored in `@idgate_hi` (`sql::update`), read back the same way.
//!
//! A statement whose only ids are explicit reports its last row's id in
//! the OK packet, as MariaDB does for an AUTO_INCREMENT column: when that
//! row's id was captured, the held OK packet gets the value read back.

use crate::frontend::session::readback::Captured;
use crate::frontend::session::{CmdError, Session};
use crate::protocol::reply;
use crate::sql::convert::{self, Converted};
use crate::sql::edit::capture_var;

impl Session {
    /// Holds back the client's last packet (unless a caller already does:
    /// a query of several statements); returns whether this call started
    /// holding, for [`Session::finish_captures`].
    pub(in crate::frontend) fn start_captures(&mut self) -> bool {
        if self.client.holding() {
            return false;
        }
        self.client.hold_last();
        true
    }

    /// Writes what is held when `release` (a statement that failed: its
    /// error is written by the caller, after what is held).
    pub(in crate::frontend) async fn release_held(
        &mut self,
        release: bool,
    ) -> Result<(), CmdError> {
        if !release {
            return Ok(());
        }
        if let Some(held) = self.client.take_held() {
            self.client
                .write_raw(&held)
                .await
                .map_err(CmdError::ClientGone)?;
        }
        Ok(())
    }

    /// Reads back the captured values of each statement of `all` on its
    /// shards, observes them, patches the held OK packet for one whose
    /// `report_last` is set, and writes it when `release` (what
    /// [`Session::start_captures`] returned).
    pub(in crate::frontend) async fn finish_captures(
        &mut self,
        all: &[Captured<'_>],
        release: bool,
    ) -> Result<(), CmdError> {
        let mut result = Ok(());
        for c in all {
            // Boxed: rare (`engine/size_tests.rs`).
            match Box::pin(self.read_captures(c)).await {
                Ok(Some(v)) => {
                    if let Some(held) = self.client.held_mut() {
                        patch_last_insert_id(held, v);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_err() && release {
            // The ids could not be read back: the statement's reply is
            // replaced by the error the caller writes (one reply per
            // command), rather than reported as a success.
            let _ = self.client.take_held();
            return result;
        }
        self.release_held(release).await?;
        result
    }

    /// Reads and observes; returns the value of the capture to report.
    async fn read_captures(&mut self, c: &Captured<'_>) -> Result<Option<u64>, CmdError> {
        if c.captures.is_empty() && !c.highest {
            return Ok(None);
        }
        let mut q = String::from("SELECT ");
        for (i, &at) in c.captures.iter().enumerate() {
            if i > 0 {
                q.push_str(", ");
            }
            q.push_str(&capture_var(at));
        }
        if c.highest {
            if !c.captures.is_empty() {
                q.push_str(", ");
            }
            q.push_str(crate::sql::update::HIGHEST);
        }
        // The variables are set to NULL after the read (detached: its reply
        // is read before the next command to the shard), so a later read
        // sees only what its own statement stored: the last row's value
        // comes from the shard that stored that row.
        let mut reset = String::from("\x03SET ");
        reset.push_str(q.get(7..).unwrap_or(""));
        let reset = reset.replace(", ", " = NULL, ") + " = NULL";
        let generator = self.shared.generator(c.generator);
        let mut last = None;
        let mut failed = None;
        for &shard in &c.shards {
            if !self.backends.is_open(shard) {
                continue;
            }
            let b = self.backend(shard).await.map_err(CmdError::Backend)?;
            let (types, rows) = b.query_typed_rows(&q).await.map_err(CmdError::Backend)?;
            b.send_detached(reset.as_bytes())
                .await
                .map_err(CmdError::Backend)?;
            let Some(row) = rows.first() else { continue };
            for (i, (v, ty)) in row.iter().zip(&types).enumerate() {
                let Some(v) = v else { continue };
                let is_last = c
                    .captures
                    .get(i)
                    .is_some_and(|&at| Some(at) == c.report_last);
                let converted = convert::text(*ty, v);
                if let (Converted::Negative(n), true) = (converted, is_last) {
                    // Never a generated id; reported as MariaDB does.
                    last = Some(n as u64);
                }
                if let Converted::Int(id) = converted {
                    if let Some(g) = &generator {
                        // Stored already: when it cannot be made sure that
                        // no other process issues it, the client gets the
                        // error instead of the statement's OK.
                        // Every shard is still read (and reset) first.
                        if let Err(e) = g.observe(id).await {
                            failed.get_or_insert(CmdError::Refused(
                                crate::frontend::errors::ER_AUTOINC_READ_FAILED,
                                e.to_string(),
                            ));
                        }
                    }
                    if is_last {
                        last = Some(id);
                    }
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(last)
    }
}

/// Sets the last insert id of a framed OK packet (anything else is left).
fn patch_last_insert_id(framed: &mut Vec<u8>, id: u64) {
    let Some(payload) = framed.get(4..) else {
        return;
    };
    if payload.first() != Some(&reply::OK) {
        return;
    }
    let Ok(new) = reply::with_last_insert_id(payload, id) else {
        return;
    };
    let Some(&seq) = framed.get(3) else { return };
    let len = new.len() as u32;
    let mut out = Vec::with_capacity(new.len() + 4);
    out.extend_from_slice(&len.to_le_bytes()[..3]);
    out.push(seq);
    out.extend_from_slice(&new);
    *framed = out;
}

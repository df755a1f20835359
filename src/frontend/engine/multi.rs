//! A query of several statements (`CLIENT_MULTI_STATEMENTS`) that names a
//! sharded or broadcast table: each statement runs as if it had been sent
//! alone (routed, split, scattered, its ids filled), and the client gets
//! their results one after the other, as from one server: every result but
//! the last says "more results exist" (`SERVER_MORE_RESULTS_EXISTS` in its
//! final OK/EOF packet), and the first error ends the query.
//!
//! The final packet of each statement's reply is held back by the client
//! connection ([`crate::protocol::packet::PacketConn::hold_last`]) so its
//! status can be set before it is sent; everything before it goes out as
//! it comes (no result set is buffered).

use crate::frontend::session::{CmdError, Session};
use crate::protocol::consts::{cmd, status};
use std::ops::Range;

/// Sets `SERVER_MORE_RESULTS_EXISTS` in the status of a reply's final
/// packet (`framed`: one physical packet), an OK or EOF packet; `false` for
/// an ERR packet or anything else (the query ends there).
pub fn mark_more_results(framed: &mut [u8], deprecate_eof: bool) -> bool {
    let Some(p) = framed.get_mut(4..) else {
        return false;
    };
    let at = match p.first() {
        // EOF: header, warnings, status.
        Some(0xfe) if !deprecate_eof || p.len() < 9 => 3,
        // OK (also with the 0xfe header that ends a result set under
        // CLIENT_DEPRECATE_EOF): header, affected rows, last insert id.
        Some(0x00 | 0xfe) => {
            let mut at = 1;
            for _ in 0..2 {
                let Some(&b) = p.get(at) else { return false };
                at += match b {
                    0xfc => 3,
                    0xfd => 4,
                    0xfe => 9,
                    _ => 1,
                };
            }
            at
        }
        _ => return false,
    };
    match p.get_mut(at..at + 2) {
        Some(s) => {
            let v = u16::from_le_bytes([s[0], s[1]]) | status::MORE_RESULTS_EXISTS;
            s.copy_from_slice(&v.to_le_bytes());
            true
        }
        None => false,
    }
}

impl Session {
    /// Runs the statements `parts` of the COM_QUERY `payload` one by one.
    pub(in crate::frontend) async fn multi(
        &mut self,
        payload: &[u8],
        parts: Vec<Range<usize>>,
    ) -> Result<(), CmdError> {
        let sql = &payload[1..];
        let deprecate_eof =
            self.login.capabilities & crate::protocol::consts::cap::DEPRECATE_EOF != 0;
        let n = parts.len();
        for (i, r) in parts.into_iter().enumerate() {
            let Some(text) = sql.get(r) else {
                break;
            };
            let mut sub = Vec::with_capacity(text.len() + 1);
            sub.push(cmd::QUERY);
            sub.extend_from_slice(text);
            self.client.hold_last();
            let result = Box::pin(self.query(&sub)).await;
            let failed = match result {
                Ok(()) => false,
                // The error ends the query: it is its last packet.
                Err(CmdError::Sql(e)) => {
                    self.send_refusal(&crate::frontend::errors::sql_error_code(&e), &e.to_string())
                        .await?;
                    true
                }
                Err(CmdError::Refused(code, message)) => {
                    self.send_refusal(&code, &message).await?;
                    true
                }
                Err(CmdError::Reply(p)) => {
                    self.reply_packet(&p).await?;
                    true
                }
                Err(e) => {
                    // A shard failed (reported by the caller) or the client
                    // is gone: what was held goes first.
                    if let Some(held) = self.client.take_held() {
                        self.client
                            .write_raw(&held)
                            .await
                            .map_err(CmdError::ClientGone)?;
                    }
                    return Err(e);
                }
            };
            let Some(mut held) = self.client.take_held() else {
                // Nothing written (not expected of a statement): go on.
                continue;
            };
            let more = !failed && i + 1 < n && mark_more_results(&mut held, deprecate_eof);
            self.client
                .write_raw(&held)
                .await
                .map_err(CmdError::ClientGone)?;
            if !more {
                return Ok(());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        crate::protocol::packet::frame(&mut out, 1, payload);
        out
    }

    #[test]
    fn marks_ok_and_eof_packets() {
        let st = |p: &[u8], at: usize| u16::from_le_bytes([p[4 + at], p[5 + at]]);
        // OK: affected 1, last insert id 300 (0xfc form), status 2, warnings 0.
        let mut ok = framed(&[0x00, 1, 0xfc, 0x2c, 0x01, 2, 0, 0, 0]);
        assert!(mark_more_results(&mut ok, false));
        assert_eq!(st(&ok, 5), 2 | status::MORE_RESULTS_EXISTS);
        // EOF: warnings 1, status 2.
        let mut eof = framed(&[0xfe, 1, 0, 2, 0]);
        assert!(mark_more_results(&mut eof, false));
        assert_eq!(st(&eof, 3), 2 | status::MORE_RESULTS_EXISTS);
        // OK with the 0xfe header (CLIENT_DEPRECATE_EOF).
        let mut fe = framed(&[0xfe, 0, 0, 0x22, 0, 0, 0, 0, 0]);
        assert!(mark_more_results(&mut fe, true));
        assert_eq!(st(&fe, 3), 0x22 | status::MORE_RESULTS_EXISTS);
        let mut err = framed(&[0xff, 0x10, 0x04, b'#']);
        assert!(!mark_more_results(&mut err, false));
        assert!(!mark_more_results(&mut [1, 0, 0, 1, 0x00], false));
        assert!(!mark_more_results(&mut [], false));
    }
}

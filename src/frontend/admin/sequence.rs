//! Sequence functions on idgate's generators (`NEXTVAL(idgate.g)`, `NEXT
//! VALUE FOR idgate.g`, `LASTVAL(idgate.g)`, `PREVIOUS VALUE FOR idgate.g`,
//! `SETVAL(idgate.g, n)`), recognised by `sql::statement::sequence`.
//!
//! Every value is taken before the statement is sent, once per call, in
//! text order (so `LASTVAL` after a `NEXTVAL` in the same statement sees
//! it, as in MariaDB): `NEXTVAL` from the generator (the same allocator as
//! INSERTs and the Redis listener), `LASTVAL` from the session's
//! [`LastValues`], `SETVAL` as `IDGATE SET FLOOR` (`floor.rs`). Then:
//!
//! - a statement that is only `SELECT call, ...` is answered by idgate,
//!   with MariaDB's column types for `NEXTVAL` (BIGINT, may be NULL);
//! - any other is written with the values as literals and goes on as the
//!   client's statement would (routing, id rules: in an INSERT into a rule
//!   table, the value is an explicit id, observed as such).
//!
//! Checked before any value is taken (so a refused statement takes none):
//! the generator exists in the session's rules (else 4091 Unknown
//! SEQUENCE), the user has a grant for it (`[[users]] generators`, else
//! 1142 as MariaDB refuses a sequence a user has no privilege on), and
//! `SETVAL` needs `admin = true` (1227).
//!
//! Prepared: a `SELECT call, ...` is prepared and executed by idgate alone
//! (binary result set, fresh values at each execute); any other statement
//! is prepared on the shard with placeholders and, at each execute, planned
//! again with fresh values (the engine's `Session::replan`).

use crate::frontend::errors::ER_AUTOINC_READ_FAILED;
use crate::frontend::session::seqstate::SeqStmt;
use crate::frontend::session::{CmdError, Session};
use crate::idgen::Generator;
use crate::protocol::codes;
use crate::protocol::consts::{cap, cmd};
use crate::protocol::resultset::{self, ColumnType, Framing};
use crate::sql::statement::sequence::{self, Op, SequenceError, Sequences};
use std::sync::Arc;

/// What a statement with sequence calls became.
pub(in crate::frontend) enum SeqOutcome {
    /// It calls none on idgate's generators: go on with it as it is.
    NotOurs,
    /// idgate answered it.
    Answered,
    /// The statement with the values written in (a COM_QUERY payload):
    /// go on with it instead.
    Rewritten(Vec<u8>),
}

impl Session {
    /// A COM_QUERY whose text passed the cheap check
    /// (`Statement::sequences`). See the module doc.
    pub(in crate::frontend) async fn query_sequences(
        &mut self,
        sql: &[u8],
    ) -> Result<SeqOutcome, CmdError> {
        let Some(stmt) = self.find_sequences(sql).await? else {
            return Ok(SeqOutcome::NotOurs);
        };
        let values = self.sequence_values(&stmt.found).await?;
        if let Some(names) = &stmt.found.select_only {
            let columns: Vec<(&str, ColumnType)> = names
                .iter()
                .map(|n| (n.as_str(), ColumnType::BigInt))
                .collect();
            let row: Vec<Option<String>> =
                values.iter().map(|v| v.map(|v| v.to_string())).collect();
            let bytes = resultset::text_result_set(
                self.next_seq,
                &columns,
                &[row],
                self.framing(),
                self.status(),
            );
            self.send_answer(&bytes).await?;
            return Ok(SeqOutcome::Answered);
        }
        let text = sequence::substitute(&stmt.sql, &stmt.found.calls, &values);
        Ok(SeqOutcome::Rewritten(
            [&[cmd::QUERY][..], text.as_bytes()].concat(),
        ))
    }

    /// A COM_STMT_PREPARE (`payload`, command byte first) with calls on
    /// idgate's generators, checked: `Ok(None)` when it has none; else the
    /// text the shard prepares (placeholders: `0` for `NEXTVAL`/`SETVAL`,
    /// `NULL` for `LASTVAL`) and what each execute needs.
    pub(in crate::frontend) async fn prepare_sequences(
        &mut self,
        payload: &[u8],
    ) -> Result<Option<(Vec<u8>, Arc<SeqStmt>)>, CmdError> {
        let Some(stmt) = self.find_sequences(&payload[1..]).await? else {
            return Ok(None);
        };
        self.check_calls(&stmt.found).await?;
        let placeholders: Vec<Option<u64>> = stmt
            .found
            .calls
            .iter()
            .map(|c| (c.op != Op::Last).then_some(0))
            .collect();
        let shard_text = [
            &[cmd::STMT_PREPARE][..],
            sequence::substitute(&stmt.sql, &stmt.found.calls, &placeholders).as_bytes(),
        ]
        .concat();
        Ok(Some((shard_text, Arc::new(stmt))))
    }

    /// The reply to the COM_STMT_PREPARE of a `SELECT call, ...`
    /// (`prepared.sequence` has its names): idgate answers it, and its
    /// executes, alone; the shard never prepares it (a COM_STMT_RESET
    /// would prepare the placeholder text there, which is harmless).
    pub(in crate::frontend) async fn prepare_answered(
        &mut self,
        prepared: crate::frontend::session::stmt::PreparedStmt,
        names: &[String],
    ) -> Result<(), CmdError> {
        let id = self.stmts.insert(prepared);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let bytes = resultset::prepare_ok(self.next_seq, id, &names, self.framing());
        self.send_answer(&bytes).await
    }

    /// A COM_STMT_EXECUTE of a statement with calls (`stmt`): `None` when
    /// idgate answered it (a `SELECT call, ...`); else the statement with
    /// fresh values written in (a COM_STMT_PREPARE payload), which the
    /// engine plans again before the execute goes on as usual.
    pub(in crate::frontend) async fn execute_sequences(
        &mut self,
        id: u32,
        stmt: &SeqStmt,
    ) -> Result<Option<Vec<u8>>, CmdError> {
        if self
            .stmts
            .get_mut(id)
            .is_some_and(|s| s.long_params.contains(&true))
        {
            return Err(CmdError::Refused(
                codes::ER_NOT_SUPPORTED_YET,
                "idgate: long data (COM_STMT_SEND_LONG_DATA) for a prepared statement that calls a sequence function on an idgate generator is not supported: its shard statement is prepared again with fresh values at each execute; bind the value instead".into(),
            ));
        }
        let values = self.sequence_values(&stmt.found).await?;
        if let Some(names) = &stmt.found.select_only {
            let mut row = Vec::with_capacity(values.len());
            for v in &values {
                row.push(match v {
                    Some(v) => Some(i64::try_from(*v).map_err(|_| {
                        CmdError::Refused(
                            codes::ER_DATA_OUT_OF_RANGE,
                            format!("idgate: the value {v} does not fit a signed BIGINT"),
                        )
                    })?),
                    None => None,
                });
            }
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let bytes = resultset::binary_bigint_row(
                self.next_seq,
                &names,
                &row,
                self.framing(),
                self.status(),
            );
            self.send_answer(&bytes).await?;
            return Ok(None);
        }
        let text = sequence::substitute(&stmt.sql, &stmt.found.calls, &values);
        Ok(Some([&[cmd::STMT_PREPARE][..], text.as_bytes()].concat()))
    }

    /// The calls in `sql` (a statement's text), read with the session's
    /// `sql_mode`. `None`: none on idgate's generators (also for a text
    /// that is not UTF-8: it is not looked at).
    async fn find_sequences(&mut self, sql: &[u8]) -> Result<Option<SeqStmt>, CmdError> {
        let Ok(text) = std::str::from_utf8(sql) else {
            return Ok(None);
        };
        let modes = self.sql_modes().await?.lexer();
        let found = sequence::find(text, modes).map_err(|e| match e {
            SequenceError::Placement(_) => {
                CmdError::Refused(codes::ER_NOT_SUPPORTED_YET, e.to_string())
            }
            SequenceError::Arguments(_) => {
                CmdError::Refused(codes::ER_WRONG_ARGUMENTS, e.to_string())
            }
        })?;
        Ok(found.map(|found| SeqStmt {
            sql: text.to_string(),
            found,
        }))
    }

    /// The generator a call names (exactly, else the one that matches
    /// ignoring case), checked for the user's grant.
    fn sequence_generator(
        &self,
        written: &str,
        op: Op,
    ) -> Result<(String, Arc<Generator>), CmdError> {
        let unknown = || {
            CmdError::Refused(
                codes::ER_UNKNOWN_SEQUENCES,
                format!(
                    "Unknown SEQUENCE: 'idgate.{written}' (idgate: no generator {written:?} in the rules in force)"
                ),
            )
        };
        let rules = self.rules.as_ref().ok_or_else(unknown)?;
        let name = match rules.generator(written) {
            Some(g) => g.name.clone(),
            None => {
                let mut like = rules
                    .generators()
                    .iter()
                    .filter(|g| g.name.eq_ignore_ascii_case(written));
                match (like.next(), like.next()) {
                    (Some(g), None) => g.name.clone(),
                    _ => return Err(unknown()),
                }
            }
        };
        let g = self.shared.generator(&name).ok_or_else(unknown)?;
        let user = &self.login.user;
        let granted = self
            .shared
            .user(user.as_bytes())
            .is_some_and(|(_, u)| u.may_use(&name));
        if !granted {
            // MariaDB's words for a sequence the user has no privilege on:
            // NEXTVAL and SETVAL need INSERT, LASTVAL SELECT.
            let command = if op == Op::Last { "SELECT" } else { "INSERT" };
            let host = self
                .client
                .peer_ip()
                .map(|ip| ip.to_string())
                .unwrap_or_else(|| "localhost".into());
            return Err(CmdError::Refused(
                codes::ER_TABLEACCESS_DENIED_ERROR,
                format!(
                    "{command} command denied to user '{user}'@'{host}' for table `idgate`.`{name}` (idgate: user '{user}' has no grant for generator '{name}' in [[users]] generators)"
                ),
            ));
        }
        Ok((name, g))
    }

    /// Every call's generator, checked (existence, grant, admin for
    /// SETVAL) before any value is taken.
    async fn check_calls(
        &mut self,
        found: &Sequences,
    ) -> Result<Vec<(String, Arc<Generator>)>, CmdError> {
        let mut out = Vec::with_capacity(found.calls.len());
        for c in &found.calls {
            if matches!(c.op, Op::Set { .. }) && !self.shared.is_admin(&self.login.user) {
                return Err(CmdError::Refused(
                    codes::ER_SPECIFIC_ACCESS_DENIED_ERROR,
                    format!(
                        "Access denied; you need the idgate admin privilege for SETVAL (IDGATE SET FLOOR) (user '{}' has no `admin = true` in [[users]])",
                        self.login.user
                    ),
                ));
            }
            out.push(self.sequence_generator(&c.generator, c.op)?);
        }
        Ok(out)
    }

    /// Each call's value, in text order (see the module doc).
    async fn sequence_values(&mut self, found: &Sequences) -> Result<Vec<Option<u64>>, CmdError> {
        let generators = self.check_calls(found).await?;
        let mut values = Vec::with_capacity(found.calls.len());
        let mut ids = Vec::with_capacity(1);
        for (c, (name, g)) in found.calls.iter().zip(generators) {
            values.push(match c.op {
                Op::Next => {
                    ids.clear();
                    g.next(1, &mut ids)
                        .await
                        .map_err(|e| CmdError::Refused(ER_AUTOINC_READ_FAILED, e.to_string()))?;
                    let id = ids.first().copied().ok_or_else(|| {
                        CmdError::Refused(
                            ER_AUTOINC_READ_FAILED,
                            format!("generator {name}: the allocator returned no id"),
                        )
                    })?;
                    self.last_values.set(name, id);
                    Some(id)
                }
                Op::Last => self.last_values.get(&name),
                Op::Set { value, floor } => {
                    self.set_floor_checked(&g, &name, floor).await?;
                    Some(value)
                }
            });
        }
        Ok(values)
    }

    fn framing(&self) -> Framing {
        Framing {
            deprecate_eof: self.login.capabilities & cap::DEPRECATE_EOF != 0,
            extended_metadata: self.login.ext_capabilities & cap::EXT_EXTENDED_METADATA != 0,
        }
    }

    /// Sends a reply idgate framed from `next_seq`.
    async fn send_answer(&mut self, bytes: &[u8]) -> Result<(), CmdError> {
        if let Some(last) = crate::protocol::packet::last_seq(bytes) {
            self.next_seq = last.wrapping_add(1);
        }
        self.client
            .write_raw(bytes)
            .await
            .map_err(CmdError::ClientGone)
    }
}

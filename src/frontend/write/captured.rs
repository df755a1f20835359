//! Prepared statements whose ids are read back after they run (the
//! mechanism is the core's `session::capture`): an INSERT whose id values
//! are expressions, variables or subqueries, and an UPDATE that sets a
//! rule table's id column.

use crate::frontend::session::readback::Captured;
use crate::frontend::session::{CmdError, Session};

impl Session {
    /// COM_STMT_EXECUTE of a prepared INSERT whose id values are captured:
    /// the execute, then the read back before the reply goes out.
    pub(in crate::frontend) async fn execute_captured(
        &mut self,
        id: u32,
        payload: &[u8],
        plan: std::sync::Arc<crate::sql::PrepareRewrite>,
    ) -> Result<(), CmdError> {
        let shards = match self.placement_at(plan.rule.routed) {
            Some(p) => p.shards().to_vec(),
            None => vec![0],
        };
        let c = Captured {
            generator: &plan.rule.generator,
            captures: &plan.captures,
            highest: false,
            // Explicit-only executes: the held OK gets the last row's value
            // (a generated row would come later and reset nothing: only
            // when every row is captured or explicit).
            report_last: plan.last_captured.filter(|_| !plan.has_slots()),
            shards,
        };
        let release = self.start_captures();
        let result = self.execute_planned(id, payload, plan.clone()).await;
        if result.is_err() {
            self.release_held(release).await?;
            return result;
        }
        self.finish_captures(std::slice::from_ref(&c), release)
            .await
    }
    /// COM_STMT_PREPARE of an UPDATE that sets a rule table's id column:
    /// the payload to prepare on the shards (the client's statement with the
    /// assignment that records the highest id appended; no parameter added)
    /// and where each execute reads it back. `None` for any other statement.
    pub(in crate::frontend) async fn prepare_highest(
        &mut self,
        rules: std::sync::Arc<crate::rules::RuleSet>,
        payload: &[u8],
    ) -> Result<
        Option<(
            Vec<u8>,
            std::sync::Arc<crate::frontend::session::stmt::Highest>,
        )>,
        CmdError,
    > {
        let Ok(sql) = std::str::from_utf8(&payload[1..]) else {
            return Ok(None);
        };
        if &crate::sql::statement::first_keyword(sql.as_bytes()) != b"UPDATE\0\0" {
            return Ok(None);
        }
        let modes = self.sql_modes().await?.lexer();
        let found =
            crate::sql::update::analyze(sql, 0, sql.len(), modes, &rules, self.schema.as_deref())
                .map_err(CmdError::Sql)?;
        let Some(u) = found else { return Ok(None) };
        let mut text = Vec::with_capacity(payload.len() + 96);
        text.push(payload[0]);
        text.extend_from_slice(sql.get(..u.append_at).unwrap_or(sql).as_bytes());
        let mut capture = String::new();
        crate::sql::update::push_capture(&mut capture, u.entry.quoted_column());
        text.extend_from_slice(capture.as_bytes());
        text.extend_from_slice(sql.get(u.append_at..).unwrap_or("").as_bytes());
        let shards = match u.entry.placement() {
            Some(p) => p.shards().to_vec(),
            None => vec![0],
        };
        Ok(Some((
            text,
            std::sync::Arc::new(crate::frontend::session::stmt::Highest {
                generator: u.entry.generator().clone(),
                shards,
            }),
        )))
    }
}

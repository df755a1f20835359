//! idgate's own statements, answered by idgate instead of a shard:
//!
//! - `SHOW IDGATE GENERATORS`: one row per generator (next id, high-water
//!   mark, cached ids, batch, rate, waits, store errors, node id, ...).
//! - `IDGATE SET FLOOR <generator> <value>`: no id at or below `value` is
//!   issued afterwards, by any idgate process (durable in the store).
//! - `IDGATE SET FLOOR <generator> FROM TABLES`: the same with the largest id
//!   found in every table whose rule uses the generator, on every shard: how
//!   a migration starts a generator above existing rows.
//! - `IDGATE RESERVE <generator> <count>`: a block of ids for a bulk loader,
//!   never issued to anyone else; answered with its first and last id.
//!
//! Parsing is pure (`sql::statement::admin`); `Session::admin` executes a command.
//! Every account in `[[users]]` may run them.

pub mod diag;

use crate::frontend::session::{CmdError, Session};
use crate::protocol::codes;
use crate::protocol::consts::cap;
use crate::protocol::resultset::{text_result_set, ColumnType, Framing};
use crate::rules::GeneratorKind;
use crate::sql::statement::{Admin, AdminError};

impl Session {
    /// Runs an admin command and answers the client.
    pub(in crate::frontend) async fn admin(
        &mut self,
        cmd: Result<Admin, AdminError>,
    ) -> Result<(), CmdError> {
        let cmd = cmd.map_err(|e| CmdError::Refused(codes::ER_NOT_SUPPORTED_YET, e.to_string()))?;
        let Some(allocator) = self.shared.allocator.clone() else {
            return Err(CmdError::Refused(
                codes::ER_NOT_SUPPORTED_YET,
                "idgate: no [rules] are configured, so there are no generators".into(),
            ));
        };
        let generator = |name: &str| {
            allocator.generator(name).ok_or_else(|| {
                CmdError::Refused(
                    codes::ER_UNKNOWN_ERROR,
                    format!("idgate: unknown generator {name:?}"),
                )
            })
        };
        let idgate_err =
            |e: crate::idgen::IdgenError| CmdError::Refused(codes::ER_UNKNOWN_ERROR, e.to_string());
        match cmd {
            Admin::ShowGenerators => {
                let rows = allocator
                    .stats()
                    .into_iter()
                    .map(|s| {
                        vec![
                            Some(s.name),
                            Some(match s.kind {
                                GeneratorKind::Sequence => "sequence".into(),
                                GeneratorKind::Snowflake => "snowflake".into(),
                            }),
                            Some(s.next_id.to_string()),
                            Some(s.high_water.to_string()),
                            Some(s.cached_remaining.to_string()),
                            Some(s.batch.to_string()),
                            Some(format!("{:.1}", s.rate_per_sec)),
                            Some(s.issued.to_string()),
                            Some(s.floor.to_string()),
                            Some(s.waits.to_string()),
                            Some(s.store_errors.to_string()),
                            Some(s.store_writes.to_string()),
                            s.node_id.map(|n| n.to_string()),
                            Some(if s.lease_valid { "1" } else { "0" }.into()),
                            s.last_error,
                        ]
                    })
                    .collect::<Vec<_>>();
                use ColumnType::{Text, UInt};
                let columns = [
                    ("name", Text),
                    ("kind", Text),
                    ("next_id", UInt),
                    ("high_water", UInt),
                    ("cached_remaining", UInt),
                    ("batch", UInt),
                    ("rate_per_sec", Text),
                    ("issued", UInt),
                    ("floor", UInt),
                    ("waits", UInt),
                    ("store_errors", UInt),
                    ("store_writes", UInt),
                    ("node_id", Text),
                    ("lease_valid", UInt),
                    ("last_error", Text),
                ];
                self.send_rows(&columns, &rows).await
            }
            Admin::SetFloor {
                generator: name,
                value,
            } => {
                generator(&name)?
                    .set_floor(value)
                    .await
                    .map_err(idgate_err)?;
                self.send_ok(self.next_seq, self.status()).await
            }
            Admin::Reserve {
                generator: name,
                count,
            } => {
                let r = generator(&name)?.reserve(count).await.map_err(idgate_err)?;
                let rows = vec![vec![
                    Some(r.start.to_string()),
                    Some(r.end.saturating_sub(1).to_string()),
                    Some((r.end - r.start).to_string()),
                ]];
                self.send_rows(
                    &[
                        ("first_id", ColumnType::UInt),
                        ("last_id", ColumnType::UInt),
                        ("count", ColumnType::UInt),
                    ],
                    &rows,
                )
                .await
            }
            Admin::SetFloorFromTables { generator: name } => {
                let g = generator(&name)?;
                let Some(rules) = self.shared.rules.clone() else {
                    return Ok(());
                };
                let mut rows = Vec::new();
                let mut floor = 0u64;
                for e in rules.entries().iter().filter(|e| **e.generator() == *name) {
                    let Some(schema) = e
                        .schema()
                        .map(str::to_string)
                        .or_else(|| self.schema.clone())
                    else {
                        return Err(CmdError::Refused(
                            codes::ER_NO_DB_ERROR,
                            format!(
                                "idgate: rule {} names no schema; USE the schema first",
                                e.rule().name
                            ),
                        ));
                    };
                    let q = format!(
                        "SELECT MAX({}) FROM `{}`.`{}`",
                        e.quoted_column(),
                        schema.replace('`', "``"),
                        e.table().replace('`', "``")
                    );
                    for shard in 0..self.backends.len() {
                        let shard_name = self.shared.config.shards[shard].name.clone();
                        let max = match self.own_query(shard, &q).await {
                            Ok(r) => r.first().and_then(|r| r.first().cloned().flatten()),
                            // The table need not exist on every shard.
                            Err(crate::backend::BackendError::Server { err, .. })
                                if err.code == 1146 =>
                            {
                                None
                            }
                            Err(e) => return Err(CmdError::Backend(e)),
                        };
                        let max_id = max.as_deref().and_then(|m| m.parse::<u64>().ok());
                        floor = floor.max(max_id.unwrap_or(0));
                        rows.push(vec![
                            Some(format!("{schema}.{}", e.table())),
                            Some(shard_name),
                            max_id.map(|m| m.to_string()),
                        ]);
                    }
                }
                g.set_floor(floor).await.map_err(idgate_err)?;
                rows.push(vec![Some("(floor)".into()), None, Some(floor.to_string())]);
                self.send_rows(
                    &[
                        ("table", ColumnType::Text),
                        ("shard", ColumnType::Text),
                        ("max_id", ColumnType::Text),
                    ],
                    &rows,
                )
                .await
            }
        }
    }

    async fn send_rows(
        &mut self,
        columns: &[(&str, ColumnType)],
        rows: &[Vec<Option<String>>],
    ) -> Result<(), CmdError> {
        let framing = Framing {
            deprecate_eof: self.login.capabilities & cap::DEPRECATE_EOF != 0,
            extended_metadata: self.login.ext_capabilities & cap::EXT_EXTENDED_METADATA != 0,
        };
        let bytes = text_result_set(self.next_seq, columns, rows, framing, self.status());
        if let Some(last) = crate::protocol::packet::last_seq(&bytes) {
            self.next_seq = last.wrapping_add(1);
        }
        self.client
            .write_raw(&bytes)
            .await
            .map_err(CmdError::ClientGone)
    }
}

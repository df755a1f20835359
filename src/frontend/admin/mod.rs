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
//! - `SHOW IDGATE RULES`: the table rules in force, with the rules version
//!   and the file:line each came from.
//! - `SHOW IDGATE STATUS`: idgate's version, the rules version and when it
//!   was applied, reloads, uptime, the store, sessions.
//! - `SHOW IDGATE SESSIONS`: idgate's client sessions, like SHOW
//!   PROCESSLIST: id, user, client address, schema, shards connected, in a
//!   transaction, TLS, the command and for how long.
//! - `SHOW IDGATE POOLS`: the shard connection pools, one row per shard
//!   (`pools.rs`).
//! - `SHOW IDGATE RESHARD` (or `IDGATE SHOW RESHARD`): the resharding
//!   jobs in the store and this idgate's pause (`reshard.rs`).
//! - `IDGATE RELOAD RULES`: reads the rules directory again and applies it
//!   all or nothing (`live.rs`); answers with what changed, or an error
//!   listing every reason (file:line).
//!
//! - `floor.rs`: `IDGATE SET FLOOR` with its checks (also `SETVAL`).
//! - `sequence.rs`: `NEXTVAL(idgate.g)`, `LASTVAL`, `SETVAL` and their
//!   `NEXT VALUE FOR` / `PREVIOUS VALUE FOR` spellings, in any statement:
//!   values taken from the generators and answered or written into the
//!   statement (`sql::statement::sequence` recognises them).
//!
//! Parsing is pure (`sql::statement::admin`); `Session::admin` executes a command.
//! `SHOW IDGATE ...` is open to every account; a statement that changes
//! state needs the admin privilege (`[[users]] admin = true`), else error
//! 1227. `IDGATE SET FLOOR <value>` keeps `allocator.floor_headroom` ids
//! free below the generator's `max`.

pub mod floor;
pub mod pools;
pub mod reshard;
pub mod sequence;

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
        if let Some(what) = cmd.changes_state() {
            if !self.shared.is_admin(&self.login.user) {
                return Err(CmdError::Refused(
                    codes::ER_SPECIFIC_ACCESS_DENIED_ERROR,
                    format!(
                        "Access denied; you need the idgate admin privilege for {what} (user '{}' has no `admin = true` in [[users]])",
                        self.login.user
                    ),
                ));
            }
        }
        match cmd {
            Admin::ShowStatus => return self.show_status().await,
            Admin::ShowSessions => return self.show_sessions().await,
            Admin::ShowPools => return self.show_pools().await,
            Admin::ShowReshard => return self.show_reshard().await,
            Admin::ShowRules => return self.show_rules().await,
            Admin::ShowViews => return self.show_views().await,
            Admin::ReloadRules => return self.reload_rules().await,
            _ => {}
        }
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
                let g = generator(&name)?;
                self.set_floor_checked(&g, &name, value).await?;
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
            Admin::ShowStatus
            | Admin::ShowRules
            | Admin::ShowViews
            | Admin::ShowSessions
            | Admin::ShowPools
            | Admin::ShowReshard
            | Admin::ReloadRules => Ok(()),
            Admin::SetFloorFromTables { generator: name } => {
                let g = generator(&name)?;
                let Some(rules) = self.rules.clone() else {
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
                    for shard in 0..self.backends.len() {
                        let shard_name = self.shared.config.shards[shard].name.clone();
                        // The table need not exist on every shard.
                        let max_id = self
                            .highest_id(shard, &schema, e.table(), e.quoted_column())
                            .await
                            .map_err(CmdError::Backend)?;
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

    async fn reload_rules(&mut self) -> Result<(), CmdError> {
        let done = self.shared.reload_rules().await.map_err(|e| {
            CmdError::Refused(
                codes::ER_UNKNOWN_ERROR,
                format!("idgate: the rules were not reloaded (the rules in force stay):\n{e}"),
            )
        })?;
        // This statement is not in a transaction: the session's next
        // statement runs on the new rules (so does this session's).
        let mut rows: Vec<Vec<Option<String>>> = done
            .diff
            .lines()
            .into_iter()
            .map(|(what, name, detail)| {
                vec![
                    Some(what.into()),
                    Some(name),
                    (!detail.is_empty()).then_some(detail),
                ]
            })
            .collect();
        rows.push(vec![
            Some("rules version".into()),
            Some(done.version.to_string()),
            done.diff.is_empty().then(|| "nothing changed".into()),
        ]);
        use ColumnType::Text;
        self.send_rows(&[("change", Text), ("name", Text), ("detail", Text)], &rows)
            .await
    }

    /// `SHOW IDGATE VIEWS`: the guarded views of the rules in force.
    async fn show_views(&mut self) -> Result<(), CmdError> {
        let rules = self.shared.rules.load().unwrap_or_default();
        let read = self.shared.rules.views().views().len();
        let rows: Vec<Vec<Option<String>>> = rules
            .views()
            .iter()
            .map(|g| {
                vec![
                    Some(g.view.clone()),
                    Some(g.table.clone()),
                    Some(g.column.clone()),
                    Some(g.id_columns.join(",")),
                    Some(read.to_string()),
                ]
            })
            .collect();
        use ColumnType::{Text, UInt};
        self.send_rows(
            &[
                ("view", Text),
                ("table", Text),
                ("column", Text),
                ("id_columns", Text),
                ("views_read", UInt),
            ],
            &rows,
        )
        .await
    }

    async fn show_rules(&mut self) -> Result<(), CmdError> {
        let version = self.shared.rules.version().to_string();
        let rules = self.shared.rules.load().unwrap_or_default();
        let names = rules.shard_names();
        let rows: Vec<Vec<Option<String>>> = rules
            .entries()
            .iter()
            .map(|e| {
                let r = e.rule();
                let (sharding, shards) = match e.placement() {
                    None => (None, names.first().cloned()),
                    Some(p) => (
                        Some(if r.broadcast == Some(true) {
                            "broadcast".to_string()
                        } else {
                            format!(
                                "{} by {}",
                                r.sharding.as_deref().unwrap_or("?"),
                                r.shard_key.as_deref().unwrap_or("?")
                            )
                        }),
                        Some(
                            p.shards()
                                .iter()
                                .filter_map(|&i| names.get(i).cloned())
                                .collect::<Vec<_>>()
                                .join(","),
                        ),
                    ),
                };
                vec![
                    Some(r.name.clone()),
                    Some(r.column.clone()),
                    Some(r.generator.clone()),
                    sharding,
                    shards,
                    Some(version.clone()),
                    Some(format!("{}:{}", e.origin().file.display(), e.origin().line)),
                ]
            })
            .collect();
        use ColumnType::Text;
        self.send_rows(
            &[
                ("table", Text),
                ("column", Text),
                ("generator", Text),
                ("sharding", Text),
                ("shards", Text),
                ("rules_version", Text),
                ("origin", Text),
            ],
            &rows,
        )
        .await
    }

    async fn show_sessions(&mut self) -> Result<(), CmdError> {
        let names = &self.shared.config.shards;
        let rows: Vec<Vec<Option<String>>> = self
            .shared
            .sessions
            .views()
            .into_iter()
            .map(|v| {
                let command = if v.id == self.id {
                    "Query" // this statement
                } else {
                    crate::protocol::consts::cmd::name(v.command)
                };
                vec![
                    Some(v.id.to_string()),
                    Some(v.user),
                    Some(v.peer),
                    v.schema,
                    Some(
                        v.shards
                            .iter()
                            .filter_map(|&i| names.get(i).map(|s| s.name.clone()))
                            .collect::<Vec<_>>()
                            .join(","),
                    ),
                    Some(if v.in_txn { "1" } else { "0" }.into()),
                    Some(if v.tls { "1" } else { "0" }.into()),
                    Some(command.into()),
                    Some(v.secs.to_string()),
                ]
            })
            .collect();
        use ColumnType::{Text, UInt};
        self.send_rows(
            &[
                ("Id", UInt),
                ("User", Text),
                ("Host", Text),
                ("db", Text),
                ("Shards", Text),
                ("In_transaction", UInt),
                ("Tls", UInt),
                ("Command", Text),
                ("Time", UInt),
            ],
            &rows,
        )
        .await
    }

    async fn show_status(&mut self) -> Result<(), CmdError> {
        let st = self.shared.rules.status();
        let time = |t: std::time::SystemTime| crate::frontend::live::utc(t);
        let store = match &self.shared.allocator {
            Some(a) => a.store().describe(),
            None => "none (no [rules])".into(),
        };
        let rows: Vec<Vec<Option<String>>> = [
            ("version", Some(env!("CARGO_PKG_VERSION").to_string())),
            (
                "uptime_secs",
                Some(self.shared.started.elapsed().as_secs().to_string()),
            ),
            (
                "rules_version",
                Some(self.shared.rules.version().to_string()),
            ),
            ("rules_applied_at", Some(time(st.applied_at))),
            (
                "rules_dir",
                self.shared
                    .config
                    .rules
                    .as_ref()
                    .map(|r| r.dir.display().to_string()),
            ),
            ("rules_source", Some(self.shared.rules_source())),
            ("rules_started_from", st.started_from),
            ("rules_reloads", Some(st.reloads.to_string())),
            ("rules_failed_reloads", Some(st.failed_reloads.to_string())),
            ("rules_last_reload_at", st.last_attempt.map(time)),
            (
                "rules_failed_version",
                st.failed_version.map(|v| v.to_string()),
            ),
            ("rules_last_error", st.last_error),
            ("store", Some(store)),
            (
                "tls_clients",
                Some(
                    match (
                        &self.shared.config.server.tls_cert,
                        self.shared.config.server.require_tls,
                    ) {
                        (None, _) => "off",
                        (Some(_), false) => "offered",
                        (Some(_), true) => "required",
                    }
                    .into(),
                ),
            ),
            (
                "tls_shards",
                Some(
                    match self.shared.config.backend.tls {
                        crate::tls::ShardTlsMode::Disabled => "disabled",
                        crate::tls::ShardTlsMode::Preferred => "preferred",
                        crate::tls::ShardTlsMode::Required => "required",
                        crate::tls::ShardTlsMode::VerifyCa => "verify_ca",
                    }
                    .into(),
                ),
            ),
            ("sessions", Some(self.shared.sessions.len().to_string())),
        ]
        .into_iter()
        .map(|(k, v)| vec![Some(k.to_string()), v])
        .collect();
        use ColumnType::Text;
        self.send_rows(&[("Variable_name", Text), ("Value", Text)], &rows)
            .await
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

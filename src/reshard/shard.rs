//! The mover's connection to one shard: logged in as idgate logs in (the
//! `[backend]` account, its TLS settings, the shard's pinned key), through
//! [`crate::backend`], reopened when it breaks. Text queries for
//! metadata and DDL; binary-protocol reads (a prepared statement without
//! parameters) for row values, so every value keeps its column's type and
//! is written back exactly by [`crate::sql::insel::write_literal`].

use std::time::Duration;

use crate::backend::conn::{BackendConn, BackendError, ConnectParams};
use crate::config::Config;
use crate::protocol::column::{flags, ColumnDef, BINARY_CHARSET};
use crate::protocol::consts::{cap, cmd, DEFAULT_CHARSET};
use crate::protocol::reply;
use crate::protocol::response::Expect;
use crate::sql::insel::SourceColumn;
use crate::tls::ShardTls;

/// Rows read in the binary protocol: each column's type, each row's
/// values (`None`: NULL).
#[derive(Debug, Clone, Default)]
pub struct Rows {
    /// Column names, in order.
    pub names: Vec<String>,
    /// What [`crate::sql::insel::write_literal`] needs of each column.
    pub columns: Vec<SourceColumn>,
    /// The values.
    pub rows: Vec<Vec<Option<Vec<u8>>>>,
}

/// One shard the mover talks to.
pub struct Shard {
    /// Index in the config's `[[shards]]`.
    pub index: usize,
    /// Its name.
    pub name: String,
    address: String,
    user: String,
    password: String,
    public_key: Option<Vec<u8>>,
    tls: ShardTls,
    timeout: Duration,
    conn: Option<BackendConn>,
    /// Collation id -> character set name, learned as needed.
    charsets: Vec<(u16, String)>,
    /// See [`Shard::take_transient`].
    transient: bool,
}

/// An error worth waiting out: the shard down or unreachable, the
/// connection lost, a lock wait timeout (1205) or deadlock (1213).
fn transient(e: &BackendError) -> bool {
    match e {
        BackendError::Connect { .. } | BackendError::Timeout { .. } | BackendError::Lost { .. } => {
            true
        }
        BackendError::Server { err, .. } => matches!(err.code, 1205 | 1213),
        _ => false,
    }
}

impl Shard {
    /// Shard `index` of `cfg` (not connected yet).
    pub fn new(cfg: &Config, index: usize) -> Option<Shard> {
        let s = cfg.shards.get(index)?;
        Some(Shard {
            index,
            name: s.name.clone(),
            address: s.address.clone(),
            user: cfg.backend.user.clone(),
            password: cfg.backend.password.clone(),
            public_key: s.public_key_pem.clone(),
            tls: ShardTls::new(cfg.backend.tls, cfg.backend.tls_ca.as_deref()),
            timeout: Duration::from_millis(cfg.backend.connect_timeout_ms.max(1)),
            conn: None,
            charsets: vec![(BINARY_CHARSET, "binary".into())],
            transient: false,
        })
    }

    async fn conn(&mut self) -> Result<&mut BackendConn, BackendError> {
        if self.conn.is_none() {
            let params = ConnectParams {
                shard: &self.name,
                address: &self.address,
                tls: &self.tls,
                public_key: self.public_key.as_deref(),
                user: &self.user,
                password: &self.password,
                database: None,
                charset: DEFAULT_CHARSET,
                capabilities: cap::LONG_PASSWORD
                    | cap::LONG_FLAG
                    | cap::PROTOCOL_41
                    | cap::TRANSACTIONS
                    | cap::SECURE_CONNECTION
                    | cap::PLUGIN_AUTH,
                ext_capabilities: 0,
                attrs: None,
                timeout: self.timeout,
            };
            let (mut c, _) = BackendConn::connect(&params).await?;
            // Each read sees what is committed when it runs: the copy and
            // the catch-up re-read rows, they never need a snapshot.
            // NO_AUTO_VALUE_ON_ZERO: a stored 0 in an AUTO_INCREMENT
            // column is copied as 0, not given a new value.
            for q in [
                &b"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"[..],
                b"SET SESSION autocommit = 1, SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO')",
            ] {
                let mut p = vec![cmd::QUERY];
                p.extend_from_slice(q);
                c.run(&p, Expect::Results).await?;
            }
            self.conn = Some(c);
        }
        match self.conn.as_mut() {
            Some(c) => Ok(c),
            None => Err(BackendError::StateLost {
                shard: self.name.clone(),
                reason: "no connection".into(),
            }),
        }
    }

    /// Drops the connection after an error that may have broken it (a
    /// server error leaves it usable).
    fn after<T>(&mut self, r: Result<T, BackendError>) -> Result<T, String> {
        match r {
            Ok(v) => Ok(v),
            Err(e) => {
                if !matches!(e, BackendError::Server { .. }) {
                    self.conn = None;
                }
                self.transient |= transient(&e);
                Err(e.to_string())
            }
        }
    }

    /// Whether an error since the last call was one that passes (the
    /// shard unreachable, a lost connection, a lock wait or deadlock);
    /// cleared by the call.
    pub fn take_transient(&mut self) -> bool {
        std::mem::take(&mut self.transient)
    }

    /// Runs a statement (DDL, DML); its result, if any, is dropped.
    pub async fn exec(&mut self, sql: &str) -> Result<(), String> {
        let mut p = Vec::with_capacity(sql.len() + 1);
        p.push(cmd::QUERY);
        p.extend_from_slice(sql.as_bytes());
        let r = match self.conn().await {
            Ok(c) => c.run(&p, Expect::Results).await.map(|_| ()),
            Err(e) => Err(e),
        };
        self.after(r)
    }

    /// A text query's rows (NULL as `None`).
    pub async fn text(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        let r = match self.conn().await {
            Ok(c) => c.query_rows(sql).await,
            Err(e) => Err(e),
        };
        self.after(r)
    }

    /// A text query's one value (first row, first column).
    pub async fn value(&mut self, sql: &str) -> Result<Option<String>, String> {
        Ok(self
            .text(sql)
            .await?
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next())
            .flatten())
    }

    /// A text query's rows by column name (for `SHOW ... STATUS`).
    pub async fn named(&mut self, sql: &str) -> Result<Vec<Vec<(String, Option<String>)>>, String> {
        let mut p = Vec::with_capacity(sql.len() + 1);
        p.push(cmd::QUERY);
        p.extend_from_slice(sql.as_bytes());
        let r = match self.conn().await {
            Ok(c) => c.run(&p, Expect::Results).await,
            Err(e) => Err(e),
        };
        let packets = self.after(r)?;
        let Some(first) = packets.first() else {
            return Ok(Vec::new());
        };
        if first.first() == Some(&reply::OK) {
            return Ok(Vec::new());
        }
        let n = crate::protocol::wire::Cursor::new(first)
            .lenenc()
            .map_err(|e| format!("shard {}: {}", self.name, e.0))? as usize;
        let mut names = Vec::with_capacity(n.min(4096));
        for p in packets.iter().skip(1).take(n) {
            let d = ColumnDef::decode(p).map_err(|e| format!("shard {}: {}", self.name, e.0))?;
            names.push(String::from_utf8_lossy(d.name).into_owned());
        }
        let mut out = Vec::new();
        for p in packets.iter().skip(2 + n) {
            if p.first() == Some(&reply::EOF) && p.len() < 9 {
                break;
            }
            let mut c = crate::protocol::wire::Cursor::new(p);
            let mut row = Vec::with_capacity(n);
            for name in &names {
                if p.get(c.pos()) == Some(&0xfb) {
                    let _ = c.u8();
                    row.push((name.clone(), None));
                } else {
                    let v = c
                        .lenenc_bytes()
                        .map_err(|e| format!("shard {}: {}", self.name, e.0))?;
                    row.push((name.clone(), Some(String::from_utf8_lossy(v).into_owned())));
                }
            }
            out.push(row);
        }
        Ok(out)
    }

    /// A query's rows in the binary protocol (prepared, executed, closed).
    pub async fn binary(&mut self, sql: &str) -> Result<Rows, String> {
        let r = self.binary_inner(sql).await;
        let (head, rows) = self.after(r)?;
        let shard = self.name.clone();
        let bad = |e: crate::protocol::Malformed| format!("shard {shard}: bad reply: {}", e.0);
        let mut types = Vec::with_capacity(head.len());
        let mut names = Vec::with_capacity(head.len());
        let mut cols = Vec::with_capacity(head.len());
        for p in &head {
            let d = ColumnDef::decode(p).map_err(bad)?;
            names.push(String::from_utf8_lossy(d.name).into_owned());
            types.push(d.column_type);
            cols.push((d.column_type, d.flags, d.decimals, d.charset));
        }
        let mut columns = Vec::with_capacity(cols.len());
        for (ty, fl, decimals, charset) in cols {
            columns.push(SourceColumn {
                ty,
                unsigned: fl & flags::UNSIGNED != 0,
                decimals,
                charset: self.charset_name(charset).await?,
            });
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let cells = crate::protocol::row::binary_cells(row, &types).map_err(bad)?;
            out.push(cells.into_iter().map(|c| c.map(<[u8]>::to_vec)).collect());
        }
        Ok(Rows {
            names,
            columns,
            rows: out,
        })
    }

    /// Prepare, execute, close: the column definitions and the rows.
    #[allow(clippy::type_complexity)]
    async fn binary_inner(
        &mut self,
        sql: &str,
    ) -> Result<(Vec<Vec<u8>>, Vec<Vec<u8>>), BackendError> {
        let shard = self.name.clone();
        let c = self.conn().await?;
        let mut prep = Vec::with_capacity(sql.len() + 1);
        prep.push(cmd::STMT_PREPARE);
        prep.extend_from_slice(sql.as_bytes());
        let reply = c.run(&prep, Expect::Prepare).await?;
        let proto = |what: &'static str| BackendError::Protocol {
            shard: shard.clone(),
            source: crate::protocol::Malformed(what),
        };
        let first = reply.first().ok_or_else(|| proto("empty prepare reply"))?;
        let stmt = crate::protocol::stmt::stmt_id(first.get(1..).unwrap_or_default())
            .map_err(|_| proto("bad prepare reply"))?;
        let mut exec = vec![cmd::STMT_EXECUTE];
        crate::protocol::stmt::encode_execute(stmt, 0, 1, &[], &mut exec);
        let result = c.run(&exec, Expect::Results).await;
        let mut close = vec![cmd::STMT_CLOSE];
        close.extend_from_slice(&stmt.to_le_bytes());
        // COM_STMT_CLOSE has no reply.
        c.send(&close).await?;
        let packets = result?;
        let Some(first) = packets.first() else {
            return Ok((Vec::new(), Vec::new()));
        };
        if first.first() == Some(&reply::OK) {
            return Ok((Vec::new(), Vec::new()));
        }
        let n = crate::protocol::wire::Cursor::new(first)
            .lenenc()
            .map_err(|_| proto("bad column count"))? as usize;
        let head: Vec<Vec<u8>> = packets.iter().skip(1).take(n).cloned().collect();
        let skip = 1 + n + usize::from(!c.deprecate_eof());
        let rows = packets
            .into_iter()
            .skip(skip)
            .filter(|p| p.first() == Some(&0))
            .collect();
        Ok((head, rows))
    }

    /// The introducer name of character set (collation id) `id`.
    async fn charset_name(&mut self, id: u16) -> Result<String, String> {
        if let Some((_, n)) = self.charsets.iter().find(|(c, _)| *c == id) {
            return Ok(n.clone());
        }
        let name = self
            .value(&format!(
                "SELECT CHARACTER_SET_NAME FROM information_schema.COLLATIONS WHERE ID = {id}"
            ))
            .await?
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            .ok_or_else(|| format!("shard {}: unknown character set id {id}", self.name))?;
        self.charsets.push((id, name.clone()));
        Ok(name)
    }
}

//! Multiplexing (`[backend] multiplex = true`): a session gives its shard
//! connections back to the pool after each statement, unless something it
//! did pins it to them, and takes any pooled one for the next.
//!
//! What a connection carries from one session to the next is either
//! restored or pins the session:
//!
//! - Restored: the schema (COM_INIT_DB, `pooled.rs`), the session's
//!   replayable `SET`s (`replay.rs`: on a connection whose state tag (a
//!   fingerprint of those `SET`s, [`SessionState::tag`]) differs,
//!   COM_RESET_CONNECTION and then the `SET`s; none on one that has the
//!   same tag), server-side prepared statements (kept on the connection for
//!   the session that takes it back, prepared again on another,
//!   `Session::backend_stmt`).
//! - `LAST_INSERT_ID()`, lazily on both sides, since almost no session asks
//!   for it by name (drivers read the OK packet, which idgate relays): a
//!   connection whose INSERT generated an id goes back carrying a claim on
//!   the value, read only when somebody needs it (`lidclaim.rs`), and a
//!   connection is given the session's value (`DO LAST_INSERT_ID(v)`) only
//!   before a statement that names `LAST_INSERT_ID()` or `@@identity`
//!   ([`Session::restore_lid`]). No round trip is added to an INSERT or to
//!   a taken connection otherwise. (A stored function or trigger that reads
//!   `LAST_INSERT_ID()` without the statement naming it sees the
//!   connection's value: documented.)
//! - Pinning until released ([`Pin`], dynamic): a transaction or XA
//!   branch (also autocommit off), a cursor open on a shard, long data sent
//!   for the next execute, and diagnostics the client may still read (the
//!   last statement left warnings or an error: `SHOW WARNINGS`,
//!   `@@warning_count` and `GET DIAGNOSTICS` must see the connection it
//!   ran on; a diagnostics statement keeps the pin as it was).
//! - Pinning until the session ends or COM_RESET_CONNECTION (sticky,
//!   found in the statement's text, as MariaDB runs it: executable
//!   comments' content included): temporary tables, `LOCK TABLES` and
//!   `FLUSH TABLES ... WITH READ LOCK | FOR EXPORT` (released by `UNLOCK
//!   TABLES`), `GET_LOCK`, any user variable
//!   mentioned (`@v`: the simplest honest rule, as idgate cannot tell
//!   which are read later), SQL `PREPARE`/`EXECUTE`, `SQL_CALC_FOUND_ROWS`,
//!   `CALL` (a routine may change anything), `HANDLER`, MariaDB sequences'
//!   per-connection values (`NEXTVAL`, `LASTVAL`, ...), COM_SET_OPTION, a
//!   `SET` idgate cannot replay, `SET TRANSACTION` (until the transaction
//!   it is for begins), client-issued `XA`, `BACKUP LOCK`/`BACKUP STAGE`.
//!
//! The same rules decide, with or without multiplexing, whether a session
//! that ends may give its connections back without COM_RESET_CONNECTION
//! (a session that pinned nothing leaves nothing a reset would clear but
//! its `SET`s, which the tag covers): the reset's round trip is saved on
//! the connect-per-request path.

use crate::backend::lidclaim::ClaimState;
use crate::backend::pool::{Idle, PIN_SLOTS};
use crate::frontend::session::muxstate::{Facts, PreparedFacts};
use crate::frontend::session::{lidread, Session};
use crate::protocol::consts::{cmd, status};
use crate::protocol::response::Expect;
use crate::sql::lexer::Modes;
use crate::sql::statement::keyword::{
    code, contains_ignore_case, executed, first_keyword, keyword_start, second_word,
    semicolon_parts, session_set, set_statement_body,
};
use crate::sql::statement::mentions::{Mentions, Word};
use crate::sql::statement::split_statements;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tracing::{debug, warn};

/// Why a session keeps its shard connections after a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Pin {
    Transaction = 0,
    Cursor,
    LongData,
    Diagnostics,
    SetNotReplayable,
    TemporaryTable,
    LockTables,
    GetLock,
    UserVariable,
    SqlPrepare,
    FoundRows,
    Call,
    Handler,
    Sequence,
    SetOption,
    SetTransaction,
    Xa,
    Backup,
}

impl Pin {
    /// Every reason, in slot order.
    pub const ALL: [Pin; 18] = [
        Pin::Transaction,
        Pin::Cursor,
        Pin::LongData,
        Pin::Diagnostics,
        Pin::SetNotReplayable,
        Pin::TemporaryTable,
        Pin::LockTables,
        Pin::GetLock,
        Pin::UserVariable,
        Pin::SqlPrepare,
        Pin::FoundRows,
        Pin::Call,
        Pin::Handler,
        Pin::Sequence,
        Pin::SetOption,
        Pin::SetTransaction,
        Pin::Xa,
        Pin::Backup,
    ];

    /// Its name in `SHOW IDGATE POOLS` and `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            Pin::Transaction => "transaction",
            Pin::Cursor => "cursor",
            Pin::LongData => "long_data",
            Pin::Diagnostics => "diagnostics",
            Pin::SetNotReplayable => "set_not_replayable",
            Pin::TemporaryTable => "temporary_table",
            Pin::LockTables => "lock_tables",
            Pin::GetLock => "get_lock",
            Pin::UserVariable => "user_variable",
            Pin::SqlPrepare => "sql_prepare",
            Pin::FoundRows => "found_rows",
            Pin::Call => "call",
            Pin::Handler => "handler",
            Pin::Sequence => "sequence",
            Pin::SetOption => "set_option",
            Pin::SetTransaction => "set_transaction",
            Pin::Xa => "xa",
            Pin::Backup => "backup",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u8)
    }
}

const _: () = assert!(Pin::ALL.len() <= PIN_SLOTS);

impl Facts {
    /// `mentions_lid`: whether it names `LAST_INSERT_ID()`, found before
    /// the command ran (`Session::before_command`).
    #[cfg(test)]
    fn of(sql: &[u8], mentions_lid: bool) -> Facts {
        Facts::with(sql, Mentions::of(sql), mentions_lid)
    }

    /// [`Facts::of`], with what the text mentions already found.
    fn with(sql: &[u8], m: Mentions, mentions_lid: bool) -> Facts {
        let first = first_keyword(sql);
        let (pins, unlock) = sticky_pins_with(sql, m, &first);
        Facts {
            pins,
            unlock,
            several_with_set: m.has(Word::Semicolon) && several_with_set(sql),
            diagnostics: (&first == b"SHOW\0\0\0\0"
                && (contains_ignore_case(sql, b"warnings")
                    || contains_ignore_case(sql, b"errors")))
                || &first == b"GET\0\0\0\0\0"
                || m.has(Word::WarningCount)
                || m.has(Word::ErrorCount),
            mentions_lid,
            inserts: matches!(&first, b"INSERT\0\0" | b"REPLACE\0"),
        }
    }
}

/// Sticky pins a client statement (its SQL text) sets, and whether it
/// releases `LOCK TABLES`. A query of several statements is looked at
/// statement by statement (cut at every `;`, also one in a string: more
/// pins at worst).
#[cfg(test)]
fn sticky_pins(sql: &[u8], m: Mentions) -> (u32, bool) {
    sticky_pins_with(sql, m, &first_keyword(sql))
}

/// [`sticky_pins`], with the text's first keyword already read.
fn sticky_pins_with(sql: &[u8], m: Mentions, first: &[u8; 8]) -> (u32, bool) {
    let mut pins = 0;
    let mut unlock = false;
    let mut part_pins = |part: &[u8]| {
        if part.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        // One statement: its first keyword is the text's.
        let (p, u) = match part.len() == sql.len() {
            true => keyword_pins(part, first),
            false => keyword_pins(part, &first_keyword(part)),
        };
        pins |= p;
        // `UNLOCK TABLES` releases the locks taken before it only.
        if u {
            pins &= !Pin::LockTables.bit();
        }
        unlock |= u && pins & Pin::LockTables.bit() == 0;
    };
    match m.has(Word::Semicolon) {
        true => semicolon_parts(sql).for_each(&mut part_pins),
        false => part_pins(sql),
    }
    if m.has(Word::At) && user_variable(sql) {
        pins |= Pin::UserVariable.bit();
    }
    if m.has(Word::GetLock) {
        pins |= Pin::GetLock.bit();
    }
    if m.has(Word::SqlCalcFoundRows) {
        pins |= Pin::FoundRows.bit();
    }
    if m.has(Word::ValueFor) || (m.has(Word::ValParen) && native_sequence(sql)) {
        pins |= Pin::Sequence.bit();
    }
    (pins, unlock)
}

/// Whether `sql` is a query of several statements of which one is a
/// session `SET`.
fn several_with_set(sql: &[u8]) -> bool {
    if memchr::memchr(b';', sql).is_none() {
        return false;
    }
    let text = String::from_utf8_lossy(sql);
    let parts = split_statements(&text, Modes::default()).unwrap_or_default();
    parts.len() > 1
        && parts
            .into_iter()
            .any(|r| text.as_bytes().get(r).is_some_and(session_set))
}

/// The pins one statement sets by its first keyword, and whether it is
/// `UNLOCK TABLES`; for `SET STATEMENT ... FOR stmt`, those of `stmt`
/// (once: MariaDB does not nest them).
fn keyword_pins(sql: &[u8], first: &[u8; 8]) -> (u32, bool) {
    let body = match &first[..4] {
        b"SET\0" => set_statement_body(sql),
        _ => None,
    };
    match body {
        Some(body) => first_keyword_pins(&body, &first_keyword(&body)),
        None => first_keyword_pins(sql, first),
    }
}

/// The pins one statement sets by its first keyword (`first`), and
/// whether it is `UNLOCK TABLES`.
fn first_keyword_pins(sql: &[u8], first: &[u8; 8]) -> (u32, bool) {
    let pin = match first {
        b"CREATE\0\0" if contains_ignore_case(sql, b"temporary") => Pin::TemporaryTable,
        b"LOCK\0\0\0\0" => Pin::LockTables,
        // `FLUSH TABLES ... WITH READ LOCK` and `... FOR EXPORT` hold their
        // locks until `UNLOCK TABLES`.
        b"FLUSH\0\0\0"
            if contains_ignore_case(sql, b"read lock")
                || contains_ignore_case(sql, b"for export") =>
        {
            Pin::LockTables
        }
        // `BACKUP LOCK` and `BACKUP STAGE`: held by the connection.
        b"BACKUP\0\0" => Pin::Backup,
        b"UNLOCK\0\0" => return (0, true),
        b"PREPARE\0" | b"EXECUTE\0" | b"DEALLOCA" => Pin::SqlPrepare,
        b"CALL\0\0\0\0" => Pin::Call,
        // A compound statement outside a stored program runs like one.
        b"IF\0\0\0\0\0\0" | b"WHILE\0\0\0" | b"LOOP\0\0\0\0" | b"REPEAT\0\0" | b"CASE\0\0\0\0" => {
            Pin::Call
        }
        b"BEGIN\0\0\0" if second_word(sql).eq_ignore_ascii_case("not") => Pin::Call,
        b"HANDLER\0" => Pin::Handler,
        b"XA\0\0\0\0\0\0" => Pin::Xa,
        b"SET\0\0\0\0\0" if set_transaction(sql) => Pin::SetTransaction,
        // `label: BEGIN ...`, `label: LOOP ...`.
        _ if labelled(sql) => Pin::Call,
        _ => return (0, false),
    };
    (pin.bit(), false)
}

/// `label: BEGIN ...` (a labelled compound statement).
fn labelled(sql: &[u8]) -> bool {
    // A text that starts with a letter has no comment to skip.
    let start = match sql.first() {
        Some(b) if b.is_ascii_alphabetic() => 0,
        _ => keyword_start(sql),
    };
    let rest = &sql[start..];
    let word = rest
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_' || **b == b'$')
        .count();
    let after = &rest[word..];
    let after = &after[after.iter().take_while(|b| b.is_ascii_whitespace()).count()..];
    word > 0 && after.first() == Some(&b':') && after.get(1) != Some(&b'=')
}

/// `SET TRANSACTION ...` (for the next transaction only).
fn set_transaction(sql: &[u8]) -> bool {
    let sql = &*code(sql);
    let text = String::from_utf8_lossy(&sql[keyword_start(sql)..]);
    let mut words = text.split_ascii_whitespace().skip(1);
    matches!(words.next(), Some(w) if w.eq_ignore_ascii_case("transaction"))
}

/// Whether `sql` mentions a user variable (`@v`, `@'v'`, not `@@v`)
/// outside strings, quoted names and comments.
pub fn user_variable(sql: &[u8]) -> bool {
    if memchr::memchr(b'@', sql).is_none() {
        return false;
    }
    let mut i = 0;
    while let Some(&b) = sql.get(i) {
        match b {
            b'\'' | b'"' | b'`' => {
                // Skip to the closing quote (a backslash escapes in strings).
                i += 1;
                while let Some(&c) = sql.get(i) {
                    if c == b'\\' && b != b'`' {
                        i += 2;
                        continue;
                    }
                    i += 1;
                    if c == b {
                        break;
                    }
                }
            }
            b'#' => i = skip_line(sql, i),
            b'-' if sql.get(i + 1) == Some(&b'-') => i = skip_line(sql, i),
            b'/' if sql.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < sql.len() && !(sql[i] == b'*' && sql.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
            }
            b'@' => {
                if sql.get(i + 1) == Some(&b'@') {
                    // A system variable: skip its name.
                    i += 2;
                    while sql
                        .get(i)
                        .is_some_and(|c| c.is_ascii_alphanumeric() || b"_.$".contains(c))
                    {
                        i += 1;
                    }
                } else {
                    return true;
                }
            }
            _ => i += 1,
        }
    }
    false
}

fn skip_line(sql: &[u8], i: usize) -> usize {
    memchr::memchr(b'\n', &sql[i..]).map_or(sql.len(), |n| i + n + 1)
}

/// Whether `sql` calls `NEXTVAL(`, `LASTVAL(` or `SETVAL(` on a MariaDB
/// sequence (per-connection values), not on idgate's own generators
/// (`idgate.g`, which idgate answers itself). `NEXT VALUE FOR s` and
/// `PREVIOUS VALUE FOR s` are [`Word::ValueFor`], found by the caller.
fn native_sequence(sql: &[u8]) -> bool {
    // The text after each `val(`.
    let mut rest = sql;
    while let Some(i) = find_ignore_case(rest, b"val(") {
        let after = &rest[i + 4..];
        let arg = &after[after.iter().take_while(|b| b.is_ascii_whitespace()).count()..];
        let named = i >= 3 && {
            let w = &rest[i - 3..i];
            w.eq_ignore_ascii_case(b"ext")
                || w.eq_ignore_ascii_case(b"ast")
                || w.eq_ignore_ascii_case(b"set")
        };
        if named
            && !arg
                .get(..7)
                .is_some_and(|a| a.eq_ignore_ascii_case(b"idgate."))
        {
            return true;
        }
        rest = after;
    }
    false
}

/// Where `needle` (lower case ASCII) first occurs in `hay`, ignoring case.
fn find_ignore_case(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = *needle.first()?;
    memchr::memchr2_iter(first, first.to_ascii_uppercase(), hay).find(|&i| {
        hay.get(i..i + needle.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(needle))
    })
}

/// Whether what idgate sends the shards for client statement `sql` may
/// read the connection's `LAST_INSERT_ID()`: the statement names it, or it
/// is an INSERT IGNORE / ON DUPLICATE KEY UPDATE, which idgate writes into
/// a rule table tracking the stored id through `LAST_INSERT_ID()` and
/// putting the session's value back when none was stored (`sql::upsert`).
#[cfg(test)]
fn reads_last_id(sql: &[u8]) -> bool {
    reads_last_id_with(sql, Mentions::of(sql))
}

/// `f` of `sql` as MariaDB runs it ([`executed`]) and of what that text
/// mentions. The markers of executable comments are blanked only when the
/// text has a `!` (`/*!`, `/*M!` need one), so most statements are
/// scanned once. The mentions passed on have [`Word::Bang`] when `sql`
/// has a `!` (blanking may take it out of the text read).
fn as_executed<T>(sql: &[u8], f: impl FnOnce(&[u8], Mentions) -> T) -> T {
    let m = Mentions::of(sql);
    if !m.has(Word::Bang) {
        return f(sql, m);
    }
    let text = executed(sql);
    f(&text, Mentions::of(&text).with(Word::Bang))
}

/// [`reads_last_id`], with what the text mentions already found.
fn reads_last_id_with(sql: &[u8], m: Mentions) -> bool {
    m.has(Word::LastInsertId)
        || m.has(Word::Identity)
        || ((m.has(Word::Ignore) || m.has(Word::Duplicate)) && &first_keyword(sql) == b"INSERT\0\0")
}

impl Session {
    /// Before each command: whether what it sends the shards may read
    /// `LAST_INSERT_ID()` ([`reads_last_id`]).
    pub(in crate::frontend) fn before_command(&mut self, payload: &[u8]) {
        self.mux.prepared = None;
        self.mux.text = None;
        if let Some(pf) = self.prepared_facts(payload) {
            // An execute: what its prepared text tells, read once.
            self.mux.want_lid = pf.facts.mentions_lid;
            self.mux.mentions = None;
            self.mux.prepared = Some(pf);
        } else {
            let mut mentions = None;
            self.mux.want_lid = self.command_text(payload, |sql| {
                as_executed(sql, |text, m| {
                    mentions = Some(m);
                    reads_last_id_with(text, m)
                })
            }) == Some(true);
            self.mux.mentions = mentions;
            if let (Some(&cmd::QUERY), Some(sql), Some(m)) =
                (payload.first(), payload.get(1..), mentions)
            {
                if !m.has(Word::Bang) {
                    self.mux.text = Some((sql.as_ptr() as usize, sql.len(), m));
                }
            }
        }
        self.note_insert(payload);
    }

    /// What `before_command` found this command's query text mentions,
    /// when `sql` is that text (the same bytes in memory: the payload is
    /// borrowed, unchanged, while the command runs, and this is cleared
    /// when it ends) and it has no `!`. A word absent there is absent from
    /// `sql`, so a reader may skip its scan ([`Mentions::may_have`]);
    /// `None` (another text, or an execute): scan.
    pub(in crate::frontend) fn mentions_of(&self, sql: &[u8]) -> Option<Mentions> {
        self.mux
            .text
            .filter(|&(at, len, _)| at == sql.as_ptr() as usize && len == sql.len())
            .map(|(_, _, m)| m)
    }

    /// For COM_STMT_EXECUTE: what the statement's prepared text tells the
    /// multiplexer, found at its first execute and kept with the statement
    /// (the text does not change; each execute scanned it again before).
    fn prepared_facts(&mut self, payload: &[u8]) -> Option<PreparedFacts> {
        if payload.first() != Some(&cmd::STMT_EXECUTE) {
            return None;
        }
        let id = crate::protocol::stmt::stmt_id(payload.get(1..)?).ok()?;
        let s = self.stmts.get_mut(id)?;
        if let Some(pf) = s.mux_facts {
            return Some(pf);
        }
        let sql = s.client_prepare.get(1..)?;
        let pf = as_executed(sql, |text, m| {
            let lid = reads_last_id_with(text, m);
            PreparedFacts {
                facts: Facts::with(text, m, lid),
                changes_session: crate::frontend::session::replay::changes_session_state(text),
            }
        });
        s.mux_facts = Some(pf);
        Some(pf)
    }

    /// Whether `[backend] multiplex` is on.
    pub(in crate::frontend) fn multiplexing(&self) -> bool {
        self.shared.config.backend.multiplex
    }

    /// What a command's statement text (a query's, or the prepared text of
    /// an execute; as MariaDB runs it, executable comments included:
    /// [`executed`]) tells about pins and `LAST_INSERT_ID()`. An execute of a
    /// prepared `SET` counts as state idgate cannot replay.
    fn command_facts(&mut self, payload: &[u8]) -> Option<Facts> {
        if let Some(pf) = self.mux.prepared.take() {
            // An execute: found by `before_command` (`prepared_facts`).
            if pf.changes_session {
                self.state.lose();
            }
            return Some(pf.facts);
        }
        if payload.first() != Some(&cmd::QUERY) {
            // Not a query, or an execute of no statement.
            return None;
        }
        let lid = self.mux.want_lid;
        // Found by `before_command` for this same command (unless the
        // command reset the session's multiplexing state meanwhile).
        let mentions = self.mux.mentions.take();
        payload.get(1..).map(|sql| match mentions {
            // No `!`: the text runs as it is written.
            Some(m) if !m.has(Word::Bang) => Facts::with(sql, m, lid),
            _ => as_executed(sql, |text, m| Facts::with(text, m, lid)),
        })
    }

    /// `f` of the statement text of a command as sent: a query's, or the
    /// prepared text of an execute.
    fn command_text<T>(&mut self, payload: &[u8], f: impl FnOnce(&[u8]) -> T) -> Option<T> {
        match payload.first() {
            Some(&cmd::QUERY) => payload.get(1..).map(f),
            Some(&cmd::STMT_EXECUTE) => {
                let id = crate::protocol::stmt::stmt_id(payload.get(1..)?).ok()?;
                let s = self.stmts.get_mut(id)?;
                s.client_prepare.get(1..).map(f)
            }
            _ => None,
        }
    }

    /// After each command (the session goes on): the pins the command
    /// set or released, and with multiplexing, the connections given back
    /// when nothing pins the session.
    pub(in crate::frontend) async fn after_command(&mut self, payload: &[u8]) {
        let Some(&command) = payload.first() else {
            return;
        };
        let facts = self.command_facts(payload);
        if command == cmd::SET_OPTION {
            self.mux.sticky |= Pin::SetOption.bit();
        }
        if let Some(f) = &facts {
            if f.several_with_set {
                self.state.lose();
            }
            if f.unlock {
                self.mux.sticky &= !Pin::LockTables.bit();
            }
            self.mux.sticky |= f.pins;
        }
        let diag_stmt = facts.as_ref().is_some_and(|f| f.diagnostics);
        if !diag_stmt && matches!(command, cmd::QUERY | cmd::STMT_EXECUTE | cmd::STMT_PREPARE) {
            self.mux.diag_pending = self.backends.conns().any(|b| b.diagnostics > 0);
        }
        if let Some(f) = &facts {
            // What an INSERT idgate did not fill did to the value, when
            // the statement tells (`generated.rs`).
            let told = f.inserts
                && !f.mentions_lid
                && self.mux.lid_set == 0
                && self.multiplexing()
                && self.note_generated();
            if !told {
                self.note_lid_change(f);
            }
        }
        let pin = self.pinned(command);
        if self.multiplexing() {
            self.count_pin(pin);
            if pin.is_none() {
                self.give_back_all(false).await;
            }
        }
        self.mux.lid_set = 0;
        self.mux.want_lid = false;
        self.mux.insert_pending = false;
    }

    /// After statement `sql`: the held connections whose
    /// `LAST_INSERT_ID()` it may have changed hold an unknown value, and
    /// the session's is to be read again (unless idgate set it).
    fn note_lid_change(&mut self, f: &Facts) {
        let mentions = f.mentions_lid;
        if !mentions && !f.inserts {
            return;
        }
        let set = self.mux.lid_set;
        let mut changed = false;
        for (shard, b) in self.backends.open() {
            if set & bit(shard) == 0 && (mentions || b.insert_id != 0) {
                changed = true;
                if let Some(h) = self.mux.held_lid.get_mut(shard) {
                    *h = None;
                }
            }
        }
        if changed && set == 0 {
            self.mux.lid_dirty = true;
            // A value left on a connection given back is old now.
            self.mux.owed = None;
        }
    }

    /// Forgets the session's pins and `LAST_INSERT_ID()`
    /// (COM_RESET_CONNECTION reset the held connections; COM_CHANGE_USER
    /// gave them back).
    pub(in crate::frontend) fn forget_mux_state(&mut self) {
        self.mux.sticky = 0;
        self.mux.key = None;
        self.mux.diag_pending = false;
        self.mux.lid = 0;
        self.mux.lid_dirty = false;
        self.mux.owed = None;
        for h in &mut self.mux.held_lid {
            *h = Some(0);
        }
    }

    /// After the login's reply: with multiplexing, the connection that
    /// checked the login's schema goes back.
    pub(in crate::frontend) async fn after_login(&mut self) {
        if self.multiplexing() && self.pinned(NO_COMMAND).is_none() {
            self.give_back_all(false).await;
        }
    }

    /// The first reason the session must keep its connections now.
    pub(in crate::frontend) fn pinned(&mut self, command: u8) -> Option<Pin> {
        if self.txn_open()
            || self
                .backends
                .conns()
                .any(|b| b.status & (status::IN_TRANS | status::AUTOCOMMIT) != status::AUTOCOMMIT)
        {
            // A transaction, or autocommit off (one begins with the next
            // statement).
            self.mux.sticky &= !Pin::SetTransaction.bit();
            return Some(Pin::Transaction);
        }
        if self.cursor_stream.is_some()
            || self
                .backends
                .conns()
                .any(|b| b.status & status::CURSOR_EXISTS != 0)
        {
            return Some(Pin::Cursor);
        }
        if command == cmd::STMT_SEND_LONG_DATA {
            return Some(Pin::LongData);
        }
        if self.mux.diag_pending {
            return Some(Pin::Diagnostics);
        }
        if self.state.replay().is_none() {
            return Some(Pin::SetNotReplayable);
        }
        if self.killed {
            return Some(Pin::Transaction);
        }
        let sticky = self.mux.sticky;
        Pin::ALL.into_iter().find(|p| sticky & p.bit() != 0)
    }

    /// Counts the session's held connections as pinned by `pin` in their
    /// pools' gauges (or nothing when not pinned).
    fn count_pin(&mut self, pin: Option<Pin>) {
        let now: Vec<_> = match pin {
            Some(p) => self
                .backends
                .open()
                .filter_map(|(s, _)| {
                    self.shared
                        .pools
                        .get(s)
                        .map(|pool| (pool.clone(), p as usize))
                })
                .collect(),
            None => Vec::new(),
        };
        let same = now.len() == self.mux.counted.0.len()
            && now
                .iter()
                .zip(&self.mux.counted.0)
                .all(|((a, r), (b, q))| Arc::ptr_eq(a, b) && r == q);
        if !same {
            self.mux.counted.set(now);
        }
    }

    /// Gives every held connection back to its pool, as it is (no reset):
    /// when a statement may have changed the session's `LAST_INSERT_ID()`,
    /// its home connection carries a claim on the value (unless the
    /// session is `ending`: then nobody needs it).
    pub(in crate::frontend) async fn give_back_all(&mut self, ending: bool) {
        if self.backends.open().next().is_none() {
            return;
        }
        self.mux.counted.clear();
        // The connection holding the session's value, when a statement may
        // have changed it since the last give-back (`lid_dirty`, or the
        // writes moved it to `lid_home`: `lastid.rs`, `lid_synced` is
        // `u64::MAX` right after one). An ending session needs it no more.
        let changed = self.mux.lid_dirty || self.lid_synced != u64::MAX;
        let home = (changed && !ending).then_some(self.lid_home);
        let now = Instant::now();
        self.mux.ended = Some(now);
        for shard in 0..self.backends.len() {
            if self.backends.is_open(shard) {
                self.give_back(shard, home, now).await;
            }
        }
        // Every connection taken from now on is given the session's value.
        self.mux.lid_dirty = false;
        self.lid_home = 0;
        self.lid_synced = u64::MAX;
    }

    /// Gives `shard`'s connection back; `home`: the shard whose connection
    /// holds the session's changed value, if any.
    async fn give_back(&mut self, shard: usize, home: Option<usize>, now: Instant) {
        let Some((mut conn, lease)) = self.backends.take(shard) else {
            return;
        };
        self.registered.control.set_thread(shard, None);
        let stmt_ids = self.stmts.ids_on(shard);
        let pool = self.shared.pools.get(shard).cloned();
        // Only shard 0 follows the session's schema without routing.
        let db_known = shard == 0 || self.shared.routing;
        let (Some(lease), Some(pool), true) = (lease, pool, db_known) else {
            crate::frontend::session::pooled::quit(conn).await;
            return;
        };
        let timeout = self.shared.connect_timeout();
        let mut held = self.mux.held_lid.get(shard).copied().flatten();
        // The session's value is on its home connection: known when idgate
        // gave it there in this command, otherwise claimed.
        let dirty_home = home == Some(shard);
        let known = self.mux.lid_set & bit(shard) != 0;
        if let (true, true, Some(v)) = (dirty_home, known, held) {
            self.mux.lid = v;
        }
        if dirty_home && !(known && held.is_some()) {
            // Not read now: the connection carries a claim on it.
            let (claim, owed) = crate::backend::lidclaim::claim();
            conn.lid_claim = Some(claim);
            self.mux.owed = Some((shard, owed));
            held = None;
        }
        // Replies to idgate's detached commands are read first (no timer
        // armed on the common path, where there are none).
        let ok = conn.detached() == 0
            || matches!(tokio::time::timeout(timeout, conn.drain()).await, Ok(Ok(_)));
        if !ok || conn.status & status::IN_TRANS != 0 {
            drop(lease);
            crate::frontend::session::pooled::quit(conn).await;
            return;
        }
        pool.stats.multiplexed.fetch_add(1, Ordering::Relaxed);
        self.mux.given_back += 1;
        debug!(conn = self.id, shard = %pool.shard, backend_conn = conn.connection_id, "shard connection given back after the statement");
        let (closed, serial) = pool.give_back_numbered(Idle {
            key: self.conn_key(),
            db: self.schema_shared(),
            tag: self.state.tag(),
            lid: held,
            // Its prepared statements stay: taken back by this session,
            // they are used again; by another, closed.
            owner: self.id,
            stmts: stmt_ids,
            lease,
            since: now,
            serial: 0,
            home: conn.conn.home(),
            conn,
        });
        // Looked for first at the next take (`pool::Want::serial`).
        if self.mux.given.len() <= shard {
            self.mux.given.resize(shard + 1, 0);
        }
        self.mux.given[shard] = serial.unwrap_or(0);
        if let Some(c) = closed {
            crate::frontend::session::pooled::quit(c).await;
        }
    }

    /// Whether the session has given a connection back after a statement
    /// (its cached `sql_mode` and character set stay valid: every
    /// connection it takes gets its state).
    pub(in crate::frontend) fn has_multiplexed(&self) -> bool {
        self.mux.given_back > 0
    }

    /// A connection taken for `shard` (`reset`: just reset for the
    /// session) whose `LAST_INSERT_ID()` is `lid`, left by session
    /// `owner` with statements `left` open: the session's statement ids
    /// stay valid if it is the connection they were prepared on, and are
    /// forgotten otherwise; the statements left that are not the
    /// session's (now) are closed; the session's `LAST_INSERT_ID()` given
    /// when it holds another.
    pub(in crate::frontend) async fn took(
        &mut self,
        shard: usize,
        conn: &mut crate::backend::BackendConn,
        lid: Option<u64>,
        owner: u32,
        left: &[u32],
        reset: bool,
    ) -> Result<(), crate::backend::BackendError> {
        let n = self.backends.len();
        if self.mux.held_lid.len() < n {
            self.mux.held_lid.resize(n, None);
            self.mux.stmts_on.resize(n, None);
        }
        let on = self.mux.stmts_on.get(shard).copied().flatten();
        let mine = !reset && owner == self.id && on == Some(conn.connection_id);
        if !mine {
            self.stmts.forget_shard(shard);
        }
        if !reset && !left.is_empty() {
            let keep = if mine {
                self.stmts.ids_on(shard)
            } else {
                Vec::new()
            };
            for bid in left.iter().filter(|b| !keep.contains(b)) {
                let mut out = vec![cmd::STMT_CLOSE];
                out.extend_from_slice(&bid.to_le_bytes());
                conn.send(&out).await?;
            }
        }
        if let Some(s) = self.mux.stmts_on.get_mut(shard) {
            *s = Some(conn.connection_id);
        }
        // The session's value is given only before a statement that
        // names it (`restore_lid`).
        if let Some(h) = self.mux.held_lid.get_mut(shard) {
            *h = lid;
        }
        Ok(())
    }

    /// Whether `conn`, just taken for `shard`, carries a claim on this
    /// session's own `LAST_INSERT_ID()` (it gave the connection back with
    /// the value unread on it).
    pub(in crate::frontend) fn own_claim(
        &self,
        shard: usize,
        conn: &crate::backend::BackendConn,
    ) -> bool {
        let (Some(claim), Some((s, owed))) = (conn.lid_claim.as_ref(), self.mux.owed.as_ref())
        else {
            return false;
        };
        *s == shard && claim.is(owed)
    }

    /// `conn`, just taken back for `shard`, carries the session's own
    /// value ([`Session::own_claim`]): the claim is abandoned (the
    /// session's side first) and dropped unread, and the value is the
    /// held connection's again (its `LAST_INSERT_ID()` unknown).
    pub(in crate::frontend) fn adopt_own_claim(
        &mut self,
        shard: usize,
        conn: &mut crate::backend::BackendConn,
    ) {
        self.mux.owed = None;
        conn.lid_claim = None;
        self.mux.lid_dirty = true;
        self.last_id_home(shard);
    }

    /// A connection just taken for `shard` (`reset`: another session's
    /// state, to be reset) carrying a claim: the session's own (the value
    /// is on the connection it holds again: nothing to read, unless the
    /// reset would clear it) or another session's (read now, before the
    /// connection is used). Returns the connection's `LAST_INSERT_ID()`
    /// when known.
    pub(in crate::frontend) async fn settle_taken(
        &mut self,
        shard: usize,
        conn: &mut crate::backend::BackendConn,
        lid: Option<u64>,
        reset: bool,
    ) -> Result<Option<u64>, crate::backend::BackendError> {
        let Some(claim) = conn.lid_claim.as_ref() else {
            return Ok(lid);
        };
        if !reset && self.own_claim(shard, conn) {
            self.adopt_own_claim(shard, conn);
            return Ok(None);
        }
        if !claim.wanted() {
            conn.lid_claim = None;
            return Ok(lid);
        }
        if let Some(pool) = self.shared.pools.get(shard) {
            // Inserting sessions look at their statements for a while, so
            // the next takers need not read (`generated.rs`).
            let st = &pool.stats;
            st.lid_reads.fetch_add(1, Ordering::Relaxed);
            let now = st.multiplexed.load(Ordering::Relaxed);
            st.look_until.store(
                now + crate::frontend::session::generated::LOOK_FOR,
                Ordering::Relaxed,
            );
        }
        match lidread::settle_claim(conn, self.shared.connect_timeout()).await {
            Some(v) => Ok(Some(v)),
            None => Err(crate::backend::BackendError::Lost {
                shard: self.shared.config.shards[shard].name.clone(),
                source: std::io::Error::other(
                    "the pooled connection broke while its LAST_INSERT_ID() was read",
                ),
            }),
        }
    }

    /// Before the command's statement (which names `LAST_INSERT_ID()`)
    /// goes to `shard`: the connection is given the session's value unless
    /// it holds it. When the value is on a held connection (`lid_dirty`),
    /// nothing: it is that connection's, or routing copies it
    /// (`lastid.rs`).
    pub(in crate::frontend) async fn restore_lid(
        &mut self,
        shard: usize,
    ) -> Result<(), crate::backend::BackendError> {
        if self.mux.lid_dirty {
            return Ok(());
        }
        if self.mux.owed.is_some() {
            // Boxed: rare (`engine/size_tests.rs`).
            Box::pin(self.settle_owed()).await;
        }
        let want = self.mux.lid;
        let held = self.mux.held_lid.get(shard).copied().flatten();
        if held == Some(want) {
            return Ok(());
        }
        let Some(conn) = self.backends.get_mut(shard) else {
            return Ok(());
        };
        let q = format!("\x03DO LAST_INSERT_ID({want})");
        conn.send_detached(q.as_bytes()).await?;
        if let Some(h) = self.mux.held_lid.get_mut(shard) {
            *h = Some(want);
        }
        Ok(())
    }

    /// The session's value, left on a connection it gave back, is needed:
    /// read where the connection is idle, or waited for while another
    /// session that took it reads it.
    async fn settle_owed(&mut self) {
        let Some((shard, owed)) = self.mux.owed.take() else {
            return;
        };
        let timeout = self.shared.connect_timeout();
        let mut state = owed.state();
        if state == ClaimState::Pending {
            let pool = self.shared.pools.get(shard).cloned();
            let idle = pool.as_ref().and_then(|p| {
                p.take_idle_where(|i| i.conn.lid_claim.as_ref().is_some_and(|c| c.is(&owed)))
            });
            if let (Some(pool), Some(mut idle)) = (pool, idle) {
                let v = lidread::settle_claim(&mut idle.conn, timeout).await;
                if v.is_some() {
                    idle.lid = v;
                    if let Some(c) = pool.give_back(idle) {
                        crate::frontend::session::pooled::quit(c).await;
                    }
                } else {
                    drop(idle.lease);
                    crate::frontend::session::pooled::quit(idle.conn).await;
                }
            }
            state = owed.settled(timeout).await;
        }
        match state {
            ClaimState::Known(v) => self.mux.lid = v,
            _ => {
                warn!(conn = self.id, shard, "the session's LAST_INSERT_ID() was lost with the pooled shard connection that held it ({state:?}); the last value idgate knew stands");
            }
        }
    }

    /// `Session::set_last_insert_id` gave `shard` the session's new value.
    pub(in crate::frontend) fn lid_given(&mut self, shard: usize, id: u64) {
        self.mux.lid = id;
        self.mux.lid_dirty = false;
        self.mux.owed = None;
        self.mux.lid_set |= bit(shard);
        if let Some(h) = self.mux.held_lid.get_mut(shard) {
            *h = Some(id);
        }
    }

    /// At the session's end: whether its connections may be given back as
    /// they are (nothing pins it), without COM_RESET_CONNECTION.
    pub(in crate::frontend) fn may_skip_reset(&mut self) -> bool {
        !self.killed && self.pinned(NO_COMMAND).is_none()
    }

    /// Reads the session state tag (for `pooled.rs`).
    pub(in crate::frontend) fn state_tag(&self) -> u64 {
        self.state.tag()
    }

    /// Runs COM_RESET_CONNECTION on a taken connection whose state is
    /// another session's.
    pub(in crate::frontend) async fn reset_taken(
        conn: &mut crate::backend::BackendConn,
    ) -> Result<(), crate::backend::BackendError> {
        conn.run(&[cmd::RESET_CONNECTION], Expect::Single)
            .await
            .map(|_| ())
    }
}

/// For [`Session::pinned`] outside a command (COM_SLEEP's byte).
const NO_COMMAND: u8 = 0;

fn bit(shard: usize) -> u64 {
    if shard < 64 {
        1 << shard
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executed_text_only_when_it_has_a_bang() {
        // No `!`: the text as written, scanned once.
        as_executed(b"SELECT 1 /* a */", |t, m| {
            assert_eq!(t, b"SELECT 1 /* a */");
            assert!(!m.has(Word::Bang));
        });
        // An executable comment: its markers blanked, the `!` remembered.
        as_executed(b"/*!40101 SET @a = 1 */", |t, m| {
            assert_eq!(t, b"         SET @a = 1   ");
            assert!(m.has(Word::Bang) && m.has(Word::At));
        });
        // A `!` that opens nothing: the text as written.
        as_executed(b"SELECT 1 != 2", |t, m| {
            assert_eq!(t, b"SELECT 1 != 2");
            assert!(m.has(Word::Bang));
        });
    }

    #[test]
    fn user_variables_outside_strings_and_comments() {
        assert!(user_variable(b"SET @a = 1"));
        assert!(user_variable(b"SELECT @`a`"));
        assert!(user_variable(b"SELECT 1 INTO @x"));
        assert!(!user_variable(b"SELECT @@sql_mode, @@session.time_zone"));
        assert!(!user_variable(b"SELECT 'a@b.com', \"x@y\", `c@d` FROM t"));
        assert!(!user_variable(
            b"SELECT 'it\\'s @no' -- @no\n # @no\n /* @no */"
        ));
        assert!(user_variable(b"SELECT 'x' /* c */, @yes"));
    }

    #[test]
    fn sticky_pins_by_statement() {
        let p = |s: &str| sticky_pins(s.as_bytes(), Mentions::of(s.as_bytes())).0;
        assert_eq!(
            p("CREATE TEMPORARY TABLE t (a int)"),
            Pin::TemporaryTable.bit()
        );
        assert_eq!(p("CREATE TABLE t (a int)"), 0);
        assert_eq!(p("LOCK TABLES t WRITE"), Pin::LockTables.bit());
        assert!(sticky_pins(b"UNLOCK TABLES", Mentions::of(b"UNLOCK TABLES")).1);
        assert_eq!(p("SELECT GET_LOCK('x', 0)"), Pin::GetLock.bit());
        assert_eq!(p("PREPARE s FROM 'SELECT 1'"), Pin::SqlPrepare.bit());
        assert_eq!(
            p("SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 1"),
            Pin::FoundRows.bit()
        );
        assert_eq!(p("CALL p()"), Pin::Call.bit());
        // Labelled compound statements, a label that starts like a keyword
        // included, with or without a comment before it.
        for labelled in [
            "l1: BEGIN NOT ATOMIC SELECT 1; END",
            "insert1 : LOOP LEAVE insert1; END LOOP",
            "/* c */ select_x: REPEAT SELECT 1; UNTIL 1 END REPEAT",
        ] {
            assert_eq!(p(labelled) & Pin::Call.bit(), Pin::Call.bit(), "{labelled}");
        }
        assert_eq!(p("INSERT INTO t VALUES (1)"), 0);
        assert_eq!(
            p("SET STATEMENT max_statement_time=1 FOR LOCK TABLES t READ"),
            Pin::LockTables.bit()
        );
        assert_eq!(
            p("BEGIN NOT ATOMIC SET time_zone = '+01:00'; END"),
            Pin::Call.bit()
        );
        assert_eq!(
            p("IF 1 THEN SET @@time_zone = '+01:00'; END IF"),
            Pin::Call.bit()
        );
        assert_eq!(p("BEGIN"), 0);
        assert_eq!(
            p("l1: LOOP SET @@time_zone = '+01:00'; LEAVE l1; END LOOP l1"),
            Pin::Call.bit()
        );
        assert_eq!(p("SELECT 1"), 0);
        assert_eq!(p("SELECT NEXTVAL(s)"), Pin::Sequence.bit());
        assert_eq!(p("SELECT NEXTVAL(idgate.g)"), 0);
        assert_eq!(p("SELECT PREVIOUS VALUE FOR s"), Pin::Sequence.bit());
        assert_eq!(
            p("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
            Pin::SetTransaction.bit()
        );
        assert_eq!(p("SET sql_mode = ''"), 0);
        assert_eq!(
            p("SET /* c */ TRANSACTION READ ONLY"),
            Pin::SetTransaction.bit()
        );
        assert_eq!(
            p("/* c */ SET TRANSACTION READ ONLY"),
            Pin::SetTransaction.bit()
        );
        assert_eq!(
            p("SET STATEMENT max_statement_time = 5 FOR CREATE TEMPORARY TABLE t (a int)"),
            Pin::TemporaryTable.bit()
        );
        assert_eq!(
            p("set statement sql_mode = 'for', x = (1) for call p()"),
            Pin::Call.bit()
        );
        assert_eq!(p("SET STATEMENT max_statement_time = 5 FOR SELECT 1"), 0);
        assert_eq!(p("SET @v = 1"), Pin::UserVariable.bit());
        assert_eq!(p("SELECT * FROM t WHERE id = 1"), 0);
        assert_eq!(p("XA START 'x'"), Pin::Xa.bit());
        assert_eq!(p("FLUSH TABLES t FOR EXPORT"), Pin::LockTables.bit());
        assert_eq!(p("FLUSH TABLES t"), 0);
        assert_eq!(p("BACKUP LOCK t"), Pin::Backup.bit());
        assert_eq!(p("BACKUP STAGE START"), Pin::Backup.bit());
        // Each statement of a multi-statement query counts.
        assert_eq!(p("SELECT 1; LOCK TABLES t WRITE"), Pin::LockTables.bit());
        assert_eq!(p("LOCK TABLES t WRITE; UNLOCK TABLES"), 0);
        assert!(
            sticky_pins(
                b"SELECT 1;\n UNLOCK TABLES",
                Mentions::of(b"SELECT 1;\n UNLOCK TABLES")
            )
            .1
        );
        // Empty statements, and a semicolon first or last.
        assert_eq!(p(";;SELECT 1;; CALL p();"), Pin::Call.bit());
        assert_eq!(p("LOCK TABLES t WRITE;"), Pin::LockTables.bit());
        assert_eq!(p(";"), 0);
        assert_eq!(
            p("SELECT LASTVAL( idgate.g), SETVAL(s, 1)"),
            Pin::Sequence.bit()
        );
        assert_eq!(p("SELECT interval(1, 2), eval(3)"), 0);
    }

    #[test]
    fn statements_in_executable_comments_pin_as_they_run() {
        // mysqldump's headers and footers: MariaDB runs what they hide.
        let f = |s: &str| Facts::of(&executed(s.as_bytes()), false);
        let saved = "/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */";
        assert_eq!(f(saved).pins, Pin::UserVariable.bit());
        assert_eq!(
            f("/*!40014 SET UNIQUE_CHECKS=@OLD_UNIQUE_CHECKS */").pins,
            Pin::UserVariable.bit()
        );
        assert_eq!(
            f("/*!40000 LOCK TABLES t WRITE */").pins,
            Pin::LockTables.bit()
        );
        assert!(f("/*M!100100 UNLOCK TABLES */").unlock);
        assert_eq!(
            f("/*!40103 CREATE TEMPORARY TABLE t (a int) */").pins,
            Pin::TemporaryTable.bit()
        );
        assert!(f("/*! INSERT INTO t VALUES (1) */").inserts);
        assert!(f("/*!*/ SHOW WARNINGS").diagnostics);
        assert!(reads_last_id(&executed(
            b"/*! INSERT IGNORE INTO t VALUES (1) */"
        )));
        // Plain comments and strings hide nothing.
        assert_eq!(f("/* SET @x = 1 */ SELECT 1").pins, 0);
        assert_eq!(f("SELECT '/*!40101 SET @x = 1 */'").pins, 0);
    }

    proptest::proptest! {
        /// What the multiplexer reads of a statement never panics.
        #[test]
        fn facts_of_anything(
            sql in "(/\\*!|/\\*|\\*/|--|#|\n|'|`|;|@|@@|:|:=| |SET|STATEMENT|FOR|BEGIN|NOT|IF|LOCK|CREATE|TEMPORARY|x|1){0,24}",
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            for t in [sql.as_bytes(), &bytes[..]] {
                let _ = Facts::of(&executed(t), false);
                let _ = (reads_last_id(t), labelled(t), several_with_set(t));
            }
        }
    }

    #[test]
    fn a_set_among_several_statements_is_found() {
        assert!(several_with_set(b"SELECT 1; SET time_zone = '+01:00'"));
        assert!(several_with_set(b"set @a = 1 ; select @a"));
        assert!(!several_with_set(b"SET NAMES utf8mb4;"));
        assert!(!several_with_set(b"SELECT 1; SELECT 2"));
        assert!(!several_with_set(b"SELECT 'a;SET b'"));
        assert!(!several_with_set(b"SELECT 1; /* SET x = 1 */"));
    }

    #[test]
    fn state_tags() {
        use crate::frontend::session::replay::SessionState;
        let q = |s: &str| [&[3u8][..], s.as_bytes()].concat();
        let mut a = SessionState::default();
        assert_eq!(a.tag(), 0);
        a.record(&q("SET sql_mode = ''"));
        let mut b = SessionState::default();
        b.record(&q("SET sql_mode = ''"));
        assert_eq!(a.tag(), b.tag());
        assert_ne!(a.tag(), 0);
        b.record(&q("SET time_zone = '+01:00'"));
        assert_ne!(a.tag(), b.tag());
        a.record(&q("SET @a = 1; SET @b = 2"));
        assert_eq!(a.tag(), u64::MAX);
        // A `SET` in an executable comment changes the tag as it is.
        let mut c = SessionState::default();
        c.record(&q("/*!40014 SET UNIQUE_CHECKS=0 */"));
        assert_ne!(c.tag(), 0);
        let mut d = SessionState::default();
        d.record(&q("/*!40101 SET GLOBAL max_connections = 10 */"));
        d.record(&q("/* SET time_zone = '+01:00' */ SELECT 1"));
        assert_eq!(d.tag(), 0);
    }

    #[test]
    fn every_pin_has_its_slot_and_name() {
        for (i, p) in Pin::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i);
            assert!(!p.name().is_empty());
        }
    }
}

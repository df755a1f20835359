//! What an INSERT into a table idgate does not fill tells about
//! `LAST_INSERT_ID()`: the OK packet's last insert id is the connection's
//! `LAST_INSERT_ID()` when MariaDB generated the statement's
//! AUTO_INCREMENT values, and only then (an explicit id is reported too,
//! but leaves `LAST_INSERT_ID()` as it was). A multiplexed session that
//! knows its value needs not read it back before another session takes
//! the connection (`frontend/session/mux.rs`).

use super::fast;
use super::lexer::{Lexer, Modes};
use super::shape::{Body, ValueClass};
use super::SqlModes;
use std::borrow::Cow;
use std::ops::Range;

/// The table a single INSERT writes (`schema` as written, if it is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'a> {
    pub schema: Option<Cow<'a, str>>,
    pub table: Cow<'a, str>,
}

/// One INSERT read up to its table name ([`insert`]): the table it
/// writes, and where the reading goes on for [`Insert::effect`] (the text
/// is read once, whatever is asked of it next).
#[derive(Debug, Clone)]
pub struct Insert<'a> {
    sql: &'a str,
    /// Just past the table name.
    lx: Lexer<'a>,
    modes: Modes,
    pub target: Target<'a>,
}

/// `sql` when it is one `INSERT` (not `IGNORE`, one statement): the only
/// kind [`Insert::effect`] tells more than [`LastId::Unknown`] for.
pub fn insert(sql: &str, modes: SqlModes) -> Option<Insert<'_>> {
    let modes = modes.lexer();
    if memchr::memchr(b';', sql.as_bytes()).is_some() {
        return None;
    }
    let mut lx = Lexer::new(sql, 0, modes);
    let t = lx.next_token()?;
    if !sql
        .get(t.start..t.end)
        .is_some_and(|w| w.eq_ignore_ascii_case("INSERT"))
    {
        return None;
    }
    let head = fast::head(&mut lx, sql).ok()?;
    (!head.ignore).then_some(Insert {
        sql,
        lx,
        modes,
        target: Target {
            schema: head.schema,
            table: head.table,
        },
    })
}

/// Where another reader of one INSERT, the planner (`plan.rs`), stopped
/// after its table name when it passed the statement on unchanged (no
/// rule table): [`resume`] goes on from there for the statement's
/// `LAST_INSERT_ID()` effect instead of reading its head again. Offsets
/// into the text it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The text's length: a reading is resumed on its own text only.
    len: usize,
    /// Just past the table name (or its PARTITION list).
    after: usize,
    modes: Modes,
    schema: Option<Range<usize>>,
    table: Range<usize>,
}

impl Read {
    /// What [`insert`] would find of `sql`, from a reading of it with
    /// `modes` whose first word is `verb` (its first token), head `head`
    /// and lexer `lx` just past it. The caller has found no `;` in `sql`
    /// (the planner's one-statement path: [`insert`] declines any). `None`
    /// for what [`insert`] declines besides (REPLACE, IGNORE) and for a
    /// name that is not a slice of `sql` (quoted with a doubled quote):
    /// those are read again.
    pub(crate) fn of(
        sql: &str,
        verb: &str,
        head: &fast::Head<'_>,
        lx: &Lexer<'_>,
        modes: Modes,
    ) -> Option<Read> {
        debug_assert!(memchr::memchr(b';', sql.as_bytes()).is_none());
        if !verb.eq_ignore_ascii_case("INSERT") || head.ignore {
            return None;
        }
        let schema = match &head.schema {
            Some(s) => Some(span(sql, s)?),
            None => None,
        };
        Some(Read {
            len: sql.len(),
            after: lx.pos(),
            modes,
            schema,
            table: span(sql, &head.table)?,
        })
    }
}

/// Where `name` lies in `sql`, when it is a slice of it (a name
/// unquoted into a string of its own lies elsewhere in memory).
fn span(sql: &str, name: &str) -> Option<Range<usize>> {
    let start = (name.as_ptr() as usize).checked_sub(sql.as_ptr() as usize)?;
    let end = start + name.len();
    (end <= sql.len()).then_some(start..end)
}

/// [`insert`] of `sql` from where `read` left it (`None` when `read` is
/// not a reading of a text as long as `sql`).
pub fn resume<'a>(sql: &'a str, read: &Read) -> Option<Insert<'a>> {
    if sql.len() != read.len {
        return None;
    }
    let schema = match &read.schema {
        Some(r) => Some(Cow::Borrowed(sql.get(r.clone())?)),
        None => None,
    };
    Some(Insert {
        sql,
        lx: Lexer::new(sql, read.after, read.modes),
        modes: read.modes,
        target: Target {
            schema,
            table: Cow::Borrowed(sql.get(read.table.clone())?),
        },
    })
}

/// [`insert`] before the session's `sql_mode` is known: without a `"` or
/// a `\` the text is read the same with and without `ANSI_QUOTES` and
/// `NO_BACKSLASH_ESCAPES` (see [`Insert::effect_in_every_mode`]).
pub fn insert_in_every_mode(sql: &str) -> Option<Insert<'_>> {
    if memchr::memchr2(b'"', b'\\', sql.as_bytes()).is_some() {
        return None;
    }
    insert(sql, SqlModes::default())
}

/// The table of `sql` when it is one `INSERT` ([`insert`]).
pub fn insert_target(sql: &str, modes: SqlModes) -> Option<Target<'_>> {
    insert(sql, modes).map(|i| i.target)
}

/// [`insert_target`] before the session's `sql_mode` is known.
pub fn insert_target_in_every_mode(sql: &str) -> Option<Target<'_>> {
    insert_in_every_mode(sql).map(|i| i.target)
}

/// What one INSERT does to the connection's `LAST_INSERT_ID()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastId {
    /// MariaDB generates every AUTO_INCREMENT value: the OK packet's
    /// last insert id is the new `LAST_INSERT_ID()`.
    Generated,
    /// No value is generated (every row gives its id, or the table has
    /// no AUTO_INCREMENT column): `LAST_INSERT_ID()` stays as it was,
    /// whatever the OK packet reports.
    Kept,
    /// Either, or some rows of each: only the connection can tell.
    Unknown,
}

/// What the rows of an INSERT give its AUTO_INCREMENT column, before
/// `NO_AUTO_VALUE_ON_ZERO` says what a 0 or `DEFAULT` means.
enum Ids {
    /// Decided whatever the mode.
    Known(LastId),
    /// Per row: the value's class (`None`: an expression, in doubt).
    Rows(Vec<Option<ValueClass>>),
}

impl Insert<'_> {
    /// What the INSERT does to `LAST_INSERT_ID()`, for a table whose
    /// AUTO_INCREMENT column is `column` (`None`: it has none) and whose
    /// columns are `table_columns` in order (for an INSERT without a
    /// column list). Generated: the column is left out of the column list,
    /// or given `NULL` (or `DEFAULT` or 0, unless `NO_AUTO_VALUE_ON_ZERO`
    /// is in `modes`) in every row. Kept: an integer other than those in
    /// every row. Unknown whenever in doubt (an expression, a placeholder,
    /// INSERT ... SELECT naming the column, a form the fast parser does
    /// not read). A caller must first rule out statements that name
    /// `LAST_INSERT_ID`.
    pub fn effect(self, column: Option<&str>, table_columns: &[String], modes: SqlModes) -> LastId {
        decide(
            &self.ids(column, table_columns),
            modes.no_auto_value_on_zero,
        )
    }

    /// [`Insert::effect`] before the session's `sql_mode` is known (the
    /// INSERT read by [`insert_in_every_mode`]): the same under every
    /// mode, or `None`. What `NO_AUTO_VALUE_ON_ZERO` changes (0 and
    /// DEFAULT in the id column) is tried both ways on the rows read once.
    pub fn effect_in_every_mode(
        self,
        column: Option<&str>,
        table_columns: &[String],
    ) -> Option<LastId> {
        let ids = self.ids(column, table_columns);
        let plain = decide(&ids, false);
        (decide(&ids, true) == plain).then_some(plain)
    }

    /// Reads the column list and the rows, as far as the id column needs.
    fn ids(self, column: Option<&str>, table_columns: &[String]) -> Ids {
        let Insert {
            sql, mut lx, modes, ..
        } = self;
        let Some(column) = column else {
            return Ids::Known(LastId::Kept);
        };
        let id_index = match fast::columns(&mut lx, sql, column) {
            // Left out of the list: every row gets a generated value,
            // whatever the rows are (no need to read them), unless ON
            // DUPLICATE KEY UPDATE changes rows instead.
            Ok(Some(list)) if list.id_index.is_none() => {
                return Ids::Known(
                    if crate::sql::statement::keyword::contains_ignore_case(
                        sql.as_bytes(),
                        b"duplicate",
                    ) {
                        LastId::Unknown
                    } else {
                        LastId::Generated
                    },
                );
            }
            Ok(Some(list)) => list.id_index,
            Ok(None) => match table_columns
                .iter()
                .position(|c| c.eq_ignore_ascii_case(column))
            {
                Some(i) => Some(i),
                None => return Ids::Known(LastId::Unknown),
            },
            Err(_) => return Ids::Known(LastId::Unknown),
        };
        // Read to the end either way: an ON DUPLICATE KEY UPDATE clause
        // (or a SELECT, which `fast` does not read) is in doubt.
        let Ok((body, _, end)) = fast::body(&mut lx, sql, modes, id_index, column) else {
            return Ids::Known(LastId::Unknown);
        };
        if end.clause || end.semicolon {
            return Ids::Known(LastId::Unknown);
        }
        Ids::Rows(match body {
            Body::Values(rows) => rows.iter().map(|r| r.id.map(|v| v.class)).collect(),
            // A SET without the column: generated, as NULL would be.
            Body::Set { id, .. } => vec![id.map_or(Some(ValueClass::Null), |v| Some(v.class))],
        })
    }
}

/// [`LastId`] of the rows' ids under `NO_AUTO_VALUE_ON_ZERO` or not.
fn decide(ids: &Ids, no_auto_value_on_zero: bool) -> LastId {
    let rows = match ids {
        Ids::Known(l) => return *l,
        Ids::Rows(rows) => rows,
    };
    let generated = |class: &ValueClass| match class {
        ValueClass::Null => Some(true),
        ValueClass::Default | ValueClass::Int(0) => Some(!no_auto_value_on_zero),
        ValueClass::Int(_) => Some(false),
        _ => None,
    };
    // Whether some row's id is generated, and some row's given (a value
    // in doubt counts as both).
    let (mut some_generated, mut some_given) = (false, false);
    for class in rows {
        match class.as_ref().and_then(generated) {
            Some(true) => some_generated = true,
            Some(false) => some_given = true,
            None => {
                some_generated = true;
                some_given = true;
            }
        }
    }
    match (some_generated, some_given) {
        (true, false) => LastId::Generated,
        (false, true) => LastId::Kept,
        _ => LastId::Unknown,
    }
}

/// What `sql` does to `LAST_INSERT_ID()` ([`Insert::effect`]; Unknown
/// when it is not one plain INSERT).
pub fn effect(
    sql: &str,
    modes: SqlModes,
    column: Option<&str>,
    table_columns: &[String],
) -> LastId {
    match insert(sql, modes) {
        Some(i) => i.effect(column, table_columns, modes),
        None => LastId::Unknown,
    }
}

/// [`effect`] before the session's `sql_mode` is known
/// ([`Insert::effect_in_every_mode`]).
pub fn effect_in_every_mode(
    sql: &str,
    column: Option<&str>,
    table_columns: &[String],
) -> Option<LastId> {
    let Some(i) = insert_in_every_mode(sql) else {
        // Not one plain INSERT: unknown in every mode; a quote or a
        // backslash that modes read differently: none.
        return if memchr::memchr2(b'"', b'\\', sql.as_bytes()).is_some() {
            None
        } else {
            Some(LastId::Unknown)
        };
    };
    i.effect_in_every_mode(column, table_columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(sql: &str) -> LastId {
        let cols = ["id".to_string(), "k".to_string(), "c".to_string()];
        effect(sql, SqlModes::default(), Some("id"), &cols)
    }

    #[test]
    fn generated_only_when_every_row_leaves_it_to_mariadb() {
        for sql in [
            "INSERT INTO t (k, c) VALUES (1, 'a')",
            "insert into db.t (k, c) values (1, 'a'), (2, 'b')",
            "INSERT INTO t (id, k, c) VALUES (0, 1, 'a')",
            "INSERT INTO t (id, k, c) VALUES (NULL, 1, 'a'), (DEFAULT, 2, 'b')",
            "INSERT INTO t (`ID`, k, c) VALUES (0, 1, 'it''s here')",
            "INSERT INTO t VALUES (NULL, 1, 'a')",
            "INSERT INTO t SET k = 1, c = 'a'",
            "INSERT INTO t SET id = NULL, k = 1",
            // Left out: generated whatever the rows (a SELECT too).
            "INSERT INTO t (k, c) SELECT k, c FROM u",
        ] {
            assert_eq!(of(sql), LastId::Generated, "{sql}");
        }
        for sql in [
            "INSERT INTO t (id, k, c) VALUES (5, 1, 'a')",
            "INSERT INTO t (id, k, c) VALUES (5, 1, 'a'), ('7', 2, 'b')",
            "INSERT INTO t VALUES (3, 1, 'a')",
            "INSERT INTO t SET id = 9, k = 1",
        ] {
            assert_eq!(of(sql), LastId::Kept, "{sql}");
        }
        for sql in [
            "INSERT INTO t (id, k, c) VALUES (0, 1, 'a'), (7, 2, 'b')",
            "INSERT INTO t (id, k) VALUES (?, 1)",
            "INSERT INTO t (id, k) VALUES (@v, 1)",
            "INSERT INTO t (id, k) SELECT NULL, k FROM u",
            "INSERT IGNORE INTO t (k) VALUES (1)",
            "INSERT INTO t (k) VALUES (1) ON DUPLICATE KEY UPDATE k = 2",
            "INSERT INTO t (k) VALUES (1); INSERT INTO t (k) VALUES (2)",
            // In doubt: a `;` anywhere, even in a string.
            "INSERT INTO t (k, c) VALUES (1, 'a;b')",
            "REPLACE INTO t (k) VALUES (1)",
            "UPDATE t SET k = 1",
            "SELECT 1",
        ] {
            assert_eq!(of(sql), LastId::Unknown, "{sql}");
        }
        // NO_AUTO_VALUE_ON_ZERO: 0 and DEFAULT are stored as given.
        let zero = SqlModes {
            no_auto_value_on_zero: true,
            ..SqlModes::default()
        };
        let cols = ["id".to_string(), "k".to_string()];
        for (sql, want) in [
            ("INSERT INTO t (id, k) VALUES (0, 1)", LastId::Kept),
            ("INSERT INTO t (id, k) VALUES (DEFAULT, 1)", LastId::Kept),
            ("INSERT INTO t (id, k) VALUES (NULL, 1)", LastId::Generated),
            ("INSERT INTO t (k) VALUES (1)", LastId::Generated),
        ] {
            assert_eq!(effect(sql, zero, Some("id"), &cols), want, "{sql}");
        }
        // A table without an AUTO_INCREMENT column generates nothing.
        assert_eq!(
            effect(
                "INSERT INTO t (k) VALUES (1)",
                SqlModes::default(),
                None,
                &cols
            ),
            LastId::Kept
        );
        // A column list the cache does not know (it was wrong).
        assert_eq!(
            effect(
                "INSERT INTO t VALUES (NULL, 1)",
                SqlModes::default(),
                Some("id"),
                &["a".to_string(), "b".to_string()]
            ),
            LastId::Unknown
        );
    }

    #[test]
    fn before_the_sql_mode_is_known_only_what_every_mode_reads_alike() {
        let cols = ["id".to_string(), "k".to_string()];
        let any = |sql: &str| effect_in_every_mode(sql, Some("id"), &cols);
        assert_eq!(any("INSERT INTO t (k) VALUES (1)"), Some(LastId::Generated));
        assert_eq!(
            any("INSERT INTO t (id, k) VALUES (NULL, 1)"),
            Some(LastId::Generated)
        );
        assert_eq!(
            any("INSERT INTO t (id, k) VALUES (5, 1)"),
            Some(LastId::Kept)
        );
        // 0: generated, unless NO_AUTO_VALUE_ON_ZERO.
        assert_eq!(any("INSERT INTO t (id, k) VALUES (0, 1)"), None);
        // Quotes and backslashes read differently in some modes.
        assert_eq!(any("INSERT INTO t (k) VALUES ('a\\')"), None);
        assert_eq!(any("INSERT INTO \"t\" (k) VALUES (1)"), None);
        assert!(insert_target_in_every_mode("INSERT INTO \"t\" (k) VALUES (1)").is_none());
        assert!(insert_target_in_every_mode("INSERT INTO s.t (k) VALUES (1)").is_some());
    }

    #[test]
    fn the_target_is_read_in_the_sessions_quoting() {
        let ansi = SqlModes {
            ansi_quotes: true,
            ..SqlModes::default()
        };
        let t = insert_target("INSERT INTO \"s\".\"t\" (k) VALUES (1)", ansi).unwrap();
        assert_eq!((t.schema.as_deref(), &*t.table), (Some("s"), "t"));
        assert!(insert_target("INSERT INTO t (k) VALUES (1)", SqlModes::default()).is_some());
        assert!(
            insert_target("INSERT IGNORE INTO t (k) VALUES (1)", SqlModes::default()).is_none()
        );
    }

    /// The planner's reading of `sql` (the session's schema `shop`,
    /// no rule for its table), and the plan.
    fn planned(
        sql: &str,
        m: SqlModes,
    ) -> Result<(crate::sql::Plan, Option<Read>), crate::sql::SqlError> {
        let columns = |_: &str, _: &str| None;
        let ctx = crate::sql::PlanCtx {
            schema: Some("shop"),
            no_auto_value_on_zero: m.no_auto_value_on_zero,
            no_backslash_escapes: m.no_backslash_escapes,
            ansi_quotes: m.ansi_quotes,
            columns: &columns,
            mentions: None,
        };
        let rules = crate::sql::tests::rules();
        crate::sql::plan::plan_query_reading(sql, &rules, &ctx)
    }

    #[test]
    fn the_planners_reading_is_resumed_for_the_usual_insert() {
        let sql = "INSERT INTO sbtest1 (id, k, c, pad) VALUES (0, 5012, '6848-9643', '2219-7011')";
        let m = SqlModes::default();
        let (plan, read) = planned(sql, m).unwrap();
        assert_eq!(plan, crate::sql::Plan::Passthrough);
        let i = resume(sql, &read.expect("a plain INSERT is resumed")).unwrap();
        assert_eq!(
            (i.target.schema.as_deref(), &*i.target.table),
            (None, "sbtest1")
        );
        let cols = ["id", "k", "c", "pad"].map(String::from);
        assert_eq!(i.effect(Some("id"), &cols, m), LastId::Generated);
        // Not on another text, nor for what `insert` declines.
        let read = planned(sql, m).unwrap().1.unwrap();
        assert!(resume(&sql[1..], &read).is_none());
        for other in [
            "REPLACE INTO t (k) VALUES (1)",
            "INSERT IGNORE INTO t (k) VALUES (1)",
            "INSERT INTO t (k) VALUES (1); SELECT 1",
            "INSERT INTO shop.orders (sku) VALUES (1)",
        ] {
            assert!(planned(other, m).unwrap().1.is_none(), "{other}");
        }
    }

    proptest::proptest! {
        /// Where the planner passed an INSERT on, its reading resumed
        /// reads what reading the text again from the start reads: the
        /// same table, and the same effect for any AUTO_INCREMENT column.
        #[test]
        fn the_planners_reading_resumed_agrees_with_reading_again(
            verb in proptest::sample::select(vec![
                "INSERT", "insert", "REPLACE", "INSERT IGNORE", "INSERT LOW_PRIORITY",
            ]),
            into in proptest::bool::ANY,
            space in proptest::sample::select(vec![" ", "\n ", " /* c */ ", "  -- x\n"]),
            schema in proptest::sample::select(vec![
                None, Some("s"), Some("`s`"), Some("\"s\""), Some("`s``x`"), Some("shop"),
            ]),
            table in proptest::sample::select(vec![
                "t", "`t`", "\"t\"", "`t``u`", "T1", "orders", "`é`",
            ]),
            partition in proptest::bool::ANY,
            list in proptest::sample::select(vec!["", " (id, k)", "(k, id)", " (`id`, k)", " ()"]),
            rows in proptest::collection::vec(
                proptest::sample::select(vec!["NULL", "DEFAULT", "0", "5", "'7'", "?", "'a\\'", "\"x\""]),
                1..3,
            ),
            tail in proptest::sample::select(vec!["", ";", " ON DUPLICATE KEY UPDATE k = 1", " "]),
            ansi_quotes in proptest::bool::ANY,
            no_backslash_escapes in proptest::bool::ANY,
            no_auto_value_on_zero in proptest::bool::ANY,
            column in proptest::sample::select(vec![Some("id"), Some("K"), None]),
        ) {
            let m = SqlModes { ansi_quotes, no_backslash_escapes, no_auto_value_on_zero };
            let into = if into { " INTO" } else { "" };
            let name = match schema {
                Some(s) => format!("{s}.{table}"),
                None => table.to_string(),
            };
            let partition = if partition { " PARTITION (p0)" } else { "" };
            let values: Vec<String> = rows.iter().map(|v| format!("({v}, 1)")).collect();
            let sql = format!(
                "{verb}{into}{space}{name}{partition}{list} VALUES {}{tail}",
                values.join(", ")
            );
            let Ok((_, Some(read))) = planned(&sql, m) else {
                return Ok(());
            };
            let resumed = resume(&sql, &read).expect("resumed on its own text");
            let again = insert(&sql, m).expect("what the planner reads, insert reads");
            proptest::prop_assert_eq!(&resumed.target, &again.target, "{}", sql);
            let cols = ["id".to_string(), "k".to_string()];
            proptest::prop_assert_eq!(
                resumed.effect(column, &cols, m),
                again.effect(column, &cols, m),
                "{}", sql
            );
        }

        /// The rows read once and decided under both modes say what
        /// reading the text once per mode says.
        #[test]
        fn one_reading_for_every_mode_agrees_with_one_per_mode(
            with_list in proptest::bool::ANY,
            id_in_list in proptest::bool::ANY,
            rows in proptest::collection::vec(
                proptest::sample::select(vec![
                    "NULL", "DEFAULT", "0", "00", "5", "'7'", "-1", "1+1", "?", "'a\\'",
                    "\"x\"", "0.4", "LAST_VALUE",
                ]),
                1..4,
            ),
            tail in proptest::sample::select(vec!["", " ON DUPLICATE KEY UPDATE k = 1", ";", " -- x"]),
            column in proptest::sample::select(vec![Some("id"), Some("ID"), Some("k"), None]),
        ) {
            let cols = ["id".to_string(), "k".to_string()];
            let list = match (with_list, id_in_list) {
                (false, _) => "",
                (true, true) => " (id, k)",
                (true, false) => " (k, id)",
            };
            let values: Vec<String> = rows.iter().map(|v| format!("({v}, 1)")).collect();
            let sql = format!("INSERT INTO s.t{list} VALUES {}{tail}", values.join(", "));
            let zero = SqlModes { no_auto_value_on_zero: true, ..SqlModes::default() };
            let per_mode = if memchr::memchr2(b'"', b'\\', sql.as_bytes()).is_some() {
                None
            } else {
                let plain = effect(&sql, SqlModes::default(), column, &cols);
                (effect(&sql, zero, column, &cols) == plain).then_some(plain)
            };
            proptest::prop_assert_eq!(effect_in_every_mode(&sql, column, &cols), per_mode, "{}", sql);
        }
    }
}

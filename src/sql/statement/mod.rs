//! One classification per statement: [`classify`] reads the head of a
//! COM_QUERY text once and says what kind of statement it is, with the
//! facts the session's later steps need. The session's command loop
//! matches on [`Kind`] once and calls one handler per kind. Pure.
//!
//! Files:
//! - `keyword.rs`: the first keyword (after white space and comments) and
//!   the cheap scans of a statement's text (`sql_mode`, character sets,
//!   `USE` inside a multi-statement query): the only keyword helpers.
//! - `admin.rs`: idgate's own statements.
//! - `mentions.rs`: the words a statement mentions anywhere (`GET_LOCK`,
//!   `LAST_INSERT_ID`, `@`, ...), all found in one pass.
//! - `kill.rs`: `KILL`.
//! - `diag.rs`: diagnostics statements (`SHOW WARNINGS` and friends).
//! - `txn.rs`: `BEGIN`/`COMMIT`/`ROLLBACK` and savepoints.
//! - `dynamic.rs`: `PREPARE ... FROM @v` / `EXECUTE IMMEDIATE @v`, whose
//!   statement is in a user variable.
//! - `sequence.rs`: `NEXTVAL(idgate.g)` and the other sequence functions
//!   on idgate's generators (a cheap byte check here, the tokenizing
//!   recognizer only for statements that pass it).

pub mod admin;
pub mod diag;
pub mod dynamic;
pub mod keyword;
pub mod kill;
pub mod mentions;
pub mod sequence;
pub mod several;
pub mod txn;

pub use admin::{Admin, AdminError};
pub use diag::Diag;
pub use keyword::{first_keyword, keyword_start};
pub use kill::Kill;
pub use several::split_statements;
pub use txn::{SavepointOp, TxnStmt};

/// What a statement is, as the session dispatches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// idgate's own statement (or a malformed one: the error says why).
    Admin(Result<Admin, AdminError>),
    /// `KILL` of an idgate session (or a form idgate refuses: what it is).
    Kill(Result<Kill, String>),
    /// A diagnostics statement (routed to the shards of the last statement
    /// when idgate routes).
    Diag(Diag),
    /// `BEGIN [WORK]`, `START TRANSACTION ...`.
    Begin,
    /// `COMMIT ...`, `ROLLBACK [WORK]`.
    End,
    /// `SAVEPOINT`, `ROLLBACK TO`, `RELEASE SAVEPOINT`, with its name.
    Savepoint(SavepointOp, String),
    /// Anything else: DML, DDL, `SET`, `USE`, ... (see the facts).
    Other,
}

/// A statement's kind and the facts read from its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// What it is.
    pub kind: Kind,
    /// Its first keyword, upper-cased, zero-padded ([`first_keyword`]).
    pub keyword: [u8; 8],
    /// It mentions `idgate` and `val`: it may call a sequence function on
    /// an idgate generator ([`sequence::may_have`]; [`sequence::find`]
    /// says).
    pub sequences: bool,
}

impl Statement {
    /// A DDL statement that may change a table's columns (the session's
    /// column cache is dropped after it).
    pub fn is_ddl(&self) -> bool {
        matches!(
            &self.keyword,
            b"ALTER\0\0\0" | b"CREATE\0\0" | b"DROP\0\0\0\0" | b"RENAME\0\0"
        )
    }

    /// A statement that may write rows.
    pub fn may_write(&self) -> bool {
        keyword::may_write(&self.keyword)
    }

    /// A `SET` statement (replayed on the session's other shards).
    pub fn is_set(&self) -> bool {
        &self.keyword[..4] == b"SET\0"
    }

    /// `INSERT` or `REPLACE`.
    pub fn is_insert(&self) -> bool {
        matches!(&self.keyword, b"INSERT\0\0" | b"REPLACE\0")
    }
}

/// Reads the head of `sql` (a COM_QUERY text) once. Most statements cost a
/// look at their first keyword: the parsers behind each kind run only when
/// the keyword is theirs.
pub fn classify(sql: &[u8]) -> Statement {
    classify_with(sql, None)
}

/// [`classify`], with what the text (or a text it is part of) mentions
/// when already found: a text without `idgate` calls no generator.
pub fn classify_with(sql: &[u8], m: Option<mentions::Mentions>) -> Statement {
    let keyword = first_keyword(sql);
    let kind = kind_of(sql, &keyword);
    let sequences =
        mentions::Mentions::may_have(m, mentions::Word::Idgate, || sequence::may_have(sql));
    Statement {
        kind,
        keyword,
        sequences,
    }
}

fn kind_of(sql: &[u8], keyword: &[u8; 8]) -> Kind {
    // Each parser runs only for its own keywords: a SELECT, INSERT or
    // UPDATE costs the keyword read (and a short SELECT a look for
    // `@@warning_count`).
    let admin = || admin::parse(sql).map(Kind::Admin);
    let kill = || kill::parse(sql).map(Kind::Kill);
    let diag = || diag::classify(sql).map(Kind::Diag);
    let txn = || match txn::classify(sql) {
        TxnStmt::Begin => Some(Kind::Begin),
        TxnStmt::End => Some(Kind::End),
        TxnStmt::Other => None,
    };
    let savepoint = || txn::savepoint_stmt(sql).map(|(op, name)| Kind::Savepoint(op, name));
    let found = match keyword {
        // `admin::parse` reads `idgate...` and `show...` words itself.
        [b'I', b'D', b'G', b'A', b'T', b'E', ..] => admin(),
        b"SHOW\0\0\0\0" => admin().or_else(diag),
        [b'S', b'H', b'O', b'W', ..] => admin(),
        b"SELECT\0\0" | b"GET\0\0\0\0\0" => diag(),
        // `KILL`, or no keyword: `/*!... KILL n */` is refused.
        b"KILL\0\0\0\0" | [0, ..] => kill(),
        b"BEGIN\0\0\0" | b"START\0\0\0" | b"COMMIT\0\0" => txn(),
        b"ROLLBACK" => txn().or_else(savepoint),
        b"SAVEPOIN" | b"RELEASE\0" => savepoint(),
        _ => None,
    };
    found.unwrap_or(Kind::Other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_found_first_change_no_classification() {
        for sql in [
            "SELECT NEXTVAL(idgate.orders)",
            "select idgate . g_1 .nextval",
            "SELECT NEXT VALUE FOR `idgate`.`s`",
            "INSERT INTO t VALUES (NEXTVAL(IdGate.s))",
            "SELECT 'idgate' , val",
            "INSERT INTO sbtest1 (id, k, c, pad) VALUES (0, 1, 'x', 'y')",
            "SHOW IDGATE GENERATORS",
            "",
        ] {
            let m = Some(mentions::Mentions::of(sql.as_bytes()));
            assert_eq!(
                classify_with(sql.as_bytes(), m),
                classify(sql.as_bytes()),
                "{sql}"
            );
        }
        assert!(classify(b"SELECT NEXTVAL(idgate.orders)").sequences);
    }

    #[test]
    fn kinds() {
        let k = |s: &str| classify(s.as_bytes()).kind;
        assert_eq!(
            k("SHOW IDGATE GENERATORS"),
            Kind::Admin(Ok(Admin::ShowGenerators))
        );
        assert!(matches!(k("idgate frobnicate"), Kind::Admin(Err(_))));
        assert!(matches!(k("IDGATEX"), Kind::Admin(Err(_))));
        assert!(matches!(k("showidgate"), Kind::Admin(Err(_))));
        assert_eq!(
            k("KILL QUERY 5"),
            Kind::Kill(Ok(Kill { query: true, id: 5 }))
        );
        assert!(matches!(k("/*!50000 KILL 5 */"), Kind::Kill(Err(_))));
        assert_eq!(k("SHOW COUNT(*) WARNINGS"), Kind::Diag(Diag::Count));
        assert_eq!(k("/* c */ begin"), Kind::Begin);
        assert_eq!(k("ROLLBACK"), Kind::End);
        assert_eq!(
            k("ROLLBACK TO SAVEPOINT a"),
            Kind::Savepoint(SavepointOp::RollbackTo, "a".into())
        );
        for other in [
            "SELECT 1",
            "SHOW TABLES",
            "INSERT INTO t VALUES (1)",
            "USE db",
            "SET @a = 1",
        ] {
            assert_eq!(k(other), Kind::Other, "{other}");
        }
        let s = classify(b"  alter table t add c int");
        assert!(s.is_ddl() && !s.may_write() && !s.is_set());
        assert!(classify(b"SET NAMES utf8mb4").is_set());
        for (sql, set) in [
            ("SET NAMES utf8mb4", true),
            ("/*!40101 SET NAMES utf8mb4 */", true),
            ("/* c */ set @a = 1", true),
            (
                "SET STATEMENT max_statement_time = 1 FOR DELETE FROM t",
                false,
            ),
            ("/*!40101 SET STATEMENT a = 1 FOR SELECT 1 */", false),
            ("/* SET NAMES utf8 */ SELECT 1", false),
            ("SELECT 1", false),
        ] {
            assert_eq!(keyword::session_set(sql.as_bytes()), set, "{sql}");
        }
        assert!(classify(b"replace into t values (1)").may_write());
    }

    /// Every parser asked in turn, whatever the keyword (how the session
    /// asked before there was one classification).
    fn every_parser(sql: &[u8]) -> Kind {
        if let Some(a) = admin::parse(sql) {
            return Kind::Admin(a);
        }
        if let Some(k) = kill::parse(sql) {
            return Kind::Kill(k);
        }
        if let Some(d) = diag::classify(sql) {
            return Kind::Diag(d);
        }
        match txn::classify(sql) {
            TxnStmt::Begin => return Kind::Begin,
            TxnStmt::End => return Kind::End,
            TxnStmt::Other => {}
        }
        match txn::savepoint_stmt(sql) {
            Some((op, name)) => Kind::Savepoint(op, name),
            None => Kind::Other,
        }
    }

    proptest::proptest! {
        /// Asking only the parser of the statement's keyword gives what
        /// asking every parser gives.
        #[test]
        fn the_keyword_picks_the_parser(
            lead in "( |\t|\n|/\\* c \\*/ |-- c\n|# c\n|/\\*!5 ){0,2}",
            head in "(?i)(idgate|show|select|get|kill|begin|start|commit|rollback|savepoint|release|insert|set|use|idgatex)",
            tail in "( (idgate|generators|set|floor|reserve|o|5|-1|query|connection|hard|user|id|warnings|errors|count\\(\\*\\)|@@warning_count|limit|2,|work|to|savepoint|s1|`a`|transaction|diagnostics|\\*/|;)){0,5}",
        ) {
            let sql = format!("{lead}{head}{tail}");
            proptest::prop_assert_eq!(classify(sql.as_bytes()).kind, every_parser(sql.as_bytes()), "{}", sql);
        }
    }
}

//! Shard key values made canonical before they are placed, so that values
//! MariaDB finds equal land on one shard.
//!
//! A table with `sharding = "hash"` (and not `hash = "bytes"`) is placed by
//! the key *as its column compares it*: idgate reads the shard key column's
//! type and collation from information_schema (`columns.rs`, shared by all
//! sessions, refreshed after DDL through idgate and every 10 s) and
//!
//! - a string column hashes the collation key of the value
//!   (`collation::Collation::key`: its weight string without trailing
//!   space weights; for `_bin` collations the bytes without trailing
//!   spaces; for binary strings the bytes), so `'Bob@X.io'`, `'bob@x.io '`
//!   are one key in `utf8mb4_general_ci`. An integer written for a string
//!   column is stored as its decimal text and placed so; looked up (`code =
//!   42`), it matches every string that reads as 42 (`'42'`, `'042'`,
//!   `' 42'`), so such a statement goes to every shard. A collation idgate
//!   does not reproduce is refused, naming table, column and collation.
//! - an integer column places a string as the integer MariaDB reads from it
//!   (`'42'`, `' 42'`, `'42.0'` are 42, `sql::convert`); one that is not a
//!   number is refused when stored and looked up on every shard.
//! - other columns (DECIMAL, dates...) hash the value's text as written.
//!
//! `mod` and `range` need an integer: a string is read as an integer column
//! reads it (`' 42'`, `'4.2e1'` are 42), without looking at the column.

use crate::collation::{self, Charset, Collation};
use crate::frontend::columns::ColumnType;
use crate::frontend::errors::ER_NOT_ROUTABLE;
use crate::frontend::session::{CmdError, Session};
use crate::rules::{RuleSet, TableEntry};
use crate::shard::placement::{KeyValue, Placement, Sharding};
use crate::sql::convert::{self, Converted};
use crate::sql::route::{Analysis, KeyBound};

/// How the shard key column compares values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// TINYINT..BIGINT.
    Integer,
    /// A string column (binary strings: [`collation::binary`]).
    Text(&'static Collation),
    /// Anything else: the value's text as written.
    Other,
}

impl KeyType {
    /// The key type of a column of `t`.
    ///
    /// # Errors
    /// A string column whose collation idgate does not reproduce (the
    /// message names it; the caller adds table and column).
    pub fn of(t: &ColumnType) -> Result<KeyType, String> {
        Ok(match t.data_type.as_str() {
            "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" => {
                KeyType::Integer
            }
            "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
                KeyType::Text(collation::binary())
            }
            "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "enum"
            | "set" => match &t.collation {
                None => KeyType::Text(collation::binary()),
                Some(name) => KeyType::Text(collation::by_name(name).ok_or_else(|| {
                    format!(
                        "its collation {name} is not one idgate reproduces ({}), so keys it finds equal could be placed on different shards; change the column's collation, or set hash = \"bytes\" in the rule to place keys by their bytes",
                        collation::ALL
                            .iter()
                            .map(|c| c.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?),
            },
            _ => KeyType::Other,
        })
    }
}

/// What the value is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Written into the column (INSERT): the row goes where the stored value
    /// belongs.
    Store,
    /// Compared with the column (`WHERE key = v`, `IN`): the shard of every
    /// row that can match.
    Lookup,
}

/// Whether placing `p`'s keys needs the column's type ([`KeyType`]).
pub fn needs_type(p: &Placement) -> bool {
    p.kind() == Sharding::Hash && !p.hashes_bytes()
}

/// The value to place instead of `v`: `Ok(None)` when a lookup of `v` can
/// match rows on several shards (send it to all of them). `ty` is the
/// column's type when [`needs_type`] (`None`: not known, the value as
/// written); `cs` the character set string values are in.
///
/// # Errors
/// A stored value whose place cannot be known (a string that is not a
/// number, for an integer column), as a reason without table and column.
pub fn canonical(
    v: &KeyValue,
    p: &Placement,
    ty: Option<KeyType>,
    cs: Charset,
    purpose: Purpose,
) -> Result<Option<KeyValue>, String> {
    let ty = match p.kind() {
        Sharding::Mod | Sharding::Range => KeyType::Integer,
        Sharding::Hash if !p.hashes_bytes() => ty.unwrap_or(KeyType::Other),
        _ => return Ok(Some(v.clone())),
    };
    Ok(Some(match (ty, v) {
        (_, KeyValue::Null) => KeyValue::Null,
        (KeyType::Integer, KeyValue::Str(b)) => match integer(b) {
            Some(i) => KeyValue::Int(i),
            // mod/range: the placement says why it is not an integer.
            None if p.kind() != Sharding::Hash => v.clone(),
            None if purpose == Purpose::Lookup => return Ok(None),
            None => {
                return Err(format!(
                    "shard key value {} is not an integer (the column is an integer column)",
                    shown(b)
                ))
            }
        },
        (KeyType::Text(c), KeyValue::Str(b)) => {
            let mut key = Vec::with_capacity(b.len() * 2);
            c.key(b, cs, &mut key);
            KeyValue::Str(key)
        }
        (KeyType::Text(_), KeyValue::Int(_)) if purpose == Purpose::Lookup => return Ok(None),
        (KeyType::Text(c), KeyValue::Int(i)) => {
            let mut key = Vec::with_capacity(40);
            c.key(i.to_string().as_bytes(), Charset::Utf8mb4, &mut key);
            KeyValue::Str(key)
        }
        _ => v.clone(),
    }))
}

/// The integer MariaDB reads from string `b` for an integer column, when it
/// reads one exactly.
fn integer(b: &[u8]) -> Option<i128> {
    let strict = std::str::from_utf8(b).ok().and_then(|s| {
        let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
        (!digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.parse::<i128>().ok())
            .flatten()
    });
    strict.or(match convert::string(b) {
        Converted::Int(u) => Some(i128::from(u)),
        Converted::Negative(_) | Converted::Unknown => None,
    })
}

/// A string key as SQL shows it, for messages.
fn shown(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let cut: String = s.chars().take(64).collect();
    format!("'{}'", cut.replace('\'', "''"))
}

/// The key types of a statement's tables, for routing it.
#[derive(Debug, Clone)]
pub struct KeyCtx {
    /// The character set string keys are written in (the session's
    /// `character_set_client`).
    pub charset: Charset,
    /// Per table of the analysis (same index): its shard key's type, when
    /// placing it needs one and a key is bound.
    pub types: Vec<Option<KeyType>>,
}

impl Default for KeyCtx {
    fn default() -> Self {
        KeyCtx {
            charset: Charset::Utf8mb4,
            types: Vec::new(),
        }
    }
}

impl Session {
    /// The session's `character_set_client`, read from the default shard
    /// when not known (a new connection, or after a statement that may have
    /// set it). One idgate does not reproduce counts as binary.
    pub(in crate::frontend) async fn key_charset(&mut self) -> Result<Charset, CmdError> {
        if let Some(cs) = self.client_cs {
            return Ok(cs);
        }
        let name = self
            .first_value("SELECT @@SESSION.character_set_client")
            .await?;
        let cs = Charset::by_name(&name).unwrap_or(Charset::Binary);
        self.client_cs = Some(cs);
        Ok(cs)
    }

    /// The type of `entry`'s shard key column in `schema` (the table's
    /// schema as the statement names it, else the rule's, else the
    /// session's), when placing by it needs one; `None` when not needed or
    /// the table cannot be read (the shard then answers the statement).
    ///
    /// # Errors
    /// A collation idgate does not reproduce (1235, naming table, column
    /// and collation); a shard that cannot be reached.
    pub(in crate::frontend) async fn key_type(
        &mut self,
        schema: Option<&str>,
        entry: &TableEntry,
    ) -> Result<Option<KeyType>, CmdError> {
        let (Some(p), Some(column)) = (entry.placement(), entry.shard_key()) else {
            return Ok(None);
        };
        if !needs_type(p) {
            return Ok(None);
        }
        let Some(schema) = schema
            .or(entry.schema())
            .map(str::to_string)
            .or_else(|| self.schema.clone())
        else {
            return Ok(None);
        };
        let table = entry.table();
        let cached = match self.shared.columns.column_type(&schema, table, column) {
            Some(t) => t,
            None => {
                match self.fetch_columns(&schema, table).await {
                    Ok(()) => {}
                    Err(CmdError::Refused(..)) => return Ok(None),
                    Err(e) => return Err(e),
                }
                self.shared
                    .columns
                    .column_type(&schema, table, column)
                    .flatten()
            }
        };
        let Some(t) = cached else { return Ok(None) };
        KeyType::of(&t).map(Some).map_err(|why| {
            CmdError::Refused(
                ER_NOT_ROUTABLE,
                format!("idgate: table {schema}.{table}: shard key column `{column}`: {why}"),
            )
        })
    }

    /// The key types of the tables of `a` whose placement needs one and
    /// whose shard key the statement binds.
    pub(in crate::frontend) async fn key_ctx(
        &mut self,
        rules: &RuleSet,
        schema: Option<&str>,
        a: &Analysis,
    ) -> Result<KeyCtx, CmdError> {
        let mut ctx = KeyCtx::default();
        for (i, t) in a.tables.iter().enumerate() {
            let s = t.schema.as_deref().or(schema);
            let ty = match (rules.entry(s, &t.table), &t.key) {
                (Some(e), KeyBound::Values(v))
                    if !v.is_empty() && e.placement().is_some_and(needs_type) =>
                {
                    self.key_type(t.schema.as_deref(), e).await?
                }
                _ => None,
            };
            // Only statements on hash tables allocate.
            if ty.is_some() {
                ctx.types.resize(i + 1, None);
                ctx.types[i] = ty;
            }
        }
        if ctx
            .types
            .iter()
            .any(|t| matches!(t, Some(KeyType::Text(_))))
        {
            ctx.charset = self.key_charset().await?;
        }
        Ok(ctx)
    }

    /// The key type and character set for the rows of an INSERT into
    /// `entry` (`table` as the plan names it: `schema.table` or `table`).
    pub(in crate::frontend) async fn insert_key_ctx(
        &mut self,
        table: &str,
        entry: &TableEntry,
    ) -> Result<(Option<KeyType>, Charset), CmdError> {
        if !entry.placement().is_some_and(needs_type) {
            return Ok((None, Charset::Utf8mb4));
        }
        let schema = table.split_once('.').map(|(s, _)| s.to_string());
        let ty = self.key_type(schema.as_deref(), entry).await?;
        let cs = match ty {
            Some(KeyType::Text(_)) => self.key_charset().await?,
            _ => Charset::Utf8mb4,
        };
        Ok((ty, cs))
    }
}

/// A prepared statement's parameter as a shard key value.
pub(in crate::frontend) fn key_value(
    ty: crate::protocol::stmt::ParamType,
    v: Option<&[u8]>,
) -> Option<KeyValue> {
    use crate::protocol::stmt::{int_value, types};
    let Some(v) = v else {
        return Some(KeyValue::Null);
    };
    match ty[0] {
        types::TINY | types::SHORT | types::YEAR | types::LONG | types::INT24 | types::LONGLONG => {
            int_value(ty, v).map(KeyValue::Int)
        }
        // Strings, decimals and blobs are sent as their text.
        0x00 | 0x0f | 0xf6 | 0xf9..=0xfe => Some(KeyValue::Str(v.to_vec())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(data_type: &str, collation: Option<&str>) -> Result<KeyType, String> {
        KeyType::of(&ColumnType {
            data_type: data_type.into(),
            collation: collation.map(Into::into),
            auto_increment: false,
        })
    }

    #[test]
    fn column_types() {
        assert_eq!(ty("bigint", None), Ok(KeyType::Integer));
        assert_eq!(
            ty("varchar", Some("utf8mb4_general_ci")),
            Ok(KeyType::Text(
                collation::by_name("utf8mb4_general_ci").unwrap()
            ))
        );
        assert_eq!(
            ty("varbinary", None),
            Ok(KeyType::Text(collation::binary()))
        );
        assert_eq!(ty("decimal", None), Ok(KeyType::Other));
        let e = ty("varchar", Some("utf8mb4_spanish_ci")).unwrap_err();
        assert!(
            e.contains("utf8mb4_spanish_ci") && e.contains("hash = \"bytes\""),
            "{e}"
        );
    }

    fn hash() -> Placement {
        Placement::hash(vec![0, 1, 2]).unwrap()
    }

    fn place(v: KeyValue, t: KeyType, purpose: Purpose) -> Option<usize> {
        let p = hash();
        canonical(&v, &p, Some(t), Charset::Utf8mb4, purpose)
            .unwrap()
            .map(|k| p.shard_of(&k).unwrap())
    }

    #[test]
    fn equal_strings_share_a_shard() {
        let ci = KeyType::Text(collation::by_name("utf8mb4_general_ci").unwrap());
        let s = |x: &str| place(KeyValue::from(x), ci, Purpose::Store);
        for (a, b) in [
            ("code01", "CODE01"),
            ("code01", "Code01  "),
            ("bob@x.io", "BOB@X.IO "),
            ("eclair", "Éclair"),
        ] {
            assert_eq!(s(a), s(b), "{a} / {b}");
        }
        // The integer 42 is stored as '42'; looked up, it matches '042' too.
        assert_eq!(place(KeyValue::Int(42), ci, Purpose::Store), s("42"));
        assert_eq!(place(KeyValue::Int(42), ci, Purpose::Lookup), None);
    }

    #[test]
    fn integer_columns_read_strings_as_numbers() {
        let i = |v: KeyValue, purpose| place(v, KeyType::Integer, purpose);
        let n = i(KeyValue::Int(42), Purpose::Store);
        for s in ["42", " 42", "+42", "42.0", "4.2e1", "042"] {
            assert_eq!(i(KeyValue::from(s), Purpose::Store), n, "{s}");
        }
        assert_eq!(i(KeyValue::from("abc"), Purpose::Lookup), None);
        let p = hash();
        let e = canonical(
            &KeyValue::from("abc"),
            &p,
            Some(KeyType::Integer),
            Charset::Utf8mb4,
            Purpose::Store,
        )
        .unwrap_err();
        assert!(e.contains("'abc'"), "{e}");
    }

    #[test]
    fn bytes_hashing_and_mod_keep_their_rules() {
        let p = Placement::hash_bytes(vec![0, 1]).unwrap();
        let v = KeyValue::from("Bob ");
        let ci = KeyType::Text(collation::by_name("utf8mb4_general_ci").unwrap());
        assert_eq!(
            canonical(&v, &p, Some(ci), Charset::Utf8mb4, Purpose::Store).unwrap(),
            Some(v.clone())
        );
        let m = Placement::modulo(vec![0, 1]).unwrap();
        assert_eq!(
            canonical(
                &KeyValue::from(" 43"),
                &m,
                None,
                Charset::Utf8mb4,
                Purpose::Lookup
            )
            .unwrap(),
            Some(KeyValue::Int(43))
        );
        assert_eq!(
            canonical(
                &KeyValue::from("-7"),
                &m,
                None,
                Charset::Utf8mb4,
                Purpose::Store
            )
            .unwrap(),
            Some(KeyValue::Int(-7))
        );
    }
}

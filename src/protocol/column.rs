//! Column definition packets (protocol 4.1), as a result set or a prepare
//! reply describes its columns: names, character set, type, flags.

use super::wire::{put_lenenc, put_lenenc_bytes, Cursor};
use super::Malformed;

/// Column flags (`*_FLAG`) that change how values are read or compared.
pub mod flags {
    pub const NOT_NULL: u16 = 1;
    pub const UNSIGNED: u16 = 1 << 5;
    /// Binary comparison: numbers, the `binary` character set, and `_bin`
    /// collations (which MariaDB flags even though the charset id it sends
    /// is the connection's result charset, not the column's collation).
    pub const BINARY: u16 = 1 << 7;
    pub const ENUM: u16 = 1 << 8;
    pub const SET: u16 = 1 << 11;
    pub const NUM: u16 = 1 << 15;
}

/// Character set id of `binary`: byte strings (VARBINARY, BLOB, BIT, and
/// the results of numeric and temporal columns).
pub const BINARY_CHARSET: u16 = 63;

/// Length of the fixed fields at the end of a column definition.
const FIXED_LEN: u64 = 0x0c;

/// The parts of a column definition idgate reads. Catalog, schema and table
/// names are skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnDef<'a> {
    /// The column's name in the result set (its alias, if it has one).
    pub name: &'a [u8],
    /// The underlying table column's name; empty for an expression.
    pub org_name: &'a [u8],
    /// Character set (collation) id of the values as sent.
    pub charset: u16,
    /// Maximum display length.
    pub length: u32,
    /// `MYSQL_TYPE_*` (see [`super::stmt::types`]).
    pub column_type: u8,
    /// See [`flags`].
    pub flags: u16,
    /// Digits after the decimal point (DECIMAL, fractional seconds).
    pub decimals: u8,
}

/// `(schema, table, column)` a result column comes from ([`ColumnDef::origin`]).
pub type Origin<'a> = (&'a [u8], &'a [u8], &'a [u8]);

impl<'a> ColumnDef<'a> {
    /// Decodes a column definition, with or without MariaDB's extended type
    /// information (present when the connection negotiated
    /// `MARIADB_CLIENT_EXTENDED_METADATA`: a length-encoded block between
    /// the original name and the fixed fields, recognised by the length).
    pub fn decode(payload: &'a [u8]) -> Result<Self, Malformed> {
        let mut c = Cursor::new(payload);
        for _ in 0..4 {
            // catalog, schema, table alias, table
            c.lenenc_bytes()?;
        }
        let name = c.lenenc_bytes()?;
        let org_name = c.lenenc_bytes()?;
        let fixed_follows =
            c.remaining() == 1 + FIXED_LEN as usize && payload.get(c.pos()) == Some(&0x0c);
        if !fixed_follows {
            c.lenenc_bytes()?;
        }
        if c.lenenc()? != FIXED_LEN {
            return Err(Malformed("column definition without its fixed fields"));
        }
        let def = ColumnDef {
            name,
            org_name,
            charset: c.u16()?,
            length: c.u32()?,
            column_type: c.u8()?,
            flags: c.u16()?,
            decimals: c.u8()?,
        };
        c.take(2)?;
        Ok(def)
    }

    /// Where a column comes from: `(schema, table, column)` as the
    /// definition names them (the table and column before any alias; both
    /// empty for an expression).
    pub fn origin(payload: &[u8]) -> Result<Origin<'_>, Malformed> {
        let mut c = Cursor::new(payload);
        c.lenenc_bytes()?;
        let schema = c.lenenc_bytes()?;
        c.lenenc_bytes()?;
        let table = c.lenenc_bytes()?;
        c.lenenc_bytes()?;
        let column = c.lenenc_bytes()?;
        Ok((schema, table, column))
    }

    /// Encodes the definition with catalog `def`, empty schema and table
    /// names, and no extended type information.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_lenenc_bytes(out, b"def");
        for _ in 0..3 {
            put_lenenc_bytes(out, b"");
        }
        put_lenenc_bytes(out, self.name);
        put_lenenc_bytes(out, self.org_name);
        put_lenenc(out, FIXED_LEN);
        out.extend_from_slice(&self.charset.to_le_bytes());
        out.extend_from_slice(&self.length.to_le_bytes());
        out.push(self.column_type);
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.push(self.decimals);
        out.extend_from_slice(&[0, 0]);
    }

    /// Whether the UNSIGNED flag is set.
    pub fn is_unsigned(&self) -> bool {
        self.flags & flags::UNSIGNED != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def() -> ColumnDef<'static> {
        ColumnDef {
            name: b"total",
            org_name: b"amount",
            charset: BINARY_CHARSET,
            length: 20,
            column_type: 0xf6,
            flags: flags::NOT_NULL | flags::BINARY,
            decimals: 3,
        }
    }

    #[test]
    fn round_trip() {
        let mut p = Vec::new();
        def().encode(&mut p);
        assert_eq!(ColumnDef::decode(&p), Ok(def()));
    }

    #[test]
    fn extended_metadata_block_is_skipped() {
        let mut plain = Vec::new();
        def().encode(&mut plain);
        // Insert the extended info (type 0 = "json") after org_name.
        let tail = plain.len() - 13;
        for ext in [&b""[..], b"\x00\x04json", &[7u8; 12][..]] {
            let mut p = plain[..tail].to_vec();
            put_lenenc_bytes(&mut p, ext);
            p.extend_from_slice(&plain[tail..]);
            assert_eq!(ColumnDef::decode(&p), Ok(def()), "{ext:?}");
        }
    }

    #[test]
    fn truncated_definitions_are_errors() {
        let mut p = Vec::new();
        def().encode(&mut p);
        for n in 0..p.len() {
            assert!(ColumnDef::decode(&p[..n]).is_err(), "{n} bytes");
        }
    }
}

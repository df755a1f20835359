//! What a row's id is (generated or explicit, as MariaDB decides for an
//! AUTO_INCREMENT column) and the row written again for its shard's
//! `LOAD DATA LOCAL` stream, byte for byte but for the id.

use super::cut::{Field, Format, Row, Value};
use crate::sql::convert::{self, Converted};

/// The id of one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    /// MariaDB would generate it: the field is absent, NULL (`\N`, or
    /// `NULL` unenclosed with an enclosure set), empty, or a value that
    /// converts to 0 (without `NO_AUTO_VALUE_ON_ZERO`).
    Generate,
    /// The row keeps its value, which the shard stores as this integer.
    Explicit(i128),
}

/// Why a row's id field cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadId(pub String);

/// The id of a row whose id field is `field` (`None`: the file has no
/// field for the id column).
pub fn decide(field: Option<&Field>, no_auto_value_on_zero: bool) -> Result<Id, BadId> {
    let bytes = match field.map(|f| &f.value) {
        None | Some(Value::Null) => return Ok(Id::Generate),
        Some(Value::Bytes(b)) => b,
    };
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        // Stored as 0 (with MariaDB's "incorrect integer value" warning).
        return Ok(match no_auto_value_on_zero {
            true => Id::Explicit(0),
            false => Id::Generate,
        });
    }
    match convert::string_prefix(bytes) {
        Converted::Int(0) if !no_auto_value_on_zero => Ok(Id::Generate),
        Converted::Int(v) => Ok(Id::Explicit(i128::from(v))),
        Converted::Negative(v) => Ok(Id::Explicit(i128::from(v))),
        Converted::Unknown => Err(BadId(format!(
            "id value '{}' is not an integer idgate can place",
            String::from_utf8_lossy(bytes)
        ))),
    }
}

/// How the shard's rows carry the id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdPlace {
    /// The row's own field (the column list, or the table, has the id
    /// column): a generated id replaces it.
    Field,
    /// Written as a new first field (idgate adds the id column to the
    /// front of the column list).
    Prepend,
}

/// Appends `row` (cut from `buf`) to `out` as the shard must read it:
/// `LINES STARTING BY`, the id field (replaced by `generated` when the
/// row's id is generated), the rest of the row's bytes unchanged, and its
/// line terminator when it had one (the file's last row may end without).
pub fn write_row(
    out: &mut Vec<u8>,
    buf: &[u8],
    row: &Row,
    fmt: &Format,
    place: IdPlace,
    generated: Option<u64>,
) {
    out.extend_from_slice(&fmt.line_start);
    let body = buf.get(row.body.clone()).unwrap_or(&[]);
    match (place, generated, &row.wanted) {
        (IdPlace::Prepend, id, _) => {
            match id {
                Some(id) => push_id(out, id),
                // Not reached: a prepended id is always generated.
                None => out.extend_from_slice(b"\\N"),
            }
            out.extend_from_slice(&fmt.field_term);
            out.extend_from_slice(body);
        }
        (IdPlace::Field, Some(id), Some(f)) => {
            let start = f.raw.start.saturating_sub(row.body.start);
            let end = f.raw.end.saturating_sub(row.body.start);
            out.extend_from_slice(body.get(..start).unwrap_or(&[]));
            push_id(out, id);
            out.extend_from_slice(body.get(end..).unwrap_or(&[]));
        }
        _ => out.extend_from_slice(body),
    }
    if row.terminated {
        out.extend_from_slice(&fmt.line_term);
    }
}

/// `id` in decimal, without an allocation per row.
fn push_id(out: &mut Vec<u8>, mut id: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (id % 10) as u8;
        id /= 10;
        if id == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

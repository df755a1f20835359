//! Result-set rows: a row packet split into its values, and a row packet
//! built from values.
//!
//! - Text rows (COM_QUERY): each value a length-encoded string, NULL as `0xfb`.
//! - Binary rows (COM_STMT_EXECUTE): a `0x00` header, a NULL bitmap whose
//!   first two bits are unused, then each non-NULL value in its type's binary
//!   form ([`super::stmt::take_value`]).

use super::stmt::{put_value, take_value};
use super::wire::{put_lenenc_bytes, Cursor};
use super::Malformed;

/// One value of a row: `None` for NULL, otherwise its bytes without any
/// length prefix (text: the string; binary: the value as
/// [`take_value`] returns it).
pub type Cell<'a> = Option<&'a [u8]>;

/// NULL in a text row.
const TEXT_NULL: u8 = 0xfb;

/// Bits before the first column's bit in a binary row's NULL bitmap.
const BITMAP_OFFSET: usize = 2;

/// Splits a text row of `columns` values. The row must hold exactly that many.
pub fn text_cells(payload: &[u8], columns: usize) -> Result<Vec<Cell<'_>>, Malformed> {
    let mut c = Cursor::new(payload);
    // Every value takes at least one byte: a bad column count cannot make
    // this allocate more than the packet's size.
    let mut cells = Vec::with_capacity(columns.min(payload.len()));
    for _ in 0..columns {
        if payload.get(c.pos()) == Some(&TEXT_NULL) {
            c.u8()?;
            cells.push(None);
        } else {
            cells.push(Some(c.lenenc_bytes()?));
        }
    }
    if !c.is_empty() {
        return Err(Malformed("row longer than its columns"));
    }
    Ok(cells)
}

/// Splits a binary row whose columns have the type codes `types`. The row
/// must hold exactly those values.
pub fn binary_cells<'a>(payload: &'a [u8], types: &[u8]) -> Result<Vec<Cell<'a>>, Malformed> {
    let mut c = Cursor::new(payload);
    if c.u8()? != 0 {
        return Err(Malformed("binary row without its 0x00 header"));
    }
    let bitmap = c.take((types.len() + BITMAP_OFFSET).div_ceil(8))?;
    let mut cells = Vec::with_capacity(types.len());
    for (i, &ty) in types.iter().enumerate() {
        let bit = i + BITMAP_OFFSET;
        let null = bitmap
            .get(bit / 8)
            .is_some_and(|b| b & (1 << (bit % 8)) != 0);
        cells.push(if null {
            None
        } else {
            Some(take_value(&mut c, ty)?)
        });
    }
    if !c.is_empty() {
        return Err(Malformed("row longer than its columns"));
    }
    Ok(cells)
}

/// Appends a text row.
pub fn put_text_row(out: &mut Vec<u8>, cells: &[Cell<'_>]) {
    for cell in cells {
        match cell {
            Some(v) => put_lenenc_bytes(out, v),
            None => out.push(TEXT_NULL),
        }
    }
}

/// Appends a binary row; `types[i]` is the type code of `cells[i]` (extra
/// types or cells are ignored).
pub fn put_binary_row(out: &mut Vec<u8>, types: &[u8], cells: &[Cell<'_>]) {
    out.push(0);
    let start = out.len();
    out.resize(start + (cells.len() + BITMAP_OFFSET).div_ceil(8), 0);
    for (i, cell) in cells.iter().enumerate() {
        if cell.is_none() {
            let bit = i + BITMAP_OFFSET;
            if let Some(b) = out.get_mut(start + bit / 8) {
                *b |= 1 << (bit % 8);
            }
        }
    }
    for (&ty, cell) in types.iter().zip(cells) {
        if let Some(v) = cell {
            put_value(out, ty, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::stmt::types;

    #[test]
    fn text_rows_round_trip_and_must_match_the_column_count() {
        let cells: Vec<Cell> = vec![Some(b"abc"), None, Some(b""), Some(&[0xfb; 300])];
        let mut p = Vec::new();
        put_text_row(&mut p, &cells);
        assert_eq!(text_cells(&p, 4).unwrap(), cells);
        assert!(text_cells(&p, 3).is_err(), "a value left over");
        assert!(text_cells(&p, 5).is_err(), "a value missing");
        for n in 0..p.len() {
            assert!(text_cells(&p[..n], 4).is_err(), "{n} bytes");
        }
    }

    #[test]
    fn binary_rows_round_trip_with_nulls_past_the_first_bitmap_byte() {
        let ty = [
            types::LONGLONG,
            types::TINY,
            types::DATETIME,
            types::NEWDECIMAL,
            types::DOUBLE,
            types::TIME,
            0xfd,
            types::LONG,
        ];
        let long = (-5i64).to_le_bytes();
        let dbl = 2.5f64.to_le_bytes();
        let cells: Vec<Cell> = vec![
            Some(&long),
            None,
            Some(&[0xe8, 0x07, 1, 2, 3, 4, 5]),
            Some(b"-1.250"),
            Some(&dbl),
            Some(&[]),
            None,
            None,
        ];
        let mut p = Vec::new();
        put_binary_row(&mut p, &ty, &cells);
        // 8 columns + 2 offset bits: a 2-byte bitmap; columns 6 and 7 in the second.
        assert_eq!(&p[..3], &[0, 0b0000_1000, 0b0000_0011]);
        assert_eq!(binary_cells(&p, &ty).unwrap(), cells);
        for n in 0..p.len() {
            assert!(binary_cells(&p[..n], &ty).is_err(), "{n} bytes");
        }
        let mut longer = p.clone();
        longer.push(0);
        assert!(binary_cells(&longer, &ty).is_err());
        let mut bad = p;
        bad[0] = 1;
        assert!(binary_cells(&bad, &ty).is_err());
    }
}

//! COM_STMT_EXECUTE payloads: statement id, flags, NULL bitmap, parameter
//! types and values; the binary form of one value ([`take_value`],
//! [`put_value`]), which binary result-set rows use too.
//!
//! idgate gives clients its own statement ids (a statement may be prepared on
//! several shard connections, or again after a reconnect), remembers the
//! parameter types a client bound (later executes may omit them), and adds the
//! generated id parameters. All of that needs the block taken apart safely.

use super::wire::{put_lenenc_bytes, Cursor};
use super::Malformed;

/// Column/parameter type codes that matter for sizing values.
pub mod types {
    pub const DECIMAL: u8 = 0x00;
    pub const TINY: u8 = 0x01;
    pub const SHORT: u8 = 0x02;
    pub const LONG: u8 = 0x03;
    pub const FLOAT: u8 = 0x04;
    pub const DOUBLE: u8 = 0x05;
    pub const NULL: u8 = 0x06;
    pub const TIMESTAMP: u8 = 0x07;
    pub const LONGLONG: u8 = 0x08;
    pub const INT24: u8 = 0x09;
    pub const DATE: u8 = 0x0a;
    pub const TIME: u8 = 0x0b;
    pub const DATETIME: u8 = 0x0c;
    pub const YEAR: u8 = 0x0d;
    pub const NEWDECIMAL: u8 = 0xf6;
    pub const ENUM: u8 = 0xf7;
    pub const SET: u8 = 0xf8;
    pub const TINY_BLOB: u8 = 0xf9;
    pub const MEDIUM_BLOB: u8 = 0xfa;
    pub const LONG_BLOB: u8 = 0xfb;
    pub const BLOB: u8 = 0xfc;
    pub const VAR_STRING: u8 = 0xfd;
    pub const STRING: u8 = 0xfe;
    /// Flag in the second type byte: the integer is unsigned.
    pub const UNSIGNED_FLAG: u8 = 0x80;
}

/// One parameter's type: the type code and its flag byte.
pub type ParamType = [u8; 2];

/// A decoded COM_STMT_EXECUTE (without the command byte).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execute<'a> {
    pub stmt_id: u32,
    /// Cursor type flags.
    pub flags: u8,
    pub iterations: u32,
    /// Parameter values, `None` for NULL, in the byte form of their type.
    pub values: Vec<Option<&'a [u8]>>,
    /// Types sent with this execute (the new-params-bound flag was 1).
    pub types: Option<Vec<ParamType>>,
}

/// The statement id of an execute/fetch/close/reset/long-data payload (after the command byte).
pub fn stmt_id(body: &[u8]) -> Result<u32, Malformed> {
    Cursor::new(body).u32()
}

/// The parameter types an execute body carries (`None` when its
/// new-params-bound flag is 0), without decoding the values.
pub fn bound_types(body: &[u8], num_params: usize) -> Result<Option<Vec<ParamType>>, Malformed> {
    if num_params == 0 {
        return Ok(None);
    }
    let mut c = Cursor::new(body);
    c.take(9)?;
    c.take(num_params.div_ceil(8))?;
    if c.u8()? != 1 {
        return Ok(None);
    }
    let raw = c.take(num_params * 2)?;
    Ok(Some(raw.chunks_exact(2).map(|t| [t[0], t[1]]).collect()))
}

/// Decodes an execute body for a statement with `num_params` parameters.
/// `known_types` are the types bound at an earlier execute, used when this
/// one does not resend them.
pub fn decode_execute<'a>(
    body: &'a [u8],
    num_params: usize,
    known_types: Option<&[ParamType]>,
) -> Result<Execute<'a>, Malformed> {
    decode_execute_long(body, num_params, known_types, &[])
}

/// [`decode_execute`] for a statement whose parameters `i` with `long[i]`
/// were sent with COM_STMT_SEND_LONG_DATA: the execute carries no value for
/// them (their null bit is clear); they decode as `Some(&[])`.
pub fn decode_execute_long<'a>(
    body: &'a [u8],
    num_params: usize,
    known_types: Option<&[ParamType]>,
    long: &[bool],
) -> Result<Execute<'a>, Malformed> {
    let mut c = Cursor::new(body);
    let stmt_id = c.u32()?;
    let flags = c.u8()?;
    let iterations = c.u32()?;
    if num_params == 0 {
        return Ok(Execute {
            stmt_id,
            flags,
            iterations,
            values: Vec::new(),
            types: None,
        });
    }
    let bitmap = c.take(num_params.div_ceil(8))?;
    let bound = c.u8()?;
    let types: Option<Vec<ParamType>> = if bound == 1 {
        let raw = c.take(num_params * 2)?;
        Some(raw.chunks_exact(2).map(|t| [t[0], t[1]]).collect())
    } else {
        None
    };
    let ty = match (&types, known_types) {
        (Some(t), _) => t.as_slice(),
        (None, Some(t)) if t.len() == num_params => t,
        _ => return Err(Malformed("execute without parameter types")),
    };
    let mut values = Vec::with_capacity(num_params);
    for (i, t) in ty.iter().enumerate() {
        let is_null = bitmap[i / 8] & (1 << (i % 8)) != 0;
        values.push(if is_null {
            None
        } else if long.get(i) == Some(&true) {
            Some(&[][..])
        } else {
            Some(take_value(&mut c, t[0])?)
        });
    }
    Ok(Execute {
        stmt_id,
        flags,
        iterations,
        values,
        types,
    })
}

/// Reads one value in the binary protocol form of type `ty` (execute
/// parameters and binary result-set rows share it): fixed-width integers and
/// floats as they are, temporal values after their length byte, everything
/// else as a length-encoded string. Returns the value without its length prefix.
pub fn take_value<'a>(c: &mut Cursor<'a>, ty: u8) -> Result<&'a [u8], Malformed> {
    use types::*;
    match ty {
        NULL => Ok(&[]),
        TINY => c.take(1),
        SHORT | YEAR => c.take(2),
        LONG | INT24 | FLOAT => c.take(4),
        LONGLONG | DOUBLE => c.take(8),
        DATE | DATETIME | TIMESTAMP | TIME => {
            let n = c.u8()? as usize;
            c.take(n)
        }
        _ => c.lenenc_bytes(),
    }
}

/// Encodes an execute body (without the command byte) that always carries
/// the parameter types.
pub fn encode_execute(
    stmt_id: u32,
    flags: u8,
    iterations: u32,
    params: &[(ParamType, Option<&[u8]>)],
    out: &mut Vec<u8>,
) {
    encode_execute_long(stmt_id, flags, iterations, params, &[], out)
}

/// [`encode_execute`] where parameters `i` with `long[i]` were sent with
/// COM_STMT_SEND_LONG_DATA: no value is written for them (not NULL either).
pub fn encode_execute_long(
    stmt_id: u32,
    flags: u8,
    iterations: u32,
    params: &[(ParamType, Option<&[u8]>)],
    long: &[bool],
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(&stmt_id.to_le_bytes());
    out.push(flags);
    out.extend_from_slice(&iterations.to_le_bytes());
    if params.is_empty() {
        return;
    }
    let start = out.len();
    out.resize(start + params.len().div_ceil(8), 0);
    for (i, (_, v)) in params.iter().enumerate() {
        if v.is_none() {
            out[start + i / 8] |= 1 << (i % 8);
        }
    }
    out.push(1);
    for (t, _) in params {
        out.extend_from_slice(t);
    }
    for (i, (t, v)) in params.iter().enumerate() {
        match v {
            Some(_) if long.get(i) == Some(&true) => {}
            Some(v) => put_value(out, t[0], v),
            None => {}
        }
    }
}

/// Appends one value in the binary protocol form of type `ty`, the inverse of
/// [`take_value`]: `v` is the value without its length prefix (a temporal
/// value is at most 12 bytes long, a fixed-width one exactly its width).
pub fn put_value(out: &mut Vec<u8>, ty: u8, v: &[u8]) {
    match ty {
        types::DATE | types::DATETIME | types::TIMESTAMP | types::TIME => {
            out.push(v.len() as u8);
            out.extend_from_slice(v);
        }
        types::TINY
        | types::SHORT
        | types::YEAR
        | types::LONG
        | types::INT24
        | types::FLOAT
        | types::LONGLONG
        | types::DOUBLE
        | types::NULL => out.extend_from_slice(v),
        _ => put_lenenc_bytes(out, v),
    }
}

/// The integer value of a bound parameter, if it is an integer type (or a
/// string of digits), for deciding "NULL or 0 means generate".
pub fn int_value(ty: ParamType, v: &[u8]) -> Option<i128> {
    use types::*;
    let unsigned = ty[1] & UNSIGNED_FLAG != 0;
    // The n-byte little-endian integer, sign-extended unless unsigned.
    let int = |n: usize| -> Option<i128> {
        let b = v.get(..n)?;
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(b);
        let x = u64::from_le_bytes(a);
        let shift = 64 - 8 * n as u32;
        Some(if unsigned {
            x as i128
        } else {
            (((x << shift) as i64) >> shift) as i128
        })
    };
    Some(match ty[0] {
        TINY => int(1)?,
        SHORT | YEAR => int(2)?,
        LONG | INT24 => int(4)?,
        LONGLONG => int(8)?,
        DECIMAL | NEWDECIMAL | 0x0f | 0xfd | 0xfe => {
            std::str::from_utf8(v).ok()?.trim().parse().ok()?
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execute_round_trip_with_nulls_and_mixed_types() {
        let long = 42i64.to_le_bytes();
        let params: Vec<(ParamType, Option<&[u8]>)> = vec![
            ([types::LONGLONG, 0], Some(&long[..])),
            ([0xfd, 0], Some(b"hello")),
            ([types::LONGLONG, 0], None),
            ([types::DATETIME, 0], Some(&[0xe8, 0x07, 1, 2])),
        ];
        let mut body = Vec::new();
        encode_execute(9, 0, 1, &params, &mut body);
        let e = decode_execute(&body, 4, None).unwrap();
        assert_eq!(e.stmt_id, 9);
        assert_eq!(e.values, params.iter().map(|p| p.1).collect::<Vec<_>>());
        let types: Vec<ParamType> = params.iter().map(|p| p.0).collect();
        assert_eq!(e.types.as_deref(), Some(&types[..]));
        assert_eq!(int_value(types[0], &long), Some(42));
        assert_eq!(int_value([types::TINY, 0], &[0xff]), Some(-1));
        assert_eq!(
            int_value([types::TINY, types::UNSIGNED_FLAG], &[0xff]),
            Some(255)
        );
        assert_eq!(
            int_value([types::LONG, 0], &(-7i32).to_le_bytes()),
            Some(-7)
        );
        assert_eq!(
            int_value([types::LONGLONG, 0], &(-7i64).to_le_bytes()),
            Some(-7)
        );
        assert_eq!(
            int_value(
                [types::LONGLONG, types::UNSIGNED_FLAG],
                &u64::MAX.to_le_bytes()
            ),
            Some(u64::MAX as i128)
        );
        assert_eq!(int_value([types::SHORT, 0], &[1]), None);
    }

    #[test]
    fn execute_without_types_uses_known_ones_or_fails() {
        // stmt 1, no cursor, 1 iteration, 1 param not null, bound flag 0, value
        let mut body = vec![1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0];
        body.extend_from_slice(&7i64.to_le_bytes());
        assert!(decode_execute(&body, 1, None).is_err());
        let e = decode_execute(&body, 1, Some(&[[types::LONGLONG, 0]])).unwrap();
        assert_eq!(e.values[0], Some(&7i64.to_le_bytes()[..]));
        assert!(decode_execute(&body[..12], 1, Some(&[[types::LONGLONG, 0]])).is_err());
    }
}

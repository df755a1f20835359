//! Request framing: one client command out of the bytes read so far.
//!
//! Clients send a command as an array of bulk strings
//! (`*2\r\n$4\r\nINCR\r\n$6\r\norders\r\n`), or as an "inline" line of
//! words (`INCR orders\r\n`, what a human types into telnet). [`parse`]
//! finds one whole command at the start of a buffer and records where its
//! arguments are, without copying them.
//!
//! Nothing a client sends makes it allocate by a declared length: the
//! arguments are ranges into the read buffer, a command has at most
//! [`MAX_ARGS`] arguments of at most [`MAX_BULK`] bytes each, and a header
//! line longer than a number can be is an error at once. So one command
//! needs at most about `MAX_ARGS * MAX_BULK` bytes of buffer, and a
//! client announcing `*2147483647` or `$4294967295` gets an error reply,
//! not an allocation.

use std::ops::Range;

/// Most arguments in one command (the longest command idgate knows,
/// `HELLO 3 AUTH user password SETNAME name`, has 7).
pub const MAX_ARGS: usize = 16;
/// Longest argument, in bytes (generator names are at most 128, passwords short).
pub const MAX_BULK: usize = 16 * 1024;
/// Longest inline command line, in bytes.
pub const MAX_INLINE: usize = 16 * 1024;
/// Longest header line (`*N` or `$N`): a sign and 19 digits, with room to spare.
const MAX_HEADER: usize = 32;

/// Why a request cannot be framed. The connection cannot be resynchronised
/// after one of these: the server replies with the error and closes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// `*N` with N not a number, or over [`MAX_ARGS`].
    #[error("Protocol error: invalid multibulk length (at most {MAX_ARGS} arguments)")]
    ArrayLength,
    /// `$N` with N not a number, negative, or over [`MAX_BULK`].
    #[error("Protocol error: invalid bulk length (at most {MAX_BULK} bytes)")]
    BulkLength,
    /// An array element that is not a bulk string.
    #[error("Protocol error: expected '$', got '{0}'")]
    ExpectedBulk(char),
    /// A bulk string not followed by CRLF.
    #[error("Protocol error: bulk string not terminated by CRLF")]
    BulkTerminator,
    /// An inline line over [`MAX_INLINE`] bytes, or with over [`MAX_ARGS`] words.
    #[error("Protocol error: too big inline request")]
    InlineTooBig,
}

/// Finds the end of a line starting at `from`: the index of its `\n`, or
/// `None` if `buf` does not hold it yet. A line longer than `max` bytes is
/// `Err(())`.
#[inline]
fn line_end(buf: &[u8], from: usize, max: usize) -> Result<Option<usize>, ()> {
    let window = &buf[from.min(buf.len())..buf.len().min(from.saturating_add(max + 2))];
    match memchr::memchr(b'\n', window) {
        Some(i) => Ok(Some(from + i)),
        None if window.len() >= max + 2 => Err(()),
        None => Ok(None),
    }
}

/// The decimal number of a header line (`*N`/`$N` without its type byte and
/// CRLF); `None` if it is not one.
#[inline]
fn header_number(line: &[u8]) -> Option<i64> {
    let (neg, digits) = match line.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, line),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(d - b'0');
    }
    Some(if neg { -v } else { v })
}

/// Strips the `\r` before a line's `\n` (`end` is the index of the `\n`).
#[inline]
fn line(buf: &[u8], start: usize, end: usize) -> &[u8] {
    let l = &buf[start..end];
    l.strip_suffix(b"\r").unwrap_or(l)
}

/// Parses one command at the start of `buf`.
///
/// Returns `Ok(Some(n))` when the command ends at byte `n`: `args` then
/// holds the range of each argument in `buf` (empty for an empty inline line
/// or `*0`, which clients may send and which do nothing). `Ok(None)` when
/// `buf` holds only part of a command (read more and call again; `args` is
/// then meaningless).
///
/// Errors: [`FrameError`] when the bytes are not a command within the limits.
pub fn parse(buf: &[u8], args: &mut Vec<Range<usize>>) -> Result<Option<usize>, FrameError> {
    args.clear();
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_array(buf, args),
        Some(_) => parse_inline(buf, args),
    }
}

fn parse_array(buf: &[u8], args: &mut Vec<Range<usize>>) -> Result<Option<usize>, FrameError> {
    let Some(end) = line_end(buf, 1, MAX_HEADER).map_err(|_| FrameError::ArrayLength)? else {
        return Ok(None);
    };
    let count = header_number(line(buf, 1, end)).ok_or(FrameError::ArrayLength)?;
    let mut pos = end + 1;
    if count <= 0 {
        // `*0` and `*-1`: nothing to do (Redis ignores them too).
        return Ok(Some(pos));
    }
    if count as usize > MAX_ARGS {
        return Err(FrameError::ArrayLength);
    }
    for _ in 0..count {
        match buf.get(pos) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&c) => return Err(FrameError::ExpectedBulk(c as char)),
        }
        let Some(end) = line_end(buf, pos + 1, MAX_HEADER).map_err(|_| FrameError::BulkLength)?
        else {
            return Ok(None);
        };
        let len = header_number(line(buf, pos + 1, end)).ok_or(FrameError::BulkLength)?;
        if !(0..=MAX_BULK as i64).contains(&len) {
            return Err(FrameError::BulkLength);
        }
        let start = end + 1;
        let stop = start + len as usize;
        match buf.get(stop..stop + 2) {
            None => return Ok(None),
            Some(b"\r\n") => {}
            Some(_) => return Err(FrameError::BulkTerminator),
        }
        args.push(start..stop);
        pos = stop + 2;
    }
    Ok(Some(pos))
}

fn parse_inline(buf: &[u8], args: &mut Vec<Range<usize>>) -> Result<Option<usize>, FrameError> {
    let Some(end) = line_end(buf, 0, MAX_INLINE).map_err(|_| FrameError::InlineTooBig)? else {
        return Ok(None);
    };
    let l = line(buf, 0, end);
    let mut i = 0;
    while i < l.len() {
        if l[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        while i < l.len() && !l[i].is_ascii_whitespace() {
            i += 1;
        }
        if args.len() == MAX_ARGS {
            return Err(FrameError::InlineTooBig);
        }
        args.push(start..i);
    }
    Ok(Some(end + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Words<'a> = Result<Option<(Vec<&'a [u8]>, usize)>, FrameError>;

    fn words(buf: &[u8]) -> Words<'_> {
        let mut args = Vec::new();
        Ok(parse(buf, &mut args)?.map(|n| (args.iter().map(|r| &buf[r.clone()]).collect(), n)))
    }

    #[test]
    fn array_and_inline_commands() {
        let b = b"*2\r\n$4\r\nINCR\r\n$6\r\norders\r\n*1\r\n$4\r\nPING\r\n";
        let (a, n) = words(b).unwrap().unwrap();
        assert_eq!(a, vec![&b"INCR"[..], b"orders"]);
        assert_eq!(n, 26);
        let (a, _) = words(&b[n..]).unwrap().unwrap();
        assert_eq!(a, vec![&b"PING"[..]]);
        let (a, n) = words(b"  incr   orders \r\nX").unwrap().unwrap();
        assert_eq!(a, vec![&b"incr"[..], b"orders"]);
        assert_eq!(n, 18);
        let (a, n) = words(b"\r\n").unwrap().unwrap();
        assert!(a.is_empty());
        assert_eq!(n, 2);
        let (a, n) = words(b"*0\r\n").unwrap().unwrap();
        assert!(a.is_empty());
        assert_eq!(n, 4);
        // An empty bulk string is an argument.
        let (a, _) = words(b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n").unwrap().unwrap();
        assert_eq!(a, vec![&b"ECHO"[..], b""]);
    }

    #[test]
    fn every_prefix_of_a_command_is_incomplete() {
        let b = b"*3\r\n$11\r\nIDGATE.NEXT\r\n$6\r\norders\r\n$2\r\n10\r\n";
        for cut in 0..b.len() {
            assert_eq!(words(&b[..cut]), Ok(None), "cut at {cut}");
        }
        assert!(words(b).unwrap().is_some());
    }

    #[test]
    fn huge_or_bad_lengths_are_errors_not_allocations() {
        assert_eq!(words(b"*2147483647\r\n"), Err(FrameError::ArrayLength));
        assert_eq!(words(b"*17\r\n"), Err(FrameError::ArrayLength));
        assert_eq!(words(b"*x\r\n"), Err(FrameError::ArrayLength));
        assert_eq!(
            words(b"*99999999999999999999999999999999999999"),
            Err(FrameError::ArrayLength)
        );
        assert_eq!(words(b"*1\r\n$4294967295\r\n"), Err(FrameError::BulkLength));
        assert_eq!(words(b"*1\r\n$-1\r\n"), Err(FrameError::BulkLength));
        assert_eq!(words(b"*1\r\n$16385\r\n"), Err(FrameError::BulkLength));
        assert_eq!(words(b"*1\r\n:5\r\n"), Err(FrameError::ExpectedBulk(':')));
        assert_eq!(
            words(b"*1\r\n$4\r\nPINGxx"),
            Err(FrameError::BulkTerminator)
        );
        let long = vec![b'a'; MAX_INLINE + 10];
        assert_eq!(words(&long), Err(FrameError::InlineTooBig));
        let many = "a ".repeat(MAX_ARGS + 1) + "\r\n";
        assert_eq!(words(many.as_bytes()), Err(FrameError::InlineTooBig));
        // A header line still short of a number's length is just incomplete.
        assert_eq!(words(b"*12"), Ok(None));
        assert_eq!(words(b"*1\r\n$16384\r\n"), Ok(None));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A cheap deterministic fuzz: every 1..3-byte mutation of a command.
        let base = b"*2\r\n$4\r\nINCR\r\n$6\r\norders\r\n".to_vec();
        let mut args = Vec::new();
        for i in 0..base.len() {
            for v in [0u8, b'\r', b'\n', b'*', b'$', b'-', b'9', 0xff] {
                let mut b = base.clone();
                b[i] = v;
                let _ = parse(&b, &mut args);
                b.truncate(i + 1);
                let _ = parse(&b, &mut args);
            }
        }
    }
}

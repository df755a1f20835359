//! Protocol integers and strings: a bounds-checked reader and plain writers.
//!
//! Every read returns [`Malformed`] instead of panicking when the input is too
//! short, so nothing a peer sends can crash idgate.

use super::Malformed;

/// A cursor over a packet payload.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Whether everything was consumed.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(Malformed("packet too short"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, Malformed> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u24(&mut self) -> Result<u32, Malformed> {
        let b = self.take(3)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], 0]))
    }

    pub fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64, Malformed> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A length-encoded integer. `0xfb` (NULL) and `0xff` are refused here.
    pub fn lenenc(&mut self) -> Result<u64, Malformed> {
        match self.u8()? {
            n @ 0..=0xfa => Ok(n as u64),
            0xfc => Ok(self.u16()? as u64),
            0xfd => Ok(self.u24()? as u64),
            0xfe => self.u64(),
            _ => Err(Malformed("bad length-encoded integer")),
        }
    }

    /// A length-encoded string.
    pub fn lenenc_bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let n = self.lenenc()?;
        let n = usize::try_from(n).map_err(|_| Malformed("string too long"))?;
        self.take(n)
    }

    /// A NUL-terminated string (without the NUL); the whole rest if there is no NUL.
    pub fn null_str(&mut self) -> &'a [u8] {
        let rest = &self.buf[self.pos..];
        match rest.iter().position(|&b| b == 0) {
            Some(i) => {
                self.pos += i + 1;
                &rest[..i]
            }
            None => self.rest(),
        }
    }
}

/// Appends a length-encoded integer.
pub fn put_lenenc(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=0xfa => out.push(n as u8),
        0xfb..=0xffff => {
            out.push(0xfc);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xff_ffff => {
            out.push(0xfd);
            out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xfe);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// Appends a length-encoded string.
pub fn put_lenenc_bytes(out: &mut Vec<u8>, s: &[u8]) {
    put_lenenc(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Appends a NUL-terminated string.
pub fn put_null_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(s);
    out.push(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenenc_round_trips_at_every_width() {
        for n in [
            0u64,
            250,
            251,
            0xffff,
            0x1_0000,
            0xff_ffff,
            0x100_0000,
            u64::MAX,
        ] {
            let mut v = Vec::new();
            put_lenenc(&mut v, n);
            assert_eq!(Cursor::new(&v).lenenc(), Ok(n), "{n}");
        }
    }

    #[test]
    fn short_input_is_an_error_not_a_panic() {
        assert!(Cursor::new(&[0xfc, 1]).lenenc().is_err());
        assert!(Cursor::new(&[0xfe, 1, 2]).lenenc().is_err());
        assert!(Cursor::new(&[5, b'a']).lenenc_bytes().is_err());
        assert!(Cursor::new(&[]).u8().is_err());
        let mut c = Cursor::new(b"abc");
        assert_eq!(c.null_str(), b"abc");
        assert!(c.is_empty());
    }
}

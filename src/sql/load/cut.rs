//! The client's file cut into rows and fields exactly as MariaDB's
//! `READ_INFO` (sql/sql_load.cc: `read_field`, `next_line`,
//! `find_start_of_fields`, `unescape`) cuts it, so that idgate's rows are
//! the rows the shard would have read from the whole file: enclosures
//! only at a field's start, doubled enclosure characters, the escape
//! character (also when it is the enclosure), `\N` and unenclosed `NULL`,
//! line terminators inside enclosed fields, `LINES STARTING BY` searched
//! across lines, the rest of a line after the last column skipped, a
//! missing trailing terminator at the end of the file.
//!
//! Incremental: [`cut_row`] looks at the bytes buffered so far; when a row
//! does not end inside them it says [`Cut::More`] and is cut again from its
//! start once more bytes arrived (rows are small next to the buffer, so
//! the rescan costs little). Multi-byte characters are read byte by byte,
//! which is exact for character sets whose multi-byte sequences never
//! contain an ASCII byte (UTF-8, the latin and other single-byte sets);
//! [`Format::check_charset`] refuses the others.

use std::ops::Range;

/// FIELDS and LINES options of the statement (MariaDB's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// `FIELDS TERMINATED BY` (default tab).
    pub field_term: Vec<u8>,
    /// `[OPTIONALLY] ENCLOSED BY` (default none).
    pub enclosed: Option<u8>,
    /// `ESCAPED BY` (default backslash; `''`: none).
    pub escaped: Option<u8>,
    /// `LINES STARTING BY` (default empty).
    pub line_start: Vec<u8>,
    /// `LINES TERMINATED BY` (default newline).
    pub line_term: Vec<u8>,
}

impl Default for Format {
    fn default() -> Self {
        Format {
            field_term: b"\t".to_vec(),
            enclosed: None,
            escaped: Some(b'\\'),
            line_start: Vec::new(),
            line_term: b"\n".to_vec(),
        }
    }
}

impl Format {
    /// The forms idgate cuts: not the fixed-width format (empty FIELDS
    /// TERMINATED BY) and not an empty LINES TERMINATED BY.
    pub fn check(&self) -> Result<(), String> {
        if self.field_term.is_empty() {
            return Err("FIELDS TERMINATED BY '' (fixed-width rows) is not supported".into());
        }
        if self.line_term.is_empty() {
            return Err("LINES TERMINATED BY '' is not supported".into());
        }
        Ok(())
    }

    /// Character sets whose multi-byte characters may contain ASCII bytes
    /// (a `\` or a terminator inside a character) are refused: idgate reads
    /// the file byte by byte.
    pub fn check_charset(charset: &str) -> Result<(), String> {
        const MB_ASCII: &[&str] = &[
            "big5", "cp932", "gbk", "gb18030", "sjis", "ucs2", "utf16", "utf16le", "utf32",
        ];
        match MB_ASCII.contains(&charset) {
            true => Err(format!(
                "CHARACTER SET {charset} is not supported (its multi-byte characters can contain ASCII bytes); load the file as utf8mb4"
            )),
            false => Ok(()),
        }
    }
}

/// A field's value as MariaDB stores it: NULL, or these bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Bytes(Vec<u8>),
}

/// One field of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Its bytes in the buffer (enclosure included, terminator excluded).
    pub raw: Range<usize>,
    /// What it reads as.
    pub value: Value,
}

/// One row: where it is in the buffer and the field asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// After `LINES STARTING BY` up to its line terminator (or the end of
    /// the file).
    pub body: Range<usize>,
    /// It ended with a line terminator (else with the end of the file).
    pub terminated: bool,
    /// Fields read (at most the column list's length).
    pub fields: usize,
    /// The field at the index asked for, when the row has it.
    pub wanted: Option<Field>,
    /// The field at the second index asked for ([`cut_row_keyed`]).
    pub key: Option<Field>,
    /// Bytes of the buffer the row used (the next row starts there).
    pub end: usize,
}

/// What [`cut_row`] found at the start of the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    Row(Row),
    /// The row goes on past the bytes buffered: cut again with more.
    More,
    /// No more rows (only with `eof`).
    End,
}

/// Cuts the row at the start of `buf`, reading `columns` fields (the column
/// list's length) and returning the field at `want`. `eof`: `buf` holds the
/// rest of the file.
pub fn cut_row(buf: &[u8], eof: bool, fmt: &Format, columns: usize, want: Option<usize>) -> Cut {
    cut_row_keyed(buf, eof, fmt, columns, want, None)
}

/// [`cut_row`], also returning the field at `key` (a shard key column that
/// is not the id).
pub fn cut_row_keyed(
    buf: &[u8],
    eof: bool,
    fmt: &Format,
    columns: usize,
    want: Option<usize>,
    key: Option<usize>,
) -> Cut {
    let mut r = Reader {
        buf,
        pos: 0,
        at_eof: eof,
        fmt,
        start_of_line: !fmt.line_start.is_empty(),
        found_end_of_line: false,
        eof: false,
        body_start: None,
        body_end: 0,
        terminated: false,
    };
    match r.row(columns, want, key) {
        Ok(Some(row)) => Cut::Row(row),
        Ok(None) => Cut::End,
        Err(More) => Cut::More,
    }
}

/// The buffer ended before the row did.
struct More;

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// `buf` ends where the file ends.
    at_eof: bool,
    fmt: &'a Format,
    start_of_line: bool,
    found_end_of_line: bool,
    eof: bool,
    /// Where the first field starts (after `LINES STARTING BY`).
    body_start: Option<usize>,
    body_end: usize,
    terminated: bool,
}

impl Reader<'_> {
    /// The next byte, `None` at the end of the file.
    fn get(&mut self) -> Result<Option<u8>, More> {
        match self.buf.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(Some(b))
            }
            None if self.at_eof => Ok(None),
            None => Err(More),
        }
    }

    /// After its first byte was read: whether the rest of `term` follows
    /// (taken if so, else nothing is taken).
    fn terminator_rest(&mut self, term: &[u8]) -> Result<bool, More> {
        let rest = term.get(1..).unwrap_or(&[]);
        let end = self.pos + rest.len();
        match self.buf.get(self.pos..end) {
            Some(b) if b == rest => {
                self.pos = end;
                Ok(true)
            }
            Some(_) => Ok(false),
            None if self.at_eof => Ok(false),
            None => {
                // A prefix that already differs cannot become a match.
                let have = &self.buf[self.pos..];
                match rest.starts_with(have) {
                    true => Err(More),
                    false => Ok(false),
                }
            }
        }
    }

    fn row(
        &mut self,
        columns: usize,
        want: Option<usize>,
        key: Option<usize>,
    ) -> Result<Option<Row>, More> {
        let mut fields = 0;
        let mut wanted = None;
        let mut key_field = None;
        for i in 0..columns {
            match self.read_field(Some(i) == want || Some(i) == key)? {
                None => break,
                Some(f) => {
                    if Some(i) == key {
                        key_field = Some(f.clone());
                    }
                    if Some(i) == want {
                        wanted = Some(f);
                    }
                    fields += 1;
                }
            }
        }
        if fields == 0 {
            return Ok(None);
        }
        self.next_line()?;
        Ok(Some(Row {
            body: {
                let start = self.body_start.unwrap_or(0);
                start..self.body_end.max(start)
            },
            terminated: self.terminated,
            fields,
            wanted,
            key: key_field,
            end: self.pos,
        }))
    }

    /// `READ_INFO::find_start_of_fields`: skips to just past `LINES
    /// STARTING BY` (across lines). False at the end of the file.
    fn find_start_of_fields(&mut self) -> Result<bool, More> {
        let start = &self.fmt.line_start;
        while let Some(c) = self.get()? {
            if Some(&c) == start.first() && self.terminator_rest(start)? {
                return Ok(true);
            }
        }
        self.found_end_of_line = true;
        self.eof = true;
        Ok(false)
    }

    /// The end of the file ends the row's body here.
    fn at_end(&mut self) {
        self.found_end_of_line = true;
        self.eof = true;
        self.body_end = self.pos;
    }

    /// `READ_INFO::read_field`: `None` when the line (or file) has ended.
    /// Only a `keep` field's value is collected (the others are only cut).
    fn read_field(&mut self, keep: bool) -> Result<Option<Field>, More> {
        if self.found_end_of_line {
            return Ok(None);
        }
        if self.start_of_line {
            self.start_of_line = false;
            if !self.find_start_of_fields()? {
                return Ok(None);
            }
        }
        if self.body_start.is_none() {
            self.body_start = Some(self.pos);
        }
        let raw_start = self.pos;
        let Some(first) = self.get()? else {
            self.at_end();
            return Ok(None);
        };
        let fmt = self.fmt;
        let escape = fmt.escaped;
        let mut data: Vec<u8> = Vec::new();
        let mut found_null = false;
        let found_enclosed = if Some(first) == fmt.enclosed {
            if keep {
                data.push(first);
            }
            Some(first)
        } else {
            self.pos -= 1;
            None
        };
        let field = |data: Vec<u8>, enclosed: bool, found_null: bool, raw: Range<usize>| {
            let value = if (!enclosed && fmt.enclosed.is_some() && data == b"NULL")
                || (data.len() == 1 && found_null)
            {
                Value::Null
            } else {
                Value::Bytes(data)
            };
            Some(Field { raw, value })
        };
        loop {
            let Some(chr) = self.get()? else {
                self.at_end();
                return Ok(field(data, false, found_null, raw_start..self.pos));
            };
            if Some(chr) == escape {
                let Some(next) = self.get()? else {
                    if keep {
                        data.push(chr);
                    }
                    self.at_end();
                    return Ok(field(data, false, found_null, raw_start..self.pos));
                };
                if escape != fmt.enclosed || Some(next) == escape {
                    let c = match next {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        b'b' => 0x08,
                        b'0' => 0,
                        b'Z' => 0x1a,
                        b'N' => {
                            found_null = true;
                            b'N'
                        }
                        o => o,
                    };
                    if keep {
                        data.push(c);
                    }
                    continue;
                }
                self.pos -= 1;
            }
            if found_enclosed.is_none() && Some(&chr) == fmt.line_term.first() {
                let before = self.pos - 1;
                if self.terminator_rest(&fmt.line_term)? {
                    self.found_end_of_line = true;
                    self.body_end = before;
                    self.terminated = true;
                    return Ok(field(data, false, found_null, raw_start..before));
                }
            }
            if Some(chr) == found_enclosed {
                let close = self.pos;
                match self.get()? {
                    Some(next) if next == chr => {
                        if keep {
                            data.push(chr);
                        }
                        continue;
                    }
                    None => {
                        self.found_end_of_line = true;
                        self.body_end = self.pos;
                        let data = data.get(1..).unwrap_or(&[]).to_vec();
                        return Ok(field(data, true, found_null, raw_start..close));
                    }
                    Some(next) => {
                        if Some(&next) == fmt.line_term.first()
                            && self.terminator_rest(&fmt.line_term)?
                        {
                            self.found_end_of_line = true;
                            self.body_end = close;
                            self.terminated = true;
                            let data = data.get(1..).unwrap_or(&[]).to_vec();
                            return Ok(field(data, true, found_null, raw_start..close));
                        }
                        if Some(&next) == fmt.field_term.first()
                            && self.terminator_rest(&fmt.field_term)?
                        {
                            let data = data.get(1..).unwrap_or(&[]).to_vec();
                            return Ok(field(data, true, found_null, raw_start..close));
                        }
                        self.pos -= 1;
                    }
                }
            } else if found_enclosed.is_none() && Some(&chr) == fmt.field_term.first() {
                let before = self.pos - 1;
                if self.terminator_rest(&fmt.field_term)? {
                    return Ok(field(data, false, found_null, raw_start..before));
                }
            }
            if keep {
                data.push(chr);
            }
        }
    }

    /// `READ_INFO::next_line`: skips the rest of the line after the last
    /// column read.
    fn next_line(&mut self) -> Result<(), More> {
        if self.found_end_of_line || self.eof {
            return Ok(());
        }
        loop {
            let Some(c) = self.get()? else {
                self.at_end();
                return Ok(());
            };
            if Some(c) == self.fmt.escaped {
                if self.get()?.is_none() {
                    self.at_end();
                    return Ok(());
                }
                continue;
            }
            if Some(&c) == self.fmt.line_term.first() {
                let before = self.pos - 1;
                let fmt = self.fmt;
                if self.terminator_rest(&fmt.line_term)? {
                    self.body_end = before;
                    self.terminated = true;
                    return Ok(());
                }
            }
        }
    }
}

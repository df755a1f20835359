//! A small MySQL-aware tokenizer over the original bytes, and a faster
//! "skim" that only finds where a statement ends.
//!
//! It knows exactly what decides token boundaries in MySQL/MariaDB: quotes
//! with backslash escapes (unless `NO_BACKSLASH_ESCAPES`) and doubled quotes,
//! backquoted identifiers, `"` as string or identifier (`ANSI_QUOTES`),
//! comments (`#`, `-- `, `/* */`), executable comments (`/*! */`, `/*M! */`,
//! whose content is code), user and system variables, numbers. Everything is
//! byte offsets into the original text; nothing is copied or unescaped
//! (a string literal's value on request: [`unescape`]).

/// The end of a `/* */` comment (a searcher built once).
static COMMENT_END: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"*/"));

/// The parts of `sql_mode` that change how text is tokenized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Modes {
    /// `NO_BACKSLASH_ESCAPES`: `\` is an ordinary character in strings.
    pub no_backslash_escapes: bool,
    /// `ANSI_QUOTES`: `"..."` is an identifier, not a string.
    pub ansi_quotes: bool,
}

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Unquoted identifier or keyword (also `0x1F`, `123abc`).
    Word,
    /// Decimal number: digits, optional fraction and exponent.
    Number,
    /// `'...'`, or `"..."` without `ANSI_QUOTES`.
    Str,
    /// `` `...` ``, or `"..."` with `ANSI_QUOTES`.
    QuotedIdent,
    /// `@name`, `@'name'`, `@@name`, `@@session.name`.
    Var,
    /// `?` placeholder.
    Param,
    /// Any other single byte (`(`, `)`, `,`, `;`, `.`, `=`, ...).
    Punct(u8),
    /// A quote or comment that never ends (the rest of the text).
    Unterminated,
}

/// One token: its kind and byte range in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    /// What it is.
    pub kind: Kind,
    /// Byte offset of its first byte.
    pub start: usize,
    /// Byte offset just past it.
    pub end: usize,
}

impl Token {
    /// A word token spelling `kw` (ASCII case-insensitively).
    pub fn is_word(&self, sql: &str, kw: &str) -> bool {
        self.kind == Kind::Word
            && sql
                .as_bytes()
                .get(self.start..self.end)
                .is_some_and(|w| w.eq_ignore_ascii_case(kw.as_bytes()))
    }

    /// True for `Punct(b)`.
    #[inline]
    pub fn is(&self, b: u8) -> bool {
        self.kind == Kind::Punct(b)
    }
}

/// True for bytes that continue an unquoted identifier.
#[inline]
pub fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// [`CLASS`]: a byte that is (or may start) whitespace or a comment, or
/// closes an executable comment (`*`): [`Lexer::skip_trivia`] decides.
const TRIVIA: u8 = 0;
/// [`CLASS`]: a byte that starts a quote, number, variable or `?`.
const OTHER: u8 = 1;
/// [`CLASS`]: a byte that is always a one-byte punctuation token.
const PUNCT: u8 = 2;
/// [`CLASS`]: a byte that starts (and continues) a word: a letter, `_`,
/// `$` or a non-ASCII byte.
const WORD: u8 = 3;
/// [`CLASS`]: an ASCII digit (continues a word, starts a number).
const DIGIT: u8 = 4;

/// What each byte means at the start of a token (`>= WORD`: it continues
/// an identifier, like [`is_ident_byte`]).
static CLASS: [u8; 256] = {
    let mut t = [PUNCT; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = if b.is_ascii_digit() {
            DIGIT
        } else if b.is_ascii_alphabetic() || b == b'_' || b == b'$' || b >= 0x80 {
            WORD
        } else {
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | b'#' | b'-' | b'/' | b'*' => TRIVIA,
                b'\'' | b'"' | b'`' | b'@' | b'?' => OTHER,
                _ => PUNCT,
            }
        };
        i += 1;
    }
    t
};

/// Tokenizer state over one text.
#[derive(Debug, Clone)]
pub struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    modes: Modes,
    /// Inside `/*! ... */`: the next `*/` closes it and is skipped.
    in_exec: bool,
    /// An executable comment was seen since the last [`Lexer::take_exec_seen`].
    exec_seen: bool,
}

impl<'a> Lexer<'a> {
    /// A lexer at byte `pos` of `src`.
    pub fn new(src: &'a str, pos: usize, modes: Modes) -> Lexer<'a> {
        Lexer {
            src: src.as_bytes(),
            pos,
            modes,
            in_exec: false,
            exec_seen: false,
        }
    }

    /// Current byte offset (just past the last token returned).
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Moves to byte offset `pos` (a token boundary found by [`skim`]).
    pub fn set_pos(&mut self, pos: usize, in_exec: bool) {
        self.pos = pos;
        self.in_exec = in_exec;
    }

    /// True while inside an executable comment.
    pub fn in_exec(&self) -> bool {
        self.in_exec
    }

    /// Whether an executable comment was entered since the last call; resets.
    pub fn take_exec_seen(&mut self) -> bool {
        std::mem::take(&mut self.exec_seen)
    }

    #[inline]
    fn at(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    /// Skips whitespace and comments. Returns false if an unterminated
    /// comment swallowed the rest (pos is then at the end).
    #[inline(never)]
    fn skip_trivia(&mut self) -> bool {
        loop {
            let b = self.at(self.pos);
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c if self.pos < self.src.len() => {
                    self.pos += 1
                }
                b'#' => self.skip_line(),
                b'-' if self.at(self.pos + 1) == b'-'
                    && is_dash_comment_end(self.src.get(self.pos + 2).copied()) =>
                {
                    self.skip_line()
                }
                b'/' if self.at(self.pos + 1) == b'*' => {
                    let after = self.pos + 2;
                    if let Some(v) = exec_comment_len(self.src, after) {
                        self.pos = after + v;
                        self.in_exec = true;
                        self.exec_seen = true;
                    } else {
                        match COMMENT_END.find(self.src.get(after..).unwrap_or(&[])) {
                            Some(i) => self.pos = after + i + 2,
                            None => {
                                self.pos = self.src.len();
                                return false;
                            }
                        }
                    }
                }
                b'*' if self.in_exec && self.at(self.pos + 1) == b'/' => {
                    self.pos += 2;
                    self.in_exec = false;
                }
                _ => return true,
            }
        }
    }

    fn skip_line(&mut self) {
        match memchr::memchr(b'\n', self.src.get(self.pos..).unwrap_or(&[])) {
            Some(i) => self.pos += i + 1,
            None => self.pos = self.src.len(),
        }
    }

    /// The next token, or `None` at the end of the text.
    ///
    /// Inlined into the parsers' loops: the common tokens (words and
    /// punctuation after plain spaces) are lexed here; comments, other
    /// whitespace, quotes, numbers, variables and `?` go to out-of-line
    /// helpers that return only a flag or a [`Kind`] (in a register). An
    /// out-of-line call returning the whole `Option<Token>` through memory
    /// cost a store-forwarding stall per token.
    #[inline]
    pub fn next_token(&mut self) -> Option<Token> {
        while self.src.get(self.pos) == Some(&b' ') {
            self.pos += 1;
        }
        let trivia_ok = match self.src.get(self.pos) {
            Some(&b) if CLASS[b as usize] == TRIVIA => self.skip_trivia(),
            _ => true,
        };
        let start = self.pos;
        let Some(&b) = self.src.get(start) else {
            if !trivia_ok {
                return Some(Token {
                    kind: Kind::Unterminated,
                    start,
                    end: start,
                });
            }
            return None;
        };
        let kind = match CLASS[b as usize] {
            PUNCT => {
                self.pos += 1;
                Kind::Punct(b)
            }
            WORD => {
                self.pos += 1;
                self.ident_tail();
                Kind::Word
            }
            _ => self.other(b),
        };
        Some(Token {
            kind,
            start,
            end: self.pos,
        })
    }

    /// The kind of a token that is not a word or punctuation (a quote, a
    /// number, a variable, `?`) starting with `b` at `self.pos`.
    #[inline(never)]
    fn other(&mut self, b: u8) -> Kind {
        match b {
            b'\'' => self.quoted(b'\'', !self.modes.no_backslash_escapes, Kind::Str),
            b'"' if self.modes.ansi_quotes => self.quoted(b'"', false, Kind::QuotedIdent),
            b'"' => self.quoted(b'"', !self.modes.no_backslash_escapes, Kind::Str),
            b'`' => self.quoted(b'`', false, Kind::QuotedIdent),
            b'0'..=b'9' => self.number(),
            b'@' => self.variable(),
            b'?' => {
                self.pos += 1;
                Kind::Param
            }
            // `#`, `-`, `/`, `*` that do not start (or end) a comment.
            _ => {
                self.pos += 1;
                Kind::Punct(b)
            }
        }
    }

    #[inline]
    fn ident_tail(&mut self) {
        while self
            .src
            .get(self.pos)
            .is_some_and(|&c| CLASS[c as usize] >= WORD)
        {
            self.pos += 1;
        }
    }

    /// A quoted string or identifier starting at `self.pos`.
    fn quoted(&mut self, q: u8, backslash: bool, kind: Kind) -> Kind {
        match scan_quoted(self.src, self.pos + 1, q, backslash) {
            Some(end) => {
                self.pos = end;
                kind
            }
            None => {
                self.pos = self.src.len();
                Kind::Unterminated
            }
        }
    }

    fn number(&mut self) -> Kind {
        let digits = |l: &mut Self| {
            while l.at(l.pos).is_ascii_digit() && l.pos < l.src.len() {
                l.pos += 1;
            }
        };
        digits(self);
        if self.at(self.pos) == b'.' {
            self.pos += 1;
            digits(self);
        }
        if matches!(self.at(self.pos), b'e' | b'E') {
            let s = self.at(self.pos + 1);
            let d = if s == b'+' || s == b'-' { 2 } else { 1 };
            if self.at(self.pos + d).is_ascii_digit() {
                self.pos += d;
                digits(self);
            }
        }
        if is_ident_byte(self.at(self.pos)) && self.pos < self.src.len() {
            self.ident_tail();
            return Kind::Word;
        }
        Kind::Number
    }

    fn variable(&mut self) -> Kind {
        self.pos += 1;
        if self.at(self.pos) == b'@' {
            self.pos += 1;
            loop {
                self.ident_tail();
                if self.at(self.pos) == b'.' && is_ident_byte(self.at(self.pos + 1)) {
                    self.pos += 1;
                    continue;
                }
                break;
            }
            return Kind::Var;
        }
        match self.at(self.pos) {
            q @ (b'\'' | b'"' | b'`') => {
                let backslash = q != b'`' && !self.modes.no_backslash_escapes;
                if self.quoted(q, backslash, Kind::Var) == Kind::Unterminated {
                    return Kind::Unterminated;
                }
            }
            _ => {
                while (is_ident_byte(self.at(self.pos)) || self.at(self.pos) == b'.')
                    && self.pos < self.src.len()
                {
                    self.pos += 1;
                }
            }
        }
        Kind::Var
    }
}

/// `-- ` starts a comment only if followed by whitespace, a control
/// character, or the end of the text.
#[inline]
fn is_dash_comment_end(b: Option<u8>) -> bool {
    match b {
        None => true,
        Some(b) => b <= b' ',
    }
}

/// At `i` just past `/*`: if this is `/*!`, `/*!NNNNN`, `/*M!` or
/// `/*M!NNNNNN`, the length of that opening (after `/*`).
#[inline]
fn exec_comment_len(src: &[u8], i: usize) -> Option<usize> {
    let bang = match (src.get(i), src.get(i + 1)) {
        (Some(b'!'), _) => 1,
        (Some(b'M'), Some(b'!')) => 2,
        _ => return None,
    };
    let digits = src
        .get(i + bang..)
        .unwrap_or(&[])
        .iter()
        .take(6)
        .take_while(|b| b.is_ascii_digit())
        .count();
    // MySQL versions are 5 digits, MariaDB's may be 6.
    let digits = if digits >= 5 { digits } else { 0 };
    Some(bang + digits)
}

/// The start of a `/* */` comment (a searcher built once).
static COMMENT_START: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"/*"));

/// Whether `src` may have an executable comment (`/*!`, `/*M!`; also one
/// inside a string: a cheap test before [`lex_all`] looks closer). A scan
/// for the `!`, rare in SQL text: memmem's setup for `/*` cost 450
/// instructions per call on sysbench's INSERT (callgrind), the scan of
/// one byte a fraction of it.
pub fn has_exec_comment(src: &[u8]) -> bool {
    memchr::memchr_iter(b'!', src).any(|j| {
        (j >= 2 && &src[j - 2..j] == b"/*" && exec_comment_len(src, j).is_some())
            || (j >= 3 && &src[j - 3..j] == b"/*M" && exec_comment_len(src, j - 1).is_some())
    })
}

/// What [`lex_all`] blanks in its copy of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blank {
    /// Executable comments' markers: their content reads as the code
    /// MariaDB runs.
    ExecMarkers,
    /// Those and every plain comment: only code is left.
    Comments,
}

/// Lexes all of `sql`, handing each token to `on_token` (its error ends
/// the walk); with `blanked` (a copy of `sql`), what [`Blank`] says is
/// blanked in it as the walk passes.
pub fn lex_all<E>(
    sql: &str,
    modes: Modes,
    mut blanked: Option<(&mut Vec<u8>, Blank)>,
    mut on_token: impl FnMut(Token) -> Result<(), E>,
) -> Result<(), E> {
    let src = sql.as_bytes();
    let mut lx = Lexer::new(sql, 0, modes);
    let (mut prev_end, mut prev_in_exec) = (0, false);
    loop {
        let t = lx.next_token();
        let gap_end = t.map_or(src.len(), |t| t.start);
        if let Some((out, what)) = blanked.as_mut() {
            if gap_end > prev_end {
                blank_trivia(src, out, prev_end, gap_end, prev_in_exec, *what);
            }
        }
        let Some(t) = t else { return Ok(()) };
        on_token(t)?;
        prev_end = t.end;
        prev_in_exec = lx.in_exec();
    }
}

/// The text MariaDB runs for `sql`: its executable comments' markers
/// blanked (`/*!40101 SET NAMES utf8 */` reads as `SET NAMES utf8`);
/// `None` when it has none.
pub fn executed_text(sql: &str, modes: Modes) -> Option<Vec<u8>> {
    let src = sql.as_bytes();
    if !has_exec_comment(src) {
        return None;
    }
    let mut out = src.to_vec();
    // Nothing refuses a token: the walk always ends at the text's end.
    let _ = lex_all(sql, modes, Some((&mut out, Blank::ExecMarkers)), |_| {
        Ok::<(), ()>(())
    });
    Some(out)
}

/// `sql` with every comment blanked and executable comments' markers too
/// (what word-by-word readers of a statement look at: `BEGIN /* app */`
/// is `BEGIN`); `None` when it has no comment.
pub fn code_text(sql: &str, modes: Modes) -> Option<Vec<u8>> {
    let src = sql.as_bytes();
    if memchr::memchr(b'#', src).is_none()
        && COMMENT_START.find(src).is_none()
        && memchr::memmem::find(src, b"--").is_none()
    {
        return None;
    }
    let mut out = src.to_vec();
    let _ = lex_all(sql, modes, Some((&mut out, Blank::Comments)), |_| {
        Ok::<(), ()>(())
    });
    Some(out)
}

/// Replaces `start..end` with as many spaces.
pub fn blank(out: &mut [u8], start: usize, end: usize) {
    if let Some(s) = out.get_mut(start..end) {
        s.fill(b' ');
    }
}

/// Blanks the executable-comment markers in the trivia `start..end` (what
/// the lexer skipped between two tokens), starting inside one if
/// `in_exec`, and with [`Blank::Comments`] the plain comments too. Mirrors
/// the lexer's trivia rules.
fn blank_trivia(
    src: &[u8],
    out: &mut [u8],
    start: usize,
    end: usize,
    mut in_exec: bool,
    what: Blank,
) {
    let comments = what == Blank::Comments;
    let skip = |out: &mut [u8], from: usize, to: usize| {
        if comments {
            blank(out, from, to);
        }
        to
    };
    let at = |i: usize| {
        if i < end {
            src.get(i).copied().unwrap_or(0)
        } else {
            0
        }
    };
    let mut i = start;
    while i < end {
        match at(i) {
            b'#' => i = skip(out, i, line_end(src, i, end)),
            b'-' if at(i + 1) == b'-' && (i + 2 >= src.len() || at(i + 2) <= b' ') => {
                i = skip(out, i, line_end(src, i, end))
            }
            b'/' if at(i + 1) == b'*' => {
                if let Some(len) = exec_comment_len(src, i + 2) {
                    let j = (i + 2 + len).min(end);
                    blank(out, i, j);
                    in_exec = true;
                    i = j;
                } else {
                    let body = src.get(i + 2..end).unwrap_or(&[]);
                    let to = match COMMENT_END.find(body) {
                        Some(k) => i + 2 + k + 2,
                        None => end,
                    };
                    i = skip(out, i, to);
                }
            }
            b'*' if in_exec && at(i + 1) == b'/' => {
                blank(out, i, i + 2);
                in_exec = false;
                i += 2;
            }
            _ => i += 1,
        }
    }
}

fn line_end(src: &[u8], i: usize, end: usize) -> usize {
    match memchr::memchr(b'\n', src.get(i..end).unwrap_or(&[])) {
        Some(k) => i + k + 1,
        None => end,
    }
}

/// How many bytes of a quoted token [`scan_quoted`] looks at one by one
/// before it hands the rest to memchr.
const SHORT: usize = 16;

/// The bytes of a string literal token (quotes included), as MariaDB reads
/// them: a doubled quote is one quote; unless `NO_BACKSLASH_ESCAPES`, `\0`
/// `\b` `\n` `\r` `\t` `\Z` are control characters, `\%` and `\_` stay two
/// characters, and `\` before anything else is dropped. The one reader of
/// string literals' values (routing keys, LOAD DATA's options, a PREPARE's text).
pub fn unescape(tok: &[u8], no_backslash_escapes: bool) -> Vec<u8> {
    let Some((&q, rest)) = tok.split_first() else {
        return Vec::new();
    };
    let body = rest.get(..rest.len().saturating_sub(1)).unwrap_or(&[]);
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while let Some(&b) = body.get(i) {
        if b == b'\\' && !no_backslash_escapes {
            match body.get(i + 1) {
                Some(b'0') => out.push(0),
                Some(b'b') => out.push(8),
                Some(b'n') => out.push(b'\n'),
                Some(b'r') => out.push(b'\r'),
                Some(b't') => out.push(b'\t'),
                Some(b'Z') => out.push(0x1a),
                Some(&c @ (b'%' | b'_')) => out.extend_from_slice(&[b'\\', c]),
                Some(&c) => out.push(c),
                None => out.push(b'\\'),
            }
            i += 2;
        } else if b == q && body.get(i + 1) == Some(&q) {
            out.push(q);
            i += 2;
        } else {
            out.push(b);
            i += 1;
        }
    }
    out
}

/// Scans a quoted token whose content starts at `i`; returns the offset just
/// past the closing quote, or `None` if it never closes.
#[inline]
pub fn scan_quoted(src: &[u8], mut i: usize, q: u8, backslash: bool) -> Option<usize> {
    loop {
        let rest = src.get(i..)?;
        // Most literals are short: a plain loop over their first bytes
        // costs less than setting up memchr's vector search.
        let head = rest.get(..SHORT).unwrap_or(rest);
        let found = match head
            .iter()
            .position(|&c| c == q || (backslash && c == b'\\'))
        {
            Some(f) => f,
            None => {
                let tail = rest.get(head.len()..)?;
                let f = if backslash {
                    memchr::memchr2(q, b'\\', tail)
                } else {
                    memchr::memchr(q, tail)
                }?;
                head.len() + f
            }
        };
        let at = i + found;
        if src.get(at) == Some(&b'\\') {
            i = at + 2;
            continue;
        }
        if src.get(at + 1) == Some(&q) {
            i = at + 2;
            continue;
        }
        return Some(at + 1);
    }
}

/// What [`skim`] found in one statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skim {
    /// Offset of the `;` that ends the statement, or the text length.
    pub end: usize,
    /// Whether the statement ended at a `;` (more text may follow).
    pub semicolon: bool,
    /// It mentions `last_insert_id` or `@@...identity`/`@@...last_insert_id`
    /// outside strings and comments (a cheap, conservative hint).
    pub last_id_hint: bool,
    /// Still inside an executable comment at `end`.
    pub in_exec: bool,
    /// An executable comment was seen.
    pub exec_seen: bool,
    /// A quote or comment never ends.
    pub unterminated: bool,
}

/// Bytes [`skim`] must look at; everything else is skipped in a tight loop.
static SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    let s = b"'\"`#-/;@_*";
    while i < s.len() {
        t[s[i] as usize] = true;
        i += 1;
    }
    t
};

fn eq_ci(hay: &[u8], start: usize, needle: &[u8]) -> bool {
    hay.get(start..start + needle.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(needle))
}

/// Finds the end of the statement starting at `pos` (a `;` outside quotes and
/// comments, or the end), with a hint whether it may use the last insert id.
/// Agrees with [`Lexer`] on every boundary.
pub fn skim(sql: &str, mut pos: usize, modes: Modes, mut in_exec: bool) -> Skim {
    let src = sql.as_bytes();
    let mut out = Skim {
        end: src.len(),
        semicolon: false,
        last_id_hint: false,
        in_exec,
        exec_seen: false,
        unterminated: false,
    };
    while let Some(&b) = src.get(pos) {
        if !SPECIAL[b as usize] {
            pos += 1;
            continue;
        }
        match b {
            b';' => {
                out.end = pos;
                out.semicolon = true;
                out.in_exec = in_exec;
                return out;
            }
            b'\'' | b'"' | b'`' => {
                let backslash =
                    b != b'`' && !modes.no_backslash_escapes && !(b == b'"' && modes.ansi_quotes);
                match scan_quoted(src, pos + 1, b, backslash) {
                    Some(e) => pos = e,
                    None => {
                        out.unterminated = true;
                        break;
                    }
                }
            }
            b'#' => match memchr::memchr(b'\n', src.get(pos..).unwrap_or(&[])) {
                Some(i) => pos += i + 1,
                None => break,
            },
            b'-' => {
                if src.get(pos + 1) == Some(&b'-') && is_dash_comment_end(src.get(pos + 2).copied())
                {
                    match memchr::memchr(b'\n', src.get(pos..).unwrap_or(&[])) {
                        Some(i) => pos += i + 1,
                        None => break,
                    }
                } else {
                    pos += 1;
                }
            }
            b'/' => {
                if src.get(pos + 1) == Some(&b'*') {
                    if let Some(v) = exec_comment_len(src, pos + 2) {
                        pos += 2 + v;
                        in_exec = true;
                        out.exec_seen = true;
                    } else {
                        match COMMENT_END.find(src.get(pos + 2..).unwrap_or(&[])) {
                            Some(i) => pos += 2 + i + 2,
                            None => {
                                out.unterminated = true;
                                break;
                            }
                        }
                    }
                } else {
                    pos += 1;
                }
            }
            b'*' => {
                if in_exec && src.get(pos + 1) == Some(&b'/') {
                    in_exec = false;
                    pos += 2;
                } else {
                    pos += 1;
                }
            }
            b'@' => {
                if src.get(pos + 1) == Some(&b'@') {
                    let mut e = pos + 2;
                    while src.get(e).is_some_and(|&c| is_ident_byte(c) || c == b'.') {
                        e += 1;
                    }
                    let name = src.get(pos + 2..e).unwrap_or(&[]);
                    let tail =
                        |n: &[u8]| name.len() >= n.len() && eq_ci(name, name.len() - n.len(), n);
                    if tail(b"identity") || tail(b"last_insert_id") {
                        out.last_id_hint = true;
                    }
                    pos = e;
                } else {
                    pos += 1;
                }
            }
            b'_' => {
                if pos >= 4 && eq_ci(src, pos - 4, b"last") && eq_ci(src, pos + 1, b"insert_id") {
                    out.last_id_hint = true;
                }
                pos += 1;
            }
            _ => pos += 1,
        }
    }
    out.end = src.len();
    out.in_exec = in_exec;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The scan for `!` finds an opener wherever a search for every
        /// `/*` does.
        #[test]
        fn exec_comment_scan_is_a_search_for_openers(t in "(/|\\*|!|M|/\\*|/\\*!|/\\*M!|1|40101| |x){0,12}") {
            let src = t.as_bytes();
            let every = (0..src.len())
                .any(|i| src[i..].starts_with(b"/*") && exec_comment_len(src, i + 2).is_some());
            proptest::prop_assert_eq!(has_exec_comment(src), every);
        }
    }

    #[test]
    fn executed_text_blanks_the_markers_only() {
        let run = |s: &str| {
            executed_text(s, Modes::default()).map(|v| String::from_utf8(v).expect("utf-8"))
        };
        assert_eq!(run("SELECT 1 /* c */"), None);
        assert_eq!(
            run("/*!40101 SET NAMES utf8 */;").as_deref(),
            Some("         SET NAMES utf8   ;")
        );
        assert_eq!(
            run("/*M!100100 SET x=1*/ /*!SET y=2*/").as_deref(),
            Some("           SET x=1      SET y=2  ")
        );
        // A version of fewer than 5 digits is content; strings and plain
        // comments are kept.
        assert_eq!(run("/*!4 */").as_deref(), Some("   4   "));
        let s = "SELECT '/*!40101 x */' /* /*!no */";
        assert_eq!(run(s).as_deref(), Some(s));
        assert_eq!(
            run("SELECT /*!1 + */ 2, '*/'").as_deref(),
            Some("SELECT    1 +    2, '*/'")
        );
    }

    fn kinds(sql: &str, modes: Modes) -> Vec<(Kind, &str)> {
        let mut l = Lexer::new(sql, 0, modes);
        let mut v = Vec::new();
        while let Some(t) = l.next_token() {
            v.push((t.kind, &sql[t.start..t.end]));
            if t.kind == Kind::Unterminated {
                break;
            }
        }
        v
    }

    #[test]
    fn tokens() {
        use Kind::*;
        let m = Modes::default();
        assert_eq!(
            kinds("INSERT /*+ x */ INTO `a``b`.t (c) VALUES ('x\\'y''z', _utf8mb4'q', 1.5e+3, 0x1F, ?, @@session.identity, @u) -- c\n# d\n;", m),
            vec![
                (Word, "INSERT"), (Word, "INTO"), (QuotedIdent, "`a``b`"), (Punct(b'.'), "."), (Word, "t"),
                (Punct(b'('), "("), (Word, "c"), (Punct(b')'), ")"), (Word, "VALUES"), (Punct(b'('), "("),
                (Str, "'x\\'y''z'"), (Punct(b','), ","), (Word, "_utf8mb4"), (Str, "'q'"), (Punct(b','), ","),
                (Number, "1.5e+3"), (Punct(b','), ","), (Word, "0x1F"), (Punct(b','), ","), (Param, "?"),
                (Punct(b','), ","), (Var, "@@session.identity"), (Punct(b','), ","), (Var, "@u"),
                (Punct(b')'), ")"), (Punct(b';'), ";"),
            ]
        );
        assert_eq!(
            kinds("a--b", m),
            vec![
                (Word, "a"),
                (Punct(b'-'), "-"),
                (Punct(b'-'), "-"),
                (Word, "b")
            ]
        );
        assert_eq!(kinds("'a\\'", m), vec![(Unterminated, "'a\\'")]);
        let nbe = Modes {
            no_backslash_escapes: true,
            ansi_quotes: true,
        };
        assert_eq!(
            kinds("'a\\' \"x\"", nbe),
            vec![(Str, "'a\\'"), (QuotedIdent, "\"x\"")]
        );
        assert_eq!(
            kinds("/*!40101 SET x=1 */ y /* z", m)[..4],
            [
                (Word, "SET"),
                (Word, "x"),
                (Punct(b'='), "="),
                (Number, "1")
            ]
        );
        assert_eq!(kinds("/* z", m), vec![(Unterminated, "")]);
    }

    /// The tokenizer as it was before [`Lexer::next_token`] got its inlined
    /// fast path: the reference the fast path must agree with.
    fn reference_next_token(l: &mut Lexer<'_>) -> Option<Token> {
        let trivia_ok = l.skip_trivia();
        let start = l.pos;
        if start >= l.src.len() {
            if !trivia_ok {
                return Some(Token {
                    kind: Kind::Unterminated,
                    start,
                    end: start,
                });
            }
            return None;
        }
        let b = l.at(start);
        let kind = match b {
            b'\'' => l.quoted(b'\'', !l.modes.no_backslash_escapes, Kind::Str),
            b'"' if l.modes.ansi_quotes => l.quoted(b'"', false, Kind::QuotedIdent),
            b'"' => l.quoted(b'"', !l.modes.no_backslash_escapes, Kind::Str),
            b'`' => l.quoted(b'`', false, Kind::QuotedIdent),
            b'0'..=b'9' => l.number(),
            b'@' => l.variable(),
            b'?' => {
                l.pos += 1;
                Kind::Param
            }
            _ if is_ident_byte(b) => {
                l.pos += 1;
                while is_ident_byte(l.at(l.pos)) && l.pos < l.src.len() {
                    l.pos += 1;
                }
                Kind::Word
            }
            _ => {
                l.pos += 1;
                Kind::Punct(b)
            }
        };
        Some(Token {
            kind,
            start,
            end: l.pos,
        })
    }

    /// [`scan_quoted`] as it was before its short-literal loop.
    fn reference_scan_quoted(src: &[u8], mut i: usize, q: u8, backslash: bool) -> Option<usize> {
        loop {
            let rest = src.get(i..)?;
            let found = if backslash {
                memchr::memchr2(q, b'\\', rest)
            } else {
                memchr::memchr(q, rest)
            }?;
            let at = i + found;
            if src.get(at) == Some(&b'\\') {
                i = at + 2;
                continue;
            }
            if src.get(at + 1) == Some(&q) {
                i = at + 2;
                continue;
            }
            return Some(at + 1);
        }
    }

    proptest::proptest! {
        #[test]
        fn quoted_scan_agrees_with_the_reference(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(b'\''),
                    proptest::strategy::Just(b'\\'),
                    proptest::strategy::Just(b'"'),
                    proptest::strategy::Just(b'a'),
                    proptest::strategy::Just(b' '),
                ],
                0..80,
            ),
            start in 0usize..82,
            backslash in proptest::bool::ANY,
        ) {
            for q in [b'\'', b'"', b'`'] {
                proptest::prop_assert_eq!(
                    scan_quoted(&bytes, start, q, backslash),
                    reference_scan_quoted(&bytes, start, q, backslash)
                );
            }
        }
    }

    fn sqlish() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        proptest::collection::vec(
            prop_oneof![
                Just(" "),
                Just("\t"),
                Just("\n"),
                Just("\r\n"),
                Just("\x0b"),
                Just("\x0c"),
                Just("INSERT"),
                Just("x_1"),
                Just("$a"),
                Just("é"),
                Just("12"),
                Just("1.5e+3"),
                Just("0x1F"),
                Just("12abc"),
                Just("'"),
                Just("\""),
                Just("`"),
                Just("\\"),
                Just("''"),
                Just("@"),
                Just("@@"),
                Just("@@session.x"),
                Just("?"),
                Just("("),
                Just(")"),
                Just(","),
                Just(";"),
                Just("."),
                Just("="),
                Just("-"),
                Just("--"),
                Just("-- "),
                Just("#"),
                Just("/"),
                Just("*"),
                Just("/*"),
                Just("*/"),
                Just("/*!"),
                Just("/*!40101"),
                Just("/*M!"),
                Just("/*M!100101"),
                Just("\0"),
                Just("\x7f"),
            ],
            0..40,
        )
        .prop_map(|v| v.concat())
    }

    proptest::proptest! {
        #[test]
        fn fast_tokens_agree_with_the_reference(
            sql in sqlish(),
            nbe in proptest::bool::ANY,
            ansi in proptest::bool::ANY,
            in_exec in proptest::bool::ANY,
        ) {
            let modes = Modes { no_backslash_escapes: nbe, ansi_quotes: ansi };
            let mut fast = Lexer::new(&sql, 0, modes);
            fast.set_pos(0, in_exec);
            let mut slow = fast.clone();
            for _ in 0..=sql.len() + 1 {
                let (a, b) = (fast.next_token(), reference_next_token(&mut slow));
                proptest::prop_assert_eq!(a, b);
                proptest::prop_assert_eq!(fast.pos(), slow.pos());
                proptest::prop_assert_eq!(fast.in_exec(), slow.in_exec());
                proptest::prop_assert_eq!(fast.exec_seen, slow.exec_seen);
                if a.is_none_or(|t| t.kind == Kind::Unterminated) {
                    break;
                }
            }
        }
    }

    #[test]
    fn skim_finds_ends_and_hints() {
        let m = Modes::default();
        let s = skim("SELECT ';', `;`, \";\" /* ; */ -- ;\n; x", 0, m, false);
        assert!(s.semicolon);
        assert_eq!(s.end, 34);
        assert!(!s.last_id_hint);
        assert!(skim("select Last_Insert_Id()", 0, m, false).last_id_hint);
        assert!(skim("select @@IDENTITY", 0, m, false).last_id_hint);
        assert!(skim("select @@session.last_insert_id", 0, m, false).last_id_hint);
        assert!(!skim("select 'last_insert_id'", 0, m, false).last_id_hint);
        assert!(!skim("select @@version", 0, m, false).last_id_hint);
        assert!(skim("select 'abc", 0, m, false).unterminated);
    }
}

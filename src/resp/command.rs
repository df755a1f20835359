//! Commands: a framed request's arguments turned into what to do.
//!
//! Parsing is separate from applying (`session.rs`), so every arity and
//! number check is here and tested without a connection. The error texts
//! are Redis's own where Redis has one, so client libraries recognise them.

/// Most ids one `IDGATE.NEXT` returns: the reply is an array held in
/// memory (about 20 bytes an id), so this bounds it to a few MB.
pub const MAX_NEXT: u64 = 100_000;

/// One client command, borrowing its arguments from the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// `PING [message]`.
    Ping(Option<&'a [u8]>),
    /// `ECHO message`.
    Echo(&'a [u8]),
    /// `QUIT`: `+OK`, then the connection is closed.
    Quit,
    /// `AUTH [user] password` (no user: `default`).
    Auth {
        /// The user, or `None` for `default`.
        user: Option<&'a [u8]>,
        /// The password.
        password: &'a [u8],
    },
    /// `HELLO [protover [AUTH user password] [SETNAME name]]`.
    Hello {
        /// 2 or 3; `None`: keep the current one.
        proto: Option<u8>,
        /// `AUTH user password`.
        auth: Option<(&'a [u8], &'a [u8])>,
        /// `SETNAME name`.
        setname: Option<&'a [u8]>,
    },
    /// `SELECT index`: only database 0 exists.
    Select(u64),
    /// `CLIENT SETNAME name`.
    ClientSetName(&'a [u8]),
    /// `CLIENT GETNAME`.
    ClientGetName,
    /// `CLIENT ID`.
    ClientId,
    /// `CLIENT SETINFO ...`: accepted and ignored (newer client libraries
    /// send their name and version on connect).
    ClientSetInfo,
    /// `COMMAND [...]`: idgate has no command table to describe; an empty
    /// one (redis-cli asks for `COMMAND DOCS` at start-up, for hints).
    Command,
    /// `CONFIG GET parameter`: what redis-benchmark asks at start-up.
    ConfigGet(&'a [u8]),
    /// `INCR gen`: the next id.
    Incr(&'a [u8]),
    /// `INCRBY gen n`: `n` consecutive ids reserved; the last one is returned.
    IncrBy(&'a [u8], u64),
    /// `GET gen`: the id the next `INCR` would return at best (not reserved).
    Get(&'a [u8]),
    /// `IDGATE.NEXT gen n`: an array of `n` ids.
    Next(&'a [u8], u64),
}

/// `ERR wrong number of arguments for 'cmd' command`.
fn arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// Redis's reply to a count that is not a number.
pub const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";

/// A decimal count (no sign, no spaces, fits u64).
fn number(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// A count in `1..=max`, with the error naming the command and the bound.
fn count(b: &[u8], cmd: &str, max: u64) -> Result<u64, String> {
    let n = number(b).ok_or_else(|| NOT_AN_INTEGER.to_string())?;
    if n == 0 || n > max {
        return Err(format!(
            "ERR {cmd}: count {n} out of range, must be between 1 and {max}"
        ));
    }
    Ok(n)
}

/// At most 32 bytes of a client's argument, printable, for an error message.
pub fn shown(b: &[u8]) -> String {
    let mut s: String = b
        .iter()
        .take(32)
        .map(|&c| {
            if (0x20..0x7f).contains(&c) && c != b'\'' {
                c as char
            } else {
                '?'
            }
        })
        .collect();
    if b.len() > 32 {
        s.push_str("...");
    }
    s
}

impl<'a> Command<'a> {
    /// The command `args` spell (`args[0]` is its name, any case).
    ///
    /// Errors: the error reply (without the leading `-`) for an unknown
    /// command, a wrong number of arguments, or a count that is not a
    /// number in range.
    pub fn parse(args: &[&'a [u8]]) -> Result<Command<'a>, String> {
        let Some((name, rest)) = args.split_first() else {
            return Err("ERR empty command".into());
        };
        let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
        // The hot commands first.
        if is("incr") {
            return match rest {
                [g] => Ok(Command::Incr(g)),
                _ => Err(arity("incr")),
            };
        }
        if is("incrby") {
            return match rest {
                [g, n] => Ok(Command::IncrBy(
                    g,
                    count(n, "INCRBY", crate::idgen::MAX_IDS_PER_REQUEST)?,
                )),
                _ => Err(arity("incrby")),
            };
        }
        if is("idgate.next") {
            return match rest {
                [g] => Ok(Command::Next(g, 1)),
                [g, n] => Ok(Command::Next(g, count(n, "IDGATE.NEXT", MAX_NEXT)?)),
                _ => Err(arity("idgate.next")),
            };
        }
        if is("get") {
            return match rest {
                [g] => Ok(Command::Get(g)),
                _ => Err(arity("get")),
            };
        }
        if is("ping") {
            return match rest {
                [] => Ok(Command::Ping(None)),
                [m] => Ok(Command::Ping(Some(m))),
                _ => Err(arity("ping")),
            };
        }
        if is("echo") {
            return match rest {
                [m] => Ok(Command::Echo(m)),
                _ => Err(arity("echo")),
            };
        }
        if is("quit") {
            return Ok(Command::Quit);
        }
        if is("auth") {
            return match rest {
                [p] => Ok(Command::Auth {
                    user: None,
                    password: p,
                }),
                [u, p] => Ok(Command::Auth {
                    user: Some(u),
                    password: p,
                }),
                _ => Err(arity("auth")),
            };
        }
        if is("hello") {
            return Self::hello(rest);
        }
        if is("select") {
            return match rest {
                [i] => number(i)
                    .map(Command::Select)
                    .ok_or_else(|| NOT_AN_INTEGER.to_string()),
                _ => Err(arity("select")),
            };
        }
        if is("client") {
            let Some((sub, rest)) = rest.split_first() else {
                return Err(arity("client"));
            };
            let sub_is = |s: &str| sub.eq_ignore_ascii_case(s.as_bytes());
            return match rest {
                [n] if sub_is("setname") => Ok(Command::ClientSetName(n)),
                [] if sub_is("getname") => Ok(Command::ClientGetName),
                [] if sub_is("id") => Ok(Command::ClientId),
                _ if sub_is("setinfo") => Ok(Command::ClientSetInfo),
                _ if sub_is("setname") || sub_is("getname") || sub_is("id") => Err(format!(
                    "ERR wrong number of arguments for 'client|{}' command",
                    shown(sub).to_ascii_lowercase()
                )),
                _ => Err(format!(
                    "ERR unknown subcommand '{}'. idgate knows CLIENT SETNAME, GETNAME, ID, SETINFO",
                    shown(sub)
                )),
            };
        }
        if is("command") {
            return Ok(Command::Command);
        }
        if is("config") {
            return match rest {
                [sub, p] if sub.eq_ignore_ascii_case(b"get") => Ok(Command::ConfigGet(p)),
                _ => Err(
                    "ERR idgate has no configuration to change over this protocol (CONFIG GET only)"
                        .into(),
                ),
            };
        }
        let mut msg = format!(
            "ERR unknown command '{}', with args beginning with:",
            shown(name)
        );
        for a in rest.iter().take(4) {
            msg.push_str(&format!(" '{}'", shown(a)));
        }
        msg.push_str(" (idgate serves ids: INCR, INCRBY, GET, IDGATE.NEXT)");
        Err(msg)
    }

    fn hello(rest: &[&'a [u8]]) -> Result<Command<'a>, String> {
        let Some((v, mut opts)) = rest.split_first() else {
            return Ok(Command::Hello {
                proto: None,
                auth: None,
                setname: None,
            });
        };
        let proto = match number(v) {
            Some(2) => 2,
            Some(3) => 3,
            Some(_) => return Err("NOPROTO unsupported protocol version".into()),
            None => return Err("ERR Protocol version is not an integer or out of range".into()),
        };
        let (mut auth, mut setname) = (None, None);
        while let Some((opt, more)) = opts.split_first() {
            if opt.eq_ignore_ascii_case(b"auth") {
                let [u, p, tail @ ..] = more else {
                    return Err("ERR Syntax error in HELLO option 'auth'".into());
                };
                auth = Some((*u, *p));
                opts = tail;
            } else if opt.eq_ignore_ascii_case(b"setname") {
                let [n, tail @ ..] = more else {
                    return Err("ERR Syntax error in HELLO option 'setname'".into());
                };
                setname = Some(*n);
                opts = tail;
            } else {
                return Err(format!("ERR Syntax error in HELLO option '{}'", shown(opt)));
            }
        }
        Ok(Command::Hello {
            proto: Some(proto),
            auth,
            setname,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command<'_>, String> {
        let args: Vec<&[u8]> = s.split(' ').map(str::as_bytes).collect();
        Command::parse(&args)
    }

    #[test]
    fn commands_and_their_errors() {
        assert_eq!(p("incr orders"), Ok(Command::Incr(b"orders")));
        assert_eq!(p("InCrBy orders 10"), Ok(Command::IncrBy(b"orders", 10)));
        assert_eq!(p("IDGATE.NEXT ev 3"), Ok(Command::Next(b"ev", 3)));
        assert_eq!(p("idgate.next ev"), Ok(Command::Next(b"ev", 1)));
        assert_eq!(p("GET orders"), Ok(Command::Get(b"orders")));
        assert_eq!(p("SELECT 0"), Ok(Command::Select(0)));
        assert_eq!(
            p("AUTH app pw"),
            Ok(Command::Auth {
                user: Some(b"app"),
                password: b"pw"
            })
        );
        assert_eq!(
            p("HELLO 3 AUTH app pw SETNAME me"),
            Ok(Command::Hello {
                proto: Some(3),
                auth: Some((b"app", b"pw")),
                setname: Some(b"me")
            })
        );
        assert_eq!(p("COMMAND DOCS"), Ok(Command::Command));
        assert_eq!(
            p("CLIENT SETINFO LIB-NAME redis-py"),
            Ok(Command::ClientSetInfo)
        );
        assert!(p("incr")
            .unwrap_err()
            .contains("wrong number of arguments for 'incr'"));
        assert_eq!(p("incrby orders ten").unwrap_err(), NOT_AN_INTEGER);
        assert_eq!(p("incrby orders -1").unwrap_err(), NOT_AN_INTEGER);
        assert!(p("incrby orders 0").unwrap_err().contains("out of range"));
        assert!(p("incrby orders 99999999999999999999999")
            .unwrap_err()
            .contains("not an integer"));
        assert!(p("idgate.next ev 100001")
            .unwrap_err()
            .contains("between 1 and 100000"));
        assert!(p("HELLO 4").unwrap_err().starts_with("NOPROTO"));
        assert!(p("HELLO 3 AUTH app").unwrap_err().contains("Syntax error"));
        let e = p("SET k v").unwrap_err();
        assert!(
            e.starts_with("ERR unknown command 'SET', with args beginning with: 'k' 'v'"),
            "{e}"
        );
        assert!(p("CLIENT KILL x")
            .unwrap_err()
            .contains("unknown subcommand 'KILL'"));
    }

    #[test]
    fn client_bytes_in_errors_are_printable_and_short() {
        let name = [b'\r', b'\n', 0xff, b'\''];
        let e = Command::parse(&[&name]).unwrap_err();
        assert!(e.contains("'????'"), "{e}");
        let long = [b'x'; 100];
        let e = Command::parse(&[&long]).unwrap_err();
        assert!(e.len() < 160, "{e}");
    }
}

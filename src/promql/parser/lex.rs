//! Splits a query into tokens, each with its byte span.
//!
//! Keywords are not told apart here: an identifier is one token whatever
//! it spells, and the parser decides from where it stands whether `by`,
//! `offset` or `sum` is a keyword or a name, as Prometheus' grammar lets
//! most keywords be metric and label names.

use super::token::*;

/// A token.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// A name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
    Ident(String),
    /// A number: decimal, hexadecimal, `Inf`, `NaN`.
    Number(f64),
    /// A duration literal (`5m`, `1h30m`), in seconds.
    Duration(f64),
    /// A quoted string, unquoted (invalid UTF-8 replaced), and its bytes
    /// when they are not valid UTF-8.
    Str(String, Option<Vec<u8>>),
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `[`
    LBracket,
    /// `]`
    RBracket,
    /// `,`
    Comma,
    /// `:`
    Colon,
    /// `@`
    At,
    /// `=` (in a matcher)
    Assign,
    /// `=~`
    EqRegex,
    /// `!~`
    NeqRegex,
    /// A symbolic operator: `+ - * / % ^ == != > < >= <= </ >/`.
    Op(TokenId),
    /// The end of the query.
    Eof,
}

impl Tok {
    /// How the token reads in a message.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("identifier {s:?}"),
            Tok::Number(_) => "number".into(),
            Tok::Duration(_) => "duration".into(),
            Tok::Str(s, _) => format!("string {s:?}"),
            Tok::LParen => "\"(\"".into(),
            Tok::RParen => "\")\"".into(),
            Tok::LBrace => "\"{\"".into(),
            Tok::RBrace => "\"}\"".into(),
            Tok::LBracket => "\"[\"".into(),
            Tok::RBracket => "\"]\"".into(),
            Tok::Comma => "\",\"".into(),
            Tok::Colon => "\":\"".into(),
            Tok::At => "\"@\"".into(),
            Tok::Assign => "\"=\"".into(),
            Tok::EqRegex => "\"=~\"".into(),
            Tok::NeqRegex => "\"!~\"".into(),
            Tok::Op(id) => format!("{:?}", text(*id)),
            Tok::Eof => "end of input".into(),
        }
    }
}

/// A token and its byte span in the query.
#[derive(Debug, Clone, PartialEq)]
pub struct Spanned {
    /// The token.
    pub tok: Tok,
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// A lexing error: its byte span and message.
#[derive(Debug, Clone, PartialEq)]
pub struct LexError {
    /// Where.
    pub start: usize,
    /// One past where.
    pub end: usize,
    /// What.
    pub msg: String,
}

fn err<T>(start: usize, end: usize, msg: impl Into<String>) -> Result<T, LexError> {
    Err(LexError {
        start,
        end,
        msg: msg.into(),
    })
}

fn is_alpha(b: u8) -> bool {
    b == b'_' || b.is_ascii_alphabetic()
}

/// Every token of `input`, ending with [`Tok::Eof`].
pub fn lex(input: &str) -> Result<Vec<Spanned>, LexError> {
    let b = input.as_bytes();
    let mut out = Vec::new();
    // The open brackets: inside `[…]` a colon separates a subquery's range
    // and step, even before a name (`[5m:step()]`).
    let mut open: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let one = |tok| (tok, 1);
        let (tok, len) = match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'(' | b'{' | b'[' => {
                open.push(c);
                one(match c {
                    b'(' => Tok::LParen,
                    b'{' => Tok::LBrace,
                    _ => Tok::LBracket,
                })
            }
            b')' | b'}' | b']' => {
                open.pop();
                one(match c {
                    b')' => Tok::RParen,
                    b'}' => Tok::RBrace,
                    _ => Tok::RBracket,
                })
            }
            b',' => one(Tok::Comma),
            b':' if open.last() == Some(&b'[')
                || !b.get(i + 1).is_some_and(|&n| is_alpha(n) || n == b':') =>
            {
                one(Tok::Colon)
            }
            b'@' => one(Tok::At),
            b'+' => one(Tok::Op(T_ADD)),
            b'-' => one(Tok::Op(T_SUB)),
            b'*' => one(Tok::Op(T_MUL)),
            b'/' => one(Tok::Op(T_DIV)),
            b'%' => one(Tok::Op(T_MOD)),
            b'^' => one(Tok::Op(T_POW)),
            b'=' => match b.get(i + 1) {
                Some(b'=') => (Tok::Op(T_EQLC), 2),
                Some(b'~') => (Tok::EqRegex, 2),
                _ => one(Tok::Assign),
            },
            b'!' => match b.get(i + 1) {
                Some(b'=') => (Tok::Op(T_NEQ), 2),
                Some(b'~') => (Tok::NeqRegex, 2),
                _ => {
                    return err(
                        i,
                        i + 1,
                        "unexpected character after '!': expected '=' or '~'",
                    )
                }
            },
            b'<' => match b.get(i + 1) {
                Some(b'=') => (Tok::Op(T_LTE), 2),
                Some(b'/') => (Tok::Op(T_TRIM_UPPER), 2),
                _ => one(Tok::Op(T_LSS)),
            },
            b'>' => match b.get(i + 1) {
                Some(b'=') => (Tok::Op(T_GTE), 2),
                Some(b'/') => (Tok::Op(T_TRIM_LOWER), 2),
                _ => one(Tok::Op(T_GTR)),
            },
            b'"' | b'\'' | b'`' => {
                let (s, raw, len) = string(input, i)?;
                (Tok::Str(s, raw), len)
            }
            b'0'..=b'9' => number_or_duration(b, i)?,
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => number_or_duration(b, i)?,
            c if is_alpha(c) || c == b':' => {
                let mut j = i + 1;
                while j < b.len() && (is_alpha(b[j]) || b[j].is_ascii_digit() || b[j] == b':') {
                    j += 1;
                }
                let word = &input[i..j];
                // Inside braces a word is a label name, `NaN` too.
                let in_braces = open.last() == Some(&b'{');
                let tok = if in_braces {
                    Tok::Ident(word.to_owned())
                } else if word.eq_ignore_ascii_case("inf") {
                    Tok::Number(f64::INFINITY)
                } else if word.eq_ignore_ascii_case("nan") {
                    Tok::Number(f64::NAN)
                } else {
                    Tok::Ident(word.to_owned())
                };
                (tok, j - i)
            }
            _ => {
                let ch = input[i..].chars().next().unwrap_or('?');
                return err(
                    i,
                    i + ch.len_utf8(),
                    format!("unexpected character: {ch:?}"),
                );
            }
        };
        i += len;
        out.push(Spanned { tok, start, end: i });
    }
    out.push(Spanned {
        tok: Tok::Eof,
        start: b.len(),
        end: b.len(),
    });
    Ok(out)
}

/// A number or a duration at `i`: the token and its length.
fn number_or_duration(b: &[u8], i: usize) -> Result<(Tok, usize), LexError> {
    // A duration: digits and units, repeated (`1h30m`, `500ms`).
    let mut j = i;
    let mut secs = 0.0;
    let mut units = 0;
    let mut last_rank = usize::MAX;
    loop {
        let d0 = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j == d0 {
            break;
        }
        let (unit, ulen, rank) = match (b.get(j), b.get(j + 1)) {
            (Some(b'm'), Some(b's')) => (0.001, 2, 0),
            (Some(b's'), _) => (1.0, 1, 1),
            (Some(b'm'), _) => (60.0, 1, 2),
            (Some(b'h'), _) => (3600.0, 1, 3),
            (Some(b'd'), _) => (86_400.0, 1, 4),
            (Some(b'w'), _) => (604_800.0, 1, 5),
            (Some(b'y'), _) => (31_536_000.0, 1, 6),
            _ => {
                j = d0;
                break;
            }
        };
        if rank >= last_rank {
            return err(
                i,
                j + ulen,
                "not a valid duration string: units out of order",
            );
        }
        last_rank = rank;
        let n: f64 = std::str::from_utf8(&b[d0..j])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::INFINITY);
        secs += n * unit;
        j += ulen;
        units += 1;
    }
    if units > 0 {
        // As Prometheus' model.ParseDuration: no more than an int64 of
        // nanoseconds (about 292 years).
        if secs > super::options::MAX_DURATION_SECS {
            return err(i, j, "duration out of range");
        }
        if j < b.len() && (is_alpha(b[j]) || b[j].is_ascii_digit() || b[j] == b'.') {
            return err(
                i,
                j + 1,
                format!("bad number or duration syntax: {:?}", lossy(&b[i..=j])),
            );
        }
        return Ok((Tok::Duration(secs), j - i));
    }
    // A number: hexadecimal, or decimal with `_` between digits.
    let mut j = i;
    let hex = b[i] == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X'));
    let value = if hex {
        j += 2;
        let mut digits = String::new();
        let mut ok = true;
        while j < b.len() && (b[j].is_ascii_hexdigit() || b[j] == b'_') {
            if b[j] == b'_' {
                // One underscore after the prefix or between digits (Go's
                // rule for `0x_1F` and `0x1_F`).
                let next_ok = b.get(j + 1).is_some_and(u8::is_ascii_hexdigit);
                let prev_ok = b[j - 1].is_ascii_hexdigit() || j == i + 2;
                ok &= next_ok && prev_ok;
            } else {
                digits.push(b[j] as char);
            }
            j += 1;
        }
        // Prometheus reads an integer as an int64 first.
        i64::from_str_radix(&digits, 16)
            .ok()
            .filter(|_| ok)
            .map(|v| v as f64)
    } else {
        let mut text = String::new();
        let (mut dot, mut exp) = (false, false);
        let mut ok = true;
        while j < b.len() {
            let c = b[j];
            let prev = if j > i { b[j - 1] } else { 0 };
            match c {
                b'0'..=b'9' => text.push(c as char),
                b'_' => {
                    if !prev.is_ascii_digit() || !b.get(j + 1).is_some_and(u8::is_ascii_digit) {
                        ok = false;
                    }
                }
                b'.' if !dot && !exp => {
                    dot = true;
                    text.push('.');
                }
                b'e' | b'E' if !exp && (prev.is_ascii_digit() || prev == b'.') => {
                    // An exponent needs digits after it (and a sign).
                    let k = if matches!(b.get(j + 1), Some(b'+' | b'-')) {
                        j + 2
                    } else {
                        j + 1
                    };
                    if !b.get(k).is_some_and(u8::is_ascii_digit) {
                        break;
                    }
                    exp = true;
                    text.push('e');
                    if k == j + 2 {
                        text.push(b[j + 1] as char);
                    }
                    j = k;
                    continue;
                }
                _ => break,
            }
            j += 1;
        }
        if !ok {
            None
        } else if text.len() > 1
            && text.starts_with('0')
            && text.bytes().all(|c| c.is_ascii_digit())
        {
            // A leading zero makes an octal integer, as Go's ParseInt with
            // base 0 reads it; with an 8 or 9 it is decimal after all.
            match i64::from_str_radix(&text[1..], 8) {
                Ok(v) => Some(v as f64),
                Err(_) => text.parse::<f64>().ok(),
            }
        } else {
            // Past the float range is an error, as in Go, not infinity.
            text.parse::<f64>().ok().filter(|v| v.is_finite())
        }
    };
    if j < b.len() && (is_alpha(b[j]) || b[j] == b'.' || b[j] == b'_') {
        return err(
            i,
            j + 1,
            format!("bad number or duration syntax: {:?}", lossy(&b[i..=j])),
        );
    }
    match value {
        Some(v) => Ok((Tok::Number(v), j - i)),
        None => err(
            i,
            j,
            format!("bad number or duration syntax: {:?}", lossy(&b[i..j])),
        ),
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The quoted string at `i`, unquoted as Go unquotes it (`\n`, `\x41`,
/// `\101`, `\u00e9`, …; a raw string in backquotes is taken as written):
/// its text, its bytes if they are not valid UTF-8, and its length.
fn string(input: &str, i: usize) -> Result<(String, Option<Vec<u8>>, usize), LexError> {
    let b = input.as_bytes();
    let q = b[i];
    let mut out: Vec<u8> = Vec::new();
    let mut j = i + 1;
    loop {
        let Some(&c) = b.get(j) else {
            return err(i, j, "unterminated quoted string");
        };
        if c == q {
            j += 1;
            break;
        }
        if c == b'\n' && q != b'`' {
            return err(i, j, "unterminated quoted string");
        }
        if c != b'\\' || q == b'`' {
            out.push(c);
            j += 1;
            continue;
        }
        let Some(&e) = b.get(j + 1) else {
            return err(i, j + 1, "unterminated quoted string");
        };
        j += 2;
        let simple = match e {
            b'a' => Some(7),
            b'b' => Some(8),
            b'f' => Some(12),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(11),
            b'\\' => Some(b'\\'),
            b'"' | b'\'' if e == q => Some(e),
            _ => None,
        };
        if let Some(v) = simple {
            out.push(v);
            continue;
        }
        let hex = |from: usize, n: usize| -> Option<u32> {
            let s = input.get(from..from + n)?;
            if !s.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            u32::from_str_radix(s, 16).ok()
        };
        match e {
            b'x' => match hex(j, 2) {
                Some(v) => {
                    out.push(v as u8);
                    j += 2;
                }
                None => {
                    return err(
                        i,
                        j,
                        "invalid escape sequence in string: \\x needs two hex digits",
                    )
                }
            },
            b'0'..=b'7' => {
                let s = input.get(j - 1..j + 2).unwrap_or("");
                match u32::from_str_radix(s, 8) {
                    Ok(v) if s.len() == 3 && v <= 255 => {
                        out.push(v as u8);
                        j += 2;
                    }
                    _ => return err(i, j, "invalid octal escape sequence in string"),
                }
            }
            b'u' | b'U' => {
                let n = if e == b'u' { 4 } else { 8 };
                match hex(j, n).and_then(char::from_u32) {
                    Some(ch) => {
                        let mut buf = [0; 4];
                        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        j += n;
                    }
                    None => return err(i, j, "invalid unicode escape sequence in string"),
                }
            }
            _ => {
                return err(
                    j - 2,
                    j,
                    format!("unknown escape sequence in string: \\{}", e as char),
                )
            }
        }
    }
    match String::from_utf8(out) {
        Ok(s) => Ok((s, None, j - i)),
        Err(e) => {
            let bytes = e.into_bytes();
            Ok((
                String::from_utf8_lossy(&bytes).into_owned(),
                Some(bytes),
                j - i,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).expect(s).into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn numbers_and_durations() {
        assert_eq!(toks("1_000")[0], Tok::Number(1000.0));
        assert_eq!(toks("0x1F")[0], Tok::Number(31.0));
        assert_eq!(toks(".5e1")[0], Tok::Number(5.0));
        assert_eq!(toks("1e-3")[0], Tok::Number(0.001));
        assert_eq!(toks("1h30m")[0], Tok::Duration(5400.0));
        assert_eq!(toks("500ms")[0], Tok::Duration(0.5));
        assert!(matches!(toks("NaN")[0], Tok::Number(v) if v.is_nan()));
        assert_eq!(toks("-Inf")[1], Tok::Number(f64::INFINITY));
        assert_eq!(toks("0755")[0], Tok::Number(493.0));
        assert_eq!(toks("09")[0], Tok::Number(9.0));
        assert_eq!(toks("0x_1F")[0], Tok::Number(31.0));
        assert_eq!(toks("{NaN=\"x\"}")[1], Tok::Ident("NaN".into()));
        for bad in [
            "1m1h",
            "1_",
            "1__0",
            "1a",
            "5mx",
            "0x",
            "1e400",
            "0xFFFFFFFFFFFFFFFFF",
            "0x1F_",
            "300y",
        ] {
            assert!(lex(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn strings_unquote_as_go_does() {
        assert_eq!(
            toks(r#""a\"b\n\x41\101\u00e9""#)[0],
            Tok::Str("a\"b\nAAé".into(), None)
        );
        assert_eq!(toks(r"`a\n`")[0], Tok::Str("a\\n".into(), None));
        assert_eq!(
            toks(r#""\xff""#)[0],
            Tok::Str("\u{fffd}".into(), Some(vec![0xff]))
        );
        assert!(lex("\"abc").is_err());
        assert!(lex(r#""\q""#).is_err());
    }

    #[test]
    fn operators() {
        assert_eq!(
            toks("a </ b >/ c != d !~ \"x\""),
            vec![
                Tok::Ident("a".into()),
                Tok::Op(T_TRIM_UPPER),
                Tok::Ident("b".into()),
                Tok::Op(T_TRIM_LOWER),
                Tok::Ident("c".into()),
                Tok::Op(T_NEQ),
                Tok::Ident("d".into()),
                Tok::NeqRegex,
                Tok::Str("x".into(), None),
                Tok::Eof,
            ]
        );
    }
}

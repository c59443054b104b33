//! The one field syntax every text form of the model uses: `key=value`
//! pairs separated by spaces, values quoted when they hold anything but
//! plain characters (`path="/a b"`), with `\"`, `\\`, `\n` and `\u{hex}`
//! escapes. Ops ([`crate::op`]) and trace lines are written in it.

use std::fmt::Write as _;

use thiserror::Error;

/// Why a text form did not parse. Every variant names what it could not read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TextError {
    #[error("field `{0}` has no `=`")]
    NoEquals(String),
    #[error("unterminated string in `{0}`")]
    Unterminated(String),
    #[error("bad escape {0}")]
    BadEscape(String),
    #[error("missing field `{0}`")]
    Missing(String),
    #[error("`{key}={value}` is not {expected}")]
    BadValue { key: String, value: String, expected: &'static str },
    #[error("`{key}={value}` is out of range")]
    OutOfRange { key: String, value: String },
    #[error("unknown op `{0}`")]
    UnknownOp(String),
    #[error("unknown mount option `{0}`")]
    UnknownMountOption(String),
}

/// A value as it is written in a field: quoted with escapes.
pub fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The fields of one line, in the order written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields(Vec<(String, String)>);

impl Fields {
    /// Splits `key=value` fields; values may be quoted with escapes.
    pub fn parse(text: &str) -> Result<Fields, TextError> {
        let mut out = Vec::new();
        let mut chars = text.chars().peekable();
        loop {
            while chars.peek() == Some(&' ') {
                chars.next();
            }
            if chars.peek().is_none() {
                return Ok(Fields(out));
            }
            let mut key = String::new();
            while let Some(&c) = chars.peek() {
                if c == '=' {
                    break;
                }
                key.push(c);
                chars.next();
            }
            if chars.next() != Some('=') {
                return Err(TextError::NoEquals(key));
            }
            let mut value = String::new();
            if chars.peek() == Some(&'"') {
                chars.next();
                loop {
                    match chars.next() {
                        None => return Err(TextError::Unterminated(key)),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some('"') => value.push('"'),
                            Some('\\') => value.push('\\'),
                            Some('n') => value.push('\n'),
                            Some('u') => {
                                let hex: String = chars.by_ref().skip(1).take_while(|c| *c != '}').collect();
                                let c = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32).ok_or(TextError::BadEscape(format!("\\u{{{hex}}}")))?;
                                value.push(c);
                            }
                            other => return Err(TextError::BadEscape(format!("{other:?}"))),
                        },
                        Some(c) => value.push(c),
                    }
                }
            } else {
                while let Some(&c) = chars.peek() {
                    if c == ' ' {
                        break;
                    }
                    value.push(c);
                    chars.next();
                }
            }
            out.push((key, value));
        }
    }

    /// The field's text.
    pub fn text(&self, key: &str) -> Result<String, TextError> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).ok_or_else(|| TextError::Missing(key.to_string()))
    }

    /// The field as a number, decimal or `0x` hex.
    pub fn num<T: TryFrom<u64>>(&self, key: &str) -> Result<T, TextError> {
        let value = self.text(key)?;
        let n = match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => value.parse::<u64>(),
        };
        let n = n.map_err(|_| TextError::BadValue { key: key.into(), value: value.clone(), expected: "a number" })?;
        T::try_from(n).map_err(|_| TextError::OutOfRange { key: key.into(), value })
    }

    /// The field as a number, or `default` when the line leaves it out.
    pub fn num_or<T: TryFrom<u64>>(&self, key: &str, default: T) -> Result<T, TextError> {
        if self.has(key) { self.num(key) } else { Ok(default) }
    }

    fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    /// The field as an octal permission mode.
    pub fn octal(&self, key: &str) -> Result<u16, TextError> {
        let value = self.text(key)?;
        u16::from_str_radix(&value, 8).map_err(|_| TextError::BadValue { key: key.into(), value, expected: "an octal mode" })
    }

    /// The field as `true` or `false`.
    pub fn flag(&self, key: &str) -> Result<bool, TextError> {
        match self.text(key)?.as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            value => Err(TextError::BadValue { key: key.into(), value: value.into(), expected: "true/false" }),
        }
    }

    /// The field as `true` or `false`, or `default` when the line leaves it out.
    pub fn flag_or(&self, key: &str, default: bool) -> Result<bool, TextError> {
        if self.has(key) { self.flag(key) } else { Ok(default) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_values_round_trip_and_bad_syntax_is_named() {
        let odd = "a \"b\"\\\n\u{1}\u{7f}é";
        let f = Fields::parse(&format!("k={} n=0x10 m=644 t=true", quote(odd))).unwrap();
        assert_eq!(f.text("k").unwrap(), odd);
        assert_eq!(f.num::<u32>("n"), Ok(16));
        assert_eq!(f.octal("m"), Ok(0o644));
        assert_eq!(f.flag("t"), Ok(true));
        assert_eq!(f.text("zz"), Err(TextError::Missing("zz".into())));
        assert_eq!((f.num_or("zz", 7u32), f.num_or("n", 7u32), f.flag_or("zz", true), f.flag_or("t", false)), (Ok(7), Ok(16), Ok(true), Ok(true)));
        assert!(matches!(f.num::<u8>("m"), Err(TextError::OutOfRange { .. })), "644 does not fit a u8");
        assert!(matches!(Fields::parse("k"), Err(TextError::NoEquals(_))));
        assert!(matches!(Fields::parse("k=\"open"), Err(TextError::Unterminated(_))));
        assert!(matches!(Fields::parse("k=\"\\q\""), Err(TextError::BadEscape(_))));
    }
}

//! The `key = value` text form of a [`DiskProfile`], so a user can add a profile
//! from a file without recompiling.
//!
//! ```text
//! # a tired laptop drive
//! base = hdd-5400            # optional; must come first
//! name = tired-5400
//! seek_full_stroke_ns = 30_000_000
//! ```
//!
//! - Blank lines and `#` comments are ignored; keys are those of
//!   [`DiskProfile::numeric_fields`] plus `name` and `base`.
//! - Values are whole numbers in the unit the key names; `_` may group digits.
//! - Every key may appear once. Unset keys keep the base's value, or the
//!   documented default without a base.
//! - Errors are typed and name the line; nothing here panics on bad text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use thiserror::Error;

use super::profile::{DiskProfile, ProfileError, BUILTIN_PROFILES};

/// Lines a profile file may hold; a bound so a runaway file is refused, not chewed.
pub const MAX_PROFILE_LINES: usize = 10_000;

/// What is wrong with one line.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LineError {
    #[error("expected `key = value`")]
    MissingEquals,
    #[error("empty key")]
    EmptyKey,
    #[error("no value for `{0}`")]
    EmptyValue(String),
    #[error("unknown key `{0}`")]
    UnknownKey(String),
    #[error("`{0}` is given twice")]
    DuplicateKey(String),
    #[error("`{key}` wants a whole number, got `{value}`")]
    BadNumber { key: String, value: String },
    #[error("unknown base profile `{0}` (built-ins: {list})", list = BUILTIN_PROFILES.join(", "))]
    UnknownBase(String),
    #[error("`base` must come before every other key")]
    BaseNotFirst,
    #[error("{0}")]
    Invalid(ProfileError),
}

/// Why a profile text was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProfileParseError {
    /// `line` counts from 1; `text` is the line as written.
    #[error("profile line {line} `{text}`: {kind}")]
    Line { line: usize, text: String, kind: LineError },
    /// The profile is inconsistent in a way no single line of the text caused
    /// (e.g. a base's value clashes with a default).
    #[error("profile is inconsistent: {0}")]
    Invalid(ProfileError),
    #[error("profile has more than {MAX_PROFILE_LINES} lines")]
    TooLong,
}

impl ProfileParseError {
    /// The 1-based line at fault, if one is.
    pub fn line(&self) -> Option<usize> {
        match self {
            ProfileParseError::Line { line, .. } => Some(*line),
            _ => None,
        }
    }
}

fn parse_number(value: &str) -> Option<u64> {
    let digits: String = value.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl DiskProfile {
    /// Parses the text form described in [`super::profile_text`].
    pub fn parse(text: &str) -> Result<DiskProfile, ProfileParseError> {
        let mut profile = DiskProfile::default();
        // key -> (line number, line text), to place errors and catch duplicates.
        let mut seen: BTreeMap<String, (usize, String)> = BTreeMap::new();
        for (index, raw) in text.lines().enumerate() {
            if index >= MAX_PROFILE_LINES {
                return Err(ProfileParseError::TooLong);
            }
            let line = index + 1;
            let fail = |kind| ProfileParseError::Line { line, text: raw.to_string(), kind };
            let content = raw.split('#').next().unwrap_or_default().trim();
            if content.is_empty() {
                continue;
            }
            let (key, value) = content.split_once('=').ok_or_else(|| fail(LineError::MissingEquals))?;
            let (key, value) = (key.trim(), value.trim());
            if key.is_empty() {
                return Err(fail(LineError::EmptyKey));
            }
            if value.is_empty() {
                return Err(fail(LineError::EmptyValue(key.to_string())));
            }
            if seen.contains_key(key) {
                return Err(fail(LineError::DuplicateKey(key.to_string())));
            }
            match key {
                "base" => {
                    if !seen.is_empty() {
                        return Err(fail(LineError::BaseNotFirst));
                    }
                    profile = DiskProfile::builtin(value)
                        .ok_or_else(|| fail(LineError::UnknownBase(value.to_string())))?;
                }
                "name" => profile.name = value.to_string(),
                _ => {
                    let slot = profile
                        .numeric_field_mut(key)
                        .ok_or_else(|| fail(LineError::UnknownKey(key.to_string())))?;
                    *slot = parse_number(value).ok_or_else(|| {
                        fail(LineError::BadNumber { key: key.to_string(), value: value.to_string() })
                    })?;
                }
            }
            seen.insert(key.to_string(), (line, raw.to_string()));
        }
        profile.validate().map_err(|err| match seen.get(err.key()) {
            Some((line, text)) => ProfileParseError::Line {
                line: *line,
                text: text.clone(),
                kind: LineError::Invalid(err),
            },
            None => ProfileParseError::Invalid(err),
        })?;
        Ok(profile)
    }

    /// The text form; [`DiskProfile::parse`] reads it back to an equal profile.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail; ignoring the Ok keeps this infallible.
        let _ = writeln!(text, "name = {}", self.name);
        for (key, value) in self.numeric_fields() {
            let _ = writeln!(text, "{key} = {value}");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_error(text: &str) -> (usize, LineError) {
        match DiskProfile::parse(text) {
            Err(ProfileParseError::Line { line, kind, .. }) => (line, kind),
            other => panic!("expected a line error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn a_base_with_overrides_comments_and_digit_groups_parses() {
        let text = "\n# tired laptop drive\nbase = hdd-5400\nname = tired  # shown in reports\n\
                    seek_full_stroke_ns = 30_000_000\n   \n";
        let profile = DiskProfile::parse(text).expect("valid profile");
        let expected = DiskProfile {
            name: "tired".into(),
            seek_full_stroke_ns: 30_000_000,
            ..DiskProfile::builtin("hdd-5400").expect("built-in")
        };
        assert_eq!(profile, expected);
        assert_eq!(DiskProfile::parse("").expect("empty is the default"), DiskProfile::default());
    }

    #[test]
    fn every_builtin_round_trips_through_text() {
        for name in BUILTIN_PROFILES {
            let profile = DiskProfile::builtin(name).expect("built-in");
            assert_eq!(DiskProfile::parse(&profile.to_text()), Ok(profile), "{name}");
        }
    }

    #[test]
    fn bad_lines_are_typed_errors_naming_the_line() {
        assert_eq!(line_error("name = x\nrotation_rpm 7200"), (2, LineError::MissingEquals));
        assert_eq!(line_error(" = 5"), (1, LineError::EmptyKey));
        assert_eq!(line_error("flush_ns ="), (1, LineError::EmptyValue("flush_ns".into())));
        assert_eq!(line_error("\n\nspin = 1"), (3, LineError::UnknownKey("spin".into())));
        assert_eq!(line_error("flush_ns = 1\nflush_ns = 2"), (2, LineError::DuplicateKey("flush_ns".into())));
        for bad in ["-5", "1.5", "7200rpm", "_", "99999999999999999999999", "+3"] {
            let (line, kind) = line_error(&format!("# c\nrotation_rpm = {bad}"));
            assert_eq!(line, 2);
            let expected = LineError::BadNumber { key: "rotation_rpm".into(), value: bad.into() };
            assert_eq!(kind, expected);
        }
        assert_eq!(line_error("base = floppy"), (1, LineError::UnknownBase("floppy".into())));
        assert_eq!(line_error("flush_ns = 1\nbase = ssd"), (2, LineError::BaseNotFirst));
    }

    #[test]
    fn an_inconsistent_value_is_blamed_on_the_line_that_set_it() {
        let (line, kind) = line_error("name = x\natomic_write_bytes = 1000");
        assert_eq!((line, kind), (2, LineError::Invalid(ProfileError::AtomicWriteBytes(1000))));

        let text = "seek_track_to_track_ns = 9\n# gap\nseek_full_stroke_ns = 5";
        let (line, kind) = line_error(text);
        assert_eq!(line, 3);
        assert!(matches!(kind, LineError::Invalid(ProfileError::FullStrokeBelowTrackToTrack { .. })));

        // Nothing in the text set the blamed key, so no line is named.
        let err = DiskProfile::parse("seek_track_to_track_ns = 9").expect_err("full stroke below");
        assert_eq!(err.line(), None);
        assert!(matches!(err, ProfileParseError::Invalid(ProfileError::FullStrokeBelowTrackToTrack { .. })));
    }

    #[test]
    fn error_messages_say_what_and_where() {
        let err = DiskProfile::parse("name = a\nspin = 3").expect_err("unknown key");
        assert_eq!(err.to_string(), "profile line 2 `spin = 3`: unknown key `spin`");
        assert_eq!(err.line(), Some(2));
    }

    #[test]
    fn a_runaway_file_is_refused() {
        let text = "# filler\n".repeat(MAX_PROFILE_LINES + 1);
        assert_eq!(DiskProfile::parse(&text), Err(ProfileParseError::TooLong));
    }
}

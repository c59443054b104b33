//! A figure in a run report: a number with its unit, a text, or a group of
//! them. The summary prints units; JSON keeps numbers as numbers.

use std::fmt::Write as _;

use crate::disk::clock::DisplayNs;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Figure {
    Count(u64),
    Bytes(u64),
    Ns(u64),
    Text(String),
    /// A ratio in hundredths (394 is 3.94), kept as an integer so its text
    /// is the same everywhere.
    Hundredths(u64),
    /// A count per block group; people see the first dozen.
    PerGroup(std::collections::BTreeMap<u32, u64>),
    /// A count per folio order (a histogram of page-cache folios).
    PerOrder(std::collections::BTreeMap<u8, u64>),
    /// Named figures shown on one line.
    Group(Vec<(String, Figure)>),
}

impl Figure {
    /// For people: units, MiB for large byte counts, groups as `k v, k v`.
    pub fn human(&self) -> String {
        match self {
            Figure::Count(n) => n.to_string(),
            Figure::Bytes(b) => human_bytes(*b),
            Figure::Ns(ns) => DisplayNs(*ns).to_string(),
            Figure::Text(t) => t.clone(),
            Figure::Hundredths(h) => format!("{}.{:02}", h / 100, h % 100),
            Figure::PerGroup(m) => ext4_engine::layout::fmt_groups(m),
            Figure::PerOrder(m) if m.is_empty() => "-".into(),
            Figure::PerOrder(m) => m.iter().map(|(o, n)| format!("{o}:{n}")).collect::<Vec<_>>().join(" "),
            Figure::Group(items) => items.iter().map(|(k, v)| format!("{} {k}", v.human())).collect::<Vec<_>>().join(", "),
        }
    }

    /// For programs: numbers bare (bytes and ns as integers), groups as objects.
    pub fn json(&self) -> String {
        match self {
            Figure::Count(n) | Figure::Bytes(n) | Figure::Ns(n) => n.to_string(),
            Figure::Text(t) => json_str(t),
            Figure::Hundredths(h) => format!("{}.{:02}", h / 100, h % 100),
            Figure::PerGroup(m) => json_object(m.iter().map(|(g, n)| (g.to_string(), n.to_string()))),
            Figure::PerOrder(m) => json_object(m.iter().map(|(o, n)| (o.to_string(), n.to_string()))),
            Figure::Group(items) => json_object(items.iter().map(|(k, v)| (k.as_str(), v.json()))),
        }
    }
}

/// Bytes with a binary unit and one decimal: 512 B, 8.8 MiB.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut unit = 0;
    let mut scale: u64 = 1024;
    while unit + 1 < UNITS.len() && b >= scale * 1024 {
        scale *= 1024;
        unit += 1;
    }
    // Tenths by integer arithmetic, so the text is the same everywhere.
    let tenths = b.saturating_mul(10) / scale;
    format!("{}.{} {}", tenths / 10, tenths % 10, UNITS[unit])
}

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON object from keys and already-encoded values.
pub fn json_object<K: AsRef<str>>(items: impl IntoIterator<Item = (K, String)>) -> String {
    let fields: Vec<String> = items.into_iter().map(|(k, v)| format!("{}:{v}", json_str(k.as_ref()))).collect();
    format!("{{{}}}", fields.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_stay_numbers_in_json_and_carry_units_for_people() {
        let f = Figure::Group(vec![("reads".into(), Figure::Count(3)), ("read".into(), Figure::Bytes(64 << 20)), ("busy".into(), Figure::Ns(1500))]);
        assert_eq!(f.json(), "{\"reads\":3,\"read\":67108864,\"busy\":1500}");
        assert_eq!(f.human(), "3 reads, 64.0 MiB read, 1.500 us busy");
        assert_eq!((human_bytes(512), human_bytes(9_270_272), human_bytes(3 << 30)), ("512 B".into(), "8.8 MiB".into(), "3.0 GiB".into()));
        assert_eq!(Figure::Text("a\"b\n".into()).json(), "\"a\\\"b\\n\"");
    }

    #[test]
    fn a_folio_histogram_reads_order_colon_count() {
        let f = Figure::PerOrder([(0, 12), (2, 40)].into_iter().collect());
        assert_eq!(f.human(), "0:12 2:40");
        assert_eq!(f.json(), "{\"0\":12,\"2\":40}");
        assert_eq!(Figure::PerOrder(Default::default()).human(), "-");
    }
}

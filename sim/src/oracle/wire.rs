//! What crosses into a qemu guest and back, on one raw "control" disk.
//!
//! ```text
//! 0        "E4ORACLE" magic (8 bytes), manifest length u64 LE
//! 4096     manifest: text, one `case DISK ro=BOOL opts=OPTS` line per case,
//!          then that case's ops in trace syntax (`op ...`), `end` after each
//! RESULTS  "E4RESULT" magic, payload length u64 LE, payload (below)
//! ```
//!
//! The payload is binary, little-endian: the kernel release (string), the case
//! count (u32), then per case an error (u8 flag + string), its outcomes
//! (u32 count + outcomes) and the ext4 lines the kernel logged about its
//! disk (u32 count + strings). Strings and byte runs are u32 length + bytes.

use ext4_model::{DirEntry, Errno, FiemapExtent, FileKind, Op, Outcome, Reply, Stat};


pub const MANIFEST_MAGIC: &[u8; 8] = b"E4ORACLE";
pub const RESULT_MAGIC: &[u8; 8] = b"E4RESULT";
pub const MANIFEST_OFFSET: u64 = 4096;
/// Where the guest writes its results; the manifest must end before.
pub const RESULTS_OFFSET: u64 = 64 << 20;
/// Size of the control disk (sparse on the host).
pub const CONTROL_DISK_BYTES: u64 = 1 << 30;

/// One case as the guest sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestCase {
    /// The block device holding the case's image, e.g. `/dev/vdb`.
    pub disk: String,
    pub read_only: bool,
    /// The mount data string, e.g. `data=journal,nodelalloc`.
    pub opts: String,
    pub ops: Vec<Op>,
}

/// What the guest reports for one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestResult {
    /// Mount or unmount failure; outcomes are then those run before it.
    pub error: Option<String>,
    pub outcomes: Vec<Outcome>,
    /// ext4's warnings and errors about the case's disk, from the guest's log.
    pub kernel_log: Vec<String>,
}

pub fn encode_manifest(cases: &[GuestCase]) -> String {
    let mut out = String::new();
    for c in cases {
        out.push_str(&format!("case {} ro={} opts={}\n", c.disk, c.read_only, if c.opts.is_empty() { "-" } else { &c.opts }));
        for op in &c.ops {
            out.push_str("op ");
            out.push_str(&op.to_string());
            out.push('\n');
        }
        out.push_str("end\n");
    }
    out
}

pub fn decode_manifest(text: &str) -> Result<Vec<GuestCase>, String> {
    let mut cases = Vec::new();
    let mut current: Option<GuestCase> = None;
    for (i, line) in text.lines().enumerate() {
        let bad = |what: String| format!("manifest line {}: {what}", i + 1);
        if let Some(rest) = line.strip_prefix("case ") {
            let mut parts = rest.split(' ');
            let disk = parts.next().ok_or_else(|| bad("no disk".into()))?.to_string();
            let ro = parts.next().and_then(|p| p.strip_prefix("ro=")).ok_or_else(|| bad("no ro=".into()))?;
            let opts = parts.next().and_then(|p| p.strip_prefix("opts=")).ok_or_else(|| bad("no opts=".into()))?;
            current = Some(GuestCase { disk, read_only: ro == "true", opts: if opts == "-" { String::new() } else { opts.to_string() }, ops: Vec::new() });
        } else if let Some(rest) = line.strip_prefix("op ") {
            let case = current.as_mut().ok_or_else(|| bad("op outside a case".into()))?;
            case.ops.push(rest.parse::<Op>().map_err(|e| bad(e.to_string()))?);
        } else if line == "end" {
            cases.push(current.take().ok_or_else(|| bad("end outside a case".into()))?);
        } else if !line.is_empty() {
            return Err(bad(format!("unexpected `{line}`")));
        }
    }
    if current.is_some() {
        return Err("manifest ends inside a case".into());
    }
    Ok(cases)
}

/// Little-endian writer.
#[derive(Default)]
pub struct Encoder(pub Vec<u8>);

impl Encoder {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }

    pub fn results(release: &str, results: &[GuestResult]) -> Vec<u8> {
        let mut e = Encoder::default();
        e.bytes(release.as_bytes());
        e.u32(results.len() as u32);
        for r in results {
            match &r.error {
                Some(msg) => {
                    e.u8(1);
                    e.bytes(msg.as_bytes());
                }
                None => e.u8(0),
            }
            e.u32(r.outcomes.len() as u32);
            for o in &r.outcomes {
                e.outcome(o);
            }
            e.u32(r.kernel_log.len() as u32);
            for line in &r.kernel_log {
                e.bytes(line.as_bytes());
            }
        }
        e.0
    }

    fn outcome(&mut self, o: &Outcome) {
        match o {
            Err(errno) => {
                self.u8(0);
                self.u32(errno.code() as u32);
            }
            Ok(Reply::Done) => self.u8(1),
            Ok(Reply::Written(n)) => {
                self.u8(2);
                self.u64(*n);
            }
            Ok(Reply::Data(d)) => {
                self.u8(3);
                self.bytes(d);
            }
            Ok(Reply::Stat(s)) => {
                self.u8(4);
                self.u64(s.ino);
                self.u8(kind_code(s.kind));
                for v in [s.mode, s.nlink] {
                    self.u32(v);
                }
                self.u64(s.size);
                self.u64(s.blocks);
                self.u32(s.flags);
            }
            Ok(Reply::Entries(es)) => {
                self.u8(5);
                self.u32(es.len() as u32);
                for e in es {
                    self.bytes(e.name.as_bytes());
                    self.u8(kind_code(e.kind));
                }
            }
            Ok(Reply::Target(t)) => {
                self.u8(6);
                self.bytes(t.as_bytes());
            }
            Ok(Reply::Extents(xs)) => {
                self.u8(7);
                self.extents(xs);
            }
            Ok(Reply::MappedCount(n)) => {
                self.u8(8);
                self.u32(*n);
            }
            // The model's own answer never comes from a guest; it is carried
            // whole all the same, so no reply is ever lost on the way.
            Ok(Reply::ExtentsToCount { extents, block_size }) => {
                self.u8(9);
                self.u32(*block_size);
                self.extents(extents);
            }
            Ok(Reply::Offset(x)) => {
                self.u8(10);
                self.u64(*x);
            }
            // The model's, never a kernel's; carried whole all the same.
            Ok(Reply::SeekChoices(c)) => {
                self.u8(11);
                self.u32(c.exact.len() as u32);
                for x in &c.exact {
                    self.u64(*x);
                }
                self.u32(c.block_starts.len() as u32);
                for r in &c.block_starts {
                    self.u64(r.start);
                    self.u64(r.end);
                }
                self.u64(c.block_size);
                self.u8(u8::from(c.enxio));
            }
            // The model's, never a kernel's; carried whole all the same.
            Ok(Reply::DataOrEinval(d)) => {
                self.u8(12);
                self.bytes(d);
            }
        }
    }

    fn extents(&mut self, xs: &[FiemapExtent]) {
        self.u32(xs.len() as u32);
        for x in xs {
            self.u64(x.logical);
            self.u64(x.length);
            self.u32(x.flags);
        }
    }
}

fn kind_code(k: FileKind) -> u8 {
    match k {
        FileKind::Regular => 0,
        FileKind::Directory => 1,
        FileKind::Symlink => 2,
    }
}

/// Little-endian reader over results a guest wrote; every length is checked.
pub struct Decoder<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Decoder { buf, at: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or_else(|| format!("results end early at byte {}", self.at))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?).map_err(|_| "results hold a string that is not UTF-8".to_string())
    }
    fn kind(&mut self) -> Result<FileKind, String> {
        match self.u8()? {
            0 => Ok(FileKind::Regular),
            1 => Ok(FileKind::Directory),
            2 => Ok(FileKind::Symlink),
            k => Err(format!("bad file kind {k}")),
        }
    }

    fn extents(&mut self) -> Result<Vec<FiemapExtent>, String> {
        let n = self.u32()?;
        let mut xs = Vec::new();
        for _ in 0..n {
            let (logical, length) = (self.u64()?, self.u64()?);
            xs.push(FiemapExtent::new(logical, length, self.u32()?));
        }
        Ok(xs)
    }

    pub fn results(buf: &'a [u8]) -> Result<(String, Vec<GuestResult>), String> {
        let mut d = Decoder::new(buf);
        let release = d.string()?;
        let n = d.u32()?;
        let mut out = Vec::new();
        for _ in 0..n {
            let error = match d.u8()? {
                0 => None,
                _ => Some(d.string()?),
            };
            let count = d.u32()?;
            let mut outcomes = Vec::new();
            for _ in 0..count {
                outcomes.push(d.outcome()?);
            }
            let lines = d.u32()?;
            let mut kernel_log = Vec::new();
            for _ in 0..lines {
                kernel_log.push(d.string()?);
            }
            out.push(GuestResult { error, outcomes, kernel_log });
        }
        Ok((release, out))
    }

    fn outcome(&mut self) -> Result<Outcome, String> {
        Ok(match self.u8()? {
            0 => {
                let code = self.u32()? as i32;
                Err(Errno::from_code(code).ok_or_else(|| format!("unknown errno {code}"))?)
            }
            1 => Ok(Reply::Done),
            2 => Ok(Reply::Written(self.u64()?)),
            3 => Ok(Reply::Data(self.bytes()?)),
            4 => {
                let ino = self.u64()?;
                let kind = self.kind()?;
                let (mode, nlink) = (self.u32()?, self.u32()?);
                let (size, blocks) = (self.u64()?, self.u64()?);
                Ok(Reply::Stat(Stat { ino, kind, mode, nlink, size, blocks, flags: self.u32()?, blocks_slack: 0 }))
            }
            5 => {
                let n = self.u32()?;
                let mut es = Vec::new();
                for _ in 0..n {
                    let name = self.string()?;
                    es.push(DirEntry { name, kind: self.kind()? });
                }
                Ok(Reply::Entries(es))
            }
            6 => Ok(Reply::Target(self.string()?)),
            7 => Ok(Reply::Extents(self.extents()?)),
            8 => Ok(Reply::MappedCount(self.u32()?)),
            9 => {
                let block_size = self.u32()?;
                Ok(Reply::ExtentsToCount { extents: self.extents()?, block_size })
            }
            10 => Ok(Reply::Offset(self.u64()?)),
            11 => {
                let mut c = ext4_model::SeekChoices::default();
                for _ in 0..self.u32()? {
                    c.exact.push(self.u64()?);
                }
                for _ in 0..self.u32()? {
                    let start = self.u64()?;
                    c.block_starts.push(start..self.u64()?);
                }
                c.block_size = self.u64()?;
                c.enxio = self.u8()? != 0;
                Ok(Reply::SeekChoices(c))
            }
            12 => Ok(Reply::DataOrEinval(self.bytes()?)),
            t => return Err(format!("bad outcome tag {t}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_and_results_round_trip_and_truncation_is_an_error() {
        let cases = vec![
            GuestCase {
                disk: "/dev/vdb".into(),
                read_only: false,
                opts: "data=journal".into(),
                ops: vec![Op::Sync, Op::Mkdir { path: "/a b".into(), perm: 0o755 }, Op::Fiemap { path: "/f".into(), start: 5, len: 0, flags: 0x8000_0006, count_only: true }],
            },
            GuestCase { disk: "/dev/vdc".into(), read_only: true, opts: String::new(), ops: vec![] },
        ];
        assert_eq!(decode_manifest(&encode_manifest(&cases)).unwrap(), cases);
        assert!(decode_manifest("op sync\n").is_err());

        let outcomes = vec![
            Err(Errno::ENOENT),
            Ok(Reply::Done),
            Ok(Reply::Written(7)),
            Ok(Reply::Data(vec![1, 2, 3])),
            Ok(Reply::Stat(Stat { ino: 12, kind: FileKind::Symlink, mode: 0o120777, nlink: 1, size: 3, blocks: 0, flags: u32::MAX, blocks_slack: 0 })),
            Ok(Reply::Entries(vec![DirEntry { name: "x".into(), kind: FileKind::Directory }])),
            Ok(Reply::Target("/t".into())),
            Ok(Reply::Extents(vec![FiemapExtent::new(0, 4096, 0x801)])),
            Ok(Reply::MappedCount(u32::MAX)),
            Ok(Reply::ExtentsToCount { extents: vec![FiemapExtent::new(8192, 4096, 0x1)], block_size: 1024 }),
            Ok(Reply::Offset(1 << 40)),
            Ok(Reply::SeekChoices(ext4_model::SeekChoices { exact: vec![3, 9], block_starts: std::iter::once(4096..8192).collect(), block_size: 4096, enxio: true })),
            Ok(Reply::DataOrEinval(vec![0; 5])),
        ];
        let results = vec![
            GuestResult { error: None, outcomes, kernel_log: vec!["EXT4-fs warning (device vdb): x".into()] },
            GuestResult { error: Some("mount: EINVAL".into()), outcomes: vec![], kernel_log: vec![] },
        ];
        let bytes = Encoder::results("7.3.4", &results);
        assert_eq!(Decoder::results(&bytes).unwrap(), ("7.3.4".to_string(), results));
        assert!(Decoder::results(&bytes[..bytes.len() - 1]).is_err());
    }
}

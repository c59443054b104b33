//! The text form of an op: its kind, then its arguments as fields
//! ([`crate::text`]). Traces, failure reports and the kernel oracle's wire
//! all speak it.
//!
//! ```text
//! write path="/a/b" offset=4096 len=100 seed=7
//! rename from="/a" to="/c"
//! fallocate path="/f" mode=0x3 offset=0 len=8192
//! fiemap path="/f" sync=false start=4096 len=100 flags=0x4 count_only=true
//! ```
//!
//! A FIEMAP writes only what differs from the whole-file request older
//! traces made (`fiemap path="/f" sync=true`): `start=` when not 0, `len=`
//! when not u64::MAX, `flags=` with the bits other than SYNC (that is
//! `sync=`), `count_only=true`. So those traces read and print unchanged.

use std::fmt;
use std::str::FromStr;

use super::{ChattrFlag, FallocFlags, FiemapRequest, Op, RenameFlags, SeekWhence};

fn chattr_text(flag: ChattrFlag) -> &'static str {
    match flag {
        ChattrFlag::Immutable => "immutable",
        ChattrFlag::Append => "append",
    }
}

fn flags_text(flags: RenameFlags) -> &'static str {
    match flags {
        RenameFlags::NoReplace => "noreplace",
        RenameFlags::Exchange => "exchange",
    }
}
use crate::text::{quote, Fields, TextError};

fn fiemap_text(f: &mut fmt::Formatter<'_>, start: u64, len: u64, flags: u32, count_only: bool) -> fmt::Result {
    write!(f, " sync={}", flags & FiemapRequest::SYNC != 0)?;
    if start != 0 {
        write!(f, " start={start}")?;
    }
    if len != u64::MAX {
        write!(f, " len={len}")?;
    }
    if flags & !FiemapRequest::SYNC != 0 {
        write!(f, " flags={:#x}", flags & !FiemapRequest::SYNC)?;
    }
    if count_only {
        write!(f, " count_only=true")?;
    }
    Ok(())
}

fn fiemap_from(f: &Fields, path: String) -> Result<Op, TextError> {
    let other: u32 = f.num_or("flags", 0)?;
    if other & FiemapRequest::SYNC != 0 {
        return Err(TextError::BadValue { key: "flags".into(), value: format!("{other:#x}"), expected: "bits other than SYNC (that is sync=)" });
    }
    let sync = if f.flag("sync")? { FiemapRequest::SYNC } else { 0 };
    Ok(Op::Fiemap { path, start: f.num_or("start", 0)?, len: f.num_or("len", u64::MAX)?, flags: sync | other, count_only: f.flag_or("count_only", false)? })
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = |s: &String| quote(s);
        match self {
            Op::Create { path, perm } => write!(f, "create path={} perm={perm:o}", q(path)),
            Op::Mkdir { path, perm } => write!(f, "mkdir path={} perm={perm:o}", q(path)),
            Op::Unlink { path } => write!(f, "unlink path={}", q(path)),
            Op::Rmdir { path } => write!(f, "rmdir path={}", q(path)),
            Op::Rename { from, to } => write!(f, "rename from={} to={}", q(from), q(to)),
            Op::Link { from, to } => write!(f, "link from={} to={}", q(from), q(to)),
            Op::Symlink { target, path } => write!(f, "symlink target={} path={}", q(target), q(path)),
            Op::Readlink { path } => write!(f, "readlink path={}", q(path)),
            Op::Readdir { path } => write!(f, "readdir path={}", q(path)),
            Op::Stat { path } => write!(f, "stat path={}", q(path)),
            Op::Write { path, offset, len, seed } => write!(f, "write path={} offset={offset} len={len} seed={seed}", q(path)),
            Op::Read { path, offset, len } => write!(f, "read path={} offset={offset} len={len}", q(path)),
            Op::Truncate { path, size } => write!(f, "truncate path={} size={size}", q(path)),
            Op::Fsync { path } => write!(f, "fsync path={}", q(path)),
            Op::Fdatasync { path } => write!(f, "fdatasync path={}", q(path)),
            Op::Sync => write!(f, "sync"),
            Op::Fallocate { path, mode, offset, len } => write!(f, "fallocate path={} mode={:#x} offset={offset} len={len}", q(path), mode.0),
            Op::Fiemap { path, start, len, flags, count_only } => {
                write!(f, "fiemap path={}", q(path))?;
                fiemap_text(f, *start, *len, *flags, *count_only)
            }
            Op::SetJournalData { path, enable } => write!(f, "set_journal_data path={} enable={enable}", q(path)),
            Op::Renameat2 { from, to, flags } => write!(f, "renameat2 from={} to={} flags={}", q(from), q(to), flags_text(*flags)),
            Op::Chattr { path, flag, enable } => write!(f, "chattr path={} flag={} enable={enable}", q(path), chattr_text(*flag)),
            Op::Append { path, len, seed } => write!(f, "append path={} len={len} seed={seed}", q(path)),
            Op::Lseek { path, offset, whence } => write!(f, "lseek path={} offset={offset} whence={}", q(path), whence.text()),
            Op::Rewrite { path, len, seed } => write!(f, "rewrite path={} len={len} seed={seed}", q(path)),
            Op::Open { path, slot } => write!(f, "open path={} slot={slot}", q(path)),
            Op::Close { slot } => write!(f, "close slot={slot}"),
            Op::ReadFd { slot, offset, len } => write!(f, "pread slot={slot} offset={offset} len={len}"),
            Op::WriteFd { slot, offset, len, seed } => write!(f, "pwrite slot={slot} offset={offset} len={len} seed={seed}"),
            Op::FsyncFd { slot } => write!(f, "fsync_fd slot={slot}"),
            Op::FtruncateFd { slot, size } => write!(f, "ftruncate slot={slot} size={size}"),
            Op::DirectWrite { path, offset, len, seed } => write!(f, "direct_write path={} offset={offset} len={len} seed={seed}", q(path)),
            Op::DirectRead { path, offset, len } => write!(f, "direct_read path={} offset={offset} len={len}", q(path)),
            Op::MapWrite { path, offset, len, seed } => write!(f, "map_write path={} offset={offset} len={len} seed={seed}", q(path)),
        }
    }
}

impl FromStr for Op {
    type Err = TextError;

    fn from_str(text: &str) -> Result<Op, TextError> {
        let (kind, rest) = text.split_once(' ').unwrap_or((text, ""));
        let f = Fields::parse(rest)?;
        let path = || f.text("path");
        Ok(match kind {
            "create" => Op::Create { path: path()?, perm: f.octal("perm")? },
            "mkdir" => Op::Mkdir { path: path()?, perm: f.octal("perm")? },
            "unlink" => Op::Unlink { path: path()? },
            "rmdir" => Op::Rmdir { path: path()? },
            "rename" => Op::Rename { from: f.text("from")?, to: f.text("to")? },
            "link" => Op::Link { from: f.text("from")?, to: f.text("to")? },
            "symlink" => Op::Symlink { target: f.text("target")?, path: path()? },
            "readlink" => Op::Readlink { path: path()? },
            "readdir" => Op::Readdir { path: path()? },
            "stat" => Op::Stat { path: path()? },
            "write" => Op::Write { path: path()?, offset: f.num("offset")?, len: f.num("len")?, seed: f.num("seed")? },
            "read" => Op::Read { path: path()?, offset: f.num("offset")?, len: f.num("len")? },
            "truncate" => Op::Truncate { path: path()?, size: f.num("size")? },
            "fsync" => Op::Fsync { path: path()? },
            "fdatasync" => Op::Fdatasync { path: path()? },
            "sync" => Op::Sync,
            "fallocate" => Op::Fallocate { path: path()?, mode: FallocFlags(f.num("mode")?), offset: f.num("offset")?, len: f.num("len")? },
            "fiemap" => fiemap_from(&f, path()?)?,
            "set_journal_data" => Op::SetJournalData { path: path()?, enable: f.flag("enable")? },
            "renameat2" => Op::Renameat2 {
                from: f.text("from")?,
                to: f.text("to")?,
                flags: match f.text("flags")?.as_str() {
                    "noreplace" => RenameFlags::NoReplace,
                    "exchange" => RenameFlags::Exchange,
                    other => return Err(TextError::BadValue { key: "flags".into(), value: other.to_string(), expected: "noreplace or exchange" }),
                },
            },
            "chattr" => Op::Chattr {
                path: path()?,
                flag: match f.text("flag")?.as_str() {
                    "immutable" => ChattrFlag::Immutable,
                    "append" => ChattrFlag::Append,
                    other => return Err(TextError::BadValue { key: "flag".into(), value: other.to_string(), expected: "immutable or append" }),
                },
                enable: f.flag("enable")?,
            },
            "append" => Op::Append { path: path()?, len: f.num("len")?, seed: f.num("seed")? },
            "rewrite" => Op::Rewrite { path: path()?, len: f.num("len")?, seed: f.num("seed")? },
            "open" => Op::Open { path: path()?, slot: f.num("slot")? },
            "close" => Op::Close { slot: f.num("slot")? },
            "pread" => Op::ReadFd { slot: f.num("slot")?, offset: f.num("offset")?, len: f.num("len")? },
            "pwrite" => Op::WriteFd { slot: f.num("slot")?, offset: f.num("offset")?, len: f.num("len")?, seed: f.num("seed")? },
            "fsync_fd" => Op::FsyncFd { slot: f.num("slot")? },
            "ftruncate" => Op::FtruncateFd { slot: f.num("slot")?, size: f.num("size")? },
            "direct_write" => Op::DirectWrite { path: path()?, offset: f.num("offset")?, len: f.num("len")?, seed: f.num("seed")? },
            "direct_read" => Op::DirectRead { path: path()?, offset: f.num("offset")?, len: f.num("len")? },
            "map_write" => Op::MapWrite { path: path()?, offset: f.num("offset")?, len: f.num("len")?, seed: f.num("seed")? },
            "lseek" => Op::Lseek {
                path: path()?,
                offset: f.num("offset")?,
                whence: match f.text("whence")?.as_str() {
                    "data" => SeekWhence::Data,
                    "hole" => SeekWhence::Hole,
                    other => return Err(TextError::BadValue { key: "whence".into(), value: other.to_string(), expected: "data or hole" }),
                },
            },
            other => return Err(TextError::UnknownOp(other.to_string())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_with_awkward_names_round_trip_and_bad_ones_are_named() {
        let ops = [
            Op::Rename { from: "/\"q\"\\\n\u{1}".into(), to: "/x y".into() },
            Op::Write { path: "/a".into(), offset: u64::MAX, len: 7, seed: 3 },
            Op::Fallocate { path: "/f".into(), mode: FallocFlags(0x13), offset: 0, len: 1 },
            Op::Create { path: "/c".into(), perm: 0o7777 },
            Op::Sync,
            Op::Renameat2 { from: "/a".into(), to: "/b".into(), flags: RenameFlags::Exchange },
            Op::Renameat2 { from: "/a".into(), to: "/b".into(), flags: RenameFlags::NoReplace },
            Op::Chattr { path: "/a".into(), flag: ChattrFlag::Immutable, enable: true },
            Op::Chattr { path: "/a".into(), flag: ChattrFlag::Append, enable: false },
            Op::Append { path: "/a".into(), len: 9, seed: 4 },
            Op::Open { path: "/a".into(), slot: 3 },
            Op::Close { slot: 200 },
            Op::ReadFd { slot: 0, offset: 4096, len: 10 },
            Op::WriteFd { slot: 1, offset: 1, len: 2, seed: 3 },
            Op::DirectWrite { path: "/d".into(), offset: 4096, len: 512, seed: 9 },
            Op::DirectRead { path: "/d".into(), offset: 513, len: 1024 },
            Op::MapWrite { path: "/d".into(), offset: 100, len: 9000, seed: 2 },
            Op::FsyncFd { slot: 2 },
            Op::FtruncateFd { slot: 3, size: u64::MAX },
            Op::Lseek { path: "/a".into(), offset: 4097, whence: SeekWhence::Data },
            Op::Lseek { path: "/a".into(), offset: u64::MAX, whence: SeekWhence::Hole },
            Op::Rewrite { path: "/a".into(), len: 0, seed: 5 },
            Op::Fiemap { path: "/a".into(), start: 0, len: u64::MAX, flags: 0, count_only: false },
            Op::Fiemap { path: "/a".into(), start: 7, len: 0, flags: 0xffff_ffff, count_only: true },
            Op::Fiemap { path: "/a".into(), start: u64::MAX, len: 4096, flags: FiemapRequest::CACHE, count_only: false },
        ];
        for op in ops {
            assert_eq!(op.to_string().parse::<Op>(), Ok(op.clone()), "{op}");
        }
        assert_eq!("frobnicate".parse::<Op>(), Err(TextError::UnknownOp("frobnicate".into())));
        assert!(matches!("renameat2 from=\"/a\" to=\"/b\" flags=whiteout".parse::<Op>(), Err(TextError::BadValue { .. })));
        assert!(matches!("write path=\"/a\" offset=x len=1 seed=1".parse::<Op>(), Err(TextError::BadValue { .. })));
        assert!(matches!("read path=\"/a\" offset=0".parse::<Op>(), Err(TextError::Missing(k)) if k == "len"));
    }

    #[test]
    fn whole_file_fiemaps_keep_the_old_text_and_the_rest_say_only_what_differs() {
        let whole = |flags| Op::Fiemap { path: "/f".into(), start: 0, len: u64::MAX, flags, count_only: false };
        for (op, text) in [
            (whole(FiemapRequest::SYNC), "fiemap path=\"/f\" sync=true"),
            (whole(0), "fiemap path=\"/f\" sync=false"),
            (whole(FiemapRequest::XATTR | FiemapRequest::SYNC), "fiemap path=\"/f\" sync=true flags=0x2"),
            (Op::Fiemap { path: "/f".into(), start: 4096, len: 10, flags: 0, count_only: true }, "fiemap path=\"/f\" sync=false start=4096 len=10 count_only=true"),
        ] {
            assert_eq!(op.to_string(), text);
            assert_eq!(text.parse::<Op>(), Ok(op));
        }
        // SYNC has one spelling, and sync= is still required.
        assert!(matches!("fiemap path=\"/f\" sync=false flags=0x1".parse::<Op>(), Err(TextError::BadValue { .. })));
        assert!(matches!("fiemap path=\"/f\" start=1".parse::<Op>(), Err(TextError::Missing(k)) if k == "sync"));
    }
}

//! A [`FileSystem`] that passes each call on to another and records the
//! [`Op`] making the same call, with the answer: a workload written against
//! the trait, run once on the engine, replays on a kernel as a
//! [`super::Case`]'s ops, whose answers can then be held to the engine's.
//!
//! A call no op can make is refused (EOPNOTSUPP) without being passed on,
//! and [`Recorder::finish`] names the first: bytes given rather than a
//! pattern seed, a length past [`MAX_IO_LEN`] or a slot past [`FD_SLOTS`]
//! (`apply` answers those itself, so the replay would not make the call).

use ext4_model::op::{FD_SLOTS, MAX_IO_LEN};
use ext4_model::{ChattrFlag, DirEntry, Errno, FallocFlags, FiemapExtent, FiemapRequest, FileSystem, Op, Outcome, RenameFlags, Reply, SeekChoices, SeekWhence, Stat};
use thiserror::Error;

pub struct Recorder<'a> {
    inner: &'a mut dyn FileSystem,
    recording: Recording,
    refused: Option<Unrecordable>,
}

/// The calls made, as ops, and what the inner filesystem answered to each
/// (as [`FileSystem::apply`] would have put it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recording {
    pub ops: Vec<Op>,
    pub outcomes: Vec<Outcome>,
}

/// A call that was refused because no op makes it.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{call}: no op makes this call ({why}); it was refused, not recorded")]
pub struct Unrecordable {
    pub call: String,
    pub why: &'static str,
}

const BYTES: &str = "it passes bytes; an op passes a pattern seed";

/// Why `apply` would answer `op` without making its call, if it would.
fn answered_by_apply(op: &Op) -> Option<&'static str> {
    let len = match op {
        Op::Write { len, .. } | Op::Read { len, .. } | Op::Append { len, .. } | Op::Rewrite { len, .. } | Op::ReadFd { len, .. } | Op::WriteFd { len, .. } => Some(*len),
        Op::DirectWrite { len, .. } | Op::DirectRead { len, .. } | Op::MapWrite { len, .. } => Some(*len),
        _ => None,
    };
    match op {
        _ if len.is_some_and(|l| l > MAX_IO_LEN) => Some("longer than an op may be"),
        Op::Open { slot, .. } if *slot >= FD_SLOTS => Some("a slot past the descriptor table"),
        _ => None,
    }
}

impl<'a> Recorder<'a> {
    pub fn new(inner: &'a mut dyn FileSystem) -> Recorder<'a> {
        Recorder { inner, recording: Recording::default(), refused: None }
    }

    /// The recording, or the first call that was refused.
    pub fn finish(self) -> Result<Recording, Unrecordable> {
        match self.refused {
            Some(why) => Err(why),
            None => Ok(self.recording),
        }
    }

    fn refuse<T>(&mut self, call: String, why: &'static str) -> Result<T, Errno> {
        self.refused.get_or_insert(Unrecordable { call, why });
        Err(Errno::EOPNOTSUPP)
    }

    /// Makes the call on the inner filesystem and records `op` and the answer.
    fn run<T>(&mut self, op: Op, call: impl FnOnce(&mut dyn FileSystem) -> Result<T, Errno>, reply: impl FnOnce(&T) -> Outcome) -> Result<T, Errno> {
        if let Some(why) = answered_by_apply(&op) {
            return self.refuse(op.to_string(), why);
        }
        let answer = call(&mut *self.inner);
        self.recording.outcomes.push(match &answer {
            Ok(t) => reply(t),
            Err(e) => Err(*e),
        });
        self.recording.ops.push(op);
        answer
    }
}

fn done(_: &()) -> Outcome {
    Ok(Reply::Done)
}

fn written(n: &u64) -> Outcome {
    Ok(Reply::Written(*n))
}

fn data(d: &[u8]) -> Outcome {
    Ok(Reply::Data(d.to_vec()))
}

fn s(path: &str) -> String {
    path.to_string()
}

// close_all keeps the trait's default: the closes it makes are recorded.
impl FileSystem for Recorder<'_> {
    fn create(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        self.run(Op::Create { path: s(path), perm }, |fs| fs.create(path, perm), done)
    }
    fn mkdir(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        self.run(Op::Mkdir { path: s(path), perm }, |fs| fs.mkdir(path, perm), done)
    }
    fn unlink(&mut self, path: &str) -> Result<(), Errno> {
        self.run(Op::Unlink { path: s(path) }, |fs| fs.unlink(path), done)
    }
    fn rmdir(&mut self, path: &str) -> Result<(), Errno> {
        self.run(Op::Rmdir { path: s(path) }, |fs| fs.rmdir(path), done)
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        self.run(Op::Rename { from: s(from), to: s(to) }, |fs| fs.rename(from, to), done)
    }
    fn renameat2(&mut self, from: &str, to: &str, flags: RenameFlags) -> Result<(), Errno> {
        self.run(Op::Renameat2 { from: s(from), to: s(to), flags }, |fs| fs.renameat2(from, to, flags), done)
    }
    fn link(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        self.run(Op::Link { from: s(from), to: s(to) }, |fs| fs.link(from, to), done)
    }
    fn symlink(&mut self, target: &str, path: &str) -> Result<(), Errno> {
        self.run(Op::Symlink { target: s(target), path: s(path) }, |fs| fs.symlink(target, path), done)
    }
    fn readlink(&mut self, path: &str) -> Result<String, Errno> {
        self.run(Op::Readlink { path: s(path) }, |fs| fs.readlink(path), |t| Ok(Reply::Target(t.clone())))
    }
    fn readdir(&mut self, path: &str) -> Result<Vec<DirEntry>, Errno> {
        self.run(Op::Readdir { path: s(path) }, |fs| fs.readdir(path), |e| Ok(Reply::Entries(e.clone())))
    }
    fn stat(&mut self, path: &str) -> Result<Stat, Errno> {
        self.run(Op::Stat { path: s(path) }, |fs| fs.stat(path), |st| Ok(Reply::Stat(st.clone())))
    }
    fn write(&mut self, path: &str, offset: u64, _: &[u8]) -> Result<u64, Errno> {
        self.refuse(format!("write {path} at {offset}"), BYTES)
    }
    fn write_pattern(&mut self, path: &str, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.run(Op::Write { path: s(path), offset, len, seed }, |fs| fs.write_pattern(path, offset, len, seed), written)
    }
    fn read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        self.run(Op::Read { path: s(path), offset, len }, |fs| fs.read(path, offset, len), |d| data(d))
    }
    fn truncate(&mut self, path: &str, size: u64) -> Result<(), Errno> {
        self.run(Op::Truncate { path: s(path), size }, |fs| fs.truncate(path, size), done)
    }
    fn fsync(&mut self, path: &str) -> Result<(), Errno> {
        self.run(Op::Fsync { path: s(path) }, |fs| fs.fsync(path), done)
    }
    fn fdatasync(&mut self, path: &str) -> Result<(), Errno> {
        self.run(Op::Fdatasync { path: s(path) }, |fs| fs.fdatasync(path), done)
    }
    fn sync(&mut self) -> Result<(), Errno> {
        self.run(Op::Sync, |fs| fs.sync(), done)
    }
    fn fallocate(&mut self, path: &str, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno> {
        self.run(Op::Fallocate { path: s(path), mode, offset, len }, |fs| fs.fallocate(path, mode, offset, len), done)
    }
    fn fiemap(&mut self, path: &str, req: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> {
        let op = Op::Fiemap { path: s(path), start: req.start, len: req.len, flags: req.flags, count_only: false };
        self.run(op, |fs| fs.fiemap(path, req), |e| Ok(Reply::Extents(e.clone())))
    }
    fn fiemap_count(&mut self, path: &str, req: FiemapRequest) -> Outcome {
        let op = Op::Fiemap { path: s(path), start: req.start, len: req.len, flags: req.flags, count_only: true };
        self.run(op, |fs| fs.fiemap_count(path, req), |r| Ok(r.clone()))
    }
    fn set_journal_data(&mut self, path: &str, enable: bool) -> Result<(), Errno> {
        self.run(Op::SetJournalData { path: s(path), enable }, |fs| fs.set_journal_data(path, enable), done)
    }
    fn chattr(&mut self, path: &str, flag: ChattrFlag, enable: bool) -> Result<(), Errno> {
        self.run(Op::Chattr { path: s(path), flag, enable }, |fs| fs.chattr(path, flag, enable), done)
    }
    fn append(&mut self, path: &str, _: &[u8]) -> Result<u64, Errno> {
        self.refuse(format!("append {path}"), BYTES)
    }
    fn append_pattern(&mut self, path: &str, len: u32, seed: u64) -> Result<u64, Errno> {
        self.run(Op::Append { path: s(path), len, seed }, |fs| fs.append_pattern(path, len, seed), written)
    }
    fn rewrite(&mut self, path: &str, _: &[u8]) -> Result<u64, Errno> {
        self.refuse(format!("rewrite {path}"), BYTES)
    }
    fn rewrite_pattern(&mut self, path: &str, len: u32, seed: u64) -> Result<u64, Errno> {
        self.run(Op::Rewrite { path: s(path), len, seed }, |fs| fs.rewrite_pattern(path, len, seed), written)
    }
    fn lseek(&mut self, path: &str, offset: u64, whence: SeekWhence) -> Result<SeekChoices, Errno> {
        let reply = |c: &SeekChoices| c.only().unwrap_or_else(|| Ok(Reply::SeekChoices(c.clone())));
        self.run(Op::Lseek { path: s(path), offset, whence }, |fs| fs.lseek(path, offset, whence), reply)
    }
    fn open(&mut self, path: &str, slot: u8) -> Result<(), Errno> {
        self.run(Op::Open { path: s(path), slot }, |fs| fs.open(path, slot), done)
    }
    fn close(&mut self, slot: u8) -> Result<(), Errno> {
        self.run(Op::Close { slot }, |fs| fs.close(slot), done)
    }
    fn pread(&mut self, slot: u8, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        self.run(Op::ReadFd { slot, offset, len }, |fs| fs.pread(slot, offset, len), |d| data(d))
    }
    fn pwrite(&mut self, slot: u8, offset: u64, _: &[u8]) -> Result<u64, Errno> {
        self.refuse(format!("pwrite slot {slot} at {offset}"), BYTES)
    }
    fn pwrite_pattern(&mut self, slot: u8, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.run(Op::WriteFd { slot, offset, len, seed }, |fs| fs.pwrite_pattern(slot, offset, len, seed), written)
    }
    fn fsync_fd(&mut self, slot: u8) -> Result<(), Errno> {
        self.run(Op::FsyncFd { slot }, |fs| fs.fsync_fd(slot), done)
    }
    fn ftruncate(&mut self, slot: u8, size: u64) -> Result<(), Errno> {
        self.run(Op::FtruncateFd { slot, size }, |fs| fs.ftruncate(slot, size), done)
    }
    fn direct_write(&mut self, path: &str, offset: u64, _: &[u8]) -> Result<u64, Errno> {
        self.refuse(format!("direct_write {path} at {offset}"), BYTES)
    }
    fn direct_write_pattern(&mut self, path: &str, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.run(Op::DirectWrite { path: s(path), offset, len, seed }, |fs| fs.direct_write_pattern(path, offset, len, seed), written)
    }
    fn direct_read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        self.run(Op::DirectRead { path: s(path), offset, len }, |fs| fs.direct_read(path, offset, len), |d| data(d))
    }
    fn direct_read_outcome(&mut self, path: &str, offset: u64, len: u32) -> Outcome {
        self.run(Op::DirectRead { path: s(path), offset, len }, |fs| fs.direct_read_outcome(path, offset, len), |r| Ok(r.clone()))
    }
    fn map_write(&mut self, path: &str, offset: u64, _: &[u8]) -> Result<u64, Errno> {
        self.refuse(format!("map_write {path} at {offset}"), BYTES)
    }
    fn map_write_pattern(&mut self, path: &str, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.run(Op::MapWrite { path: s(path), offset, len, seed }, |fs| fs.map_write_pattern(path, offset, len, seed), written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::Workload;
    use ext4_model::{Model, MountConfig};

    #[test]
    fn a_workload_replays_from_its_recording_with_the_same_answers_and_tree() {
        let config = MountConfig::default();
        for w in Workload::ALL.into_iter().filter(|w| *w != Workload::Fill) {
            let mut original = Model::new(&config).unwrap();
            let mut rec = Recorder::new(&mut original);
            let made = w.run(&mut rec, 3, 1).unwrap();
            let recording = rec.finish().unwrap();
            assert!(recording.ops.len() > made.files.len(), "{}", w.name());
            let mut replayed = Model::new(&config).unwrap();
            let outcomes: Vec<Outcome> = recording.ops.iter().map(|op| replayed.apply(op)).collect();
            assert_eq!(outcomes, recording.outcomes, "{}", w.name());
            for path in made.files.iter().chain(&made.dirs) {
                assert_eq!(replayed.stat(path), original.stat(path), "{path}");
            }
            for path in &made.files {
                assert_eq!(replayed.read(path, 0, MAX_IO_LEN), original.read(path, 0, MAX_IO_LEN), "{path}");
            }
        }
    }

    #[test]
    fn calls_no_op_makes_are_refused_unmade_and_named() {
        let mut model = Model::new(&MountConfig::default()).unwrap();
        let mut rec = Recorder::new(&mut model);
        rec.create("/f", 0o644).unwrap();
        assert_eq!(rec.write("/f", 0, b"bytes"), Err(Errno::EOPNOTSUPP));
        assert_eq!(rec.write_pattern("/f", 0, MAX_IO_LEN + 1, 1), Err(Errno::EOPNOTSUPP));
        assert_eq!(rec.open("/f", FD_SLOTS), Err(Errno::EOPNOTSUPP));
        let refused = rec.finish().unwrap_err();
        assert_eq!(refused.call, "write /f at 0");
        assert!(refused.to_string().contains("pattern seed"), "{refused}");
        assert_eq!(model.stat("/f").unwrap().size, 0, "a refused call is not passed on");
    }
}

//! Canonical workloads, named and seeded, for layout reports, snapshots
//! and the allocator's kernel comparison. Each runs through the
//! [`FileSystem`] trait, so the same seed makes the same calls on the
//! engine and on a mounted kernel filesystem ([`crate::oracle::syscalls::SyscallFs`]).
//! Data is written as patterns (`write_pattern`), never as bytes, so a run
//! records as ops ([`crate::oracle::recorder`]) a qemu guest can replay.
//!
//! `scale` grows each one roughly linearly (1 is a few seconds on the
//! engine in a debug build).

use ext4_model::{Errno, FileSystem};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// rsync and cp write in chunks of this size.
const CHUNK: u32 = 256 << 10;
/// Bytes the stream workload's log grows by beside each MiB of video.
const LOG_LINE: u32 = 200;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    /// A tree copy, like an rsync of a root partition: nested
    /// directories, many small files, some medium, a few large.
    TreeCopy,
    /// One writer streaming large files in 1 MiB writes while a log grows beside it.
    Stream,
    /// Many small files in few directories.
    SmallFiles,
    /// Files of 1..8 MiB until the filesystem is full.
    Fill,
    /// Rounds of creating files, deleting about half, and refilling.
    Ageing,
}

/// What a workload made: directories and regular files still present, in creation order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Made {
    pub dirs: Vec<String>,
    pub files: Vec<String>,
    /// Writes refused with ENOSPC (only `fill` expects them).
    pub enospc: u64,
}

impl Workload {
    pub const ALL: [Workload; 5] = [Workload::TreeCopy, Workload::Stream, Workload::SmallFiles, Workload::Fill, Workload::Ageing];

    pub fn name(self) -> &'static str {
        match self {
            Workload::TreeCopy => "tree-copy",
            Workload::Stream => "stream",
            Workload::SmallFiles => "small-files",
            Workload::Fill => "fill",
            Workload::Ageing => "ageing",
        }
    }

    pub fn parse(name: &str) -> Result<Workload, String> {
        Workload::ALL.into_iter().find(|w| w.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
            format!("unknown workload {name:?}: one of {}", names.join(", "))
        })
    }

    /// Runs the workload; errors other than an expected ENOSPC stop it.
    pub fn run(self, fs: &mut dyn FileSystem, seed: u64, scale: u32) -> Result<Made, String> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ((self as u64) << 56));
        let mut w = Writer { fs, made: Made::default(), data_seed: seed.wrapping_mul(0x9e37_79b9) };
        let scale = scale.max(1);
        match self {
            Workload::TreeCopy => tree_copy(&mut w, &mut rng, scale),
            Workload::Stream => stream(&mut w, &mut rng, scale),
            Workload::SmallFiles => small_files(&mut w, &mut rng, scale),
            Workload::Fill => fill(&mut w, &mut rng),
            Workload::Ageing => ageing(&mut w, &mut rng, scale),
        }?;
        w.fs.sync().map_err(|e| format!("sync: {e:?}"))?;
        Ok(w.made)
    }
}

struct Writer<'a> {
    fs: &'a mut dyn FileSystem,
    made: Made,
    data_seed: u64,
}

impl Writer<'_> {
    fn mkdir(&mut self, path: &str) -> Result<(), String> {
        self.fs.mkdir(path, 0o755).map_err(|e| format!("mkdir {path}: {e:?}"))?;
        self.made.dirs.push(path.to_string());
        Ok(())
    }

    fn create(&mut self, path: &str) -> Result<(), String> {
        self.fs.create(path, 0o644).map_err(|e| format!("create {path}: {e:?}"))?;
        self.made.files.push(path.to_string());
        Ok(())
    }

    /// Creates `path` and writes `size` bytes in chunks; Ok(false) on ENOSPC
    /// (the file stays, as far as it got).
    fn file(&mut self, path: &str, size: u64, chunk: u32) -> Result<bool, String> {
        self.create(path)?;
        self.data_seed += 1;
        let mut at = 0;
        while at < size {
            let n = u32::try_from(size - at).map_or(chunk, |left| left.min(chunk));
            match self.fs.write_pattern(path, at, n, self.data_seed ^ at) {
                Ok(_) => at += u64::from(n),
                Err(Errno::ENOSPC) => {
                    self.made.enospc += 1;
                    return Ok(false);
                }
                Err(e) => return Err(format!("write {path} at {at}: {e:?}")),
            }
        }
        Ok(true)
    }

    fn unlink(&mut self, path: &str) -> Result<(), String> {
        self.fs.unlink(path).map_err(|e| format!("unlink {path}: {e:?}"))?;
        self.made.files.retain(|f| f != path);
        Ok(())
    }
}

/// A size from a root partition's mix: most files small, some medium, few large.
fn tree_file_size(rng: &mut ChaCha8Rng) -> u64 {
    match rng.random_range(0..100u32) {
        0..70 => rng.random_range(100..16 << 10),
        70..96 => rng.random_range(16 << 10..1 << 20),
        _ => rng.random_range(1 << 20..8 << 20),
    }
}

fn tree_copy(w: &mut Writer, rng: &mut ChaCha8Rng, scale: u32) -> Result<(), String> {
    // Depth first, as rsync walks: a directory's files, then its subdirectories.
    let mut stack: Vec<(String, u32)> = (0..4 * scale).map(|i| (format!("/top{i}"), 0)).collect();
    stack.reverse();
    while let Some((dir, depth)) = stack.pop() {
        w.mkdir(&dir)?;
        for f in 0..rng.random_range(2..10u32) {
            w.file(&format!("{dir}/f{f}"), tree_file_size(rng), CHUNK)?;
        }
        if depth < 3 {
            let subs = rng.random_range(0..4u32);
            for s in (0..subs).rev() {
                stack.push((format!("{dir}/d{s}"), depth + 1));
            }
        }
    }
    Ok(())
}

fn stream(w: &mut Writer, rng: &mut ChaCha8Rng, scale: u32) -> Result<(), String> {
    w.mkdir("/video")?;
    w.create("/video/log")?;
    let mut log_at = 0u64;
    for i in 0..2 * scale {
        let path = format!("/video/clip{i}");
        w.create(&path)?;
        let mib = rng.random_range(8..24u64);
        for m in 0..mib {
            w.fs.write_pattern(&path, m << 20, 1 << 20, i as u64 * 1000 + m).map_err(|e| format!("write {path}: {e:?}"))?;
            w.fs.write_pattern("/video/log", log_at, LOG_LINE, log_at).map_err(|e| format!("write log: {e:?}"))?;
            log_at += u64::from(LOG_LINE);
        }
    }
    Ok(())
}

fn small_files(w: &mut Writer, rng: &mut ChaCha8Rng, scale: u32) -> Result<(), String> {
    for d in 0..2 {
        w.mkdir(&format!("/mail{d}"))?;
    }
    for i in 0..100 * scale {
        let d = rng.random_range(0..2u32);
        w.file(&format!("/mail{d}/m{i}"), rng.random_range(500..4096), CHUNK)?;
    }
    Ok(())
}

fn fill(w: &mut Writer, rng: &mut ChaCha8Rng) -> Result<(), String> {
    w.mkdir("/fill")?;
    let mut i = 0;
    loop {
        let size = rng.random_range(1u64 << 20..8 << 20);
        if !w.file(&format!("/fill/f{i}"), size, 1 << 20)? {
            return Ok(());
        }
        i += 1;
    }
}

fn ageing(w: &mut Writer, rng: &mut ChaCha8Rng, scale: u32) -> Result<(), String> {
    for d in 0..4 {
        w.mkdir(&format!("/age{d}"))?;
    }
    let mut next = 0;
    for _round in 0..4 {
        for _ in 0..30 * scale {
            let d = rng.random_range(0..4u32);
            w.file(&format!("/age{d}/f{next}"), tree_file_size(rng).min(2 << 20), CHUNK)?;
            next += 1;
        }
        w.fs.sync().map_err(|e| format!("sync: {e:?}"))?;
        let files = w.made.files.clone();
        for f in files {
            if rng.random_bool(0.5) {
                w.unlink(&f)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ext4_model::{Model, MountConfig};

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for w in Workload::ALL {
            assert_eq!(Workload::parse(w.name()), Ok(w));
        }
        assert!(Workload::parse("rsync").unwrap_err().contains("tree-copy"));
    }

    #[test]
    fn the_same_seed_makes_the_same_tree_and_another_seed_another() {
        let run = |seed| {
            let mut m = Model::new(&MountConfig::default()).unwrap();
            Workload::TreeCopy.run(&mut m, seed, 1).unwrap()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        assert!(a.dirs.len() >= 4 && a.files.len() > a.dirs.len(), "{} dirs, {} files", a.dirs.len(), a.files.len());
    }
}

//! The `model_ops` target: the reference model alone under arbitrary mount
//! configs and ops. A refused config is a typed error, no op panics, the
//! model's invariants hold after every op, and a crash right now may
//! recover to the current state.
//!
//! Ops decode with `Op::arbitrary`, then a decoding step aims them: an
//! arbitrary `String` almost never names a file that exists (about 95% of
//! such ops failed with ENOENT), so most paths become a name made so far or
//! a new one in a directory made so far, from a small set of names so that
//! creates meet EEXIST and renames meet their targets. One path in sixteen
//! is left as decoded, for the path parser's sake. Offsets and lengths are
//! brought near the data the same way.

use arbitrary::{Arbitrary, Unstructured};
use ext4_model::op::FD_SLOTS;
use ext4_model::{DataMode, FallocFlags as F, FileSystem, Model, MountConfig, Op};

use super::{Reach, MAX_FUZZ_OPS};

/// Names new entries get: few, so ops collide.
const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
/// Offsets land within this many bytes, where writes put data.
const NEAR_DATA: u64 = 1 << 20;
/// Cap on one write's or read's length: the crash envelope check at the
/// end reads every file back, so bytes cost executions.
const MAX_IO: u32 = 256 << 10;

/// What one input did.
#[derive(Clone, Debug, Default)]
pub struct ModelOpsRun {
    /// The config the model accepted; `None` when it refused it.
    pub config: Option<MountConfig>,
    pub reach: Reach,
}

/// What an op's path should name for the op to have a chance.
#[derive(Clone, Copy)]
enum Want {
    File,
    Dir,
    Any,
    New,
}

/// What each path-like string of `op` should name, in
/// [`Op::path_strings_mut`]'s order (a symlink's target, then its path).
fn wants(op: &Op) -> [Want; 2] {
    use Want::*;
    match op {
        Op::Create { .. } | Op::Mkdir { .. } => [New, New],
        Op::Symlink { .. } => [Any, New],
        Op::Link { .. } => [File, New],
        Op::Rename { .. } | Op::Renameat2 { .. } => [Any, New],
        Op::Rmdir { .. } | Op::Readdir { .. } => [Dir, Dir],
        Op::Unlink { .. } | Op::Readlink { .. } | Op::Stat { .. } => [Any, Any],
        _ => [File, File],
    }
}

/// Names made so far: every path an op that succeeded created. Entries
/// go stale when unlinked or renamed away, as a real program's names do;
/// ops on them then fail as they should.
struct Names {
    files: Vec<String>,
    dirs: Vec<String>,
}

impl Names {
    fn new() -> Names {
        Names { files: Vec::new(), dirs: vec!["/".to_string()] }
    }

    /// Points `path` at a name of the kind `want`, a new name in a made
    /// directory, or (one in sixteen) leaves it as decoded, as its own first
    /// bytes choose: a mutation of one path's bytes moves that path only.
    fn aim(&self, path: &mut String, want: Want) {
        let b = path.as_bytes();
        let byte = |i: usize| usize::from(b.get(i).copied().unwrap_or(0));
        let (how, pick, name) = (byte(0) % 16, byte(1) | byte(2) << 8, NAMES[byte(3) % NAMES.len()]);
        let made = |list: &[String]| (!list.is_empty()).then(|| list[pick % list.len()].clone());
        let aimed = match (how, want) {
            (15, _) => return,
            // A name that exists where a new one is wanted (EEXIST), and
            // a new one where one that exists is (ENOENT), now and then.
            (13 | 14, Want::New) => self.any(pick),
            (14, _) => None,
            (_, Want::File) => made(&self.files),
            (_, Want::Dir) => made(&self.dirs),
            (_, Want::Any) => self.any(pick),
            (_, Want::New) => None,
        };
        *path = aimed.unwrap_or_else(|| {
            let dir = &self.dirs[pick % self.dirs.len()];
            if dir == "/" { format!("/{name}") } else { format!("{dir}/{name}") }
        });
    }

    /// The `pick`th of the files, then the directories but the root, round
    /// and round; None when nothing is made yet.
    fn any(&self, pick: usize) -> Option<String> {
        let made = self.files.len() + self.dirs.len() - 1;
        let i = pick.checked_rem(made)?;
        Some(self.files.get(i).unwrap_or_else(|| &self.dirs[1 + i - self.files.len()]).clone())
    }

    /// Records what a successful op made.
    fn note(&mut self, op: &Op) {
        let (made, dir) = match op {
            Op::Mkdir { path, .. } => (path, true),
            Op::Create { path, .. } | Op::Symlink { path, .. } | Op::Link { to: path, .. } => (path, false),
            Op::Rename { from, to } | Op::Renameat2 { from, to, .. } => (to, self.dirs.contains(from)),
            _ => return,
        };
        let list = if dir { &mut self.dirs } else { &mut self.files };
        if !list.contains(made) {
            list.push(made.clone());
        }
    }
}

/// An offset near the data, mostly: one in sixteen values (top nibble
/// 0xF) is kept raw (EFBIG, EINVAL, overflow), seven in sixteen land on a
/// block edge, the rest anywhere within [`NEAR_DATA`].
fn near(x: u64) -> u64 {
    match x >> 60 {
        0xF => x,
        0x8..=0xE => x % NEAR_DATA / 4096 * 4096,
        _ => x % NEAR_DATA,
    }
}

/// Bounds what arbitrary bytes make of an op's numbers. Uniform u64s and
/// u32s would make nearly every offset EFBIG and every FIEMAP EBADR, so
/// most are brought near the data (FIEMAP's flags to the known three); a
/// bit of each value keeps a few raw.
fn tame(op: &mut Op) {
    match op {
        Op::Write { offset, len, .. }
        | Op::DirectWrite { offset, len, .. }
        | Op::MapWrite { offset, len, .. }
        | Op::WriteFd { offset, len, .. }
        | Op::Read { offset, len, .. }
        | Op::DirectRead { offset, len, .. }
        | Op::ReadFd { offset, len, .. } => {
            *offset = near(*offset);
            *len %= MAX_IO;
        }
        Op::Append { len, .. } | Op::Rewrite { len, .. } => *len %= MAX_IO,
        Op::Lseek { offset, .. } => *offset = near(*offset),
        Op::Truncate { size, .. } | Op::FtruncateFd { size, .. } => *size = near(*size),
        Op::Fallocate { mode, offset, len, .. } => {
            // Seven modes ext4 knows, and raw bits for the eighth choice.
            const MODES: [u32; 7] = [0, F::KEEP_SIZE, F::PUNCH_HOLE | F::KEEP_SIZE, F::ZERO_RANGE, F::ZERO_RANGE | F::KEEP_SIZE, F::COLLAPSE_RANGE, F::INSERT_RANGE];
            if let Some(&m) = MODES.get((mode.0 % 8) as usize) {
                mode.0 = m;
            }
            *offset = near(*offset);
            *len = near(*len);
        }
        Op::Fiemap { start, len, flags, .. } => {
            if *start >> 63 == 0 {
                *start %= 16 << 20;
            }
            if *len >> 63 == 0 {
                *len %= 16 << 20;
            }
            if *flags >> 31 == 0 {
                *flags &= 0x7;
            }
        }
        _ => {}
    }
    if let Op::Open { slot, .. } | Op::Close { slot } | Op::ReadFd { slot, .. } | Op::WriteFd { slot, .. } | Op::FsyncFd { slot } | Op::FtruncateFd { slot, .. } = op {
        // One past the table now and then: EBADF.
        *slot %= FD_SLOTS + 1;
    }
}

/// Mostly configurations ext4 accepts (so ops get exercised), sometimes raw
/// arbitrary ones (so refusal is exercised).
fn mount_config(u: &mut Unstructured) -> arbitrary::Result<MountConfig> {
    if u.ratio(1, 16)? {
        return MountConfig::arbitrary(u);
    }
    let mut c = MountConfig {
        block_size: *u.choose(&[1024, 2048, 4096, 8192, 16384, 32768, 65536])?,
        page_size: *u.choose(&[4096, 16384, 65536])?,
        has_journal: !u.ratio(1, 8)?,
        data: *u.choose(&[None, Some(DataMode::Ordered), Some(DataMode::Writeback), Some(DataMode::Journal)])?,
        delalloc: *u.choose(&[None, Some(false), Some(true)])?,
        dioread_nolock: *u.choose(&[None, Some(false), Some(true)])?,
        ..MountConfig::default()
    };
    c.read_only = u.ratio(1, 16)?;
    c.auto_da_alloc = !u.ratio(1, 4)?;
    if u.ratio(1, 8)? {
        c.cluster_size = Some(c.block_size << u.int_in_range(1..=4)?);
    }
    Ok(c)
}

/// Runs one input; panics on a broken invariant or a current state the
/// crash envelope would not allow.
pub fn model_ops(data: &[u8]) -> ModelOpsRun {
    let mut u = Unstructured::new(data);
    let mut run = ModelOpsRun::default();
    let Ok(config) = mount_config(&mut u) else { return run };
    let mut model = match Model::new(&config) {
        Ok(m) => m,
        Err(e) => {
            assert!(config.validate().is_err(), "Model::new refused a config validate accepts: {e}");
            return run;
        }
    };
    run.config = Some(config);
    run.reach.inputs = 1;
    let mut names = Names::new();
    // Names to aim at from the first op: otherwise most inputs spend their
    // opening ops on ENOENT. Not counted; a read-only mount refuses them.
    for op in [Op::Mkdir { path: "/d".into(), perm: 0o755 }, Op::Create { path: "/a".into(), perm: 0o644 }, Op::Create { path: "/d/b".into(), perm: 0o644 }] {
        if model.apply(&op).is_ok() {
            names.note(&op);
        }
    }
    for _ in 0..MAX_FUZZ_OPS {
        let Ok(mut op) = Op::arbitrary(&mut u) else { break };
        let want = wants(&op);
        for (path, want) in op.path_strings_mut().into_iter().zip(want) {
            names.aim(path, want);
        }
        tame(&mut op);
        let outcome = model.apply(&op);
        if let Err(e) = model.check_invariants() {
            panic!("model invariant broken after {op:?}: {e}");
        }
        run.reach.ops += 1;
        if outcome.is_ok() {
            run.reach.succeeded(op.kind(), 1);
            names.note(&op);
        }
        if u.is_empty() {
            break;
        }
    }
    let envelope = model.crash_envelope();
    if let Err(v) = envelope.check(&mut model.clone()) {
        panic!("the current state must be an allowed crash state: {v}");
    }
    run
}

/// A seed corpus of `n` inputs of random bytes (a ChaCha stream, so the
/// same files every time): the first whose config the model refuses, and
/// inputs in which a write and another data op succeed, with at least half
/// of their ops (of random inputs, about 39% of ops succeed).
pub fn seed_corpus(n: usize) -> Vec<Vec<u8>> {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6d6f_6465);
    let (mut kept, mut refused) = (Vec::new(), false);
    for i in 0..n * 200 {
        if kept.len() >= n {
            break;
        }
        let len = 256 + (i % 4) * 256;
        let input: Vec<u8> = (0..len).map(|_| rng.random::<u8>()).collect();
        let run = model_ops(&input);
        let r = &run.reach;
        let reaches = r.writes > 0 && r.reads + r.truncates + r.fallocates > 0 && r.ok_percent() >= 50.0;
        let first_refusal = run.config.is_none() && !refused && !input.is_empty();
        if reaches && kept.len() + usize::from(!refused) < n || first_refusal {
            refused |= first_refusal;
            kept.push(input);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aimed_paths_are_made_names_or_new_names_in_made_dirs() {
        let mut names = Names::new();
        names.note(&Op::Mkdir { path: "/d".into(), perm: 0o755 });
        names.note(&Op::Create { path: "/d/x".into(), perm: 0o644 });
        let aimed = |first: &[u8], want: Want| {
            let mut p = String::from_utf8(first.to_vec()).unwrap();
            names.aim(&mut p, want);
            p
        };
        assert_eq!(aimed(&[15, 0, 0, 0], Want::File), "\u{f}\0\0\0", "how 15 keeps the decoded path");
        assert_eq!(aimed(&[], Want::File), "/d/x", "an empty path is aimed too");
        assert_eq!(aimed(&[1, 0, 0, 0], Want::Dir), "/");
        assert_eq!(aimed(&[1, 1, 0, 0], Want::Dir), "/d");
        assert_eq!(aimed(&[1, 1, 0, 0], Want::Any), "/d");
        assert_eq!(aimed(&[1, 0, 0, 2], Want::New), "/c");
        assert_eq!(aimed(&[1, 1, 0, 2], Want::New), "/d/c");
        assert_eq!(aimed(&[13, 0, 0, 2], Want::New), "/d/x", "an existing name where a new one is wanted");
        assert_eq!(aimed(&[14, 0, 0, 2], Want::File), "/c", "a new name where an existing one is wanted");
        names.note(&Op::Rename { from: "/d".into(), to: "/e".into() });
        assert!(names.dirs.contains(&"/e".to_string()), "a renamed directory is still one");
    }

    #[test]
    fn offsets_stay_near_the_data_unless_kept_raw() {
        assert!(near(u64::MAX >> 4) < NEAR_DATA);
        assert_eq!(near((1 << 63) | 12_345_678) % 4096, 0);
        assert!(near((1 << 63) | 12_345_678) < NEAR_DATA);
        assert_eq!(near(u64::MAX), u64::MAX);
    }
}

//! Laws of the model, as properties over random op sequences and mounts.

use ext4_model::op::{fiemap_flags, pattern};
use ext4_testkit::strategy;
use ext4_model::{FallocFlags, FiemapRequest, FileKind, FileSystem, Model, MountConfig, Op};
use proptest::prelude::*;

/// Random data-op history on one file, so laws start from odd states.
fn file_history() -> impl Strategy<Value = Vec<Op>> {
    let one = prop_oneof![
        (0u64..40_000, 1u32..9000, any::<u64>()).prop_map(|(offset, len, seed)| Op::Write { path: "/f".into(), offset, len, seed }),
        (0u64..40_000).prop_map(|size| Op::Truncate { path: "/f".into(), size }),
        (strategy::falloc_mode(), 0u64..40_000, 1u64..20_000)
            .prop_map(|(mode, offset, len)| Op::Fallocate { path: "/f".into(), mode, offset, len }),
        Just(Op::Fsync { path: "/f".into() }),
    ];
    prop::collection::vec(one, 0..12)
}

fn setup(cfg: &MountConfig, history: &[Op]) -> Model {
    let mut m = Model::new(cfg).unwrap();
    m.create("/f", 0o644).unwrap();
    for op in history {
        let _ = m.apply(op);
    }
    m.check_invariants().unwrap();
    m
}

/// A populated tree, so that random namespace ops mostly find what they name.
fn populated(cfg: &MountConfig) -> Model {
    let mut m = Model::new(cfg).unwrap();
    for d in ["/a", "/b", "/a/b", "/b/b"] {
        m.mkdir(d, 0o755).unwrap();
    }
    for f in ["/c", "/d", "/a/c", "/a/d", "/b/c", "/a/b/c"] {
        m.create(f, 0o644).unwrap();
    }
    m.symlink("/a", "/b/d").unwrap();
    m
}

fn content(m: &mut Model) -> Vec<u8> {
    let size = m.stat("/f").unwrap().size;
    m.read("/f", 0, size as u32).unwrap()
}

fn bs(m: &Model) -> u64 {
    m.mount().block_size as u64
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn write_then_read_returns_the_data(cfg in strategy::valid_mount_config(), h in file_history(),
                                         off in 0u64..50_000, len in 0u32..20_000, seed: u64) {
        let mut m = setup(&cfg, &h);
        let size_before = m.stat("/f").unwrap().size;
        let n = m.write("/f", off, &pattern(seed, len as usize)).unwrap();
        prop_assert_eq!(n, len as u64);
        prop_assert_eq!(m.read("/f", off, len).unwrap(), pattern(seed, len as usize));
        let want = if len == 0 { size_before } else { size_before.max(off + len as u64) };
        prop_assert_eq!(m.stat("/f").unwrap().size, want);
        m.check_invariants().unwrap();
    }

    #[test]
    fn punched_range_reads_zeros_and_maps_as_a_hole(cfg in strategy::valid_mount_config(), h in file_history(),
                                                    a in 0u64..40_000, b in 0u64..40_000) {
        let mut m = setup(&cfg, &h);
        let size = m.stat("/f").unwrap().size;
        prop_assume!(size > 0);
        let (off, end) = (a.min(b) % size, (a.max(b) % size).max(a.min(b) % size + 1));
        let before = content(&mut m);
        m.fallocate("/f", FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE), off, end - off).unwrap();
        let after = content(&mut m);
        prop_assert_eq!(after.len(), before.len());
        prop_assert!(after[off as usize..end as usize].iter().all(|&x| x == 0));
        prop_assert_eq!(&after[..off as usize], &before[..off as usize]);
        prop_assert_eq!(&after[end as usize..], &before[end as usize..]);
        let bs = bs(&m);
        let (first_full, last_full) = (off.div_ceil(bs) * bs, end / bs * bs);
        for e in m.fiemap("/f", FiemapRequest::whole(0)).unwrap() {
            prop_assert!(first_full >= last_full || !(e.logical < last_full && e.logical + e.length > first_full),
                "extent {:?} covers punched blocks {}..{}", e, first_full, last_full);
        }
    }

    #[test]
    fn collapse_and_insert_shift_data(cfg in strategy::valid_mount_config(), h in file_history(),
                                      ob in 0u64..12, lb in 1u64..6) {
        let mut m = setup(&cfg, &h);
        let bs = bs(&m);
        let (off, len) = (ob * bs, lb * bs);
        let before = content(&mut m);
        let size = before.len() as u64;
        let r = m.fallocate("/f", FallocFlags(FallocFlags::INSERT_RANGE), off, len);
        if off >= size {
            prop_assert_eq!(r, Err(ext4_model::Errno::EINVAL));
            return Ok(());
        }
        r.unwrap();
        let mut want = before[..off as usize].to_vec();
        want.extend(std::iter::repeat_n(0, len as usize));
        want.extend_from_slice(&before[off as usize..]);
        prop_assert_eq!(content(&mut m), want.clone());
        // The inserted range is a hole.
        for e in m.fiemap("/f", FiemapRequest::whole(0)).unwrap() {
            prop_assert!(e.logical + e.length <= off || e.logical >= off + len);
        }
        m.fallocate("/f", FallocFlags(FallocFlags::COLLAPSE_RANGE), off, len).unwrap();
        prop_assert_eq!(content(&mut m), before);
        m.check_invariants().unwrap();
    }

    #[test]
    fn truncate_shrinks_then_grows_with_zeros(cfg in strategy::valid_mount_config(), h in file_history(),
                                              small in 0u64..20_000, big in 0u64..60_000) {
        let mut m = setup(&cfg, &h);
        let before = content(&mut m);
        let small = small.min(before.len() as u64);
        m.truncate("/f", small).unwrap();
        prop_assert_eq!(m.stat("/f").unwrap().size, small);
        let big = big.max(small);
        m.truncate("/f", big).unwrap();
        let after = content(&mut m);
        prop_assert_eq!(&after[..small as usize], &before[..small as usize]);
        prop_assert!(after[small as usize..].iter().all(|&x| x == 0));
        // Blocks past the new EOF were freed.
        let bs = bs(&m);
        let past = m.fiemap("/f", FiemapRequest::whole(0)).unwrap().into_iter().filter(|e| e.logical + e.length > small.div_ceil(bs) * bs).count();
        prop_assert_eq!(past, 0);
    }

    #[test]
    fn fiemap_and_blocks_agree(cfg in strategy::valid_mount_config(), h in file_history()) {
        let mut m = setup(&cfg, &h);
        let ext = m.fiemap("/f", FiemapRequest::whole(0)).unwrap();
        let mapped: u64 = ext.iter().map(|e| e.length).sum();
        prop_assert_eq!(m.stat("/f").unwrap().blocks * 512, mapped);
        prop_assert!(ext.iter().all(|e| e.flags & fiemap_flags::DELALLOC == 0 || cfg.delalloc != Some(false)));
        // Data beyond what is mapped reads as zeros.
        let data = content(&mut m);
        let bs = bs(&m) as usize;
        for (i, chunk) in data.chunks(bs).enumerate() {
            let at = (i * bs) as u64;
            let is_mapped = ext.iter().any(|e| e.logical <= at && at < e.logical + e.length);
            prop_assert!(is_mapped || chunk.iter().all(|&x| x == 0), "unmapped block {} holds data", i);
        }
    }

    /// Any op sequence keeps the model's invariants, including link counts that
    /// match the names in the tree.
    #[test]
    fn invariants_and_nlink_accounting(cfg in strategy::valid_mount_config(), ops in prop::collection::vec(strategy::op(), 0..60)) {
        let mut m = populated(&cfg);
        for op in &ops {
            let _ = m.apply(op);
            m.check_invariants().map_err(|e| TestCaseError::fail(format!("after {op:?}: {e}")))?;
        }
        // Directory link counts from what readdir shows.
        let mut dirs = vec!["/".to_string()];
        while let Some(d) = dirs.pop() {
            let entries = m.readdir(&d).unwrap();
            let subdirs: Vec<String> = entries.iter().filter(|e| e.kind == FileKind::Directory)
                .map(|e| if d == "/" { format!("/{}", e.name) } else { format!("{d}/{}", e.name) }).collect();
            prop_assert_eq!(m.stat(&d).unwrap().nlink as usize, 2 + subdirs.len());
            dirs.extend(subdirs);
        }
    }

    /// A successful rename moves exactly one name; a failed one changes nothing.
    #[test]
    fn rename_is_atomic(ops in prop::collection::vec(strategy::op(), 0..20), from in strategy::path(), to in strategy::path()) {
        let mut m = populated(&MountConfig::default());
        for op in &ops {
            let _ = m.apply(op);
        }
        let before = ext4_model::durability::view_tree(&mut m).unwrap();
        let src = m.stat(&from);
        let dst = m.stat(&to);
        match m.rename(&from, &to) {
            // A `to` that runs through `from` (a symlink moved away) no longer
            // resolves after the rename, in Linux as here.
            Ok(()) if to.starts_with(&format!("{from}/")) => {}
            // A `from` that runs through `to` (a symlink replaced) now walks
            // the moved inode: ENOTDIR through a file, or some other name.
            Ok(()) if from.starts_with(&format!("{to}/")) => {
                let src = src.unwrap();
                prop_assert_eq!(m.stat(&to).unwrap().ino, src.ino);
                prop_assert!(m.stat(&from).map_or(true, |s| s.ino != src.ino));
            }
            Ok(()) => {
                let src = src.unwrap();
                let now = m.stat(&to).unwrap();
                prop_assert_eq!(now.ino, src.ino);
                let same = dst.as_ref().is_ok_and(|d| d.ino == src.ino);
                if !same && from != to {
                    prop_assert_eq!(m.stat(&from).err(), Some(ext4_model::Errno::ENOENT));
                }
            }
            Err(_) => prop_assert_eq!(ext4_model::durability::view_tree(&mut m).unwrap(), before),
        }
        m.check_invariants().unwrap();
    }
}

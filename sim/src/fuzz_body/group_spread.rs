//! The `group_spread` target: the allocator's group-spreading policy under
//! arbitrary geometry (block size, group count, flex size, metadata_csum
//! or uninit_bg descriptors) and policy (Orlov or oldalloc, BLOCK_UNINIT
//! groups used or skipped, mballoc's `mb_stream_req` and
//! `mb_group_prealloc`), fed mkdir, create, write, truncate, unlink,
//! rmdir and sync. After every op the allocator's counts match its
//! descriptors and bitmaps, and where ext4's rules decide a group they
//! held:
//! - a top-level directory under Orlov went to a flex group with at least
//!   the average free inodes and free clusters and the fewest directories
//!   among those (find_group_orlov), in its first group with a free inode;
//! - with flex_bg, a file went to its parent's flex group whenever that
//!   had a free inode (find_group_other).
//!
//! At the end the unmounted image passes the engine's fsck (no block
//! claimed twice, bitmaps, counts and flags exact). An error other than
//! the expected ones (ENOSPC, ENOTEMPTY), a broken rule or a panic is a crash.

use arbitrary::{Arbitrary, Unstructured};
use ext4_engine::device_mem::MemDevice;
use ext4_engine::format::group_desc::GroupDesc;
use ext4_engine::fs::Ext4;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::{Errno, FileSystem, MountConfig};

const MAX_OPS: usize = 64;
/// Logical blocks a write may start at, and blocks it may cover.
const FILE_BLOCKS: u64 = 4096;
const MAX_WRITE_BLOCKS: u64 = 64;

#[derive(Arbitrary, Debug)]
enum Step {
    Mkdir { parent: u8 },
    Create { dir: u8 },
    Write { file: u8, at: u16, blocks: u8 },
    Truncate { file: u8, blocks: u16 },
    Unlink { file: u8 },
    Rmdir { dir: u8 },
    Sync,
}

/// What one input ran, for the corpus replay's checks.
#[derive(Debug, Default)]
pub struct SpreadRun {
    pub mount: String,
    pub groups: u32,
    pub flex_size: u32,
    pub steps: usize,
    /// Top-level directories made under Orlov whose flex group the rule chose.
    pub orlov_checked: usize,
    /// Files whose group the parent's flex decided.
    pub home_checked: usize,
    pub enospc: usize,
}

/// Orlov's unit stats (a flex group, or a group without flex_bg):
/// free inodes, free clusters, directories.
fn unit_stats(descs: &[GroupDesc], flex: u32) -> Vec<(u64, u64, u64)> {
    descs
        .chunks(flex as usize)
        .map(|c| c.iter().fold((0, 0, 0), |(i, b, d), g| (i + u64::from(g.free_inodes), b + u64::from(g.free_blocks), d + u64::from(g.used_dirs))))
        .collect()
}

/// The group find_group_orlov may give a top-level directory, if its rule decides one.
fn orlov_allows(before: &[GroupDesc], flex: u32, group: u32) -> Option<bool> {
    let units = unit_stats(before, flex);
    let n = units.len() as u64;
    let avg_i = units.iter().map(|u| u.0).sum::<u64>() / n;
    let avg_b = units.iter().map(|u| u.1).sum::<u64>() / n;
    let eligible: Vec<usize> = (0..units.len()).filter(|&i| units[i].0 > 0 && units[i].0 >= avg_i && units[i].1 >= avg_b).collect();
    let fewest = eligible.iter().map(|&i| units[i].2).min()?;
    let unit = (group / flex) as usize;
    let first_free = (unit as u32 * flex..((unit as u32 + 1) * flex).min(before.len() as u32)).find(|&g| before[g as usize].free_inodes > 0);
    Some(eligible.contains(&unit) && units[unit].2 == fewest && first_free == Some(group))
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Ok, or one of the errors an op may answer here; anything else is a crash.
fn allowed<T>(r: Result<T, Errno>, ok_errors: &[Errno], what: &str) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) if ok_errors.contains(&e) => None,
        Err(e) => panic!("{what}: {e:?}"),
    }
}

/// Runs one input; None when it decodes to nothing runnable.
pub fn group_spread(data: &[u8]) -> Option<SpreadRun> {
    let mut u = Unstructured::new(data);
    let bs = *u.choose(&[1024u32, 2048, 4096]).ok()?;
    let groups = u.int_in_range(2u32..=40).ok()?;
    let flex_log = *u.choose(&[None, Some(1u8), Some(2), Some(3), Some(4)]).ok()?;
    let metadata_csum = u.arbitrary::<bool>().ok()?;
    let skip = u.arbitrary::<bool>().ok()?;
    let orlov = !u.ratio(1, 4).ok()?;
    // mballoc's knobs: which files count as streams (inode windows) and
    // how large the locality group's windows are (0: none at all).
    let stream_req = *u.choose(&[None, Some(0u32), Some(4), Some(256)]).ok()?;
    let group_prealloc = *u.choose(&[None, Some(0u32), Some(8), Some(2048)]).ok()?;
    let first = u64::from(bs == 1024);
    let size = (first + u64::from(groups) * u64::from(8 * bs)) * u64::from(bs);
    let mut text = format!("bs={bs}");
    if skip {
        text += ",skip_block_uninit";
    }
    if !orlov {
        text += ",oldalloc";
    }
    if let Some(n) = stream_req {
        text += &format!(",mb_stream_req={n}");
    }
    if let Some(n) = group_prealloc {
        text += &format!(",mb_group_prealloc={n}");
    }
    let config: MountConfig = text.parse().ok()?;
    let mut opts = MkfsOptions::for_mount(&config, size, *b"group-spread-fuz", [5; 16], 1_700_000_000);
    opts.flex_bg_log = flex_log;
    opts.metadata_csum = metadata_csum;
    let mut dev = MemDevice::new(size);
    mkfs(&mut dev, &opts).ok()?;
    let mut fs = Ext4::mount(dev, &config).ok()?;
    let flex = fs.geometry().flex_size();
    let ipg = fs.geometry().inodes_per_group;
    let mut run = SpreadRun { mount: text.clone(), groups: fs.geometry().group_count, flex_size: flex, ..SpreadRun::default() };
    let group_of = |ino: u64| ((ino - 1) / u64::from(ipg)) as u32;
    let mut dirs = vec!["/".to_string()];
    let mut files: Vec<String> = Vec::new();
    let mut names = 0u32;
    while run.steps < MAX_OPS && !u.is_empty() {
        let Ok(step) = Step::arbitrary(&mut u) else { break };
        run.steps += 1;
        let what = format!("{step:?} on {text}, {} groups, flex {flex}", run.groups);
        let before = fs.group_descs().to_vec();
        match step {
            Step::Mkdir { parent } => {
                let p = dirs[usize::from(parent) % dirs.len()].clone();
                names += 1;
                let path = join(&p, &format!("d{names}"));
                if allowed(fs.mkdir(&path, 0o755), &[Errno::ENOSPC], &what).is_some() {
                    let group = group_of(fs.stat(&path).unwrap_or_else(|e| panic!("{what}: stat {path}: {e:?}")).ino);
                    if orlov && p == "/" {
                        if let Some(ok) = orlov_allows(&before, flex, group) {
                            assert!(ok, "{what}: top-level directory {path} in group {group}, against find_group_orlov's rule");
                            run.orlov_checked += 1;
                        }
                    }
                    dirs.push(path);
                } else {
                    run.enospc += 1;
                }
            }
            Step::Create { dir } => {
                let p = dirs[usize::from(dir) % dirs.len()].clone();
                names += 1;
                let path = join(&p, &format!("f{names}"));
                if allowed(fs.create(&path, 0o644), &[Errno::ENOSPC], &what).is_some() {
                    let group = group_of(fs.stat(&path).unwrap_or_else(|e| panic!("{what}: stat {path}: {e:?}")).ino);
                    let parent = group_of(fs.stat(&p).unwrap_or_else(|e| panic!("{what}: stat {p}: {e:?}")).ino);
                    let home = parent - parent % flex..(parent - parent % flex + flex).min(before.len() as u32);
                    if flex > 1 && home.clone().any(|g| before[g as usize].free_inodes > 0) {
                        assert!(home.contains(&group), "{what}: file {path} in group {group}, its parent's flex is groups {home:?}");
                        run.home_checked += 1;
                    }
                    files.push(path);
                } else {
                    run.enospc += 1;
                }
            }
            Step::Write { file, at, blocks } if !files.is_empty() => {
                let f = &files[usize::from(file) % files.len()];
                let at = u64::from(at) % FILE_BLOCKS * u64::from(bs);
                let len = (u64::from(blocks) % MAX_WRITE_BLOCKS + 1) * u64::from(bs);
                if allowed(fs.write(f, at, &vec![0x5a; len as usize]), &[Errno::ENOSPC], &what).is_none() {
                    run.enospc += 1;
                }
            }
            Step::Truncate { file, blocks } if !files.is_empty() => {
                let f = &files[usize::from(file) % files.len()];
                allowed(fs.truncate(f, u64::from(blocks) % FILE_BLOCKS * u64::from(bs)), &[Errno::ENOSPC], &what);
            }
            Step::Unlink { file } if !files.is_empty() => {
                let f = files.swap_remove(usize::from(file) % files.len());
                allowed(fs.unlink(&f), &[], &what);
            }
            Step::Rmdir { dir } if dirs.len() > 1 => {
                let i = 1 + usize::from(dir) % (dirs.len() - 1);
                if allowed(fs.rmdir(&dirs[i]), &[Errno::ENOTEMPTY], &what).is_some() {
                    dirs.swap_remove(i);
                }
            }
            Step::Sync => {
                allowed(fs.sync(), &[Errno::ENOSPC], &what);
            }
            _ => {}
        }
        if let Err(e) = fs.check_allocator() {
            panic!("{what}: allocator counts: {e}");
        }
    }
    let dev = fs.unmount().unwrap_or_else(|e| panic!("unmount on {text}: {e}"));
    let (_, report) = ext4_engine::check::check(dev);
    assert!(report.is_clean(), "engine fsck after {} steps on {text}, {} groups, flex {flex}: {report}", run.steps, run.groups);
    Some(run)
}

/// Inputs for the committed corpus: seeded bytes long enough for the
/// geometry and some 40 steps each, kept when they decode to a run.
pub fn seed_corpus(n: usize) -> Vec<Vec<u8>> {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5b7e_ad00);
    let mut kept = Vec::new();
    for _ in 0..n * 20 {
        if kept.len() >= n {
            break;
        }
        let input: Vec<u8> = (0..320).map(|_| rng.random()).collect();
        if group_spread(&input).is_some_and(|run| run.steps >= 16) {
            kept.push(input);
        }
    }
    kept
}

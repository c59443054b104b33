//! The `folio_nofail` target: the engine under arbitrary memory geometry
//! (block size, page size, folio order cap, budget, fragmentation) and a
//! stream of writes, reads, write-backs and metadata reads. A no-fail
//! request that fails or livelocks, an ENOMEM where the budget holds 256
//! minimum folios and memory is whole (or blocks are single pages), an
//! ENOMEM that changed the file, a panic (an index conversion that
//! overflows among them), or data that reads back wrong is a crash.

use arbitrary::{Arbitrary, Unstructured};
use ext4_engine::device_mem::MemDevice;
use ext4_engine::fs::Ext4;
use ext4_engine::memory::nofail::{NoFailStats, NOFAIL_WARN_ABOVE_ORDER};
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::{Errno, FileSystem, MountConfig};

use crate::memory::folios::BuddyFolios;

/// Files the ops aim at, and the bytes of each the target compares.
const FILES: usize = 4;
const FILE_SPAN: u64 = 2 << 20;
const MAX_LEN: u64 = 256 << 10;
const MAX_OPS: usize = 48;
const DISK_BYTES: u64 = 256 << 20;

#[derive(Arbitrary, Debug)]
enum Step {
    /// `len` bytes of a pattern at `at`, near a folio boundary.
    Write { file: u8, at: u32, len: u32, byte: u8 },
    Read { file: u8, at: u32, len: u32 },
    Fsync { file: u8 },
    Sync,
    /// Metadata reads and writes: a directory of files in a fresh place,
    /// then every name of it looked at.
    Spread { files: u8 },
    Truncate { file: u8, size: u32 },
    DropCaches,
    Kswapd,
}

/// What one input ran, for the corpus replay's checks.
#[derive(Debug, Default)]
pub struct NoFailRun {
    pub mount: String,
    pub fragment: u8,
    pub stats: NoFailStats,
    pub kswapd_passes: u64,
    /// Clean metadata folios dropped by kswapd or for no-fail requests,
    /// and checkpoints run to unpin them.
    pub metadata_reclaimed: u64,
    /// Writes and truncates that answered ENOMEM (no block for a folio).
    pub enomem: u64,
    /// Writes that came back short.
    pub short: u64,
    pub steps: usize,
}

/// Runs one input; None when it decodes to nothing runnable.
pub fn folio_nofail(data: &[u8]) -> Option<NoFailRun> {
    let mut u = Unstructured::new(data);
    let bs = *u.choose(&[1024u32, 2048, 4096, 8192, 16384, 32768, 65536]).ok()?;
    let ps = *u.choose(&[4096u32, 16384, 65536]).ok()?;
    let max_order = u.int_in_range(0u8..=9).ok()?;
    let mode = *u.choose(&["", "data=journal", "data=writeback", "nodelalloc"]).ok()?;
    let need_mb = (u64::from(bs.max(ps)) * u64::from(ext4_model::config::MIN_FOLIOS_IN_MEMORY)).div_ceil(1 << 20);
    let budget_mb = need_mb + u64::from(u.int_in_range(0u8..=3).ok()?) * need_mb;
    let fragment = u.int_in_range(0u8..=90).ok()?;
    let frag_seed = u64::from(u.arbitrary::<u16>().ok()?);
    let text = format!("bs={bs},ps={ps},max_folio_order={max_order},page_cache_mb={budget_mb}{}{mode}", if mode.is_empty() { "" } else { "," });
    let config: MountConfig = text.parse().ok()?;
    let effective = config.validate().ok()?;
    let mut dev = MemDevice::new(DISK_BYTES);
    mkfs(&mut dev, &MkfsOptions::for_mount(&config, DISK_BYTES, *b"folio-nofail-fuz", [9; 16], 1_700_000_000)).ok()?;
    let memory = BuddyFolios::new(ps, effective.page_cache_bytes, fragment, frag_seed);
    let mut fs = Ext4::mount_with_memory(dev, &config, Box::new(memory)).ok()?;
    // None once the disk filled under a file: its bytes are no longer known.
    let mut shadow: Vec<Option<Vec<u8>>> = vec![Some(Vec::new()); FILES];
    for f in 0..FILES {
        fs.create(&format!("/f{f}"), 0o644).ok()?;
    }
    let folio = u64::from(bs.max(ps)) << effective.min_folio_order.min(effective.max_folio_order);
    let mut run = NoFailRun { mount: text.clone(), fragment, ..NoFailRun::default() };
    // Fragmented memory may have no block for a folio of several pages:
    // then a write or truncate answers ENOMEM and changes nothing (or a
    // write comes back short), as the model's op/memory.rs says.
    let enomem_ok = fragment > 0 && effective.min_folio_order > 0;
    let mut dirs = 0u32;
    while run.steps < MAX_OPS && !u.is_empty() {
        let Ok(step) = Step::arbitrary(&mut u) else { break };
        run.steps += 1;
        let what = format!("{step:?} on {text} fragment={fragment}");
        match step {
            Step::Write { file, at, len, byte } => {
                let f = usize::from(file) % FILES;
                // Near a folio boundary, or anywhere.
                let at = if at & 1 == 0 { (u64::from(at >> 1) % (FILE_SPAN / folio)) * folio + u64::from(at >> 24) % 3 } else { u64::from(at) % FILE_SPAN };
                let len = (u64::from(len) % MAX_LEN).min(FILE_SPAN - at);
                let bytes: Vec<u8> = (0..len).map(|i| byte.wrapping_add((i % 251) as u8)).collect();
                let written = fs.write(&format!("/f{f}"), at, &bytes);
                if enomem_ok && written == Err(Errno::ENOMEM) {
                    run.enomem += 1;
                    continue;
                }
                if written.as_ref().is_ok_and(|&n| n < len) {
                    run.short += 1;
                }
                match expect(written, &what) {
                    // A write of nothing changes nothing, its size included.
                    Some(0) => {}
                    Some(n) => {
                        if let Some(s) = shadow[f].as_mut() {
                            let end = (at + n) as usize;
                            if s.len() < end {
                                s.resize(end, 0);
                            }
                            s[at as usize..end].copy_from_slice(&bytes[..n as usize]);
                        }
                    }
                    None => shadow[f] = None,
                }
            }
            Step::Read { file, at, len } => {
                let f = usize::from(file) % FILES;
                let at = u64::from(at) % FILE_SPAN;
                let len = (u64::from(len) % MAX_LEN) as u32;
                let got = expect(fs.read(&format!("/f{f}"), at, len), &what);
                if let (Some(got), Some(s)) = (got, shadow[f].as_ref()) {
                    let want: &[u8] = s.get(at as usize..).map_or(&[], |s| &s[..s.len().min(len as usize)]);
                    assert!(got == want, "{what}: read back {} bytes differing from the {} written", got.len(), want.len());
                }
            }
            Step::Fsync { file } => {
                expect(fs.fsync(&format!("/f{}", usize::from(file) % FILES)), &what);
            }
            Step::Sync => {
                expect(fs.sync(), &what);
            }
            Step::Spread { files } => {
                let dir = format!("/d{dirs}");
                dirs += 1;
                if expect(fs.mkdir(&dir, 0o755), &what).is_some() {
                    let made: Vec<String> = (0..files % 32).map(|i| format!("{dir}/n{i}")).filter(|p| expect(fs.create(p, 0o644), &what).is_some()).collect();
                    for p in &made {
                        expect(fs.stat(p), &what);
                    }
                    let listed = expect(fs.readdir(&dir), &what).map_or(0, |e| e.len());
                    assert!(listed >= made.len(), "{what}: {listed} names listed of {} made", made.len());
                }
            }
            Step::Truncate { file, size } => {
                let f = usize::from(file) % FILES;
                let size = u64::from(size) % FILE_SPAN;
                let truncated = fs.truncate(&format!("/f{f}"), size);
                if enomem_ok && truncated == Err(Errno::ENOMEM) {
                    run.enomem += 1;
                    continue;
                }
                match expect(truncated, &what) {
                    Some(()) => {
                        if let Some(s) = shadow[f].as_mut() {
                            s.resize(size as usize, 0);
                        }
                    }
                    None => shadow[f] = None,
                }
            }
            Step::DropCaches => {
                expect(fs.sync(), &what);
                fs.drop_clean_folios();
            }
            Step::Kswapd => {
                fs.kswapd().unwrap_or_else(|e| panic!("{what}: kswapd failed: {e}"));
            }
        }
        if let Some(l) = fs.take_livelock() {
            panic!("{what}: {l}");
        }
        let data = fs.data_path_stats();
        assert!(data.cache_bytes + data.metadata_bytes <= data.cache_bound_bytes, "{what}: {} data and {} metadata bytes past the bound {}", data.cache_bytes, data.metadata_bytes, data.cache_bound_bytes);
    }
    for (f, want) in shadow.iter().enumerate() {
        let got = expect(fs.read(&format!("/f{f}"), 0, FILE_SPAN as u32), "the final read");
        if let (Some(got), Some(want)) = (got, want) {
            assert!(got == *want, "file {f} reads back wrong at the end on {text} fragment={fragment}: {} bytes, {} expected, first difference at {:?}", got.len(), want.len(), got.iter().zip(want.iter()).position(|(a, b)| a != b));
        }
    }
    run.stats = fs.nofail_stats();
    let k = fs.kswapd_stats();
    run.kswapd_passes = k.passes;
    run.metadata_reclaimed = k.metadata_folios + k.checkpoints + run.stats.reclaimed_metadata_folios + run.stats.reclaim_checkpoints;
    let warned: u64 = run.stats.by_order.iter().filter(|(o, _)| **o > NOFAIL_WARN_ABOVE_ORDER).map(|(_, n)| n).sum();
    assert_eq!(run.stats.warnings, warned, "every order > 1 request warns, no other");
    expect(fs.unmount().map(|_| ()).map_err(Errno::from), "the unmount");
    Some(run)
}

/// An op's answer; None for ENOSPC, the disk's to give. Any other error
/// is a crash.
fn expect<T>(r: Result<T, Errno>, what: &str) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(Errno::ENOSPC) => None,
        Err(e) => panic!("{what}: {e:?} ({})", ext4_engine::fs::take_last_error().map_or_else(String::new, |e| e.to_string())),
    }
}

/// The seed corpus's generator: seeded random inputs long enough for
/// dozens of steps, kept while they reach something new (a block and page
/// size pair with or without fragmentation; no-fail warnings, retries,
/// compactions, metadata reclaim, kswapd passes). Deterministic: the same
/// call gives the same files.
pub fn seed_corpus(want: usize) -> Vec<Vec<u8>> {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6e6f_6661_696c); // "nofail"
    let mut seen = std::collections::BTreeSet::new();
    let mut kept = Vec::new();
    for _ in 0..want * 40 {
        if kept.len() >= want {
            break;
        }
        let len = rng.random_range(200..700);
        let input: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let Some(run) = folio_nofail(&input) else { continue };
        if run.steps < 16 {
            continue;
        }
        let s = &run.stats;
        let pair = run.mount.split(',').take(2).collect::<Vec<_>>().join(",");
        let marks = [run.fragment > 0, s.warnings > 0, s.retries > 0, s.compactions > 0, run.metadata_reclaimed > 0, run.kswapd_passes > 0];
        if seen.insert((pair, marks)) {
            kept.push(input);
        }
    }
    kept
}

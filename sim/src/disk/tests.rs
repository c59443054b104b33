//! Whole-disk tests of [`SimDisk`]: the durability contract through the
//! `BlockDevice` interface, timing shapes, determinism and bad configuration.

use ext4_engine::device::{BlockDevice, DeviceError, IoClass, WriteFlags};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

fn disk(profile: &str, size_bytes: u64, seed: u64) -> SimDisk {
    let profile = DiskProfile::builtin(profile).expect("built-in");
    SimDisk::new(size_bytes, profile, seed, FaultConfig::NONE).expect("valid disk")
}

fn read_block(disk: &mut SimDisk, offset: u64) -> Vec<u8> {
    let mut buf = vec![0; 4096];
    disk.read(offset, &mut buf, IoClass::Data).expect("read");
    buf
}

fn durable_block(disk: &SimDisk, offset: u64) -> Vec<u8> {
    let mut buf = vec![0; 4096];
    disk.read_durable(offset, &mut buf).expect("in range");
    buf
}

#[test]
fn bad_sizes_and_configs_are_typed_errors() {
    let ram = || DiskProfile::builtin("ram").expect("built-in");
    assert_eq!(SimDisk::new(0, ram(), 1, FaultConfig::NONE).unwrap_err(), DiskConfigError::Size(0));
    assert_eq!(SimDisk::new(1000, ram(), 1, FaultConfig::NONE).unwrap_err(), DiskConfigError::Size(1000));
    let bad_profile = DiskProfile { atomic_write_bytes: 3, ..ram() };
    assert!(matches!(
        SimDisk::new(GIB, bad_profile, 1, FaultConfig::NONE),
        Err(DiskConfigError::Profile(ProfileError::AtomicWriteBytes(3)))
    ));
    let bad_faults = FaultConfig { read_error: FaultSwitch::on(-1.0), ..FaultConfig::NONE };
    assert!(matches!(SimDisk::new(GIB, ram(), 1, bad_faults), Err(DiskConfigError::Faults(_))));
    let mut fine = SimDisk::new(GIB, ram(), 1, FaultConfig::NONE).expect("valid");
    assert!(fine.set_faults(bad_faults).is_err());
    assert_eq!(fine.faults(), &FaultConfig::NONE, "a refused config changes nothing");
}

#[test]
fn unaligned_or_out_of_range_io_is_refused_without_effect() {
    let mut disk = disk("hdd-7200", GIB, 1);
    let out = |offset, len| DeviceError::OutOfRange { offset, len, size: GIB };
    assert_eq!(disk.read(100, &mut [0; 512], IoClass::Data), Err(out(100, 512)));
    assert_eq!(disk.write(0, &[0; 100], WriteFlags::DATA), Err(out(0, 100)));
    assert_eq!(disk.write(GIB, &[0; 512], WriteFlags::DATA), Err(out(GIB, 512)));
    assert_eq!(disk.read(u64::MAX - 511, &mut [0; 1024], IoClass::Data), Err(out(u64::MAX - 511, 1024)));
    assert_eq!(disk.inject_latent_sector(GIB), Err(out(GIB, 512)));
    assert_eq!(disk.stats(), &DiskStats::default());
    assert_eq!(disk.now(), SimTime::ZERO);
}

#[test]
fn reads_see_cached_writes_that_a_crash_may_then_lose() {
    let mut disk = disk("ram", GIB, 3);
    disk.write(4096, &[7; 4096], WriteFlags::DATA).expect("write");
    assert_eq!(read_block(&mut disk, 4096), vec![7; 4096], "reads see the cache");
    assert_eq!(durable_block(&disk, 4096), vec![0; 4096], "not yet durable");
    assert_ne!(disk.image_hash(), disk.durable_image_hash());
    let report = disk.crash(&CrashPolicy::LOSE_ALL);
    assert_eq!(report.dropped(), 1);
    assert_eq!(read_block(&mut disk, 4096), vec![0; 4096], "the unflushed write vanished");
    assert_eq!(disk.pending_writes(), 0);
}

#[test]
fn flushed_and_fua_writes_survive_every_crash() {
    for seed in 0..16 {
        let mut disk = disk("ssd", GIB, seed);
        disk.write(0, &[1; 4096], WriteFlags::METADATA).expect("write");
        disk.flush().expect("flush");
        disk.write(8192, &[2; 4096], WriteFlags { class: IoClass::Journal, fua: true }).expect("fua");
        disk.write(16384, &[3; 8192], WriteFlags::DATA).expect("write");
        // Rewrites of the durable blocks, still pending: a crash may lose them
        // but must then leave the durable versions, not zeros.
        disk.write(0, &[4; 4096], WriteFlags::METADATA).expect("write");
        let policy = CrashPolicy::new(0.5, 1.0).expect("valid");
        disk.crash(&policy);
        let first = read_block(&mut disk, 0);
        assert!(first == vec![1; 4096] || first == vec![4; 4096], "seed {seed}");
        assert_eq!(read_block(&mut disk, 8192), vec![2; 4096], "FUA survives, seed {seed}");
    }
}

#[test]
fn a_fua_write_is_durable_at_once_and_stale_cached_data_cannot_resurrect() {
    let mut disk = disk("hdd-5400", GIB, 5);
    disk.write(0, &[1; 8192], WriteFlags::JOURNAL).expect("write");
    disk.write(4096, &[2; 4096], WriteFlags { class: IoClass::Journal, fua: true }).expect("fua");
    assert_eq!(durable_block(&disk, 4096), vec![2; 4096]);
    assert_eq!(disk.stats().fua_writes, 1);
    disk.crash(&CrashPolicy::KEEP_ALL);
    assert_eq!(read_block(&mut disk, 0), vec![1; 4096]);
    assert_eq!(read_block(&mut disk, 4096), vec![2; 4096], "the older cached write must not win");
}

#[test]
fn a_full_cache_destages_its_oldest_writes_which_then_survive_a_crash() {
    let tiny_cache = DiskProfile { write_cache_bytes: 8192, ..DiskProfile::builtin("ram").expect("built-in") };
    let mut disk = SimDisk::new(GIB, tiny_cache, 1, FaultConfig::NONE).expect("valid");
    for (index, byte) in [1u8, 2, 3].into_iter().enumerate() {
        disk.write(index as u64 * 4096, &[byte; 4096], WriteFlags::DATA).expect("write");
    }
    assert_eq!((disk.pending_writes(), disk.stats().destaged_writes), (2, 1));
    disk.crash(&CrashPolicy::LOSE_ALL);
    assert_eq!(read_block(&mut disk, 0), vec![1; 4096], "the destaged write is durable");
    assert_eq!(read_block(&mut disk, 4096), vec![0; 4096]);

    // Larger than the whole cache: written through, durable at once.
    disk.write(GIB / 2, &[9; 16384], WriteFlags::DATA).expect("write");
    assert_eq!(durable_block(&disk, GIB / 2), vec![9; 4096]);
}

#[test]
fn write_through_profile_never_has_anything_to_lose() {
    let through = DiskProfile { write_cache_bytes: 0, ..DiskProfile::builtin("ssd").expect("built-in") };
    let mut disk = SimDisk::new(GIB, through, 1, FaultConfig::NONE).expect("valid");
    disk.write(0, &[5; 4096], WriteFlags::DATA).expect("write");
    assert_eq!(disk.pending_writes(), 0);
    disk.crash(&CrashPolicy::LOSE_ALL);
    assert_eq!(read_block(&mut disk, 0), vec![5; 4096]);
}

#[test]
fn ram_costs_zero_time_whatever_the_workload() {
    let mut disk = disk("ram", TIB, 9);
    let mut workload = ChaCha8Rng::seed_from_u64(1);
    for _ in 0..200 {
        let offset = workload.random_range(0..TIB / 4096) * 4096;
        disk.write(offset, &[1; 4096], WriteFlags::DATA).expect("write");
        read_block(&mut disk, workload.random_range(0..TIB / 4096) * 4096);
    }
    disk.flush().expect("flush");
    assert_eq!(disk.now(), SimTime::ZERO);
    assert_eq!(disk.stats().total().busy_ns, 0);
    assert!(disk.stats().seeks > 100, "seeks are still counted: {}", disk.stats().seeks);
}

fn read_time_ns(offsets: &[u64]) -> u64 {
    let mut disk = disk("hdd-7200", TIB, 4);
    for &offset in offsets {
        read_block(&mut disk, offset);
    }
    disk.now().as_ns()
}

#[test]
fn sequential_reads_on_hdd_are_much_cheaper_than_random_ones() {
    let sequential: Vec<u64> = (0..256).map(|i| (TIB / 2) + i * 4096).collect();
    let mut workload = ChaCha8Rng::seed_from_u64(2);
    let random: Vec<u64> = (0..256).map(|_| workload.random_range(0..TIB / 4096) * 4096).collect();
    let (fast, slow) = (read_time_ns(&sequential), read_time_ns(&random));
    assert!(slow > 20 * fast, "sequential {fast} ns vs random {slow} ns");
    // A random 4 KiB read on a 7200 rpm drive costs milliseconds.
    assert!(slow / 256 > 5_000_000, "mean random read {} ns", slow / 256);
}

#[test]
fn flush_destages_in_one_sweep_and_costs_media_time_on_hdd() {
    let mut disk = disk("hdd-7200", TIB, 6);
    for i in [7u64, 1, 5, 3] {
        disk.write(i * GIB, &[1; 4096], WriteFlags::DATA).expect("write");
    }
    let before = disk.now().as_ns();
    let cached = disk.stats().data.busy_ns;
    assert!(before < 1_000_000, "cached writes only cross the link: {before} ns");
    disk.flush().expect("flush");
    let flush_cost = disk.now().as_ns() - before;
    assert!(flush_cost > 4 * DiskProfile::builtin("hdd-7200").expect("built-in").seek_track_to_track_ns);
    let stats = disk.stats();
    assert_eq!((stats.flushes, stats.destaged_writes, stats.seeks), (1, 4, 4));
    // An ascending sweep from 0 to 7 GiB travels 7 GiB, not the 22 GiB of issue order.
    assert_eq!(stats.seek_distance_bytes, 7 * GIB - 3 * 4096);
    assert!(stats.data.busy_ns > cached);
    assert_eq!(disk.image_hash(), disk.durable_image_hash());
}

#[test]
fn a_huge_sparse_device_with_few_writes_stays_cheap_and_exports_clipped_extents() {
    let size = 16 * TIB;
    let mut disk = disk("nvme", size, 8);
    disk.write(size - 512, &[3; 512], WriteFlags::METADATA).expect("last sector");
    disk.write(0, &[4; 4096], WriteFlags::METADATA).expect("first block");
    disk.flush().expect("flush");
    let mut last = [0; 512];
    disk.read(size - 512, &mut last, IoClass::Metadata).expect("read");
    assert_eq!(last, [3; 512]);
    let extents: Vec<(u64, usize)> = disk.durable_extents().map(|(offset, data)| (offset, data.len())).collect();
    assert_eq!(extents, vec![(0, 4096), (size - 4096, 4096)]);
    assert_eq!(disk.touched_bytes(), 2 * 4096);
}

#[test]
fn the_last_exported_extent_is_clipped_to_an_odd_device_size() {
    let mut disk = disk("ram", 4096 + 512, 1);
    disk.write(4096, &[1; 512], WriteFlags::DATA).expect("last sector");
    assert_eq!(disk.durable_extents().count(), 0, "nothing durable yet");
    disk.flush().expect("flush");
    let extents: Vec<(u64, usize)> = disk.durable_extents().map(|(offset, data)| (offset, data.len())).collect();
    assert_eq!(extents, vec![(4096, 512)]);
}

/// A mixed workload with faults, flushes and a crash; returns everything a run
/// should reproduce.
fn run(seed: u64, extra_reads: bool) -> (DiskStats, u64, u64, Vec<Result<(), DeviceError>>, CrashReport) {
    let faults = FaultConfig {
        read_error: FaultSwitch::on(0.05),
        write_error: FaultSwitch::on(0.05),
        latent_sector: FaultSwitch::on(0.02),
        ..FaultConfig::NONE
    };
    let profile = DiskProfile::builtin("hdd-5400").expect("built-in");
    let mut disk = SimDisk::new(TIB, profile, seed, faults).expect("valid");
    // The workload's own stream is fixed: only the disk's seed varies.
    let mut workload = ChaCha8Rng::seed_from_u64(77);
    let mut results = Vec::new();
    for step in 0..300u64 {
        let offset = workload.random_range(0..TIB / 4096) * 4096;
        let byte = (step % 250) as u8 + 1;
        let result = match workload.random_range(0..10) {
            0 => disk.flush(),
            1..=4 => disk.read(offset, &mut [0; 4096], IoClass::Metadata),
            5 => disk.write(offset, &[byte; 8192], WriteFlags { class: IoClass::Journal, fua: true }),
            _ => disk.write(offset, &vec![byte; 16384], WriteFlags::DATA),
        };
        results.push(result);
        if extra_reads {
            disk.peek(offset, &mut [0; 4096]).expect("in range");
        }
    }
    // Leave a burst in the cache so the crash has real choices to make.
    for i in 0..12u64 {
        let result = disk.write(i * 3 * GIB, &[0xC0; 8192], WriteFlags::DATA);
        results.push(result);
    }
    let report = disk.crash(&CrashPolicy::default());
    (disk.stats().clone(), disk.image_hash(), disk.durable_image_hash(), results, report)
}

#[test]
fn the_same_seed_and_ops_reproduce_stats_hashes_and_faults_exactly() {
    let first = run(1234, false);
    let second = run(1234, false);
    assert_eq!(first.0, second.0);
    assert_eq!((first.1, first.2), (second.1, second.2));
    assert_eq!(first.3, second.3);
    assert_eq!(first.4, second.4);
    assert!(first.0.faults.total() > 0, "the workload should meet some faults");
    assert!(first.4.dropped() > 0 && first.4.kept() > 0, "{:?}", first.4);
}

#[test]
fn different_seeds_give_different_runs() {
    let (a, b) = (run(1, false), run(2, false));
    assert_ne!(a.0.elapsed_ns, b.0.elapsed_ns);
    assert_ne!(a.3, b.3, "fault draws should differ");
    assert_ne!(a.1, b.1, "post-crash images should differ");
}

#[test]
fn side_effect_free_peeks_do_not_perturb_the_run() {
    assert_eq!(run(5, false), run(5, true));
}

#[test]
fn crash_decisions_do_not_depend_on_how_much_latency_was_drawn() {
    let image_after = |reads: u64| {
        let mut disk = disk("hdd-7200", TIB, 10);
        for i in 0..reads {
            read_block(&mut disk, i * GIB);
        }
        for i in 0..32u64 {
            disk.write(i * 4096, &[i as u8 + 1; 4096], WriteFlags::DATA).expect("write");
        }
        let report = disk.crash(&CrashPolicy::default());
        (report, disk.durable_image_hash())
    };
    let (quiet, busy) = (image_after(0), image_after(50));
    assert_eq!(quiet, busy);
}

#[test]
fn hashes_agree_after_flush_and_do_not_depend_on_write_history() {
    let mut a = disk("ssd", GIB, 1);
    let mut b = disk("ssd", GIB, 2);
    a.write(0, &[1; 4096], WriteFlags::DATA).expect("write");
    a.write(0, &[2; 4096], WriteFlags::DATA).expect("write");
    b.write(0, &[2; 4096], WriteFlags::METADATA).expect("write");
    b.write(GIB / 2, &[0; 4096], WriteFlags::DATA).expect("zeros");
    assert_eq!(a.image_hash(), b.image_hash());
    a.flush().expect("flush");
    assert_eq!(a.image_hash(), a.durable_image_hash());
    assert_ne!(a.durable_image_hash(), b.durable_image_hash());
}

#[test]
fn stats_count_per_class_and_print_a_table() {
    let mut disk = disk("hdd-7200", GIB, 2);
    disk.write(0, &[1; 4096], WriteFlags::JOURNAL).expect("write");
    disk.write(8192, &[1; 8192], WriteFlags::METADATA).expect("write");
    disk.read(8192, &mut [0; 8192], IoClass::Metadata).expect("read");
    disk.read(GIB / 2, &mut [0; 4096], IoClass::Data).expect("read");
    disk.flush().expect("flush");
    let stats = disk.stats();
    assert_eq!((stats.journal.writes, stats.journal.write_bytes), (1, 4096));
    assert_eq!((stats.metadata.reads, stats.metadata.read_bytes, stats.metadata.writes), (1, 8192, 1));
    assert_eq!((stats.data.reads, stats.data.read_bytes), (1, 4096));
    assert_eq!(stats.elapsed_ns, disk.now().as_ns());
    assert_eq!(stats.total().busy_ns + stats.flush_busy_ns + stats.idle_ns, stats.elapsed_ns, "all time is accounted");
    let table = stats.to_string();
    assert!(table.contains("journal") && table.contains("metadata"), "{table}");
}

#[test]
fn latency_and_crash_draw_from_distinct_streams_of_the_same_seed() {
    let disk = disk("hdd-7200", GIB, 3);
    assert_ne!(disk.latency_rng.get_stream(), disk.crash_rng.get_stream());
    assert_eq!(disk.latency_rng.get_seed(), disk.crash_rng.get_seed(), "one seed fixes both");
    let other = self::disk("hdd-7200", GIB, 4);
    assert_ne!(disk.latency_rng.get_seed(), other.latency_rng.get_seed());
}

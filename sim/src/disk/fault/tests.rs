//! The fault layer through the disk it sits in.

use super::*;
use ext4_engine::device::DeviceError;
use crate::disk::profile::DiskProfile;
use crate::disk::store::CHUNK_BYTES;
use crate::disk::SimDisk;
use std::collections::BTreeSet;
use ext4_engine::device::{BlockDevice, IoClass, WriteFlags};

const SIZE: u64 = 1 << 30;

fn disk(faults: FaultConfig) -> SimDisk {
    let ram = DiskProfile::builtin("ram").expect("built-in");
    SimDisk::new(SIZE, ram, 42, faults).expect("valid disk")
}

fn read_ok(disk: &mut SimDisk, offset: u64) -> bool {
    disk.read(offset, &mut [0; 4096], IoClass::Data).is_ok()
}

#[test]
fn configs_with_impossible_rates_are_refused() {
    let mut config = FaultConfig::NONE;
    config.write_error = FaultSwitch { enabled: false, probability: 1.5 };
    assert!(matches!(config.validate(), Err(FaultConfigError::Probability { fault: "write_error", .. })));
    config.write_error = FaultSwitch::on(f64::NAN);
    assert!(config.validate().is_err());
    assert_eq!(FaultConfig::default().validate(), Ok(()));
}

#[test]
fn read_errors_fire_when_on_and_never_when_off() {
    let mut faulty = disk(FaultConfig { read_error: FaultSwitch::on(1.0), ..FaultConfig::NONE });
    let err = faulty.read(8192, &mut [0; 4096], IoClass::Data).expect_err("read EIO");
    assert!(matches!(err, DeviceError::Io { offset } if (8192..12288).contains(&offset)));
    assert_eq!(faulty.stats().faults.read_errors, 1);

    let mut sometimes = disk(FaultConfig { read_error: FaultSwitch::on(0.3), ..FaultConfig::NONE });
    let failed = (0..200).filter(|i| !read_ok(&mut sometimes, i * 4096)).count();
    assert!((20..100).contains(&failed), "{failed} of 200 at p=0.3");

    let off = FaultSwitch { enabled: false, probability: 1.0 };
    let mut healthy = disk(FaultConfig { read_error: off, ..FaultConfig::NONE });
    assert!((0..200).all(|i| read_ok(&mut healthy, i * 4096)));
}

#[test]
fn write_errors_fire_when_on_apply_nothing_and_never_fire_when_off() {
    let mut faulty = disk(FaultConfig { write_error: FaultSwitch::on(1.0), ..FaultConfig::NONE });
    let err = faulty.write(0, &[5; 4096], WriteFlags::DATA).expect_err("write EIO");
    assert!(matches!(err, DeviceError::Io { offset } if offset < 4096));
    let mut back = [9; 4096];
    faulty.read(0, &mut back, IoClass::Data).expect("reads are healthy");
    assert_eq!(back, [0; 4096], "a failed write must not be applied");
    assert_eq!(faulty.stats().faults.write_errors, 1);

    let off = FaultSwitch { enabled: false, probability: 1.0 };
    let mut healthy = disk(FaultConfig { write_error: off, ..FaultConfig::NONE });
    assert!((0..200).all(|i| healthy.write(i * 4096, &[1; 4096], WriteFlags::DATA).is_ok()));
}

#[test]
fn latent_sectors_fail_until_rewritten_and_hide_while_switched_off() {
    let latent_on = FaultConfig { latent_sector: FaultSwitch::on(0.0), ..FaultConfig::NONE };
    let mut disk = disk(latent_on);
    disk.write(0, &[3; 8192], WriteFlags::DATA).expect("write");
    disk.flush().expect("flush");
    disk.inject_latent_sector(4608).expect("in range");
    let err = disk.read(4096, &mut [0; 4096], IoClass::Data).expect_err("bad sector");
    assert_eq!(err, DeviceError::Io { offset: 4608 });
    assert!(read_ok(&mut disk, 0), "the neighbouring block is fine");

    disk.set_faults(FaultConfig::NONE).expect("valid");
    assert!(read_ok(&mut disk, 4096), "switched off, the bad sector is hidden");
    disk.set_faults(latent_on).expect("valid");
    assert!(!read_ok(&mut disk, 4096), "switched back on, the truth is still there");

    disk.write(4608, &[4; 512], WriteFlags::DATA).expect("rewrite");
    disk.flush().expect("flush");
    assert!(read_ok(&mut disk, 4096), "rewriting remaps the sector");
    assert_eq!(disk.latent_sectors().count(), 0);
}

#[test]
fn latent_sectors_develop_when_on_and_never_when_off() {
    let developing = FaultConfig { latent_sector: FaultSwitch::on(1.0), ..FaultConfig::NONE };
    let mut disk = disk(developing);
    let err = disk.read(1 << 20, &mut [0; 4096], IoClass::Metadata).expect_err("develops");
    let DeviceError::Io { offset } = err else { panic!("expected EIO, got {err:?}") };
    assert_eq!(disk.latent_sectors().collect::<Vec<_>>(), vec![offset]);
    assert_eq!(disk.stats().faults.new_latent_sectors, 1);
    // The same range now fails on the planted sector even with no new draws.
    disk.set_faults(FaultConfig { latent_sector: FaultSwitch::on(0.0), ..FaultConfig::NONE }).expect("valid");
    assert_eq!(disk.read(1 << 20, &mut [0; 4096], IoClass::Data), Err(DeviceError::Io { offset }));
    assert_eq!(disk.stats().faults.latent_sector_errors, 1);

    let off = FaultSwitch { enabled: false, probability: 1.0 };
    let mut healthy = self::disk(FaultConfig { latent_sector: off, ..FaultConfig::NONE });
    assert!((0..200).all(|i| read_ok(&mut healthy, i * 4096)));
    assert_eq!(healthy.latent_sectors().count(), 0);
}

#[test]
fn cached_sectors_never_report_latent_errors() {
    let mut disk = disk(FaultConfig { latent_sector: FaultSwitch::on(0.0), ..FaultConfig::NONE });
    disk.inject_latent_sector(0).expect("in range");
    assert!(!read_ok(&mut disk, 0));
    disk.write(0, &[1; 4096], WriteFlags::DATA).expect("write");
    disk.inject_latent_sector(0).expect("in range");
    assert!(read_ok(&mut disk, 0), "served from the write cache");
}

#[test]
fn device_turns_read_only_after_n_writes_when_on_and_never_when_off() {
    let trigger = ReadOnlyTrigger::AfterWrites(3);
    let mut disk = disk(FaultConfig { read_only: ReadOnlyFault { enabled: true, trigger }, ..FaultConfig::NONE });
    for i in 0..3 {
        disk.write(i * 4096, &[1; 4096], WriteFlags::DATA).expect("before the trigger");
    }
    assert_eq!(disk.write(1 << 20, &[1; 4096], WriteFlags::DATA), Err(DeviceError::ReadOnly));
    assert_eq!(disk.flush(), Err(DeviceError::ReadOnly), "pending writes cannot be flushed");
    assert!(read_ok(&mut disk, 0), "reads still work");
    assert_eq!(disk.stats().faults.read_only_rejections, 2);

    let mut healthy = self::disk(FaultConfig {
        read_only: ReadOnlyFault { enabled: false, trigger },
        ..FaultConfig::NONE
    });
    assert!((0..50).all(|i| healthy.write(i * 4096, &[1; 4096], WriteFlags::DATA).is_ok()));
    assert!(healthy.flush().is_ok());
}

#[test]
fn seeded_read_only_moment_falls_within_its_bound_and_varies_by_seed() {
    let config = FaultConfig {
        read_only: ReadOnlyFault { enabled: true, trigger: ReadOnlyTrigger::SeededWithin(20) },
        ..FaultConfig::NONE
    };
    let mut moments = BTreeSet::new();
    for seed in 0..16 {
        let ram = DiskProfile::builtin("ram").expect("built-in");
        let mut disk = SimDisk::new(SIZE, ram, seed, config).expect("valid");
        let accepted = (0..30u64)
            .take_while(|i| disk.write(i * 4096, &[1; 512], WriteFlags::JOURNAL).is_ok())
            .count();
        assert!(accepted <= 20, "seed {seed} accepted {accepted}");
        assert_eq!(disk.write(0, &[1; 512], WriteFlags::JOURNAL), Err(DeviceError::ReadOnly));
        moments.insert(accepted);
    }
    assert!(moments.len() > 3, "the moment should depend on the seed: {moments:?}");
}

#[test]
fn no_space_refuses_new_storage_past_the_budget_but_allows_rewrites() {
    let budget = NoSpaceFault { enabled: true, budget_bytes: 2 * CHUNK_BYTES };
    let mut disk = disk(FaultConfig { no_space: budget, ..FaultConfig::NONE });
    disk.write(0, &[1; 8192], WriteFlags::DATA).expect("within budget");
    assert_eq!(disk.write(1 << 20, &[1; 512], WriteFlags::DATA), Err(DeviceError::NoSpace));
    disk.write(4096, &[2; 4096], WriteFlags::DATA).expect("rewrite of touched storage");
    assert_eq!(disk.stats().faults.no_space_rejections, 1);

    let off = NoSpaceFault { enabled: false, budget_bytes: 0 };
    let mut healthy = self::disk(FaultConfig { no_space: off, ..FaultConfig::NONE });
    assert!((0..50).all(|i| healthy.write(i << 20, &[1; 4096], WriteFlags::DATA).is_ok()));
    assert_eq!(healthy.touched_bytes(), 50 * CHUNK_BYTES, "the truth is counted while off");
}

#[test]
fn scripted_faults_fire_only_at_their_command_and_drawn_ones_are_reported() {
    let on = FaultConfig {
        read_error: FaultSwitch::on(1.0),
        write_error: FaultSwitch::on(1.0),
        read_only: ReadOnlyFault { enabled: true, trigger: ReadOnlyTrigger::AfterWrites(u64::MAX) },
        ..FaultConfig::NONE
    };
    let mut drawn = disk(on);
    drawn.begin_op(Vec::new());
    assert!(drawn.write(0, &[1; 4096], WriteFlags::DATA).is_err());
    assert!(!read_ok(&mut drawn, 0));
    let fired = drawn.take_fired_faults();
    assert_eq!(fired.iter().map(|e| (e.kind, e.command)).collect::<Vec<_>>(), vec![(ScriptedFault::Write, 0), (ScriptedFault::Read, 1)]);
    assert!(fired.iter().all(|e| e.sector < 8), "sectors are relative to the command");

    let mut replay = disk(on);
    replay.script_faults();
    let armed = vec![
        FaultEvent { kind: ScriptedFault::Write, command: 1, sector: 3 },
        FaultEvent { kind: ScriptedFault::ReadOnly, command: 3, sector: 0 },
    ];
    replay.begin_op(armed);
    assert!(replay.write(0, &[1; 4096], WriteFlags::DATA).is_ok(), "probabilities are ignored in a replay");
    assert_eq!(replay.write(8192, &[1; 4096], WriteFlags::DATA), Err(DeviceError::Io { offset: 8192 + 3 * 512 }));
    assert!(read_ok(&mut replay, 0));
    assert_eq!(replay.write(0, &[2; 512], WriteFlags::DATA), Err(DeviceError::ReadOnly));
    replay.begin_op(Vec::new());
    assert_eq!(replay.write(0, &[2; 512], WriteFlags::DATA), Err(DeviceError::ReadOnly), "read-only stays");
}

//! A shadow of a disk: reads see the disk as the engine would now (pending
//! writes included), writes land in the shadow's own overlay, and time runs
//! on the shadow's own clock with the disk's profile. A check unmounts a
//! shadow of the engine onto it and fscks what that wrote, and the disk it
//! shadows, its clock, head and random streams stay exactly as they were.
//!
//! What it cannot see: faults (a check judges the filesystem, not the disk)
//! and the write cache's destaging order (its writes cost as cached writes,
//! its flushes as the profile's fixed flush cost).

use std::collections::BTreeMap;

use ext4_engine::device::{check_range, BlockDevice, DeviceError, WriteFlags, SECTOR_SIZE};
use rand_chacha::ChaCha8Rng;

use super::latency;
use super::SimDisk;

/// Sector size as an index.
const SECTOR: usize = SECTOR_SIZE as usize;
/// The overlay keeps written sectors in pieces of this many, so a shadow
/// unmount writing megabytes of file data allocates per 4 KiB, not per sector.
const PIECE_SECTORS: u64 = 8;
const PIECE: usize = SECTOR * PIECE_SECTORS as usize;

/// Written sectors of one overlay piece: their bytes, and which they are.
struct Piece {
    /// Bit `i` set: sector `i` of the piece was written.
    written: u8,
    bytes: Box<[u8; PIECE]>,
}

pub struct ShadowDisk<'a> {
    base: &'a SimDisk,
    /// Sectors written to the shadow, by piece number (sector / 8).
    overlay: BTreeMap<u64, Piece>,
    head: u64,
    rng: ChaCha8Rng,
    elapsed_ns: u64,
}

impl SimDisk {
    /// A shadow of this disk as it is now.
    pub fn shadow(&self) -> ShadowDisk<'_> {
        ShadowDisk { base: self, overlay: BTreeMap::new(), head: self.head, rng: self.latency_rng.clone(), elapsed_ns: 0 }
    }
}

impl ShadowDisk<'_> {
    /// Simulated time the shadow's commands took.
    pub fn elapsed_ns(&self) -> u64 {
        self.elapsed_ns
    }

    /// Bytes written to the shadow.
    pub fn written_bytes(&self) -> u64 {
        self.overlay.values().map(|p| u64::from(p.written.count_ones())).sum::<u64>() * SECTOR_SIZE
    }

    fn media(&mut self, offset: u64, len: u64) {
        let profile = self.base.profile();
        let cost = latency::media_cost(profile, self.base.size_bytes(), self.head, offset, len, &mut self.rng);
        self.head = offset + len;
        self.elapsed_ns = self.elapsed_ns.saturating_add(cost.total_ns()).saturating_add(profile.command_overhead_ns);
    }
}

impl BlockDevice for ShadowDisk<'_> {
    fn size_bytes(&self) -> u64 {
        self.base.size_bytes()
    }

    fn read(&mut self, offset: u64, buf: &mut [u8], _class: ext4_engine::device::IoClass) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size_bytes())?;
        if buf.is_empty() {
            return Ok(());
        }
        self.base.peek(offset, buf)?;
        debug_assert!(offset % SECTOR_SIZE == 0 && buf.len() % SECTOR == 0, "the engine reads whole sectors");
        let first = offset / SECTOR_SIZE;
        let last = first + (buf.len() / SECTOR) as u64;
        for (&piece, p) in self.overlay.range(first / PIECE_SECTORS..last.div_ceil(PIECE_SECTORS)) {
            for i in 0..PIECE_SECTORS {
                let sector = piece * PIECE_SECTORS + i;
                if p.written & (1 << i) == 0 || sector < first || sector >= last {
                    continue;
                }
                let at = ((sector - first) as usize) * SECTOR;
                let from = i as usize * SECTOR;
                buf[at..at + SECTOR].copy_from_slice(&p.bytes[from..from + SECTOR]);
            }
        }
        self.media(offset, buf.len() as u64);
        Ok(())
    }

    fn write(&mut self, offset: u64, buf: &[u8], _flags: WriteFlags) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size_bytes())?;
        debug_assert!(offset % SECTOR_SIZE == 0 && buf.len() % SECTOR == 0, "the engine writes whole sectors");
        let first = offset / SECTOR_SIZE;
        for (i, data) in buf.chunks_exact(SECTOR).enumerate() {
            let sector = first + i as u64;
            let (piece, within) = (sector / PIECE_SECTORS, (sector % PIECE_SECTORS) as usize);
            let p = self.overlay.entry(piece).or_insert_with(|| Piece { written: 0, bytes: Box::new([0; PIECE]) });
            p.bytes[within * SECTOR..(within + 1) * SECTOR].copy_from_slice(data);
            p.written |= 1 << within;
        }
        let cost = latency::cached_cost(self.base.profile(), buf.len() as u64);
        self.elapsed_ns = self.elapsed_ns.saturating_add(cost.total_ns());
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        let profile = self.base.profile();
        self.elapsed_ns = self.elapsed_ns.saturating_add(profile.flush_ns).saturating_add(profile.command_overhead_ns);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{DiskProfile, FaultConfig};
    use ext4_engine::device::IoClass;

    #[test]
    fn a_shadow_reads_the_disk_writes_apart_and_keeps_its_own_time() {
        let profile = DiskProfile::builtin("hdd-7200").unwrap();
        let mut disk = SimDisk::new(1 << 30, profile, 5, FaultConfig::NONE).unwrap();
        disk.write(4096, &[1; 4096], WriteFlags::DATA).unwrap();
        let (now, hash, stats) = (disk.now(), disk.image_hash(), disk.stats().clone());
        let mut shadow = disk.shadow();
        let mut buf = [0; 8192];
        shadow.read(0, &mut buf, IoClass::Data).unwrap();
        assert_eq!((&buf[..4096], &buf[4096..]), (&[0; 4096][..], &[1; 4096][..]), "pending writes are seen");
        shadow.write(512, &[2; 1024], WriteFlags::DATA).unwrap();
        shadow.flush().unwrap();
        shadow.read(0, &mut buf, IoClass::Data).unwrap();
        assert_eq!((buf[511], buf[512], buf[1535], buf[1536]), (0, 2, 2, 0));
        assert!(shadow.elapsed_ns() > 0 && shadow.written_bytes() == 1024);
        drop(shadow);
        assert_eq!((disk.now(), disk.image_hash(), disk.stats()), (now, hash, &stats), "the disk is as it was");
    }
}

//! Images made by the real mke2fs: the arguments every caller gives it (a
//! UUID and directory-hash seed drawn from the run's seed, a fixed clock, so
//! the same seed makes the same image), and loading such an image into a
//! simulated disk, so a simulation starts from geometry only mke2fs makes
//! (its flex-group packing, lazy inode tables, BLOCK_UNINIT groups holding
//! their neighbours' metadata) instead of the engine's own mkfs.
//!
//! The image is made in a sparse scratch file and copied in by its data
//! ranges (SEEK_DATA/SEEK_HOLE), never whole: an 8 GiB disk holds a few MiB.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use ext4_engine::device::{BlockDevice, WriteFlags, SECTOR_SIZE};
use ext4_model::MountConfig;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::MkfsArgs;
use crate::run::spec::SIM_EPOCH_SECS;

/// Largest piece copied from the scratch file at once.
const COPY_BYTES: usize = 1 << 20;

/// Seed-derived UUID text for mke2fs, so images are repeatable.
pub fn uuid_for(seed: u64) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(0x7575_6964); // "uuid"
    let b: [u8; 16] = rng.random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-4{}-8{}-{}", &hex[0..8], &hex[8..12], &hex[13..16], &hex[17..20], &hex[20..32])
}

/// mke2fs's whole argument list for an image of `bytes` at `path`: the test
/// bed's own options (quiet, ext4, forced, the block size and journal the
/// model runs with, the seeded UUID and hash seed), then `mkfs`'s.
pub fn mke2fs_args(mkfs: &MkfsArgs, mount: &MountConfig, seed: u64, path: &Path, bytes: u64) -> Vec<String> {
    let uuid = uuid_for(seed);
    let mut args: Vec<String> = ["-q", "-t", "ext4", "-F", "-b", &mount.block_size.to_string(), "-U", &uuid].iter().map(|s| s.to_string()).collect();
    if !mount.has_journal {
        args.extend(["-O".to_string(), "^has_journal".to_string()]);
    }
    // A cluster size from --mount cluster= rather than from the arguments.
    if let Some(c) = mount.cluster_size.filter(|_| mkfs.feature("bigalloc").is_none()) {
        args.extend(["-O".to_string(), "bigalloc".to_string(), "-C".to_string(), c.to_string()]);
    }
    args.extend(mkfs.mke2fs_args(&format!("hash_seed={uuid}")));
    args.push(path.display().to_string());
    args.push(format!("{}k", bytes / 1024));
    args
}

/// Runs mke2fs with `args`; its complaint (printed on stdout as often as on
/// stderr) is the error.
pub fn run_mke2fs(mke2fs: &Path, args: &[String]) -> Result<(), String> {
    let out = Command::new(mke2fs)
        .env("E2FSPROGS_FAKE_TIME", SIM_EPOCH_SECS.to_string())
        .args(args)
        .output()
        .map_err(|e| format!("run {}: {e}", mke2fs.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let said = if said.trim().is_empty() { "(it printed nothing)".to_string() } else { said.trim().to_string() };
    Err(format!("mke2fs {} failed ({}): {said}", args.join(" "), out.status))
}

/// A scratch file removed however the caller leaves.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Formats `disk` with the real mke2fs and `mkfs`'s arguments, for a model
/// mounted as `mount` (its block size and journal, which
/// [`MkfsArgs::model_mount`] made agree with `mkfs`).
pub fn format_with_mke2fs<D: BlockDevice>(disk: &mut D, mkfs: &MkfsArgs, mount: &MountConfig, seed: u64) -> Result<(), String> {
    if let Some(why) = mkfs.refusal() {
        return Err(why);
    }
    let mke2fs = ext4_testkit::e2fsprogs::tool("mke2fs").ok_or("--mkfs needs mke2fs (e2fsprogs), which is not installed")?;
    let bytes = disk.size_bytes();
    let path = std::env::temp_dir().join(format!("ext4sim-mke2fs-{}-{seed}.img", std::process::id()));
    let scratch = Scratch(path);
    let file = File::create(&scratch.0).map_err(|e| format!("{}: {e}", scratch.0.display()))?;
    file.set_len(bytes).map_err(|e| format!("{}: {e}", scratch.0.display()))?;
    drop(file);
    run_mke2fs(&mke2fs, &mke2fs_args(mkfs, mount, seed, &scratch.0, bytes))?;
    copy_data_ranges(&scratch.0, disk)?;
    disk.flush().map_err(|e| format!("flush after mke2fs: {e}"))
}

/// Copies the data ranges of the sparse file at `path` onto `disk`.
fn copy_data_ranges<D: BlockDevice>(path: &Path, disk: &mut D) -> Result<(), String> {
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let size = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.len();
    let mut buf = vec![0u8; COPY_BYTES];
    let mut at = 0u64;
    while at < size {
        let Some((start, end)) = next_data(&file, at, size)? else { break };
        // Whole sectors: the device moves nothing smaller.
        let (start, end) = (start / SECTOR_SIZE * SECTOR_SIZE, end.div_ceil(SECTOR_SIZE).saturating_mul(SECTOR_SIZE).min(size));
        let mut pos = start;
        while pos < end {
            let len = usize::try_from(end - pos).unwrap_or(COPY_BYTES).min(COPY_BYTES);
            file.read_exact_at(&mut buf[..len], pos).map_err(|e| format!("{}: {e}", path.display()))?;
            disk.write(pos, &buf[..len], WriteFlags::METADATA).map_err(|e| format!("loading the mke2fs image: {e}"))?;
            pos += len as u64;
        }
        at = end;
    }
    Ok(())
}

/// The next data range at or after `from`, as (start, end), if any.
fn next_data(file: &File, from: u64, size: u64) -> Result<Option<(u64, u64)>, String> {
    let fd = file.as_raw_fd();
    let seek = |whence: libc::c_int, at: u64| -> Result<Option<u64>, String> {
        let at = libc::off_t::try_from(at).map_err(|_| format!("offset {at} past off_t"))?;
        // SAFETY: lseek on a descriptor this function borrows; no memory is touched.
        let r = unsafe { libc::lseek(fd, at, whence) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            // ENXIO: no data (or no hole) at or after the offset.
            return if e.raw_os_error() == Some(libc::ENXIO) { Ok(None) } else { Err(format!("lseek: {e}")) };
        }
        Ok(u64::try_from(r).ok())
    };
    let Some(start) = seek(libc::SEEK_DATA, from)? else { return Ok(None) };
    let end = seek(libc::SEEK_HOLE, start)?.unwrap_or(size).min(size);
    Ok(Some((start, end)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ext4_engine::device_mem::MemDevice;

    #[test]
    fn an_mke2fs_image_loads_whole_and_opens_in_the_engine() {
        if ext4_testkit::e2fsprogs::tool("mke2fs").is_none() {
            println!("SKIPPED: e2fsprogs not installed");
            return;
        }
        let mount = MountConfig::default();
        let args = MkfsArgs::parse("-O ^flex_bg -N 4096").unwrap();
        let mut disk = MemDevice::new(256 << 20);
        format_with_mke2fs(&mut disk, &args, &mount, 7).unwrap();
        let image = ext4_engine::image::Image::open(disk.clone()).unwrap();
        assert_eq!(image.geometry().flex_size(), 1, "^flex_bg reached mke2fs");
        assert!(image.superblock().has_journal());
        // The same seed makes the same image; another seed another UUID.
        let mut again = MemDevice::new(256 << 20);
        format_with_mke2fs(&mut again, &args, &mount, 7).unwrap();
        assert!(again == disk);
        let mut other = MemDevice::new(256 << 20);
        format_with_mke2fs(&mut other, &args, &mount, 8).unwrap();
        assert!(other != disk);
        // A refused feature is an error naming it, before mke2fs runs.
        let refused = format_with_mke2fs(&mut MemDevice::new(64 << 20), &MkfsArgs::parse("-O inline_data").unwrap(), &mount, 1);
        assert!(refused.unwrap_err().contains("inline_data"));
        // A --mount cluster= reaches mke2fs as bigalloc with that cluster.
        let bigalloc = MountConfig { cluster_size: Some(32768), ..mount };
        let mut disk = MemDevice::new(256 << 20);
        format_with_mke2fs(&mut disk, &MkfsArgs::default(), &bigalloc, 7).unwrap();
        let image = ext4_engine::image::Image::open(disk).unwrap();
        assert_eq!(image.geometry().cluster_ratio(), 8);
    }
}

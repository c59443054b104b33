//! Layout reports people look at: of any image (`ext4sim layout IMAGE`)
//! or of a canonical workload run on the engine from a fresh mkfs
//! (`ext4sim layout --seed N --workload W`, and the insta snapshots).
//! Stable and diff-friendly: fixed columns; for a workload, untouched
//! groups counted rather than listed and per-file lines for small ones.

use std::fmt::Write as _;

use ext4_engine::device::BlockDevice;
use ext4_engine::fs::Ext4;
use ext4_engine::image::Image;
use ext4_engine::layout::groups::GroupTable;
use ext4_engine::layout::LayoutReport;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::MountConfig;

use crate::disk::{DiskProfile, FaultConfig, SimDisk};
use crate::workloads::{Made, Workload};

/// Files listed one per line up to this many; past it only the summary.
pub const PER_FILE_LIMIT: usize = 40;

/// A canonical workload on the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutRun {
    pub workload: Workload,
    pub seed: u64,
    pub scale: u32,
    pub mount: MountConfig,
    pub disk_bytes: u64,
}

impl LayoutRun {
    /// A disk with several flex groups at the mount's block size (sparse:
    /// only written blocks take memory).
    pub fn default_disk_bytes(mount: &MountConfig) -> u64 {
        match mount.block_size {
            0..=1024 => 2 << 30,
            1025..=4096 => 16 << 30,
            _ => 64 << 30,
        }
    }

    /// mkfs, mount, run the workload, unmount: the image and what it made.
    pub fn run(&self) -> Result<(Image<SimDisk>, Made), String> {
        self.run_on("ram")
    }

    /// [`LayoutRun::run`] on a disk of the named profile (its clock then
    /// times what is read from the image).
    pub fn run_on(&self, profile: &str) -> Result<(Image<SimDisk>, Made), String> {
        let profile = DiskProfile::builtin(profile).ok_or_else(|| format!("no disk profile {profile:?}"))?;
        let mut disk = SimDisk::new(self.disk_bytes, profile, self.seed, FaultConfig::NONE).map_err(|e| format!("disk: {e}"))?;
        let opts = MkfsOptions::for_mount(&self.mount, self.disk_bytes, [0x42; 16], [0x17; 16], crate::run::spec::SIM_EPOCH_SECS);
        mkfs(&mut disk, &opts).map_err(|e| format!("mkfs: {e}"))?;
        disk.flush().map_err(|e| format!("flush: {e}"))?;
        let mut fs = Ext4::mount(disk, &self.mount).map_err(|e| format!("mount: {e}"))?;
        let made = self.workload.run(&mut fs, self.seed, self.scale)?;
        let disk = fs.unmount().map_err(|e| format!("unmount: {e}"))?;
        let image = Image::open(disk).map_err(|e| format!("reopen: {e}"))?;
        Ok((image, made))
    }

    pub fn title(&self) -> String {
        format!("workload {} seed {} scale {} mount \"{}\"", self.workload.name(), self.seed, self.scale, self.mount)
    }
}

/// The report of `image`, and its group table (for `--svg`); `listed` is
/// what a workload made (an image's report lists every group).
pub fn report<D: BlockDevice>(title: &str, image: &mut Image<D>, listed: Option<&Made>) -> Result<(String, GroupTable), String> {
    let layout = LayoutReport::read(image).map_err(|e| format!("{title}: {e}"))?;
    let table = GroupTable::read(image, &layout).map_err(|e| format!("{title}: {e}"))?;
    let geo = image.geometry();
    let (files, dirs) = layout.noncontiguous();
    let mut out = String::new();
    let _ = writeln!(out, "layout of {title}");
    let _ = writeln!(out, "  block size {}, {} blocks per cluster, {} inodes per group", geo.block_size, geo.cluster_ratio(), geo.inodes_per_group);
    for line in layout.to_string().lines() {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out, "  non-contiguous (as e2fsck counts): {files} files, {dirs} directories");
    if let Some(made) = listed.filter(|m| m.files.len() <= PER_FILE_LIMIT) {
        for path in made.dirs.iter().chain(&made.files) {
            let Some(p) = layout.find(path) else { continue };
            let gl: Vec<String> = p.data_groups.iter().map(|g| g.to_string()).collect();
            let _ = writeln!(out, "  {path:<24} inode group {:>4}  extents {:>3}  data groups [{}]", p.inode_group, p.extents, gl.join(" "));
        }
    }
    if listed.is_none() {
        out += &table.to_string();
        return Ok((out, table));
    }
    // A workload's report: the groups it touched.
    let mut shown = table.clone();
    shown.rows.retain(|r| !(r.block_uninit && r.inode_uninit && r.dir_blocks == 0 && r.file_blocks == 0));
    let hidden = table.rows.len() - shown.rows.len();
    out += &shown.to_string();
    let _ = writeln!(out, "{hidden} groups untouched (block and inode bitmaps uninitialised, nothing in them) not listed");
    Ok((out, table))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_reports_its_workload_and_stays_the_same_for_the_same_seed() {
        let run = LayoutRun { workload: Workload::SmallFiles, seed: 3, scale: 1, mount: MountConfig::default(), disk_bytes: 4 << 30 };
        let text = |r: &LayoutRun| {
            let (mut image, made) = r.run().unwrap();
            report(&r.title(), &mut image, Some(&made)).unwrap().0
        };
        let a = text(&run);
        assert_eq!(a, text(&run));
        assert!(a.contains("files: 100 with data"), "{a}");
        assert!(a.contains("groups untouched"), "{a}");
        let other = LayoutRun { seed: 4, ..run.clone() };
        assert_ne!(a, text(&other));
    }
}

//! Where an image's blocks went: the one layout report, read from disk so
//! every file counts (not only those a mount happens to have cached). The
//! simulator's run summary and the insta snapshots of allocation layouts are
//! both views of it; [`groups`] is its per-group table (`ext4sim layout`).

pub mod groups;

use std::collections::BTreeMap;
use std::fmt;

use crate::device::BlockDevice;
use crate::error::Result;
use crate::format::dirent::{FT_DIR, FT_REG_FILE};
use crate::format::group_desc::BG_BLOCK_UNINIT;
use crate::format::inode::ROOT_INO;
use crate::format::{GroupIndex, InodeNumber};
use crate::image::Image;

/// Cap on directories and files walked, so a report stays cheap on a huge image.
pub const MAX_LAYOUT_ENTRIES: usize = 100_000;

/// One directory or regular file and where it sits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The first path the walk reached it by.
    pub path: String,
    pub ino: InodeNumber,
    pub is_dir: bool,
    /// The group holding the inode.
    pub inode_group: GroupIndex,
    /// On-disk extents (leaf entries), holes not counted.
    pub extents: usize,
    /// Blocks its extents cover.
    pub blocks: u64,
    /// The group of each extent's first block, consecutive repeats merged.
    pub data_groups: Vec<GroupIndex>,
    /// Non-contiguous as e2fsck counts it: an extent that does not start
    /// right after the one before it on disk, in an inode of fewer blocks
    /// (i_blocks) than a group.
    pub noncontiguous: bool,
}

/// A summary of an image's allocation layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayoutReport {
    pub block_size: u32,
    pub groups: u32,
    pub blocks_per_group: u32,
    pub flex_size: u32,
    /// Groups still BLOCK_UNINIT (never touched).
    pub untouched_groups: u32,
    /// Group -> blocks of regular files' extents starting in it.
    pub data_blocks_per_group: BTreeMap<GroupIndex, u64>,
    /// Group -> directory inodes in it.
    pub dirs_per_group: BTreeMap<GroupIndex, u64>,
    /// Directories and regular files in walk order (depth first from the root).
    pub placed: Vec<Placed>,
    /// The walk stopped at [`MAX_LAYOUT_ENTRIES`].
    pub truncated: bool,
}

impl LayoutReport {
    /// Walks the tree from the root.
    pub fn read<D: BlockDevice>(image: &mut Image<D>) -> Result<LayoutReport> {
        let geo = image.geometry().clone();
        let mut out = LayoutReport {
            block_size: geo.block_size,
            groups: geo.group_count,
            blocks_per_group: geo.blocks_per_group,
            flex_size: geo.flex_size(),
            untouched_groups: u32::try_from(image.group_descs().iter().filter(|d| d.has_flag(BG_BLOCK_UNINIT)).count()).unwrap_or(u32::MAX),
            ..LayoutReport::default()
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut pending = vec![(ROOT_INO, "/".to_string(), true)];
        while let Some((ino, path, is_dir)) = pending.pop() {
            if out.placed.len() >= MAX_LAYOUT_ENTRIES {
                out.truncated = true;
                break;
            }
            let inode = image.read_named_inode(ino)?;
            let extents = image.extents(ino, &inode)?;
            let inode_group = geo.inode_location(ino).map_or(0, |(g, _)| g);
            let mut data_groups: Vec<GroupIndex> = extents.iter().filter_map(|x| geo.group_of_block(x.physical)).collect();
            data_groups.dedup();
            let blocks = extents.iter().map(|x| u64::from(x.len)).sum();
            let jumps = extents.windows(2).any(|w| w[0].physical + u64::from(w[0].len) != w[1].physical);
            let i_blocks = if inode.has_flag(crate::format::inode::FL_HUGE_FILE) { inode.blocks } else { inode.blocks / u64::from(geo.block_size / 512) };
            let noncontiguous = jumps && i_blocks < u64::from(geo.blocks_per_group);
            if is_dir {
                *out.dirs_per_group.entry(inode_group).or_default() += 1;
                // Depth first in name order: push in reverse so the smallest name comes out first.
                let mut children: Vec<_> = image.read_dir(ino)?.into_iter().filter(|e| e.name != b"." && e.name != b"..").collect();
                children.sort_by(|a, b| b.name.cmp(&a.name));
                for e in children {
                    if !matches!(e.file_type, FT_DIR | FT_REG_FILE) || !seen.insert(e.inode) {
                        continue;
                    }
                    let name = String::from_utf8_lossy(&e.name);
                    let child = if path == "/" { format!("/{name}") } else { format!("{path}/{name}") };
                    pending.push((e.inode, child, e.file_type == FT_DIR));
                }
            } else {
                for x in &extents {
                    if let Some(g) = geo.group_of_block(x.physical) {
                        *out.data_blocks_per_group.entry(g).or_default() += u64::from(x.len);
                    }
                }
            }
            out.placed.push(Placed { path, ino, is_dir, inode_group, extents: extents.len(), blocks, data_groups, noncontiguous });
        }
        Ok(out)
    }

    /// Regular files holding data.
    pub fn files_with_data(&self) -> impl Iterator<Item = &Placed> {
        self.placed.iter().filter(|p| !p.is_dir && p.extents > 0)
    }

    /// Files whose data is in more than one extent.
    pub fn fragmented_files(&self) -> usize {
        self.files_with_data().filter(|p| p.extents > 1).count()
    }

    /// Extents of files with data.
    pub fn file_extents(&self) -> usize {
        self.files_with_data().map(|p| p.extents).sum()
    }

    /// Mean extents per file with data (1.0 is perfectly contiguous).
    pub fn mean_extents(&self) -> f64 {
        let files = self.files_with_data().count();
        if files == 0 {
            return 0.0;
        }
        // Counts far below 2^52 convert exactly.
        self.file_extents() as f64 / files as f64
    }

    /// Groups holding file data or directories.
    pub fn groups_in_use(&self) -> usize {
        let mut g: Vec<GroupIndex> = self.data_blocks_per_group.keys().chain(self.dirs_per_group.keys()).copied().collect();
        g.sort_unstable();
        g.dedup();
        g.len()
    }

    /// Regular files and directories e2fsck would call non-contiguous.
    pub fn noncontiguous(&self) -> (usize, usize) {
        let files = self.placed.iter().filter(|p| p.noncontiguous && !p.is_dir).count();
        (files, self.placed.iter().filter(|p| p.noncontiguous && p.is_dir).count())
    }

    /// The entry reached by `path`, if the walk reached it.
    pub fn find(&self, path: &str) -> Option<&Placed> {
        self.placed.iter().find(|p| p.path == path)
    }
}

/// Up to twelve `group:count` pairs, then how many groups in all.
pub fn fmt_groups(m: &BTreeMap<GroupIndex, u64>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    let mut parts: Vec<String> = m.iter().take(12).map(|(g, n)| format!("{g}:{n}")).collect();
    if m.len() > 12 {
        parts.push(format!("... ({} groups)", m.len()));
    }
    parts.join(" ")
}

impl fmt::Display for LayoutReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "groups: {} of {} blocks (flex {}), {} never touched", self.groups, self.blocks_per_group, self.flex_size, self.untouched_groups)?;
        writeln!(f, "data blocks by group: {}", fmt_groups(&self.data_blocks_per_group))?;
        writeln!(f, "dirs by group: {}", fmt_groups(&self.dirs_per_group))?;
        let files = self.files_with_data().count();
        write!(f, "files: {files} with data, {} extents, {} fragmented, {:.2} extents/file", self.file_extents(), self.fragmented_files(), self.mean_extents())?;
        if self.truncated {
            write!(f, " (walk stopped at {MAX_LAYOUT_ENTRIES} entries)")?;
        }
        writeln!(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::Ext4;
    use ext4_model::{FileSystem, MountConfig};

    #[test]
    fn the_report_finds_every_file_and_directory_where_the_image_put_it() {
        let config = MountConfig::default();
        let mut fs = crate::fixtures::fresh_mounted(1 << 30);
        fs.mkdir("/d", 0o755).unwrap();
        fs.create("/d/f", 0o644).unwrap();
        fs.write("/d/f", 0, &vec![1; 3 * 4096]).unwrap();
        // A hole between two pieces makes two extents.
        fs.create("/g", 0o644).unwrap();
        fs.write("/g", 0, &[2; 10]).unwrap();
        fs.write("/g", 1 << 20, &[3; 10]).unwrap();
        fs.create("/empty", 0o644).unwrap();
        fs.symlink("/d/f", "/l").unwrap();
        let dev = fs.unmount().unwrap();
        let mut image = Image::open(dev).unwrap();
        let r = LayoutReport::read(&mut image).unwrap();
        let paths: Vec<&str> = r.placed.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, ["/", "/d", "/d/f", "/empty", "/g", "/lost+found"]);
        let f = r.find("/d/f").unwrap();
        assert_eq!((f.is_dir, f.extents, f.blocks), (false, 1, 3));
        assert_eq!(r.find("/g").unwrap().extents, 2);
        assert_eq!((r.files_with_data().count(), r.fragmented_files(), r.file_extents()), (2, 1, 3));
        assert!((r.mean_extents() - 1.5).abs() < 1e-9);
        assert_eq!(r.dirs_per_group.values().sum::<u64>(), 3);
        assert_eq!(r.data_blocks_per_group.values().sum::<u64>(), 5);
        assert!(r.untouched_groups > 0 && r.untouched_groups < r.groups);
        let text = r.to_string();
        assert!(text.contains("files: 2 with data, 3 extents, 1 fragmented, 1.50 extents/file"), "{text}");
        // Read again, the same report: the walk has one order.
        let again = LayoutReport::read(&mut image).unwrap();
        assert_eq!(again, r);
        drop(Ext4::mount(image.into_device(), &config).unwrap());
    }
}

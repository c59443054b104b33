//! Layout figures read from an image: where file data sits group by group and
//! how fragmented files are. Read from disk, so every file counts, not only
//! those the engine happens to have cached.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use ext4_engine::device::BlockDevice;
use ext4_engine::format::dirent::{FT_DIR, FT_REG_FILE};
use ext4_engine::format::group_desc::BG_BLOCK_UNINIT;
use ext4_engine::image::Image;

/// Cap on files walked, so a report stays cheap on a huge image.
pub const MAX_LAYOUT_FILES: usize = 100_000;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageLayout {
    pub groups: u32,
    pub flex_size: u32,
    /// Groups still BLOCK_UNINIT (never touched).
    pub untouched_groups: u32,
    /// Group -> file data blocks in it.
    pub data_blocks_per_group: BTreeMap<u32, u64>,
    /// Group -> directory inodes in it.
    pub dirs_per_group: BTreeMap<u32, u64>,
    pub files: u64,
    pub extents: u64,
    pub fragmented_files: u64,
}

impl ImageLayout {
    pub fn mean_extents(&self) -> f64 {
        if self.files == 0 { 0.0 } else { self.extents as f64 / self.files as f64 }
    }
}

fn fmt_groups(m: &BTreeMap<u32, u64>) -> String {
    if m.is_empty() {
        return "-".into();
    }
    let mut parts: Vec<String> = m.iter().take(12).map(|(g, n)| format!("{g}:{n}")).collect();
    if m.len() > 12 {
        parts.push(format!("... ({} groups)", m.len()));
    }
    parts.join(" ")
}

impl fmt::Display for ImageLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "groups: {} (flex {}), {} never touched", self.groups, self.flex_size, self.untouched_groups)?;
        writeln!(f, "data blocks by group: {}", fmt_groups(&self.data_blocks_per_group))?;
        writeln!(f, "dirs by group: {}", fmt_groups(&self.dirs_per_group))?;
        writeln!(
            f,
            "files: {} with data, {} extents, {} fragmented, {:.2} extents/file",
            self.files,
            self.extents,
            self.fragmented_files,
            self.mean_extents()
        )
    }
}

/// Walks the tree from the root and tallies the layout.
pub fn image_layout<D: BlockDevice>(dev: &mut D) -> Result<ImageLayout, String> {
    let mut image = Image::open(dev).map_err(|e| e.to_string())?;
    walk(&mut image)
}

fn walk<D: BlockDevice>(image: &mut Image<D>) -> Result<ImageLayout, String> {
    let geo = image.geometry().clone();
    let mut out = ImageLayout {
        groups: geo.group_count,
        flex_size: geo.flex_size(),
        untouched_groups: image.group_descs().iter().filter(|d| d.flags & BG_BLOCK_UNINIT != 0).count() as u32,
        ..ImageLayout::default()
    };
    let mut seen = BTreeSet::new();
    let mut pending = vec![ext4_engine::format::inode::ROOT_INO];
    while let Some(dir) = pending.pop() {
        if let Some((g, _)) = geo.inode_location(dir) {
            *out.dirs_per_group.entry(g).or_default() += 1;
        }
        for e in image.read_dir(dir).map_err(|e| e.to_string())? {
            if e.name == b"." || e.name == b".." || !seen.insert(e.inode) || seen.len() > MAX_LAYOUT_FILES {
                continue;
            }
            match e.file_type {
                FT_DIR => pending.push(e.inode),
                FT_REG_FILE => {
                    let inode = image.read_inode(e.inode).map_err(|e| e.to_string())?;
                    let extents = image.extents(e.inode, &inode).map_err(|e| e.to_string())?;
                    if extents.is_empty() {
                        continue;
                    }
                    out.files += 1;
                    out.extents += extents.len() as u64;
                    out.fragmented_files += u64::from(extents.len() > 1);
                    for x in &extents {
                        if let Some(g) = geo.group_of_block(x.physical) {
                            *out.data_blocks_per_group.entry(g).or_default() += u64::from(x.len);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

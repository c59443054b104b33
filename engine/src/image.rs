//! Opening an existing ext4 image read-only: the superblock, every group
//! descriptor and their checksums are validated up front; inodes, extent trees,
//! directories, bitmaps and file contents are read (and checked) on demand.
//!
//! - Every value read from the image is checked before it is used as an offset,
//!   a length or a loop bound; bad input is a typed [`Error`], never a panic.
//! - Inodes in a group's uninitialised tail (INODE_UNINIT, or past
//!   `bg_itable_unused`) read as all-zero, as e2fsck treats them.
//! - Not handled yet: block-mapped (non-extent) files, inline data, htree node
//!   checksums (htree directories are listed through their leaf blocks).

// Values read from the image become offsets and lengths: conversions are checked.
#![deny(clippy::as_conversions)]

use crate::device::{BlockDevice, IoClass};
use crate::error::{ChecksumObject, Corrupt, Error, Result, Unsupported};
use crate::format::bitmap::{stored_bitmap_csum_matches, Bitmap};
use crate::format::bytes::{le16, le32, u64_from_usize, usize_from_u32};
use crate::format::checksum::inode_seed;
use crate::format::dirent::{self, DirEntry};
use crate::format::extent::{self, Extent, ExtentNode};
use crate::format::geometry::Geometry;
use crate::format::group_desc::{verify_desc_checksum, DescChecksum, GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use crate::format::inode::{self, Inode, FL_EXTENTS, FL_INDEX, FL_INLINE_DATA};
use crate::format::journal_superblock::{JournalSuperblock, JOURNAL_SB_SIZE};
use crate::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::format::{BlockNumber, GroupIndex, InodeNumber};

/// Most extent-tree nodes one walk may visit: bounds the work a hostile tree
/// (many indexes pointing at the same empty leaf) can cause.
pub const MAX_EXTENT_NODES: usize = 1 << 20;

/// A validated, read-only view of an image.
#[derive(Debug)]
pub struct Image<D: BlockDevice> {
    dev: D,
    sb: Superblock,
    geo: Geometry,
    descs: Vec<GroupDesc>,
    /// Seed for metadata checksums when metadata_csum is on.
    csum_seed: Option<u32>,
}

fn gd_corrupt(group: GroupIndex, what: String) -> Error {
    Error::Corrupt(Corrupt::GroupDescriptor { group, what })
}

impl<D: BlockDevice> Image<D> {
    /// Reads and validates the superblock and all group descriptors.
    pub fn open(mut dev: D) -> Result<Self> {
        let dev_size = dev.size_bytes();
        if dev_size < SUPERBLOCK_OFFSET + u64_from_usize(SUPERBLOCK_SIZE) {
            return Err(Error::Corrupt(Corrupt::Superblock(format!("device of {dev_size} bytes has no superblock"))));
        }
        let mut raw = [0u8; SUPERBLOCK_SIZE];
        dev.read(SUPERBLOCK_OFFSET, &mut raw, IoClass::Metadata)?;
        let sb = Superblock::parse(&raw)?;
        let geo = Geometry::from_superblock(&sb)?;
        let dev_blocks = dev_size / u64::from(geo.block_size);
        if geo.blocks_count > dev_blocks {
            return Err(Error::Corrupt(Corrupt::Superblock(format!(
                "s_blocks_count {} exceeds the device's {dev_blocks} blocks",
                geo.blocks_count
            ))));
        }
        let csum_seed = sb.has_metadata_csum().then(|| sb.csum_seed());
        let desc_csum = DescChecksum::of(&sb);
        let bs = u64::from(geo.block_size);
        let gdt_start = u64::from(geo.first_data_block) + 1;
        let gdt_len = usize_from_u32(geo.gdt_blocks).checked_mul(usize_from_u32(geo.block_size)).ok_or_else(|| {
            Error::Corrupt(Corrupt::Superblock(format!("GDT of {} blocks does not fit in memory", geo.gdt_blocks)))
        })?;
        let mut gdt = vec![0u8; gdt_len];
        dev.read(gdt_start * bs, &mut gdt, IoClass::Metadata)?;
        let ds = usize::from(geo.desc_size);
        let mut descs = Vec::with_capacity(usize_from_u32(geo.group_count));
        for g in 0..geo.group_count {
            // In bounds: the GDT was sized to hold group_count descriptors.
            let at = usize_from_u32(g) * ds;
            let b = &gdt[at..at + ds];
            verify_desc_checksum(b, g, desc_csum)?;
            let d = GroupDesc::parse(b);
            check_desc(&geo, g, &d, desc_csum != DescChecksum::None)?;
            descs.push(d);
        }
        Ok(Image { dev, sb, geo, descs, csum_seed })
    }

    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }
    pub fn group_descs(&self) -> &[GroupDesc] {
        &self.descs
    }
    /// Gives the device back.
    pub fn into_device(self) -> D {
        self.dev
    }

    /// Reads `count` whole blocks starting at `block`, which must lie inside the filesystem.
    pub fn read_blocks(&mut self, block: BlockNumber, count: u64) -> Result<Vec<u8>> {
        let end = block.checked_add(count).filter(|&e| e <= self.geo.blocks_count);
        if end.is_none() {
            return Err(Error::InvalidArgument(format!(
                "blocks {block}+{count} outside the {}-block filesystem",
                self.geo.blocks_count
            )));
        }
        let bs = u64::from(self.geo.block_size);
        let len = count.checked_mul(bs).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
            Error::InvalidArgument(format!("{count} blocks of {bs} bytes do not fit in memory"))
        })?;
        let mut buf = vec![0u8; len];
        self.dev.read(block * bs, &mut buf, IoClass::Metadata)?;
        Ok(buf)
    }

    /// Reads inode `ino` (checksum verified with metadata_csum).
    pub fn read_inode(&mut self, ino: InodeNumber) -> Result<Inode> {
        let (g, idx) = self.geo.inode_location(ino).ok_or_else(|| {
            Error::InvalidArgument(format!("inode {ino} outside 1..={}", self.geo.inodes_count()))
        })?;
        let d = self.descs[usize_from_u32(g)];
        let lazy = self.csum_seed.is_some() || self.sb.has_gdt_csum();
        let initialised = self.geo.inodes_per_group.saturating_sub(d.itable_unused);
        if lazy && (d.has_flag(BG_INODE_UNINIT) || idx >= initialised) {
            return Ok(Inode::zeroed(self.geo.inode_size));
        }
        let isz = u64::from(self.geo.inode_size);
        let bs = u64::from(self.geo.block_size);
        let byte = u64::from(idx) * isz;
        // No overflow: check_desc keeps the inode table inside the filesystem.
        let block = self.read_blocks(d.inode_table + byte / bs, 1)?;
        let at = usize::try_from(byte % bs).expect("below the u32 block size, and usize has at least 32 bits");
        Inode::parse(&block[at..at + usize::from(self.geo.inode_size)], ino, self.csum_seed)
    }

    /// The inode a directory entry names: one in use. An entry naming a
    /// free inode (zeroed, or in a group's unused inode-table tail past
    /// bg_itable_unused) is the corruption e2fsck reports, and the mounted
    /// engine refuses it the same way ([`Corrupt::entry_names_free_inode`]).
    pub fn read_named_inode(&mut self, ino: InodeNumber) -> Result<Inode> {
        let inode = self.read_inode(ino)?;
        if inode.mode == 0 || inode.links_count == 0 {
            return Err(Corrupt::entry_names_free_inode(ino));
        }
        Ok(inode)
    }

    fn ino_seed(&self, ino: InodeNumber, inode: &Inode) -> Option<u32> {
        self.csum_seed.map(|s| inode_seed(s, ino, inode.generation))
    }

    /// Every extent of `inode` in logical order, walking the tree to any depth
    /// and checking each node against its parent.
    pub fn extents(&mut self, ino: InodeNumber, inode: &Inode) -> Result<Vec<Extent>> {
        if !inode.has_flag(FL_EXTENTS) {
            return Err(Unsupported::Construct(format!("inode {ino} is block-mapped (no extents flag)")).into());
        }
        let (h, root) = extent::parse_node(&inode.block, ino)?;
        let mut out = Vec::new();
        let mut visited = 1usize;
        let seed = self.ino_seed(ino, inode);
        self.walk(ino, seed, h.depth, root, 0, u64::from(u32::MAX) + 1, &mut out, &mut visited)?;
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn walk(
        &mut self,
        ino: InodeNumber,
        seed: Option<u32>,
        depth: u16,
        node: ExtentNode,
        lo: u64,
        hi: u64,
        out: &mut Vec<Extent>,
        visited: &mut usize,
    ) -> Result<()> {
        let bad = |what: String| Error::Corrupt(Corrupt::Extent { ino, what });
        match node {
            ExtentNode::Leaf(exts) => {
                for e in exts {
                    if u64::from(e.logical) < lo || e.logical_end() > hi {
                        return Err(bad(format!("extent at logical {} outside its index range {lo}..{hi}", e.logical)));
                    }
                    if out.last().is_some_and(|p: &Extent| u64::from(e.logical) < p.logical_end()) {
                        return Err(bad(format!("extent at logical {} overlaps the one before", e.logical)));
                    }
                    let end = e.physical.checked_add(u64::from(e.len));
                    if e.physical < u64::from(self.geo.first_data_block) || end.is_none_or(|x| x > self.geo.blocks_count) {
                        return Err(bad(format!("extent at logical {} maps blocks {}+{} outside the filesystem", e.logical, e.physical, e.len)));
                    }
                    out.push(e);
                }
                Ok(())
            }
            ExtentNode::Index { children, .. } => {
                for (i, child) in children.iter().enumerate() {
                    let c_lo = u64::from(child.logical);
                    let c_hi = children.get(i + 1).map_or(hi, |n| u64::from(n.logical));
                    if c_lo < lo || c_lo >= hi {
                        return Err(bad(format!("index at logical {c_lo} outside its parent range {lo}..{hi}")));
                    }
                    *visited += 1;
                    if *visited > MAX_EXTENT_NODES {
                        return Err(bad(format!("more than {MAX_EXTENT_NODES} tree nodes")));
                    }
                    if child.child < u64::from(self.geo.first_data_block) || child.child >= self.geo.blocks_count {
                        return Err(bad(format!("index points at block {} outside the filesystem", child.child)));
                    }
                    let b = self.read_blocks(child.child, 1)?;
                    let (h, node) = extent::parse_node(&b, ino)?;
                    if h.depth + 1 != depth {
                        return Err(bad(format!("block {} has depth {} under a depth-{depth} index", child.child, h.depth)));
                    }
                    if let Some(s) = seed {
                        extent::verify_block_checksum(&b, &h, s, ino, child.child)?;
                    }
                    self.walk(ino, seed, h.depth, node, c_lo, c_hi, out, visited)?;
                }
                Ok(())
            }
        }
    }

    /// Lists a directory (linear, or htree through its leaves), "." and ".." included.
    pub fn read_dir(&mut self, ino: InodeNumber) -> Result<Vec<DirEntry>> {
        let inode = self.read_named_inode(ino)?;
        if !inode.is_dir() {
            return Err(Error::InvalidArgument(format!("inode {ino} (mode {:o}) is not a directory", inode.mode)));
        }
        if inode.has_flag(FL_INLINE_DATA) {
            return Err(Unsupported::Construct(format!("directory {ino} has inline data")).into());
        }
        let bs = u64::from(self.geo.block_size);
        let nblocks = inode.size / bs;
        if inode.size % bs != 0 {
            return Err(Error::Corrupt(Corrupt::Inode { ino, what: format!("directory size {} not a multiple of {bs}", inode.size) }));
        }
        let htree = inode.has_flag(FL_INDEX);
        let seed = self.ino_seed(ino, &inode);
        let mut entries = Vec::new();
        let mut next = 0u64;
        for e in self.extents(ino, &inode)? {
            if u64::from(e.logical) != next && next < nblocks {
                return Err(Error::Corrupt(Corrupt::Dirent { ino, block: next, what: "hole in directory".to_string() }));
            }
            let take = u64::from(e.len).min(nblocks.saturating_sub(u64::from(e.logical)));
            for i in 0..take {
                let lblk = u64::from(e.logical) + i;
                let b = self.read_blocks(e.physical + i, 1)?;
                self.parse_dir_block(ino, lblk, &b, htree, seed, &mut entries)?;
            }
            next = e.logical_end();
        }
        if next < nblocks {
            return Err(Error::Corrupt(Corrupt::Dirent { ino, block: next, what: "size covers unmapped blocks".to_string() }));
        }
        Ok(entries)
    }

    fn parse_dir_block(
        &self,
        ino: InodeNumber,
        lblk: u64,
        b: &[u8],
        htree: bool,
        seed: Option<u32>,
        entries: &mut Vec<DirEntry>,
    ) -> Result<()> {
        let bad = |what: String| Error::Corrupt(Corrupt::Dirent { ino, block: lblk, what });
        let bs = b.len();
        if htree {
            // The dx root is "." then a ".." whose rec_len swallows the index.
            if lblk == 0 {
                let parsed = dirent::parse_block(b, false).map_err(bad)?;
                entries.extend(parsed.entries.into_iter().take(2));
                return Ok(());
            }
            let first_rec = dirent::rec_len_from_disk(le16(b, 4), bs);
            if le32(b, 0) == 0 && first_rec == bs {
                return Ok(()); // interior dx node
            }
        }
        let parsed = dirent::parse_block(b, seed.is_some()).map_err(bad)?;
        if let (Some(s), Some(stored)) = (seed, parsed.stored_checksum) {
            let computed = dirent::block_checksum(b, s);
            if computed != stored {
                return Err(Error::Corrupt(Corrupt::Checksum {
                    object: ChecksumObject::DirBlock { ino, block: lblk },
                    stored,
                    computed,
                }));
            }
        }
        entries.extend(parsed.entries);
        Ok(())
    }

    /// Contents of a regular file or symlink, at most `max_len` bytes long.
    pub fn read_file(&mut self, ino: InodeNumber, max_len: u64) -> Result<Vec<u8>> {
        let inode = self.read_named_inode(ino)?;
        if inode.size > max_len {
            return Err(Error::InvalidArgument(format!("inode {ino} holds {} bytes > limit {max_len}", inode.size)));
        }
        if inode.has_flag(FL_INLINE_DATA) {
            return Err(Unsupported::Construct(format!("inode {ino} has inline data")).into());
        }
        let size = usize::try_from(inode.size)
            .map_err(|_| Error::InvalidArgument(format!("inode {ino} holds {} bytes, more than fit in memory", inode.size)))?;
        if inode.is_symlink() && !inode.has_flag(FL_EXTENTS) && size < inode::I_BLOCK_LEN {
            return Ok(inode.block[..size].to_vec());
        }
        let bs = u64::from(self.geo.block_size);
        let mut data = vec![0u8; size];
        for e in self.extents(ino, &inode)? {
            let start = u64::from(e.logical) * bs;
            if e.unwritten || start >= inode.size {
                continue;
            }
            let want_blocks = (inode.size - start).div_ceil(bs).min(u64::from(e.len));
            let b = self.read_blocks(e.physical, want_blocks)?;
            let at = usize::try_from(start).expect("start < i_size, which fits in usize");
            let n = b.len().min(size - at);
            data[at..at + n].copy_from_slice(&b[..n]);
        }
        Ok(data)
    }

    /// Resolves an absolute path ("/a/b") to an inode number.
    pub fn lookup(&mut self, path: &str) -> Result<InodeNumber> {
        let mut ino = inode::ROOT_INO;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            let found = self.read_dir(ino)?.into_iter().find(|e| e.name == part.as_bytes());
            ino = found.map(|e| e.inode).ok_or_else(|| Error::InvalidArgument(format!("{path}: no entry {part:?}")))?;
        }
        self.read_named_inode(ino)?;
        Ok(ino)
    }

    /// Group `g`'s block bitmap, checksum verified; `None` for BLOCK_UNINIT groups.
    pub fn read_block_bitmap(&mut self, g: GroupIndex) -> Result<Option<Bitmap>> {
        let d = *self.descs.get(usize_from_u32(g)).ok_or_else(|| Error::InvalidArgument(format!("no group {g}")))?;
        if (self.csum_seed.is_some() || self.sb.has_gdt_csum()) && d.has_flag(BG_BLOCK_UNINIT) {
            return Ok(None);
        }
        let bm = Bitmap::from_bytes(self.read_blocks(d.block_bitmap, 1)?);
        if let Some(s) = self.csum_seed {
            let computed = bm.checksum(s, self.geo.clusters_per_group());
            if !stored_bitmap_csum_matches(d.block_bitmap_csum, computed, self.geo.desc_size) {
                return Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::BlockBitmap { group: g }, stored: d.block_bitmap_csum, computed }));
            }
        }
        Ok(Some(bm))
    }

    /// Group `g`'s inode bitmap, checksum verified; `None` for INODE_UNINIT groups.
    pub fn read_inode_bitmap(&mut self, g: GroupIndex) -> Result<Option<Bitmap>> {
        let d = *self.descs.get(usize_from_u32(g)).ok_or_else(|| Error::InvalidArgument(format!("no group {g}")))?;
        if (self.csum_seed.is_some() || self.sb.has_gdt_csum()) && d.has_flag(BG_INODE_UNINIT) {
            return Ok(None);
        }
        let bm = Bitmap::from_bytes(self.read_blocks(d.inode_bitmap, 1)?);
        if let Some(s) = self.csum_seed {
            let computed = bm.checksum(s, self.geo.inodes_per_group);
            if !stored_bitmap_csum_matches(d.inode_bitmap_csum, computed, self.geo.desc_size) {
                return Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::InodeBitmap { group: g }, stored: d.inode_bitmap_csum, computed }));
            }
        }
        Ok(Some(bm))
    }

    /// The journal superblock of the internal journal, if the filesystem has one.
    pub fn journal_superblock(&mut self) -> Result<Option<JournalSuperblock>> {
        if !self.sb.has_journal() || self.sb.journal_inum == 0 {
            return Ok(None);
        }
        let ino = self.sb.journal_inum;
        let inode = self.read_inode(ino)?;
        let first = self.extents(ino, &inode)?.into_iter().find(|e| e.logical == 0);
        let e = first.ok_or_else(|| Error::Corrupt(Corrupt::Journal(format!("journal inode {ino} has no block 0"))))?;
        let b = self.read_blocks(e.physical, 1)?;
        let mut raw = [0u8; JOURNAL_SB_SIZE];
        raw.copy_from_slice(&b[..JOURNAL_SB_SIZE]);
        JournalSuperblock::parse(&raw, self.geo.block_size).map(Some)
    }
}

/// Checks one descriptor's pointers and counts against the geometry.
fn check_desc(geo: &Geometry, g: GroupIndex, d: &GroupDesc, has_csum: bool) -> Result<()> {
    let (lo, hi) = if geo.log_groups_per_flex.is_some() {
        (u64::from(geo.first_data_block), geo.blocks_count)
    } else {
        let s = geo.group_first_block(g);
        (s, s + u64::from(geo.group_len(g)))
    };
    let primary_meta = u64::from(geo.first_data_block)..u64::from(geo.first_data_block) + u64::from(geo.base_meta_blocks(0));
    let itb = u64::from(geo.inode_table_blocks);
    for (name, start, len) in [("block bitmap", d.block_bitmap, 1), ("inode bitmap", d.inode_bitmap, 1), ("inode table", d.inode_table, itb)] {
        let end = start.checked_add(len);
        if start < lo || end.is_none_or(|e| e > hi) {
            return Err(gd_corrupt(g, format!("{name} at block {start} (+{len}) outside blocks {lo}..{hi}")));
        }
        if start < primary_meta.end && end.is_some_and(|e| e > primary_meta.start) {
            return Err(gd_corrupt(g, format!("{name} at block {start} overlaps the superblock/GDT")));
        }
    }
    let len = geo.group_clusters(g);
    if d.free_blocks > len {
        return Err(gd_corrupt(g, format!("bg_free_blocks_count {} > {len} clusters in the group", d.free_blocks)));
    }
    let ipg = geo.inodes_per_group;
    for (name, v) in [("bg_free_inodes_count", d.free_inodes), ("bg_used_dirs_count", d.used_dirs), ("bg_itable_unused", d.itable_unused)] {
        if v > ipg {
            return Err(gd_corrupt(g, format!("{name} {v} > {ipg} inodes per group")));
        }
    }
    if has_csum && d.has_flag(BG_BLOCK_UNINIT) && g + 1 == geo.group_count {
        return Err(gd_corrupt(g, "BLOCK_UNINIT on the last group".to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::WriteFlags;
    use crate::device_mem::MemDevice;
    use crate::format::checksum::fs_seed_from_uuid;
    use crate::format::extent::ExtentIndex;
    use crate::format::inode::{Timestamp, S_IFREG};
    use crate::mkfs::{mkfs, MkfsOptions};

    const UUID: [u8; 16] = [9; 16];

    fn fresh() -> MemDevice {
        let mut dev = MemDevice::new(64 << 20);
        mkfs(&mut dev, &MkfsOptions::new(64 << 20, UUID, [4; 16], crate::fixtures::EPOCH_SECS)).unwrap();
        dev
    }

    #[test]
    fn opens_what_mkfs_wrote() {
        let mut img = Image::open(fresh()).unwrap();
        let names: Vec<Vec<u8>> = img.read_dir(2).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"lost+found".to_vec()]);
        assert_eq!(img.lookup("/lost+found").unwrap(), 11);
        assert!(matches!(img.lookup("/nope"), Err(Error::InvalidArgument(_))));
        assert!(matches!(img.read_dir(8), Err(Error::InvalidArgument(_))), "the journal is not a directory");
        let jsb = img.journal_superblock().unwrap().unwrap();
        assert_eq!(jsb.maxlen, 1024, "16384 blocks get mke2fs's smallest journal");
        assert_eq!(img.read_inode(12).unwrap(), Inode::zeroed(256), "unused tail reads as zero");
        let mut dev = img.into_device();
        dev.write(0, &[0xAAu8; 512], WriteFlags::METADATA).unwrap();
        assert!(Image::open(dev).is_ok(), "the boot sector is not part of the filesystem");
    }

    fn leaf(exts: &[(u32, u32, u64)]) -> ExtentNode {
        ExtentNode::Leaf(exts.iter().map(|&(logical, len, physical)| Extent { logical, len, physical, unwritten: false }).collect())
    }

    /// A depth-2 tree for inode 12: root -> index block 12002 -> leaves 12000, 12001.
    fn deep_tree(dev: &mut MemDevice, leaf_a: ExtentNode, leaf_b_depth: u16) -> Inode {
        let seed = inode_seed(fs_seed_from_uuid(&UUID), 12, 7);
        let mut put = |blk: u64, node: &ExtentNode, depth_override: Option<u16>| {
            let mut b = vec![0u8; 4096];
            extent::write_node(&mut b, node, 0).unwrap();
            if let Some(d) = depth_override {
                b[6..8].copy_from_slice(&d.to_le_bytes());
            }
            extent::set_block_checksum(&mut b, seed);
            dev.write(blk * 4096, &b, WriteFlags::METADATA).unwrap();
        };
        put(12000, &leaf_a, None);
        put(12001, &leaf(&[(100, 1, 13200)]), Some(leaf_b_depth));
        let children = vec![ExtentIndex { logical: 0, child: 12000 }, ExtentIndex { logical: 100, child: 12001 }];
        put(12002, &ExtentNode::Index { depth: 1, children }, None);
        let mut inode = Inode::new(256, S_IFREG | 0o644, Timestamp::from_secs(1));
        inode.flags = FL_EXTENTS;
        inode.generation = 7;
        let root = ExtentNode::Index { depth: 2, children: vec![ExtentIndex { logical: 0, child: 12002 }] };
        extent::write_node(&mut inode.block, &root, 0).unwrap();
        inode
    }

    #[test]
    fn walks_a_depth_two_tree_in_logical_order() {
        let mut dev = fresh();
        let inode = deep_tree(&mut dev, leaf(&[(0, 10, 13000), (10, 5, 13100)]), 0);
        let mut img = Image::open(dev).unwrap();
        let got: Vec<(u32, u32, u64)> = img.extents(12, &inode).unwrap().iter().map(|e| (e.logical, e.len, e.physical)).collect();
        assert_eq!(got, vec![(0, 10, 13000), (10, 5, 13100), (100, 1, 13200)]);
    }

    #[test]
    fn tree_inconsistencies_are_typed_errors() {
        let err = |leaf_a: ExtentNode, depth_b: u16| {
            let mut dev = fresh();
            let inode = deep_tree(&mut dev, leaf_a, depth_b);
            Image::open(dev).unwrap().extents(12, &inode).unwrap_err()
        };
        let what = |e: Error| match e {
            Error::Corrupt(Corrupt::Extent { ino: 12, what }) => what,
            other => panic!("expected an extent corruption, got {other:?}"),
        };
        assert!(what(err(leaf(&[(0, 10, 13000)]), 1)).contains("has depth 1 under a depth-1 index"));
        assert!(what(err(leaf(&[(95, 10, 13000)]), 0)).contains("outside its index range 0..100"));
        assert!(what(err(leaf(&[(0, 10, 1 << 40)]), 0)).contains("outside the filesystem"));

        let mut dev = fresh();
        let inode = deep_tree(&mut dev, leaf(&[(0, 10, 13000)]), 0);
        dev.write(12001 * 4096, &[0u8; 512], WriteFlags::METADATA).unwrap();
        let e = Image::open(dev).unwrap().extents(12, &inode).unwrap_err();
        assert!(what(e).starts_with("eh_magic"));

        let mut dev = fresh();
        let inode = deep_tree(&mut dev, leaf(&[(0, 10, 13000)]), 0);
        let mut b = vec![0u8; 512];
        dev.read(12000 * 4096, &mut b, IoClass::Metadata).unwrap();
        b[16] ^= 1;
        dev.write(12000 * 4096, &b, WriteFlags::METADATA).unwrap();
        assert!(matches!(
            Image::open(dev).unwrap().extents(12, &inode),
            Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::ExtentBlock { ino: 12, block: 12000 }, .. }))
        ));
    }
}

//! FS_IOC_FIEMAP as ext4_fiemap answers it:
//! - FIEMAP_FLAG_CACHE first: the inode's extent tree is read back through
//!   the buffer cache and its runs go into the extent status cache
//!   (ext4_ext_precache), whatever the rest of the request turns out to be;
//! - the request's checks, shared with the model (`vfs::check_fiemap`);
//! - SYNC writes the file's dirty data back;
//! - XATTR maps where the extended attributes live (ext4_iomap_xattr_fiemap);
//! - otherwise the asked blocks are reported as ext4's report ops map them:
//!   mapped pieces looked up through the extent status cache, delayed
//!   ranges between them, each clipped to the blocks, the last one LAST.
//!   Directories are mapped like files.

use std::ops::Range;

use ext4_model::op::fiemap_flags;
use ext4_model::vfs::check_fiemap;
use ext4_model::{Errno, FiemapExtent, FiemapRequest};

use crate::device::BlockDevice;
use crate::error::{Corrupt, Error};
use crate::extent_tree::find::Check;
use crate::extent_tree::{self, ExtentMap, Piece};
use crate::format::inode::{Inode, FL_EXTENTS};
use crate::format::InodeNumber;

use super::node::Node;
use super::Ext4;

impl<D: BlockDevice> Ext4<D> {
    pub(crate) fn fiemap_request(&mut self, path: &str, req: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> {
        // Write-back waits where a handle would (see `locks`).
        if req.syncs() {
            self.start_handle()?;
        }
        let ino = self.open_path(path)?;
        let map = self.fiemap_open(ino, req);
        self.closing(ino, map)
    }

    fn fiemap_open(&mut self, ino: InodeNumber, req: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> {
        if req.flags & FiemapRequest::CACHE != 0 {
            self.precache_extents(ino)?;
            self.ctx.es_lru.touch(ino);
        }
        let bs = self.ctx.bs();
        let plan = check_fiemap(req, self.ctx.mount.max_file_size(), bs)?;
        if plan.sync && !self.ctx.mount.read_only {
            self.write_back_data(ino, 0).map_err(Errno::from)?;
        }
        if self.ctx.uncached_fiemap && !plan.xattr {
            let (ctx, node) = self.split_for_lookup(ino)?;
            // The on-disk tree is what gets looked up: bring it up to date.
            ctx.write_tree(ino, node)?;
            return Ok(report_uncached(ctx, ino, node, plan.blocks, bs)?);
        }
        // The injected stale-cache bug must reach the lockstep comparison,
        // as it would in a release build, not stop at this self-check.
        let check_cache = !self.ctx.bug_keeps_stale_extents && !self.ctx.bug_keeps_cached_holes;
        let (ctx, node) = self.split_for_lookup(ino)?;
        if plan.xattr {
            return Ok(xattr_map(&node.disk, bs, plan.bytes.start));
        }
        debug_assert!(!check_cache || node.cache_agrees(), "the extent status cache says other than the map");
        let mapped = ctx.mapped_pieces(ino, node, plan.blocks.clone())?;
        let out = assemble(node, plan.blocks, bs, mapped);
        if node.es.cached_entries() > 0 {
            self.ctx.es_lru.touch(ino);
        }
        Ok(out)
    }

    /// ext4_ext_precache: the tree's blocks read (the reads CACHE costs),
    /// checked against the mapping they were written from, and every run
    /// loaded into the extent status cache. Returns how many it holds.
    pub(crate) fn precache_extents(&mut self, ino: InodeNumber) -> Result<usize, Errno> {
        let (ctx, node) = self.split_for_lookup(ino)?;
        if !node.disk.has_flag(FL_EXTENTS) {
            return Ok(0);
        }
        // A mapping changed since its tree was last written has no tree
        // on disk yet to read: it is all in memory.
        if node.tree_loaded() && (node.map_dirty || node.tree_blocks.is_empty()) {
            return Ok(node.precache(None));
        }
        let seed = ctx.ino_seed(ino, node.disk.generation);
        let tree = extent_tree::load(&mut ctx.cache, &mut ctx.dev, ino, &node.disk, seed, ctx.geo.blocks_count)?;
        if node.tree_loaded() && !same_runs(&tree.map, node.map()) {
            return Err(Error::Corrupt(Corrupt::Inode { ino, what: "the extent tree reads back other than the mapping it was written from".into() }).into());
        }
        Ok(node.precache(Some(&tree.map)))
    }
}

/// Whether two maps cover the same blocks the same way, however their
/// runs are cut.
fn same_runs(a: &ExtentMap, b: &ExtentMap) -> bool {
    let merged = |m: &ExtentMap| {
        let mut out = ExtentMap::new();
        for p in m.iter() {
            out.insert(p.logical, p.len, p.physical, p.unwritten);
        }
        out
    };
    merged(a) == merged(b)
}

/// FIEMAP's report with every mapped piece found by a lookup in the
/// on-disk tree from the root (ext4_find_extent per extent), as FIEMAP
/// went without the extent status cache.
fn report_uncached<D: BlockDevice>(ctx: &mut super::Ctx<D>, ino: InodeNumber, node: &Node, blocks: Range<u64>, bs: u64) -> crate::error::Result<Vec<FiemapExtent>> {
    let mut mapped = Vec::new();
    let mut at = blocks.start;
    while at < blocks.end {
        let Some(e) = extent_tree::find::find_extent(&mut ctx.cache, &mut ctx.dev, ino, &node.disk, at, Check::Every)?.extent else { break };
        let start = u64::from(e.logical).max(at);
        if start >= blocks.end {
            break;
        }
        let end = e.logical_end().min(blocks.end);
        mapped.push(Piece { logical: start, len: end - start, physical: e.physical + (start - u64::from(e.logical)), unwritten: e.unwritten });
        at = end;
    }
    Ok(assemble(node, blocks, bs, mapped))
}

/// The extents of `blocks`: the `mapped` pieces in order, the inode's
/// delayed ranges between them, the last one LAST.
fn assemble(node: &Node, blocks: Range<u64>, bs: u64, mapped: Vec<Piece>) -> Vec<FiemapExtent> {
    let extent = |logical: u64, len: u64, flags: u32| FiemapExtent::new(logical * bs, len * bs, flags);
    let delayed_flags = fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN;
    let mut out: Vec<FiemapExtent> = Vec::new();
    let mut delayed = node.es.delayed_in(blocks).peekable();
    for p in mapped {
        while let Some(d) = delayed.next_if(|d| d.start < p.logical) {
            out.push(extent(d.start, d.end - d.start, delayed_flags));
        }
        out.push(extent(p.logical, p.len, if p.unwritten { fiemap_flags::UNWRITTEN } else { 0 }));
    }
    for d in delayed {
        out.push(extent(d.start, d.end - d.start, delayed_flags));
    }
    if let Some(last) = out.last_mut() {
        last.flags |= fiemap_flags::LAST;
    }
    out
}

/// ext4_iomap_xattr_fiemap: one extent at 0 where the attributes live (in
/// the inode past its extra fields, else the block i_file_acl names), none
/// when there are none or the walk starts at `start` past them.
fn xattr_map(disk: &Inode, bs: u64, start: u64) -> Vec<FiemapExtent> {
    let (length, flags) = match disk.in_inode_xattr_bytes() {
        Some(bytes) => (bytes, fiemap_flags::DATA_INLINE | fiemap_flags::NOT_ALIGNED),
        None if disk.file_acl != 0 => (bs, 0),
        None => return Vec::new(),
    };
    if start >= length {
        return Vec::new();
    }
    vec![FiemapExtent::new(0, length, flags | fiemap_flags::LAST)]
}

#[cfg(test)]
mod tests {
    use ext4_model::{FileSystem, Op, Reply};

    use super::*;
    use crate::fixtures::fresh_mounted;

    const BS: u64 = 4096;

    fn map(fs: &mut Ext4<crate::device_mem::MemDevice>, path: &str, start: u64, len: u64, flags: u32) -> Vec<(u64, u64, u32)> {
        let req = FiemapRequest { start, len, flags };
        fs.fiemap(path, req).unwrap().into_iter().map(|e| (e.logical / BS, e.length / BS, e.flags)).collect()
    }

    /// A file of eight separate written extents (every other block of 16)
    /// after a sync, so its tree has a leaf block below the inode.
    fn fragmented(fs: &mut Ext4<crate::device_mem::MemDevice>) -> InodeNumber {
        fs.create("/f", 0o644).unwrap();
        for b in (0..16).step_by(2) {
            fs.write("/f", b * BS, &[7u8; 4096]).unwrap();
        }
        fs.sync().unwrap();
        let ino = fs.open_path("/f").unwrap();
        assert!(!fs.node(ino).unwrap().tree_blocks.is_empty(), "eight extents leave the inode");
        ino
    }

    #[test]
    fn lookups_and_cache_fill_the_extent_status_cache_and_change_no_answer() {
        let mut fs = fresh_mounted(64 << 20);
        let ino = fragmented(&mut fs);
        let before = map(&mut fs, "/f", 0, u64::MAX, 0);
        assert_eq!(before.len(), 8);
        let node = fs.node(ino).unwrap();
        assert_eq!(node.es.cached_extents(), 8, "each miss cached its extent");
        assert_eq!(node.es.cached_entries(), 9, "the holes ride on the extents after them; the last one has a marker");
        assert_eq!(fs.shrink_extent_status(u64::MAX), 9);
        assert_eq!(map(&mut fs, "/f", 0, u64::MAX, FiemapRequest::CACHE), before);
        assert_eq!(fs.node(ino).unwrap().es.cached_extents(), 8);
        // Even a request refused afterwards has loaded it, as ext4 does.
        fs.write("/f", 0, &[1u8; 4096]).unwrap();
        fs.sync().unwrap();
        assert_eq!(fs.fiemap("/f", FiemapRequest { start: 0, len: 0, flags: FiemapRequest::CACHE }), Err(Errno::EINVAL));
        assert_eq!(fs.node(ino).unwrap().es.cached_extents(), 8);
        // Punching drops what it touched; the answers still follow the map.
        fs.fallocate("/f", ext4_model::FallocFlags(0x3), 0, 3 * BS).unwrap();
        let node = fs.node(ino).unwrap();
        assert_eq!(node.es.cached_extents(), 6);
        assert!(node.cache_agrees());
        assert_eq!(map(&mut fs, "/f", 0, 6 * BS, 0), vec![(4, 1, fiemap_flags::LAST)]);
    }

    /// After a mount, FIEMAP looks a file up through the extent status
    /// cache into the on-disk tree, reading only the leaves it reaches;
    /// the first change to the file reads the tree whole.
    #[test]
    fn a_fresh_mount_maps_through_the_cache_reading_only_the_leaves_it_needs() {
        let mut fs = fresh_mounted(64 << 20);
        fs.create("/p", 0o644).unwrap();
        fs.fallocate("/p", ext4_model::FallocFlags(0), 0, 4000 * BS).unwrap();
        for b in (1..4000).step_by(2) {
            fs.fallocate("/p", ext4_model::FallocFlags(0x3), b * BS, BS).unwrap();
        }
        let whole = map(&mut fs, "/p", 0, u64::MAX, 0);
        assert_eq!(whole.len(), 2000);
        let mut fs = Ext4::mount(fs.unmount().unwrap(), &ext4_model::MountConfig::default()).unwrap();
        let ino = fs.open_path("/p").unwrap();
        let head: Vec<(u64, u64, u32)> = (0..5).map(|i| (2 * i, 1, fiemap_flags::UNWRITTEN | if i == 4 { fiemap_flags::LAST } else { 0 })).collect();
        assert_eq!(whole[..4], head[..4]);
        assert_eq!(map(&mut fs, "/p", 0, 10 * BS, 0), head);
        assert!(!fs.nodes[&ino].tree_loaded(), "a lookup needs no whole tree");
        let (ctx, node) = fs.split_for_lookup(ino).unwrap();
        let seed = ctx.ino_seed(ino, node.disk.generation);
        let tree = extent_tree::load(&mut ctx.cache, &mut ctx.dev, ino, &node.disk, seed, ctx.geo.blocks_count).unwrap().tree_blocks;
        assert_eq!(tree.len(), 7, "2000 extents: an index block over six leaves");
        let checked: Vec<bool> = tree.iter().map(|&b| ctx.cache.is_verified(b)).collect();
        assert_eq!(checked, [true, true, false, false, false, false, false], "a lookup read the index block and the first leaf only");
        // Cold, whole: the same answer; then a change loads the tree.
        assert_eq!(map(&mut fs, "/p", 0, u64::MAX, 0), whole);
        assert_eq!(fs.nodes[&ino].es.cached_extents(), 2000);
        fs.fallocate("/p", ext4_model::FallocFlags(0x3), 0, BS).unwrap();
        assert!(fs.nodes[&ino].tree_loaded());
        assert!(fs.nodes[&ino].cache_agrees());
        assert_eq!(map(&mut fs, "/p", 0, u64::MAX, 0), whole[1..]);
    }

    /// The shrinker takes the least recently used inode's cached entries
    /// first, whole, and leaves delayed extents; answers do not change.
    #[test]
    fn the_shrinker_drops_the_least_recently_used_cache_first_and_never_delayed_extents() {
        let mut fs = fresh_mounted(64 << 20);
        let f = fragmented(&mut fs);
        fs.create("/g", 0o644).unwrap();
        for b in (0..10).step_by(2) {
            fs.write("/g", b * BS, &[3u8; 4096]).unwrap();
        }
        fs.sync().unwrap();
        let g = fs.open_path("/g").unwrap();
        map(&mut fs, "/g", 0, u64::MAX, FiemapRequest::CACHE);
        let f_before = map(&mut fs, "/f", 0, u64::MAX, FiemapRequest::CACHE);
        // /g used its cache last now; /f gains a delayed extent.
        map(&mut fs, "/g", 0, u64::MAX, 0);
        fs.write("/f", 100 * BS, &[4u8; 4096]).unwrap();
        assert_eq!((fs.node(f).unwrap().es.cached_extents(), fs.node(g).unwrap().es.cached_extents()), (8, 5));
        let (f_entries, g_entries) = (fs.node(f).unwrap().es.cached_entries(), fs.node(g).unwrap().es.cached_entries());
        assert_eq!(fs.shrink_extent_status(1), f_entries as u64, "the oldest inode's entries go, all of them");
        assert_eq!((fs.node(f).unwrap().es.cached_entries(), fs.node(g).unwrap().es.cached_entries()), (0, g_entries));
        assert_eq!(fs.node(f).unwrap().es.delayed_blocks(), 1, "a delayed extent is never shrunk");
        // The delayed block added since moved LAST off the eighth extent.
        let mapped = |v: Vec<(u64, u64, u32)>| v.into_iter().take(8).map(|(l, n, fl)| (l, n, fl & !fiemap_flags::LAST)).collect::<Vec<_>>();
        let f_after = map(&mut fs, "/f", 0, u64::MAX, 0);
        assert_eq!(f_after.len(), 9);
        assert_eq!(mapped(f_after), mapped(f_before), "a smaller cache gives the same answers");
        let refilled = fs.node(f).unwrap().es.cached_entries() as u64;
        assert_eq!(fs.shrink_extent_status(u64::MAX), refilled + g_entries as u64);
        assert_eq!(fs.shrink_extent_status(u64::MAX), 0, "nothing cached is left");
    }

    /// CACHE loads before SYNC writes back, and write-back converts the
    /// unwritten extent the cache just took in: the conversion must drop it.
    /// Without that drop a swarm fails at once, shrunk to these four ops.
    #[test]
    fn write_back_after_cache_leaves_no_stale_unwritten_entry() {
        let mut fs = fresh_mounted(64 << 20);
        fs.create("/a", 0o644).unwrap();
        fs.fallocate("/a", ext4_model::FallocFlags(0x10), 0, 1).unwrap();
        fs.write("/a", 0, &[9u8]).unwrap();
        assert_eq!(map(&mut fs, "/a", 0, u64::MAX, FiemapRequest::SYNC | FiemapRequest::CACHE), vec![(0, 1, fiemap_flags::LAST)]);
    }

    /// The uncached path (every extent looked up from the root of the on-disk
    /// tree) answers what the cached one does: across leaf blocks, for a
    /// range, with unwritten and delayed extents, and with the mapping
    /// changed since the tree was last written.
    #[test]
    fn uncached_lookups_in_the_on_disk_tree_answer_as_the_cache_does() {
        let mut fs = fresh_mounted(256 << 20);
        fs.create("/f", 0o644).unwrap();
        fs.fallocate("/f", ext4_model::FallocFlags(0), 0, 3000 * BS).unwrap();
        for b in (1..3000).step_by(2) {
            fs.fallocate("/f", ext4_model::FallocFlags(0x3), b * BS, BS).unwrap();
        }
        for b in (0..600).step_by(6) {
            fs.write("/f", b * BS, &[5u8; 4096]).unwrap();
        }
        fs.sync().unwrap();
        fs.write("/f", 3100 * BS, &[6u8; 4096]).unwrap();
        fs.fallocate("/f", ext4_model::FallocFlags(0x3), 1000 * BS, 10 * BS).unwrap();
        let ranges = [(0, u64::MAX), (7 * BS + 1, 900 * BS), (2990 * BS, 200 * BS)];
        let cached: Vec<_> = ranges.iter().map(|&(s, l)| map(&mut fs, "/f", s, l, 0)).collect();
        assert_eq!(cached[0].len(), 1500 - 5 + 1, "1,500 extents, five punched, one delayed");
        fs.set_uncached_fiemap(true);
        let uncached: Vec<_> = ranges.iter().map(|&(s, l)| map(&mut fs, "/f", s, l, 0)).collect();
        assert_eq!(uncached, cached);
        let ino = fs.open_path("/f").unwrap();
        assert!(fs.node(ino).unwrap().tree_blocks.len() > 1, "several leaves were walked");
    }

    #[test]
    fn a_range_is_clipped_to_its_blocks_with_its_own_last_extent() {
        let mut fs = fresh_mounted(64 << 20);
        fragmented(&mut fs);
        // Bytes 4097..4 blocks + 1: blocks 1..5, holding extents at 2 and 4.
        assert_eq!(map(&mut fs, "/f", BS + 1, 3 * BS + 1, 0), vec![(2, 1, 0), (4, 1, fiemap_flags::LAST)]);
        assert_eq!(map(&mut fs, "/f", 3 * BS, BS, 0), vec![], "a hole maps nothing");
        fs.write("/f", 40 * BS, &[2u8; 3 * 4096]).unwrap();
        assert_eq!(map(&mut fs, "/f", 41 * BS + 7, 1, 0), vec![(41, 1, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN | fiemap_flags::LAST)]);
        assert_eq!(map(&mut fs, "/f", 41 * BS, BS, FiemapRequest::SYNC), vec![(41, 1, fiemap_flags::LAST)], "SYNC wrote it back");
    }

    #[test]
    fn the_count_is_the_length_of_the_engines_own_list() {
        let mut fs = fresh_mounted(64 << 20);
        fragmented(&mut fs);
        fs.write("/f", 30 * BS, &[2u8; 4096]).unwrap();
        fs.mkdir("/d", 0o755).unwrap();
        for (path, start, len, flags) in [("/f", 0, u64::MAX, 0), ("/f", 3 * BS, 20 * BS, 0), ("/f", 5, 1, FiemapRequest::CACHE), ("/f", 0, u64::MAX, FiemapRequest::XATTR), ("/d", 0, u64::MAX, 0), ("/f", 29 * BS, 4 * BS, FiemapRequest::SYNC)] {
            let list = fs.apply(&Op::Fiemap { path: path.into(), start, len, flags, count_only: false });
            let count = fs.apply(&Op::Fiemap { path: path.into(), start, len, flags, count_only: true });
            let Ok(Reply::Extents(list)) = list else { panic!("{list:?}") };
            assert_eq!(count, Ok(Reply::MappedCount(list.len() as u32)), "{path} {start} {len} {flags:#x}");
        }
    }

    #[test]
    fn bad_requests_get_the_kernels_errors_and_xattrs_map_nothing() {
        let mut fs = fresh_mounted(64 << 20);
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[3u8; 4096]).unwrap();
        let max = fs.ctx.mount.max_file_size();
        let ask = |fs: &mut Ext4<_>, start, len, flags| fs.fiemap("/f", FiemapRequest { start, len, flags }).map(|m| m.len());
        assert_eq!(ask(&mut fs, 0, 0, 0), Err(Errno::EINVAL));
        assert_eq!(ask(&mut fs, max, 1, 0), Err(Errno::EINVAL));
        assert_eq!(ask(&mut fs, max + 1, 1, 0), Err(Errno::EFBIG));
        assert_eq!(ask(&mut fs, 0, 1, FiemapRequest::SYNC | 0x10), Err(Errno::EBADR));
        assert_eq!(map(&mut fs, "/f", 0, 1, 0), vec![(0, 1, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN | fiemap_flags::LAST)], "EBADR wrote nothing back");
        assert_eq!(ask(&mut fs, 0, u64::MAX, FiemapRequest::XATTR | FiemapRequest::SYNC), Ok(0));
        assert_eq!(map(&mut fs, "/f", 0, 1, 0), vec![(0, 1, fiemap_flags::LAST)], "XATTR|SYNC wrote it back");
    }
}

//! Building a model from what a filesystem shows: after a crash the model
//! continues from the recovered state, and an image made elsewhere (mke2fs -d,
//! debugfs) can be put in lockstep from its first op.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::MountConfig;
use crate::content::Source;
use crate::data::{Alloc, FileData};
use crate::durability::{data_ranges, read_range, view_tree, CrashViolation, MAX_CHECKED_BYTES};
use crate::fs::FileSystem;
use crate::model::{inode_blocks, Limits, Model};
use crate::op::{fiemap_flags, FiemapRequest, FileKind};
use crate::state::{Ino, Inode, Marks, Node, State, FIRST_FREE_INO, LOST_FOUND_INO, ROOT_INO};

fn inconsistent(path: &str, detail: String) -> CrashViolation {
    CrashViolation::Inconsistent { path: path.to_string(), detail }
}

fn parent_and_name(path: &str) -> (&str, &str) {
    let cut = path.rfind('/').unwrap_or(0);
    let parent = if cut == 0 { "/" } else { &path[..cut] };
    (parent, &path[cut + 1..])
}

impl Model {
    /// A model whose state is exactly what `fs` shows.
    pub fn adopt(config: &MountConfig, limits: Limits, fs: &mut dyn FileSystem) -> Result<Model, CrashViolation> {
        let mount = config.validate().map_err(|e| inconsistent("/", format!("mount config: {e}")))?;
        let bs = mount.block_size as u64;
        let ratio = u64::from(mount.cluster_size / mount.block_size);
        let view = view_tree(fs)?;
        let mut st = State::new();
        st.inodes.clear();
        let mut by_fs_ino: BTreeMap<u64, Ino> = BTreeMap::new();
        let mut names: BTreeMap<Ino, u32> = BTreeMap::new();
        for (path, node) in &view.nodes {
            let fs_ino = view.inos[path];
            let existing = by_fs_ino.get(&fs_ino).copied();
            let ino = match (path.as_str(), existing) {
                (_, Some(ino)) => ino,
                ("/", None) => ROOT_INO,
                ("/lost+found", None) if node.kind == FileKind::Directory => LOST_FOUND_INO,
                _ => {
                    let ino = st.next_ino.max(FIRST_FREE_INO);
                    st.next_ino = ino + 1;
                    ino
                }
            };
            by_fs_ino.insert(fs_ino, ino);
            if path != "/" {
                let (parent_path, name) = parent_and_name(path);
                let parent = by_fs_ino[&view.inos[parent_path]];
                st.entries_mut(parent).insert(name.to_string(), ino);
                *names.entry(ino).or_default() += 1;
            }
            if existing.is_some() {
                continue;
            }
            let inode_node = match node.kind {
                FileKind::Directory => {
                    let parent = if path == "/" { ROOT_INO } else { by_fs_ino[&view.inos[parent_and_name(path).0]] };
                    Node::Dir { entries: BTreeMap::new(), parent }
                }
                FileKind::Symlink => Node::Symlink(node.target.clone().unwrap_or_default()),
                FileKind::Regular => Node::File(adopt_file(fs, path, view.files[path].1, bs)?),
            };
            let perm = (node.mode & 0o7777) as u16;
            let inode = Inode { node: inode_node, perm, links: 0, flags: node.flags, marks: Marks::default() };
            st.used_blocks += inode_blocks(&inode, ratio);
            // An adopted file may be mid write-back.
            st.touched.insert(ino);
            st.inodes.insert(ino, inode);
        }
        for (ino, inode) in st.inodes.iter_mut() {
            if !matches!(inode.node, Node::Dir { .. }) {
                inode.links = names.get(ino).copied().unwrap_or(0);
            }
        }
        st.next_ino = st.next_ino.max(FIRST_FREE_INO);
        let model = Model::from_state(mount, limits, st, true);
        for (path, node) in &view.nodes {
            let ino = by_fs_ino[&view.inos[path]];
            let nlink = model.st.nlink(ino);
            if nlink != node.nlink {
                return Err(inconsistent(path, format!("reports nlink {} but the tree gives {nlink}", node.nlink)));
            }
        }
        model.check_invariants().map_err(|e| inconsistent("/", e))?;
        Ok(model)
    }
}

fn adopt_file(fs: &mut dyn FileSystem, path: &str, size: u64, bs: u64) -> Result<FileData, CrashViolation> {
    let extents = fs.fiemap(path, FiemapRequest::whole(0)).map_err(|errno| CrashViolation::Unreadable { call: format!("fiemap {path}"), errno })?;
    let mut file = FileData { size, ..FileData::default() };
    // Blocks a model says may be holes are taken as holes.
    for e in extents.iter().filter(|e| !e.maybe_hole) {
        if e.logical % bs != 0 || e.length % bs != 0 {
            return Err(inconsistent(path, format!("extent {e:?} is not block aligned")));
        }
        let alloc = if e.flags & fiemap_flags::DELALLOC != 0 {
            Alloc::Delayed
        } else if e.flags & fiemap_flags::UNWRITTEN != 0 && e.writeback_pending {
            // Dirty pages over unwritten blocks: only a model reports them.
            Alloc::UnwrittenDirty
        } else if e.flags & fiemap_flags::UNWRITTEN != 0 {
            Alloc::Unwritten
        } else {
            Alloc::Written
        };
        file.writeback_pending |= alloc.settled() != alloc;
        file.blocks.insert(e.logical / bs..(e.logical + e.length) / bs, alloc);
    }
    let ranges = data_ranges(fs, path, size)?;
    let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    if total > MAX_CHECKED_BYTES {
        return Err(inconsistent(path, format!("{total} bytes of data is more than adoption reads")));
    }
    for range in ranges {
        let bytes: Arc<[u8]> = read_range(fs, path, range.clone())?.into();
        // Blocks that read as zeros stay holes in the content; the rest
        // share the buffer read (neighbouring blocks make one run).
        let mut off = range.start;
        while off < range.end {
            let take = ((off / bs + 1) * bs).min(range.end) - off;
            let at = (off - range.start) as usize;
            if bytes[at..at + take as usize].iter().any(|&x| x != 0) {
                file.content.put(off, take, Source::Literal { bytes: bytes.clone(), at });
            }
            off += take;
        }
    }
    Ok(file)
}

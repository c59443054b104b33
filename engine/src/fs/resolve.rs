//! Path resolution, step for step the model's (`ext4_model::state::State::walk`):
//! ENOTDIR before ENAMETOOLONG before ENOENT, symlinks followed in the
//! middle of a path always and at its end on request, at most 40 of them.

use std::borrow::Cow;

use ext4_model::op::NAME_MAX;
use ext4_model::path::{target_components, target_demands_dir, Last, SplitPath};
use ext4_model::{Errno, FileKind};

use crate::device::BlockDevice;
use crate::format::dirent::FT_SYMLINK;
use crate::format::inode::ROOT_INO;
use crate::format::InodeNumber;

use super::Ext4;

/// Linux follows at most this many symlinks in one lookup (MAXSYMLINKS).
pub const MAX_SYMLINKS: u32 = 40;

impl<D: BlockDevice> Ext4<D> {
    /// Resolves a whole path; `follow_last` follows a final symlink, and a
    /// trailing slash always does and demands a directory.
    pub(crate) fn resolve(&mut self, path: &SplitPath, follow_last: bool) -> Result<InodeNumber, Errno> {
        let mut followed = 0;
        let ino = self.walk(ROOT_INO, &path.components, follow_last || path.trailing_slash, &mut followed)?;
        if path.trailing_slash && self.kind_of(ino)? != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(ino)
    }

    /// Resolves all but the last component, which must name a directory.
    pub(crate) fn resolve_parent<'a>(&mut self, path: &SplitPath<'a>) -> Result<(InodeNumber, Last<'a>), Errno> {
        let (parent, last) = path.split_last();
        let mut followed = 0;
        let dir = self.walk(ROOT_INO, parent, true, &mut followed)?;
        if self.kind_of(dir)? != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok((dir, last))
    }

    /// The entry `name` in directory `dir` (which must be one).
    pub(crate) fn lookup_in(&mut self, dir: InodeNumber, name: &str) -> Result<Option<crate::dir::Slot>, Errno> {
        let node = self.dir_node(dir)?;
        Ok(node.dir.as_ref().and_then(|d| d.lookup(name.as_bytes())))
    }

    /// A symlink's target.
    pub(crate) fn link_target(&mut self, ino: InodeNumber) -> Result<String, Errno> {
        let node = self.node(ino)?;
        if !node.disk.is_symlink() {
            return Err(Errno::EINVAL);
        }
        let size = usize::try_from(node.disk.size).map_err(|_| Errno::EIO)?;
        let bytes = if node.is_fast_symlink() {
            node.disk.block.get(..size).ok_or(Errno::EIO)?.to_vec()
        } else {
            let p = node.map().lookup(0).ok_or(Errno::EIO)?;
            let bs = self.ctx.bs();
            if size as u64 >= bs {
                return Err(Errno::EIO);
            }
            let mut b = vec![0u8; bs as usize];
            self.ctx.dev.read(p.physical * bs, &mut b, crate::device::IoClass::Data).map_err(crate::error::Error::from)?;
            b.truncate(size);
            b
        };
        String::from_utf8(bytes).map_err(|_| Errno::EIO)
    }

    fn walk(&mut self, start: InodeNumber, comps: &[&str], mut follow_last: bool, followed: &mut u32) -> Result<InodeNumber, Errno> {
        let mut want_dir = false;
        // Components still to walk, next on top. A path's own stay borrowed;
        // only a symlink target's are copied, and symlinks are rare.
        let mut todo: Vec<Cow<'_, str>> = comps.iter().rev().map(|c| Cow::Borrowed(*c)).collect();
        let mut cur = start;
        while let Some(name) = todo.pop() {
            // One inode lookup per step serves the type check and the entry.
            let (ctx, node) = self.split(cur)?;
            match node.kind() {
                Some(FileKind::Directory) => {}
                Some(_) => return Err(Errno::ENOTDIR),
                None => return Err(Errno::EIO),
            }
            if name.len() > NAME_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            let (next, is_link) = if name == "." {
                (cur, false)
            } else {
                ctx.load_dir(cur, node)?;
                let dir = node.dir.as_ref().ok_or(Errno::EIO)?;
                if name == ".." {
                    (dir.parent(), false)
                } else {
                    let slot = dir.lookup(name.as_bytes()).ok_or(Errno::ENOENT)?;
                    (slot.ino, slot.file_type == FT_SYMLINK)
                }
            };
            if is_link && (!todo.is_empty() || follow_last) {
                *followed += 1;
                if *followed > MAX_SYMLINKS {
                    return Err(Errno::ELOOP);
                }
                let target = self.link_target(next)?;
                if todo.is_empty() && target_demands_dir(&target) {
                    // The body's trailing slash now ends the path.
                    follow_last = true;
                    want_dir = true;
                }
                let (absolute, tcomps) = target_components(&target);
                if absolute {
                    cur = ROOT_INO;
                }
                todo.extend(tcomps.rev().map(|c| Cow::Owned(c.to_string())));
                continue;
            }
            cur = next;
        }
        if want_dir && self.kind_of(cur)? != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(cur)
    }
}

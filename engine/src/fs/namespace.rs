//! Namespace operations, with errors in the model's order (namespace.rs there):
//! path resolution, then existence, then read-only, then type and emptiness,
//! then space.

use ext4_model::op::{DirEntry, LINK_MAX};
use ext4_model::path::{check_name, Last, SplitPath};
use ext4_model::{Errno, FileKind, RenameFlags, Stat};

use crate::device::{BlockDevice, WriteFlags};
use crate::dir::Slot;
use crate::format::dirent::{FT_DIR, FT_SYMLINK};
use crate::format::inode::{FL_EXTENTS, I_BLOCK_LEN, ROOT_INO};
use crate::format::InodeNumber;

use super::lifecycle::file_type;
use super::lock_plan::namespace::{inode_lock, rename_children};
use super::Ext4;

pub(crate) fn split(path: &str) -> Result<SplitPath<'_>, Errno> {
    SplitPath::parse(path)
}

impl<D: BlockDevice> Ext4<D> {
    fn is_dir(&mut self, ino: InodeNumber) -> Result<bool, Errno> {
        Ok(self.kind_of(ino)? == FileKind::Directory)
    }

    /// Parent and new name for creating `path`, as far as the path says
    /// (filename_create before it locks the parent).
    fn new_name<'p>(&mut self, path: &'p str, open_create: bool) -> Result<(InodeNumber, &'p str, bool), Errno> {
        let sp = split(path)?;
        let (dir, last) = self.resolve_parent(&sp)?;
        let Last::Normal(name) = last else { return Err(Errno::EEXIST) };
        if open_create && sp.trailing_slash {
            // open(O_CREAT) refuses a trailing slash before it looks.
            return Err(Errno::EISDIR);
        }
        Ok((dir, name, sp.trailing_slash))
    }

    /// Runs `f` holding `dir`'s i_rwsem, once `name` is a valid name not
    /// in it yet (the rest of filename_create).
    fn creating_in<T>(&mut self, dir: InodeNumber, name: &str, f: impl FnOnce(&mut Self) -> Result<T, Errno>) -> Result<T, Errno> {
        self.under_locks(&[inode_lock(dir, "filename_create")], |fs| {
            check_name(name)?;
            if fs.lookup_in(dir, name)?.is_some() {
                return Err(Errno::EEXIST);
            }
            f(fs)
        })
    }

    /// Creates and links a new inode of `kind` at `dir/name`.
    fn make(&mut self, dir: InodeNumber, name: &str, kind: FileKind, perm: u16) -> Result<InodeNumber, Errno> {
        let ino = self.new_inode(dir, name, kind, perm)?;
        if let Err(e) = self.add_entry(dir, name, ino, file_type(kind)) {
            // No room for the name: give the inode back.
            let _ = self.free_inode(ino);
            return Err(e);
        }
        Ok(ino)
    }

    pub(crate) fn do_create(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        let (dir, name, _) = self.new_name(path, true)?;
        self.creating_in(dir, name, |fs| {
            fs.ctx.writable()?;
            fs.may_create_in(dir)?;
            fs.make(dir, name, FileKind::Regular, perm).map(drop)
        })
    }

    pub(crate) fn do_mkdir(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        let (dir, name, _) = self.new_name(path, false)?;
        self.creating_in(dir, name, |fs| {
            fs.ctx.writable()?;
            fs.may_create_in(dir)?;
            fs.make(dir, name, FileKind::Directory, perm).map(drop)
        })
    }

    pub(crate) fn do_symlink(&mut self, target: &str, path: &str) -> Result<(), Errno> {
        ext4_model::vfs::check_symlink_target(target)?;
        let (dir, name, slash) = self.new_name(path, false)?;
        self.creating_in(dir, name, |fs| {
            if slash {
                return Err(Errno::ENOENT);
            }
            fs.ctx.writable()?;
            fs.may_create_in(dir)?;
            let bs = fs.ctx.bs();
            if target.len() as u64 + 1 > bs {
                return Err(Errno::ENAMETOOLONG);
            }
            let ino = fs.new_inode(dir, name, FileKind::Symlink, 0o777)?;
            let stored = fs.store_link_target(ino, target);
            if let Err(e) = stored.and_then(|()| fs.add_entry(dir, name, ino, FT_SYMLINK)) {
                let _ = fs.free_inode(ino);
                return Err(e);
            }
            Ok(())
        })
    }

    /// Puts a symlink's target in `i_block` (short) or in one data block.
    fn store_link_target(&mut self, ino: InodeNumber, target: &str) -> Result<(), Errno> {
        let (ctx, node) = self.split(ino)?;
        node.disk.size = target.len() as u64;
        if target.len() < I_BLOCK_LEN {
            node.disk.block = [0; I_BLOCK_LEN];
            node.disk.block[..target.len()].copy_from_slice(target.as_bytes());
            return Ok(());
        }
        node.disk.flags |= FL_EXTENTS;
        crate::format::extent::write_node(&mut node.disk.block, &crate::format::extent::ExtentNode::Leaf(Vec::new()), 0)?;
        ctx.map_range(ino, node, 0..1, false)?;
        let p = node.map().lookup(0).ok_or(Errno::EIO)?;
        let bs = ctx.bs();
        let mut b = vec![0u8; bs as usize];
        b[..target.len()].copy_from_slice(target.as_bytes());
        ctx.dev.write(p.physical * bs, &b, WriteFlags::DATA).map_err(crate::error::Error::from)?;
        Ok(())
    }

    pub(crate) fn do_link(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        let ino = self.resolve(&split(from)?, false)?;
        let (dir, name, slash) = self.new_name(to, false)?;
        self.creating_in(dir, name, |fs| {
            if slash {
                return Err(Errno::ENOENT);
            }
            fs.ctx.writable()?;
            fs.may_create_in(dir)?;
            let kind = fs.kind_of(ino)?;
            if fs.restricted(ino)? || kind == FileKind::Directory {
                return Err(Errno::EPERM);
            }
            // vfs_link: the source's i_rwsem, then its link count.
            fs.under_locks(&[inode_lock(ino, "vfs_link")], |fs| {
                if u32::from(fs.node(ino)?.disk.links_count) >= LINK_MAX {
                    return Err(Errno::EMLINK);
                }
                fs.add_entry(dir, name, ino, file_type(kind))?;
                let (ctx, node) = fs.split(ino)?;
                node.disk.links_count += 1;
                node.disk.ctime = ctx.now();
                fs.mark_dirty(ino);
                Ok(())
            })
        })
    }

    pub(crate) fn do_unlink(&mut self, path: &str) -> Result<(), Errno> {
        let sp = split(path)?;
        let (dir, last) = self.resolve_parent(&sp)?;
        let Last::Normal(name) = last else { return Err(Errno::EISDIR) };
        self.under_locks(&[inode_lock(dir, "do_unlinkat")], |fs| {
            fs.ctx.writable()?;
            check_name(name)?;
            let slot = fs.lookup_in(dir, name)?.ok_or(Errno::ENOENT)?;
            let is_dir = fs.is_dir(slot.ino)?;
            if sp.trailing_slash {
                return Err(if is_dir { Errno::EISDIR } else { Errno::ENOTDIR });
            }
            fs.may_delete(dir, slot.ino)?;
            if is_dir {
                return Err(Errno::EISDIR);
            }
            fs.under_locks(&[inode_lock(slot.ino, "vfs_unlink")], |fs| {
                fs.remove_entry(dir, name)?;
                fs.drop_link(slot.ino)
            })
        })
    }

    pub(crate) fn do_rmdir(&mut self, path: &str) -> Result<(), Errno> {
        let sp = split(path)?;
        let (dir, last) = self.resolve_parent(&sp)?;
        let name = match last {
            Last::Normal(name) => name,
            Last::Dot => return Err(Errno::EINVAL),
            Last::DotDot => return Err(Errno::ENOTEMPTY),
            Last::Root => return Err(Errno::EBUSY),
        };
        self.under_locks(&[inode_lock(dir, "do_rmdir")], |fs| {
            fs.ctx.writable()?;
            check_name(name)?;
            let slot = fs.lookup_in(dir, name)?.ok_or(Errno::ENOENT)?;
            fs.may_delete(dir, slot.ino)?;
            if !fs.is_dir(slot.ino)? {
                return Err(Errno::ENOTDIR);
            }
            fs.under_locks(&[inode_lock(slot.ino, "vfs_rmdir")], |fs| {
                if !fs.dir_node(slot.ino)?.dir.as_ref().ok_or(Errno::EIO)?.is_empty() {
                    return Err(Errno::ENOTEMPTY);
                }
                fs.remove_entry(dir, name)?;
                fs.drop_link(slot.ino)
            })
        })
    }

    /// True when `ancestor` is `ino` or one of its parents.
    pub(crate) fn is_ancestor(&mut self, ancestor: InodeNumber, mut ino: InodeNumber) -> Result<bool, Errno> {
        // A parent chain longer than the inode count means a loop on disk.
        let limit = self.ctx.geo.inodes_count();
        for _ in 0..=limit {
            if ino == ancestor {
                return Ok(true);
            }
            if ino == ROOT_INO {
                return Ok(false);
            }
            ino = self.dir_node(ino)?.dir.as_ref().ok_or(Errno::EIO)?.parent();
        }
        Err(Errno::EIO)
    }

    /// rename(2), or renameat2(2) with `flags`, checked in the model's order.
    pub(crate) fn do_rename(&mut self, from: &str, to: &str, flags: Option<RenameFlags>) -> Result<(), Errno> {
        let exchange = flags == Some(RenameFlags::Exchange);
        let osp = split(from)?;
        let nsp = split(to)?;
        let (odir, olast) = self.resolve_parent(&osp)?;
        let (ndir, nlast) = self.resolve_parent(&nsp)?;
        let Last::Normal(oname) = olast else { return Err(Errno::EBUSY) };
        let Last::Normal(nname) = nlast else {
            return Err(if flags == Some(RenameFlags::NoReplace) { Errno::EEXIST } else { Errno::EBUSY });
        };
        let parents = self.rename_parents(odir, ndir)?;
        self.under_locks(&parents.steps, |fs| {
            fs.ctx.writable()?;
            check_name(oname)?;
            let old = fs.lookup_in(odir, oname)?.ok_or(Errno::ENOENT)?;
            // The new name is looked up (and refused if too long) before the
            // trailing-slash checks.
            check_name(nname)?;
            let new = fs.lookup_in(ndir, nname)?;
            match (flags, new) {
                (Some(RenameFlags::NoReplace), Some(_)) => return Err(Errno::EEXIST),
                (Some(RenameFlags::Exchange), None) => return Err(Errno::ENOENT),
                (Some(RenameFlags::Exchange), Some(n)) if n.file_type != FT_DIR && nsp.trailing_slash => return Err(Errno::ENOTDIR),
                _ => {}
            }
            let old_is_dir = old.file_type == FT_DIR;
            if !old_is_dir && (osp.trailing_slash || (!exchange && nsp.trailing_slash)) {
                return Err(Errno::ENOTDIR);
            }
            fs.rename_trap(odir, ndir, old, new, exchange)?;
            if new.map(|n| n.ino) == Some(old.ino) {
                return Ok(());
            }
            fs.may_delete(odir, old.ino)?;
            match new {
                Some(n) => fs.may_delete(ndir, n.ino)?,
                None => fs.may_create_in(ndir)?,
            }
            if let (Some(n), false) = (new, exchange) {
                match (old_is_dir, n.file_type == FT_DIR) {
                    (true, false) => return Err(Errno::ENOTDIR),
                    (false, true) => return Err(Errno::EISDIR),
                    _ => {}
                }
            }
            if odir != ndir {
                // Rewriting a moved directory's ".." needs write access to it.
                let mut flips = old_is_dir && fs.immutable(old.ino)?;
                if let Some(n) = new.filter(|n| exchange && n.file_type == FT_DIR) {
                    flips |= fs.immutable(n.ino)?;
                }
                if flips {
                    return Err(Errno::EPERM);
                }
            }
            // vfs_rename locks the inodes it moves once the checks pass.
            fs.under_locks(&rename_children(old, new, odir, ndir).steps, |fs| {
                if let (true, Some(n)) = (exchange, new) {
                    return fs.exchange((odir, oname, old), (ndir, nname, n));
                }
                // ext4_rename, before its own checks: replacing a name writes the
                // source's delayed blocks back (auto_da_alloc).
                if new.is_some() && fs.ctx.mount.auto_da_alloc {
                    fs.alloc_da_blocks(old.ino)?;
                }
                if let Some(n) = new.filter(|n| n.file_type == FT_DIR) {
                    if !fs.dir_node(n.ino)?.dir.as_ref().ok_or(Errno::EIO)?.is_empty() {
                        return Err(Errno::ENOTEMPTY);
                    }
                }
                fs.remove_entry(odir, oname)?;
                if let Some(n) = new {
                    fs.remove_entry(ndir, nname)?;
                    fs.drop_link(n.ino)?;
                }
                fs.add_entry(ndir, nname, old.ino, old.file_type)?;
                fs.moved(old, odir, ndir)
            })
        })
    }

    /// lock_rename's trap: a rename between two directories may not move
    /// a directory under itself, nor replace an ancestor of the source's
    /// directory. Checked before vfs_rename locks the inodes it moves,
    /// which is what keeps that locking in ancestor order.
    pub(crate) fn rename_trap(&mut self, odir: InodeNumber, ndir: InodeNumber, old: Slot, new: Option<Slot>, exchange: bool) -> Result<(), Errno> {
        if odir == ndir {
            return Ok(());
        }
        if old.file_type == FT_DIR && self.is_ancestor(old.ino, ndir)? {
            return Err(Errno::EINVAL);
        }
        if let Some(n) = new.filter(|n| n.file_type == FT_DIR) {
            if self.is_ancestor(n.ino, odir)? {
                return Err(if exchange { Errno::EINVAL } else { Errno::ENOTEMPTY });
            }
        }
        Ok(())
    }

    /// ext4_cross_rename: each name points at the other's inode; a moved
    /// directory's ".." follows its new parent.
    fn exchange(&mut self, a: (InodeNumber, &str, Slot), b: (InodeNumber, &str, Slot)) -> Result<(), Errno> {
        let ((adir, aname, aslot), (bdir, bname, bslot)) = (a, b);
        self.replace_entry(adir, aname, bslot.ino, bslot.file_type)?;
        self.replace_entry(bdir, bname, aslot.ino, aslot.file_type)?;
        self.moved(aslot, adir, bdir)?;
        self.moved(bslot, bdir, adir)
    }

    /// An inode renamed out of `from` into `to`: a directory that changes
    /// parent points its ".." at the new one; its ctime changes.
    fn moved(&mut self, slot: Slot, from: InodeNumber, to: InodeNumber) -> Result<(), Errno> {
        if slot.file_type == FT_DIR && from != to {
            self.dir_for_edit(slot.ino)?;
            let (ctx, node) = self.split(slot.ino)?;
            node.dir.as_mut().ok_or(Errno::EIO)?.set_parent(&mut ctx.cache, &mut ctx.dev, to)?;
        }
        let (ctx, node) = self.split(slot.ino)?;
        node.disk.ctime = ctx.now();
        self.mark_dirty(slot.ino);
        Ok(())
    }

    pub(crate) fn do_readlink(&mut self, path: &str) -> Result<String, Errno> {
        let ino = self.resolve(&split(path)?, false)?;
        self.link_target(ino)
    }

    pub(crate) fn do_readdir(&mut self, path: &str) -> Result<Vec<DirEntry>, Errno> {
        let ino = self.resolve(&split(path)?, true)?;
        if !self.is_dir(ino)? {
            return Err(Errno::ENOTDIR);
        }
        self.under_inode_lock(ino, super::locks::Lock::InodeRwsem, true, "iterate_dir", |fs| {
            let node = fs.dir_node(ino)?;
            let d = node.dir.as_ref().ok_or(Errno::EIO)?;
            let kind = |ft: u8| match ft {
                FT_DIR => FileKind::Directory,
                FT_SYMLINK => FileKind::Symlink,
                _ => FileKind::Regular,
            };
            d.entries()
                .map(|(name, slot)| {
                    let name = String::from_utf8(name.to_vec()).map_err(|_| Errno::EIO)?;
                    Ok(DirEntry { name, kind: kind(slot.file_type) })
                })
                .collect()
        })
    }

    pub(crate) fn stat_of(&mut self, ino: InodeNumber) -> Result<Stat, Errno> {
        let sectors = self.ctx.bs() / 512;
        let bits = self.ctx.cluster_bits();
        let node = self.node(ino)?;
        let kind = node.kind().ok_or(Errno::EIO)?;
        Ok(Stat {
            ino: u64::from(ino),
            kind,
            mode: u32::from(node.disk.mode),
            nlink: u32::from(node.disk.links_count),
            size: node.disk.size,
            // Delayed blocks count, as ext4_getattr adds i_reserved_data_blocks.
            blocks: super::clusters::data_blocks(node.map(), &node.es, bits, true) * sectors,
            flags: node.visible_flags(),
            blocks_slack: 0,
        })
    }

    /// lstat, and the flags through an O_RDONLY|O_NOFOLLOW descriptor
    /// (which a symlink refuses), whose close is a release.
    pub(crate) fn do_stat(&mut self, path: &str) -> Result<Stat, Errno> {
        let ino = self.resolve(&split(path)?, false)?;
        let stat = self.stat_of(ino);
        self.closing(ino, stat)
    }

    /// Resolves a path the way open(2) does (following symlinks).
    pub(crate) fn open_path(&mut self, path: &str) -> Result<InodeNumber, Errno> {
        self.resolve(&split(path)?, true)
    }

    /// open(O_WRONLY): directories refuse, then a read-only mount does.
    pub(crate) fn open_for_write(&mut self, path: &str, append: bool) -> Result<InodeNumber, Errno> {
        let ino = self.open_path(path)?;
        if self.is_dir(ino)? {
            return Err(Errno::EISDIR);
        }
        self.ctx.writable()?;
        self.may_write(ino, append)?;
        self.ctx.writers.insert(ino);
        Ok(ino)
    }
}

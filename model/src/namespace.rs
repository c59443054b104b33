//! Namespace operations, with errors in the order Linux's namei and ext4 check
//! them: path resolution, then existence, then read-only, then type and
//! emptiness, then space.

use std::collections::BTreeMap;

use crate::data::FileData;
use crate::model::{split, Model};
use crate::op::{inode_flags, DirEntry, RenameFlags, LINK_MAX};
use crate::path::{check_name, Last};
use crate::state::{Ino, Node};
use crate::vfs::VfsVersion;
use crate::Errno;

impl Model {
    fn lookup_in(&self, dir: Ino, name: &str) -> Option<Ino> {
        self.st.entries(dir).and_then(|e| e.get(name).copied())
    }

    /// Parent and new name for creating `path`: "." / ".." / "/" exist already.
    fn new_name<'p>(&self, path: &'p str, open_create: bool) -> Result<(Ino, &'p str, bool), Errno> {
        let sp = split(path)?;
        let (dir, last) = self.st.resolve_parent(&sp)?;
        let Last::Normal(name) = last else { return Err(Errno::EEXIST) };
        if open_create && sp.trailing_slash {
            // open(O_CREAT) refuses a trailing slash before it looks.
            return Err(Errno::EISDIR);
        }
        check_name(name)?;
        if self.lookup_in(dir, name).is_some() {
            return Err(Errno::EEXIST);
        }
        Ok((dir, name, sp.trailing_slash))
    }

    pub(crate) fn do_create(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        let (dir, name, _) = self.new_name(path, true)?;
        self.writable()?;
        self.may_create_in(dir)?;
        self.reserve_inode()?;
        self.add_inode(dir, name, Node::File(FileData::default()), perm);
        Ok(())
    }

    pub(crate) fn do_mkdir(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        let (dir, name, _) = self.new_name(path, false)?;
        self.writable()?;
        self.may_create_in(dir)?;
        self.reserve_inode()?;
        self.add_inode(dir, name, Node::Dir { entries: BTreeMap::new(), parent: dir }, perm);
        Ok(())
    }

    pub(crate) fn do_symlink(&mut self, target: &str, path: &str) -> Result<(), Errno> {
        crate::vfs::check_symlink_target(target)?;
        let (dir, name, slash) = self.new_name(path, false)?;
        if slash {
            return Err(Errno::ENOENT);
        }
        self.writable()?;
        self.may_create_in(dir)?;
        // ext4 stores the target and its NUL in at most one block.
        if target.len() as u64 + 1 > self.bs() {
            return Err(Errno::ENAMETOOLONG);
        }
        self.reserve_inode()?;
        let slow = target.len() >= crate::model::FAST_SYMLINK_MAX;
        if slow {
            // Its one block takes a whole cluster under bigalloc.
            let ratio = self.ratio();
            self.reserve_blocks(ratio)?;
            self.st.used_blocks += ratio;
        }
        self.add_inode(dir, name, Node::Symlink(target.to_string()), 0o777);
        Ok(())
    }

    pub(crate) fn do_link(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        let ino = self.st.resolve(&split(from)?, false)?;
        let (dir, name, slash) = self.new_name(to, false)?;
        if slash {
            return Err(Errno::ENOENT);
        }
        self.writable()?;
        self.may_create_in(dir)?;
        if self.restricted(ino) || self.st.is_dir(ino) {
            return Err(Errno::EPERM);
        }
        if self.st.inode(ino).links >= LINK_MAX {
            return Err(Errno::EMLINK);
        }
        self.st.entries_mut(dir).insert(name.to_string(), ino);
        self.st.inode_mut(ino).links += 1;
        self.touch_meta(dir);
        self.touch_meta(ino);
        Ok(())
    }

    pub(crate) fn do_unlink(&mut self, path: &str) -> Result<(), Errno> {
        let sp = split(path)?;
        let (dir, last) = self.st.resolve_parent(&sp)?;
        let Last::Normal(name) = last else { return Err(Errno::EISDIR) };
        self.writable()?;
        check_name(name)?;
        let ino = self.lookup_in(dir, name).ok_or(Errno::ENOENT)?;
        // A trailing slash is refused before vfs_unlink; may_delete comes
        // before its is-a-directory check.
        if sp.trailing_slash {
            return Err(if self.st.is_dir(ino) { Errno::EISDIR } else { Errno::ENOTDIR });
        }
        self.may_delete(dir, ino)?;
        if self.st.is_dir(ino) {
            return Err(Errno::EISDIR);
        }
        self.st.entries_mut(dir).remove(name);
        self.touch_meta(dir);
        self.drop_link(ino);
        Ok(())
    }

    pub(crate) fn do_rmdir(&mut self, path: &str) -> Result<(), Errno> {
        let sp = split(path)?;
        let (dir, last) = self.st.resolve_parent(&sp)?;
        let name = match last {
            Last::Normal(name) => name,
            Last::Dot => return Err(Errno::EINVAL),
            Last::DotDot => return Err(Errno::ENOTEMPTY),
            Last::Root => return Err(Errno::EBUSY),
        };
        self.writable()?;
        check_name(name)?;
        let ino = self.lookup_in(dir, name).ok_or(Errno::ENOENT)?;
        self.may_delete(dir, ino)?;
        let Some(entries) = self.st.entries(ino) else { return Err(Errno::ENOTDIR) };
        if !entries.is_empty() {
            return Err(Errno::ENOTEMPTY);
        }
        self.st.entries_mut(dir).remove(name);
        self.touch_meta(dir);
        self.drop_link(ino);
        Ok(())
    }

    /// rename(2), or renameat2(2) with `flags`, in do_renameat2's order of
    /// checks (fs/namei.c) and then ext4_rename / ext4_cross_rename.
    pub(crate) fn do_rename(&mut self, from: &str, to: &str, flags: Option<RenameFlags>) -> Result<(), Errno> {
        let exchange = flags == Some(RenameFlags::Exchange);
        let osp = split(from)?;
        let nsp = split(to)?;
        let (odir, olast) = self.st.resolve_parent(&osp)?;
        let (ndir, nlast) = self.st.resolve_parent(&nsp)?;
        let Last::Normal(oname) = olast else { return Err(Errno::EBUSY) };
        let Last::Normal(nname) = nlast else {
            return Err(if flags == Some(RenameFlags::NoReplace) { Errno::EEXIST } else { Errno::EBUSY });
        };
        self.writable()?;
        check_name(oname)?;
        let old = self.lookup_in(odir, oname).ok_or(Errno::ENOENT)?;
        // The new name is looked up (and refused if too long) before the
        // trailing-slash checks.
        check_name(nname)?;
        let new = self.lookup_in(ndir, nname);
        match (flags, new) {
            (Some(RenameFlags::NoReplace), Some(_)) => return Err(Errno::EEXIST),
            (Some(RenameFlags::Exchange), None) => return Err(Errno::ENOENT),
            _ => {}
        }
        // Linux 7 checks the ancestor traps before the trailing slashes.
        let traps_first = self.vfs == VfsVersion::Linux7;
        if traps_first {
            self.rename_traps(old, (odir, ndir), new, exchange)?;
        }
        if let (true, Some(n)) = (exchange, new) {
            if !self.st.is_dir(n) && nsp.trailing_slash {
                return Err(Errno::ENOTDIR);
            }
        }
        let old_is_dir = self.st.is_dir(old);
        if !old_is_dir && (osp.trailing_slash || (!exchange && nsp.trailing_slash)) {
            return Err(Errno::ENOTDIR);
        }
        if !traps_first {
            self.rename_traps(old, (odir, ndir), new, exchange)?;
        }
        if new == Some(old) {
            return Ok(());
        }
        // vfs_rename: may_delete of the source, then of the target (or
        // may_create where there is none), then the kinds, then permission
        // to rewrite the ".." of a directory changing parents.
        self.may_delete(odir, old)?;
        match new {
            Some(n) => self.may_delete(ndir, n)?,
            None => self.may_create_in(ndir)?,
        }
        if let (Some(n), false) = (new, exchange) {
            match (old_is_dir, self.st.is_dir(n)) {
                (true, false) => return Err(Errno::ENOTDIR),
                (false, true) => return Err(Errno::EISDIR),
                _ => {}
            }
        }
        if odir != ndir {
            let flips = (old_is_dir && self.immutable(old)) || (exchange && new.is_some_and(|n| self.st.is_dir(n) && self.immutable(n)));
            if flips {
                return Err(Errno::EPERM);
            }
        }
        if let (true, Some(n)) = (exchange, new) {
            self.exchange((odir, oname, old), (ndir, nname, n));
            return Ok(());
        }
        // ext4_rename: replacing a name starts write-back of the source's
        // delayed blocks (auto_da_alloc), before its own checks.
        if new.is_some() && self.mount.auto_da_alloc {
            self.alloc_da_blocks(old);
        }
        if let Some(n) = new {
            if self.st.entries(n).is_some_and(|e| !e.is_empty()) {
                return Err(Errno::ENOTEMPTY);
            }
        }
        self.st.entries_mut(odir).remove(oname);
        if let Some(n) = new {
            self.st.entries_mut(ndir).remove(nname);
            self.drop_link(n);
        }
        self.st.entries_mut(ndir).insert(nname.to_string(), old);
        if let Node::Dir { parent, .. } = &mut self.st.inode_mut(old).node {
            *parent = ndir;
        }
        self.touch_meta(odir);
        self.touch_meta(ndir);
        self.touch_meta(old);
        Ok(())
    }

    /// lock_rename's traps: a directory cannot move into its own subtree,
    /// nor replace (or swap with) one of its own ancestors.
    fn rename_traps(&self, old: Ino, (odir, ndir): (Ino, Ino), new: Option<Ino>, exchange: bool) -> Result<(), Errno> {
        if odir == ndir {
            return Ok(());
        }
        if self.st.is_dir(old) && self.st.is_ancestor(old, ndir) {
            return Err(Errno::EINVAL);
        }
        if let Some(n) = new.filter(|n| self.st.is_dir(*n)) {
            if self.st.is_ancestor(n, odir) {
                return Err(if exchange { Errno::EINVAL } else { Errno::ENOTEMPTY });
            }
        }
        Ok(())
    }

    /// Swaps two names' inodes; moved directories get their new parent
    /// (their ".." changes, and the parents' link counts follow from it).
    fn exchange(&mut self, a: (Ino, &str, Ino), b: (Ino, &str, Ino)) {
        let ((adir, aname, aino), (bdir, bname, bino)) = (a, b);
        self.st.entries_mut(adir).insert(aname.to_string(), bino);
        self.st.entries_mut(bdir).insert(bname.to_string(), aino);
        for (ino, parent) in [(aino, bdir), (bino, adir)] {
            if let Node::Dir { parent: p, .. } = &mut self.st.inode_mut(ino).node {
                *p = parent;
            }
            self.touch_meta(ino);
        }
        self.touch_meta(adir);
        self.touch_meta(bdir);
    }

    pub(crate) fn do_readlink(&self, path: &str) -> Result<String, Errno> {
        let ino = self.st.resolve(&split(path)?, false)?;
        match &self.st.inode(ino).node {
            Node::Symlink(t) => Ok(t.clone()),
            _ => Err(Errno::EINVAL),
        }
    }

    pub(crate) fn do_readdir(&self, path: &str) -> Result<Vec<DirEntry>, Errno> {
        let ino = self.st.resolve(&split(path)?, true)?;
        let entries = self.st.entries(ino).ok_or(Errno::ENOTDIR)?;
        Ok(entries.iter().map(|(name, c)| DirEntry { name: name.clone(), kind: self.st.inode(*c).kind() }).collect())
    }

    /// Resolves a path the way open(2) does (following symlinks).
    pub(crate) fn open_path(&self, path: &str) -> Result<Ino, Errno> {
        self.st.resolve(&split(path)?, true)
    }

    /// open(O_WRONLY), with O_APPEND or not (may_open): directories
    /// refuse, then a read-only mount, then an immutable inode, then an
    /// append-only one unless the open appends.
    pub(crate) fn open_for_write(&self, path: &str, append: bool) -> Result<Ino, Errno> {
        let ino = self.open_path(path)?;
        if self.st.is_dir(ino) {
            return Err(Errno::EISDIR);
        }
        self.writable()?;
        if self.immutable(ino) || (!append && self.append_only(ino)) {
            return Err(Errno::EPERM);
        }
        Ok(ino)
    }

    pub(crate) fn immutable(&self, ino: Ino) -> bool {
        self.st.inode(ino).flags & inode_flags::IMMUTABLE != 0
    }

    pub(crate) fn append_only(&self, ino: Ino) -> bool {
        self.st.inode(ino).flags & inode_flags::APPEND != 0
    }

    /// Immutable or append-only: no unlink, rename, link or truncate.
    pub(crate) fn restricted(&self, ino: Ino) -> bool {
        self.immutable(ino) || self.append_only(ino)
    }

    /// may_create: new names need a directory that is not immutable.
    fn may_create_in(&self, dir: Ino) -> Result<(), Errno> {
        if self.immutable(dir) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// may_delete: neither the directory (immutable or append-only) nor the
    /// victim (immutable or append-only) may lose the name.
    fn may_delete(&self, dir: Ino, victim: Ino) -> Result<(), Errno> {
        if self.restricted(dir) || self.restricted(victim) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::fs::FileSystem;
    use crate::op::RenameFlags;
    use crate::vfs::VfsVersion;
    use crate::{Errno, Model, MountConfig};

    /// A file under /d, and /d/e/g: sources with trailing slashes, renamed
    /// into their own ancestors.
    fn tree(vfs: VfsVersion) -> Model {
        let mut m = Model::new(&MountConfig::default()).unwrap().with_vfs(vfs);
        m.mkdir("/d", 0o755).unwrap();
        m.create("/d/f", 0o644).unwrap();
        m.mkdir("/d/e", 0o755).unwrap();
        m.mkdir("/d/e/g", 0o755).unwrap();
        m
    }

    #[test]
    fn linux_7_checks_rename_traps_before_trailing_slashes() {
        let (mut six, mut seven) = (tree(VfsVersion::Linux6), tree(VfsVersion::Linux7));
        for m in [&mut six, &mut seven] {
            assert_eq!(m.rename("/d/f", "/d"), Err(Errno::ENOTEMPTY), "no slash: the trap either way");
            assert_eq!(m.renameat2("/d/f", "/d/", RenameFlags::NoReplace), Err(Errno::EEXIST), "before both");
        }
        assert_eq!(six.rename("/d/f", "/d/"), Err(Errno::ENOTDIR));
        assert_eq!(seven.rename("/d/f", "/d/"), Err(Errno::ENOTEMPTY));
        assert_eq!(six.renameat2("/d/f/", "/d", RenameFlags::Exchange), Err(Errno::ENOTDIR));
        assert_eq!(seven.renameat2("/d/f/", "/d", RenameFlags::Exchange), Err(Errno::EINVAL));
        assert_eq!(six.renameat2("/d", "/d/f/", RenameFlags::Exchange), Err(Errno::ENOTDIR));
        assert_eq!(seven.renameat2("/d", "/d/f/", RenameFlags::Exchange), Err(Errno::EINVAL));
        assert_eq!(VfsVersion::of_release("7.3.4+deb13-cloud-amd64"), VfsVersion::Linux7);
        assert_eq!(VfsVersion::of_release("6.18.44-fc-v1252"), VfsVersion::Linux6);
        assert_eq!(VfsVersion::of_release("garbage"), VfsVersion::Linux6);
    }
}

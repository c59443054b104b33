//! Rules for the reserved inodes (below `s_first_ino`), which e2fsck treats
//! as always in use: the bad-blocks inode must be clear, the root must be a
//! directory, the journal inode a regular file when there is a journal (and
//! empty when there is none), and the unused ones must have mode 0.

use crate::device::BlockDevice;
use crate::format::bytes::le32;
use crate::format::inode::*;
use crate::format::superblock::feature;
use crate::format::InodeNumber;

use super::problem::Problem;
use super::state::Checker;

const BOOT_LOADER_INO: InodeNumber = 5;
const USR_QUOTA_INO: InodeNumber = 3;
const GRP_QUOTA_INO: InodeNumber = 4;

pub fn check<D: BlockDevice>(c: &mut Checker<D>, ino: InodeNumber, inode: &Inode) {
    let ft = inode.file_type();
    let has_journal = c.sb.has_journal();
    let quota = c.sb.feature_ro_compat & feature::RO_COMPAT_QUOTA != 0;
    let what = match ino {
        BAD_BLOCKS_INO => {
            let busy = inode.mode != 0 || inode.uid != 0 || inode.gid != 0 || inode.links_count != 0 || inode.file_acl != 0;
            busy.then(|| "bad blocks inode has a mode, owner, links or xattrs".to_string())
        }
        ROOT_INO => {
            if ft != S_IFDIR {
                Some(format!("root is not a directory (mode {:#o})", inode.mode))
            } else if inode.dtime != 0 {
                Some(format!("root has dtime {}", inode.dtime))
            } else {
                None
            }
        }
        BOOT_LOADER_INO => (ft == S_IFDIR).then(|| "boot loader inode is a directory".to_string()),
        RESIZE_INO => (inode.mode != 0 && ft != S_IFREG).then(|| format!("resize inode has mode {:#o}", inode.mode)),
        JOURNAL_INO if has_journal && c.sb.journal_inum == JOURNAL_INO => {
            if ft != S_IFREG {
                c.report(Problem::Journal { what: format!("journal inode has mode {:#o}, not a regular file", inode.mode) });
            }
            None
        }
        JOURNAL_INO => {
            let busy = inode.links_count != 0 || inode.blocks != 0 || le32(&inode.block, 0) != 0;
            busy.then(|| "journal inode is not in use but holds data".to_string())
        }
        USR_QUOTA_INO | GRP_QUOTA_INO if quota => {
            (inode.mode != 0 && ft != S_IFREG).then(|| format!("quota inode has mode {:#o}", inode.mode))
        }
        _ => (inode.mode != 0).then(|| format!("unused reserved inode has mode {:#o}", inode.mode)),
    };
    if let Some(what) = what {
        c.report(Problem::ReservedInode { ino, what });
    }
}

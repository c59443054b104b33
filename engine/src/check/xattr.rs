//! External extended-attribute blocks (`i_file_acl`): each is claimed once
//! however many inodes share it, and must carry the xattr magic, a
//! reference count equal to the inodes pointing at it, and (with
//! metadata_csum) a checksum seeded with its block number.

use crate::device::BlockDevice;
use crate::format::bytes::{le32, put_le32};
use crate::format::checksum::crc32c_raw;

use super::problem::{Owner, Problem};
use super::state::Checker;

/// `h_magic` of an xattr block.
const XATTR_MAGIC: u32 = 0xEA02_0000;
const H_REFCOUNT: usize = 0x04;
const H_CHECKSUM: usize = 0x10;

pub fn check<D: BlockDevice>(c: &mut Checker<D>) {
    let refs = std::mem::take(&mut c.xattr_refs);
    for (block, inos) in refs {
        let Some(&ino) = inos.first() else { continue };
        c.claims.add(block, 1, Owner::Xattr);
        let mut b = match c.disk.block(block) {
            Ok(b) => b,
            Err(p) => {
                c.report(p);
                continue;
            }
        };
        let bad = |what: String| Problem::Xattr { ino, block, what };
        let magic = le32(&b, 0);
        if magic != XATTR_MAGIC {
            c.report(bad(format!("magic {magic:#010x} != {XATTR_MAGIC:#010x}")));
            continue;
        }
        let refcount = le32(&b, H_REFCOUNT);
        if u64::from(refcount) != inos.len() as u64 {
            c.report(bad(format!("reference count {refcount}, {} inodes use it", inos.len())));
        }
        if let Some(seed) = c.csum_seed {
            let stored = le32(&b, H_CHECKSUM);
            put_le32(&mut b, H_CHECKSUM, 0);
            let computed = crc32c_raw(crc32c_raw(seed, &block.to_le_bytes()), &b);
            if stored != computed {
                c.report(bad(format!("checksum {stored:#010x}, computed {computed:#010x}")));
            }
        }
    }
}

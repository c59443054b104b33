//! On-disk inodes: the 128-byte base plus `i_extra_isize` bytes of extra fields
//! (nanosecond timestamps, crtime, high checksum half), inside an
//! `s_inode_size`-byte slot. Bytes past the extra fields (in-inode xattrs) are
//! kept verbatim.
//!
//! Checksum: crc32c seeded per inode (fs seed, inode number, generation) over the
//! whole slot with both checksum fields zeroed; the high half is stored only when
//! `i_extra_isize >= 4`, otherwise only the low 16 bits are compared.

use crate::error::{ChecksumObject, Corrupt, Error, Result};
use crate::format::bytes::*;
use crate::format::checksum::{crc32c_raw, inode_seed};
use crate::format::superblock::GOOD_OLD_INODE_SIZE;
use crate::format::InodeNumber;

/// Bad blocks inode.
pub const BAD_BLOCKS_INO: InodeNumber = 1;
/// Root directory.
pub const ROOT_INO: InodeNumber = 2;
/// Resize inode (unused without resize_inode; all zero).
pub const RESIZE_INO: InodeNumber = 7;
/// Journal inode.
pub const JOURNAL_INO: InodeNumber = 8;
/// First non-reserved inode; mkfs puts lost+found here.
pub const LOST_AND_FOUND_INO: InodeNumber = 11;

/// File type bits of `i_mode`.
pub const S_IFMT: u16 = 0o170000;
pub const S_IFSOCK: u16 = 0o140000;
pub const S_IFLNK: u16 = 0o120000;
pub const S_IFREG: u16 = 0o100000;
pub const S_IFBLK: u16 = 0o060000;
pub const S_IFDIR: u16 = 0o040000;
pub const S_IFCHR: u16 = 0o020000;
pub const S_IFIFO: u16 = 0o010000;

/// `i_flags` bits.
pub const FL_INDEX: u32 = 0x1000;
pub const FL_JOURNAL_DATA: u32 = 0x4000;
pub const FL_TOPDIR: u32 = 0x20000;
pub const FL_HUGE_FILE: u32 = 0x40000;
pub const FL_EXTENTS: u32 = 0x80000;
pub const FL_EA_INODE: u32 = 0x200000;
pub const FL_INLINE_DATA: u32 = 0x10000000;

/// h_magic of extended attributes kept in the inode, just past its extra
/// fields (EXT4_XATTR_MAGIC).
pub const IN_INODE_XATTR_MAGIC: u32 = 0xEA02_0000;
/// The `i_extra_isize` mkfs writes: every extra field up to `i_projid`.
pub const EXTRA_ISIZE: u16 = 32;
/// Bytes of `i_block`.
pub const I_BLOCK_LEN: usize = 60;

const I_MODE: usize = 0x00;
const I_UID: usize = 0x02;
const I_SIZE_LO: usize = 0x04;
const I_ATIME: usize = 0x08;
const I_CTIME: usize = 0x0C;
const I_MTIME: usize = 0x10;
const I_DTIME: usize = 0x14;
const I_GID: usize = 0x18;
const I_LINKS_COUNT: usize = 0x1A;
const I_BLOCKS_LO: usize = 0x1C;
const I_FLAGS: usize = 0x20;
const I_VERSION_LO: usize = 0x24;
const I_BLOCK: usize = 0x28;
const I_GENERATION: usize = 0x64;
const I_FILE_ACL_LO: usize = 0x68;
const I_SIZE_HIGH: usize = 0x6C;
const I_BLOCKS_HIGH: usize = 0x74;
const I_FILE_ACL_HIGH: usize = 0x76;
const I_UID_HIGH: usize = 0x78;
const I_GID_HIGH: usize = 0x7A;
const I_CHECKSUM_LO: usize = 0x7C;
const I_EXTRA_ISIZE: usize = 0x80;
const I_CHECKSUM_HI: usize = 0x82;
const I_CTIME_EXTRA: usize = 0x84;
const I_MTIME_EXTRA: usize = 0x88;
const I_ATIME_EXTRA: usize = 0x8C;
const I_CRTIME: usize = 0x90;
const I_CRTIME_EXTRA: usize = 0x94;
const I_VERSION_HI: usize = 0x98;
const I_PROJID: usize = 0x9C;

/// A timestamp with ext4's 34-bit seconds range and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp {
    pub secs: i64,
    pub nsec: u32,
}

impl Timestamp {
    pub const fn from_secs(secs: i64) -> Self {
        Timestamp { secs, nsec: 0 }
    }

    /// Decodes a 32-bit seconds field and its `_extra` word (nsec << 2 | epoch).
    fn decode(lo: u32, extra: u32) -> Self {
        let epoch = i64::from(extra & 3);
        Timestamp { secs: i64::from(signed32(lo)) + (epoch << 32), nsec: extra >> 2 }
    }

    /// Encodes as (seconds field, extra word). Seconds outside ext4's range wrap
    /// in the epoch bits, as the kernel's encoder does.
    fn encode(self) -> (u32, u32) {
        let lo = lo32(bits64(self.secs));
        // Wrapping: only bits 32-33 of the difference are kept.
        let epoch = lo32(bits64(self.secs.wrapping_sub(i64::from(signed32(lo))) >> 32)) & 3;
        (lo, (self.nsec.min(999_999_999) << 2) | epoch)
    }
}

/// One inode, fields joined from their split halves.
///
/// Layout: 0x00 mode, 0x02 uid, 0x04 size_lo, 0x08/0x0C/0x10 atime/ctime/mtime,
/// 0x14 dtime, 0x18 gid, 0x1A links, 0x1C blocks_lo, 0x20 flags, 0x24 version,
/// 0x28 i_block[60], 0x64 generation, 0x68 file_acl_lo, 0x6C size_high, 0x74
/// blocks_high, 0x76 file_acl_high, 0x78 uid_high, 0x7A gid_high, 0x7C
/// checksum_lo; extra: 0x80 extra_isize, 0x82 checksum_hi, 0x84/88/8C
/// ctime/mtime/atime_extra, 0x90 crtime, 0x94 crtime_extra, 0x98 version_hi,
/// 0x9C projid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inode {
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: Timestamp,
    pub ctime: Timestamp,
    pub mtime: Timestamp,
    pub crtime: Timestamp,
    pub dtime: u32,
    pub links_count: u16,
    /// Raw 48-bit `i_blocks`: 512-byte units, or fs blocks with [`FL_HUGE_FILE`].
    pub blocks: u64,
    pub flags: u32,
    pub version: u64,
    pub block: [u8; I_BLOCK_LEN],
    pub generation: u32,
    pub file_acl: u64,
    pub extra_isize: u16,
    pub projid: u32,
    /// Stored checksum (low half only when there is no room for the high half).
    pub checksum: u32,
    /// The whole slot as read; zero for new inodes. Unmodelled bytes come from here.
    raw: Vec<u8>,
}

impl Inode {
    /// An all-zero inode for a slot of `inode_size` bytes.
    pub fn zeroed(inode_size: u16) -> Self {
        Self::read_fields(&vec![0u8; usize::from(inode_size.max(GOOD_OLD_INODE_SIZE))])
    }

    /// A fresh inode with extra fields, the given mode and one timestamp for all four times.
    pub fn new(inode_size: u16, mode: u16, time: Timestamp) -> Self {
        let mut ino = Self::zeroed(inode_size);
        ino.mode = mode;
        ino.atime = time;
        ino.ctime = time;
        ino.mtime = time;
        ino.crtime = time;
        if inode_size > GOOD_OLD_INODE_SIZE {
            ino.extra_isize = EXTRA_ISIZE.min(inode_size - GOOD_OLD_INODE_SIZE);
        }
        ino
    }

    fn read_fields(b: &[u8]) -> Self {
        let extra_isize = if b.len() > usize::from(GOOD_OLD_INODE_SIZE) { le16(b, I_EXTRA_ISIZE) } else { 0 };
        let extra_end = usize::from(GOOD_OLD_INODE_SIZE) + usize::from(extra_isize);
        // An extra field exists only if i_extra_isize reaches past its end.
        let extra = |off: usize| if off + 4 <= extra_end && off + 4 <= b.len() { le32(b, off) } else { 0 };
        let has_hi = extra_end >= I_CHECKSUM_HI + 2 && b.len() >= I_CHECKSUM_HI + 2;
        let mut block = [0u8; I_BLOCK_LEN];
        block.copy_from_slice(&b[I_BLOCK..I_BLOCK + I_BLOCK_LEN]);
        let csum_hi = if has_hi { u32::from(le16(b, I_CHECKSUM_HI)) } else { 0 };
        Inode {
            mode: le16(b, I_MODE),
            uid: u32::from(le16(b, I_UID)) | (u32::from(le16(b, I_UID_HIGH)) << 16),
            gid: u32::from(le16(b, I_GID)) | (u32::from(le16(b, I_GID_HIGH)) << 16),
            size: join64(le32(b, I_SIZE_LO), le32(b, I_SIZE_HIGH)),
            atime: Timestamp::decode(le32(b, I_ATIME), extra(I_ATIME_EXTRA)),
            ctime: Timestamp::decode(le32(b, I_CTIME), extra(I_CTIME_EXTRA)),
            mtime: Timestamp::decode(le32(b, I_MTIME), extra(I_MTIME_EXTRA)),
            crtime: Timestamp::decode(extra(I_CRTIME), extra(I_CRTIME_EXTRA)),
            dtime: le32(b, I_DTIME),
            links_count: le16(b, I_LINKS_COUNT),
            blocks: join64(le32(b, I_BLOCKS_LO), u32::from(le16(b, I_BLOCKS_HIGH))),
            flags: le32(b, I_FLAGS),
            version: join64(le32(b, I_VERSION_LO), extra(I_VERSION_HI)),
            block,
            generation: le32(b, I_GENERATION),
            file_acl: join64(le32(b, I_FILE_ACL_LO), u32::from(le16(b, I_FILE_ACL_HIGH))),
            extra_isize,
            projid: extra(I_PROJID),
            checksum: u32::from(le16(b, I_CHECKSUM_LO)) | (csum_hi << 16),
            raw: b.to_vec(),
        }
    }

    /// Parses inode `ino` from its slot, checking `i_extra_isize` and (when
    /// `csum_seed` is given, i.e. metadata_csum) the checksum.
    pub fn parse(b: &[u8], ino: InodeNumber, csum_seed: Option<u32>) -> Result<Self> {
        let size = b.len();
        if size < usize::from(GOOD_OLD_INODE_SIZE) {
            return Err(Error::Corrupt(Corrupt::Inode { ino, what: format!("slot of {size} bytes < 128") }));
        }
        let inode = Self::read_fields(b);
        if size > usize::from(GOOD_OLD_INODE_SIZE) {
            let room = size - usize::from(GOOD_OLD_INODE_SIZE);
            if usize::from(inode.extra_isize) > room || inode.extra_isize % 4 != 0 {
                return Err(Error::Corrupt(Corrupt::Inode {
                    ino,
                    what: format!("i_extra_isize {} not a multiple of 4 within {room}", inode.extra_isize),
                }));
            }
        }
        if let Some(seed) = csum_seed {
            // e2fsprogs treats a never-written (all-zero) inode as valid.
            let all_zero = b[..usize::from(GOOD_OLD_INODE_SIZE)].iter().all(|&x| x == 0);
            let computed = inode_checksum(b, ino, seed);
            let computed = if inode.has_checksum_hi(size) { computed } else { computed & 0xFFFF };
            if computed != inode.checksum && !all_zero {
                return Err(Error::Corrupt(Corrupt::Checksum {
                    object: ChecksumObject::Inode { ino },
                    stored: inode.checksum,
                    computed,
                }));
            }
        }
        Ok(inode)
    }

    fn has_checksum_hi(&self, slot: usize) -> bool {
        slot > usize::from(GOOD_OLD_INODE_SIZE)
            && usize::from(GOOD_OLD_INODE_SIZE) + usize::from(self.extra_isize) >= I_CHECKSUM_HI + 2
    }

    /// Serializes into a slot of `inode_size` bytes, computing the checksum when
    /// `csum_seed` is given (metadata_csum).
    pub fn to_bytes(&self, inode_size: u16, ino: InodeNumber, csum_seed: Option<u32>) -> Vec<u8> {
        let slot = usize::from(inode_size);
        let mut b = self.raw.clone();
        b.resize(slot, 0);
        let extra_end = usize::from(GOOD_OLD_INODE_SIZE) + usize::from(self.extra_isize);
        let fits = |off: usize| off + 4 <= extra_end && off + 4 <= slot;
        put_le16(&mut b, I_MODE, self.mode);
        put_le16(&mut b, I_UID, lo16(self.uid));
        put_le16(&mut b, I_UID_HIGH, hi16(self.uid));
        put_le16(&mut b, I_GID, lo16(self.gid));
        put_le16(&mut b, I_GID_HIGH, hi16(self.gid));
        put_le32(&mut b, I_SIZE_LO, lo32(self.size));
        put_le32(&mut b, I_SIZE_HIGH, hi32(self.size));
        for (t, base, extra) in [
            (self.atime, I_ATIME, I_ATIME_EXTRA),
            (self.ctime, I_CTIME, I_CTIME_EXTRA),
            (self.mtime, I_MTIME, I_MTIME_EXTRA),
        ] {
            let (lo, ex) = t.encode();
            put_le32(&mut b, base, lo);
            if fits(extra) {
                put_le32(&mut b, extra, ex);
            }
        }
        if fits(I_CRTIME_EXTRA) {
            let (lo, ex) = self.crtime.encode();
            put_le32(&mut b, I_CRTIME, lo);
            put_le32(&mut b, I_CRTIME_EXTRA, ex);
        }
        put_le32(&mut b, I_DTIME, self.dtime);
        put_le16(&mut b, I_LINKS_COUNT, self.links_count);
        put_le32(&mut b, I_BLOCKS_LO, lo32(self.blocks));
        put_le16(&mut b, I_BLOCKS_HIGH, lo16(hi32(self.blocks)));
        put_le32(&mut b, I_FLAGS, self.flags);
        put_le32(&mut b, I_VERSION_LO, lo32(self.version));
        if fits(I_VERSION_HI) {
            put_le32(&mut b, I_VERSION_HI, hi32(self.version));
        }
        put_bytes(&mut b, I_BLOCK, &self.block);
        put_le32(&mut b, I_GENERATION, self.generation);
        put_le32(&mut b, I_FILE_ACL_LO, lo32(self.file_acl));
        put_le16(&mut b, I_FILE_ACL_HIGH, lo16(hi32(self.file_acl)));
        if slot > usize::from(GOOD_OLD_INODE_SIZE) {
            put_le16(&mut b, I_EXTRA_ISIZE, self.extra_isize);
        }
        if fits(I_PROJID) {
            put_le32(&mut b, I_PROJID, self.projid);
        }
        let has_hi = self.has_checksum_hi(slot);
        let csum = match csum_seed {
            Some(seed) => inode_checksum(&b, ino, seed),
            None => self.checksum,
        };
        put_le16(&mut b, I_CHECKSUM_LO, lo16(csum));
        if has_hi {
            put_le16(&mut b, I_CHECKSUM_HI, hi16(csum));
        }
        debug_assert_eq!(Self::read_fields(&b), self.as_written(&b, csum), "inode {ino} does not read back as written");
        b
    }

    /// What [`Inode::to_bytes`] stored in the slot `b` with checksum `csum`, in
    /// the form the slot can hold it.
    fn as_written(&self, b: &[u8], csum: u32) -> Inode {
        let slot = b.len();
        let extra_end = usize::from(GOOD_OLD_INODE_SIZE) + usize::from(self.extra_isize);
        let fits = |off: usize| off + 4 <= extra_end && off + 4 <= slot;
        // 34-bit seconds and nsec up to 999_999_999; without the extra word, only signed 32-bit seconds.
        let time = |t: Timestamp, extra: usize| {
            let (lo, ex) = t.encode();
            Timestamp::decode(lo, if fits(extra) { ex } else { 0 })
        };
        Inode {
            atime: time(self.atime, I_ATIME_EXTRA),
            ctime: time(self.ctime, I_CTIME_EXTRA),
            mtime: time(self.mtime, I_MTIME_EXTRA),
            // Not written without room for crtime_extra: the slot keeps what it held.
            crtime: if fits(I_CRTIME_EXTRA) { time(self.crtime, I_CRTIME_EXTRA) } else { Self::read_fields(b).crtime },
            // Without room for i_version_hi only the low half is stored.
            version: if fits(I_VERSION_HI) { self.version } else { u64::from(lo32(self.version)) },
            // A 128-byte slot has no i_extra_isize (and so no extra fields).
            extra_isize: if slot > usize::from(GOOD_OLD_INODE_SIZE) { self.extra_isize } else { 0 },
            projid: if fits(I_PROJID) { self.projid } else { 0 },
            // Without room for the high half only the low 16 bits are stored.
            checksum: if self.has_checksum_hi(slot) { csum } else { csum & 0xFFFF },
            raw: b.to_vec(),
            ..self.clone()
        }
    }

    pub fn file_type(&self) -> u16 {
        self.mode & S_IFMT
    }
    pub fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }
    pub fn is_reg(&self) -> bool {
        self.file_type() == S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.file_type() == S_IFLNK
    }
    pub fn has_flag(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Bytes of the slot that hold extended attributes, when the magic sits
    /// just past the extra fields (where ext4_iget looks for them).
    pub fn in_inode_xattr_bytes(&self) -> Option<u64> {
        let at = usize::from(GOOD_OLD_INODE_SIZE) + usize::from(self.extra_isize);
        let magic = self.raw.get(at..at + 4)?;
        (le32(magic, 0) == IN_INODE_XATTR_MAGIC).then(|| u64_from_usize(self.raw.len() - at))
    }

    /// Space charged to the inode in bytes, decoding `i_blocks` units.
    pub fn allocated_bytes(&self, block_size: u32, huge_file: bool) -> u64 {
        if huge_file && self.has_flag(FL_HUGE_FILE) {
            self.blocks.saturating_mul(u64::from(block_size))
        } else {
            self.blocks.saturating_mul(512)
        }
    }
}

/// The checksum an inode slot should carry (full 32 bits; callers mask to 16
/// when the slot has no high half). Both checksum fields are treated as zero.
pub fn inode_checksum(b: &[u8], ino: InodeNumber, fs_seed: u32) -> u32 {
    let generation = le32(b, I_GENERATION);
    let seed = inode_seed(fs_seed, ino, generation);
    let has_hi = slot_has_checksum_hi(b);
    let c = crc32c_raw(seed, &b[..I_CHECKSUM_LO]);
    let c = crc32c_raw(c, &[0, 0]);
    if has_hi {
        let c = crc32c_raw(c, &b[I_CHECKSUM_LO + 2..I_CHECKSUM_HI]);
        let c = crc32c_raw(c, &[0, 0]);
        crc32c_raw(c, &b[I_CHECKSUM_HI + 2..])
    } else {
        crc32c_raw(c, &b[I_CHECKSUM_LO + 2..])
    }
}

/// Whether slot `b` stores the checksum's high half (its extra fields reach it).
fn slot_has_checksum_hi(b: &[u8]) -> bool {
    let extra_isize = if b.len() > usize::from(GOOD_OLD_INODE_SIZE) { le16(b, I_EXTRA_ISIZE) } else { 0 };
    b.len() > usize::from(GOOD_OLD_INODE_SIZE) && usize::from(GOOD_OLD_INODE_SIZE) + usize::from(extra_isize) >= I_CHECKSUM_HI + 2
}

/// Stores in slot `b` the checksum its bytes call for, whatever they hold
/// (a tool's reseal of a slot it edited in place).
pub fn seal_inode_checksum(b: &mut [u8], ino: InodeNumber, fs_seed: u32) {
    let c = inode_checksum(b, ino, fs_seed);
    put_le16(b, I_CHECKSUM_LO, lo16(c));
    if slot_has_checksum_hi(b) {
        put_le16(b, I_CHECKSUM_HI, hi16(c));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checksum::fs_seed_from_uuid;

    const UUID: [u8; 16] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00];
    /// First inode-table block of the mke2fs fixture: inodes 1..=16, 256 bytes each.
    const ITABLE0: &[u8; 4096] = include_bytes!("../../tests/fixtures/mke2fs_4k_8m.itable0");

    fn slot(ino: u32) -> &'static [u8] {
        let at = (usize_from_u32(ino) - 1) * 256;
        &ITABLE0[at..at + 256]
    }

    #[test]
    fn parses_mke2fs_root_and_verifies_its_checksum() {
        let seed = fs_seed_from_uuid(&UUID);
        let root = Inode::parse(slot(ROOT_INO), ROOT_INO, Some(seed)).unwrap();
        assert!(root.is_dir());
        assert_eq!(root.mode & 0o7777, 0o755);
        assert_eq!((root.links_count, root.size, root.blocks), (3, 4096, 8));
        assert_eq!(root.flags, FL_EXTENTS);
        assert_eq!(root.extra_isize, 32);
        assert_eq!(root.checksum, 0xb83a_9b19, "debugfs: Inode checksum");
        assert_eq!(root.mtime, Timestamp::from_secs(crate::fixtures::EPOCH_SECS));
        assert_eq!(root.crtime, Timestamp::from_secs(crate::fixtures::EPOCH_SECS));
    }

    #[test]
    fn every_mke2fs_inode_verifies_and_round_trips() {
        let seed = fs_seed_from_uuid(&UUID);
        // mke2fs writes inodes 1..=11; 12..=16 are never-written zeros.
        for ino in 1..=11 {
            let parsed = Inode::parse(slot(ino), ino, Some(seed)).unwrap();
            assert_eq!(parsed.to_bytes(256, ino, Some(seed)), slot(ino), "inode {ino}");
        }
        for ino in 12..=16 {
            assert_eq!(Inode::parse(slot(ino), ino, Some(seed)).unwrap(), Inode::zeroed(256));
        }
        // Inode 1 has extra_isize 0: only a 16-bit checksum.
        assert_eq!(Inode::parse(slot(1), 1, Some(seed)).unwrap().extra_isize, 0);
    }

    #[test]
    fn corruption_is_detected_and_named() {
        let seed = fs_seed_from_uuid(&UUID);
        let mut b = slot(ROOT_INO).to_vec();
        b[0x1A] ^= 1;
        assert!(matches!(
            Inode::parse(&b, ROOT_INO, Some(seed)),
            Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::Inode { ino: 2 }, stored: 0xb83a_9b19, .. }))
        ));
        assert!(Inode::parse(&b, ROOT_INO, None).is_ok(), "without metadata_csum nothing is checked");
        let mut b = slot(ROOT_INO).to_vec();
        b[I_EXTRA_ISIZE] = 200;
        match Inode::parse(&b, ROOT_INO, None) {
            Err(Error::Corrupt(Corrupt::Inode { ino: 2, what })) => assert!(what.starts_with("i_extra_isize 200")),
            other => panic!("expected an inode corruption, got {other:?}"),
        }
        assert!(Inode::parse(&[0u8; 256], 7, Some(seed)).is_ok(), "all-zero inodes are valid");
    }

    #[test]
    fn timestamps_use_epoch_bits_and_nanoseconds() {
        let mut ino = Inode::new(256, S_IFREG | 0o644, Timestamp { secs: 0x2_8000_0000, nsec: 123_456_789 });
        ino.atime = Timestamp { secs: -5, nsec: 1 };
        let b = ino.to_bytes(256, 12, Some(99));
        let back = Inode::parse(&b, 12, Some(99)).unwrap();
        assert_eq!(back.mtime, Timestamp { secs: 0x2_8000_0000, nsec: 123_456_789 });
        assert_eq!(back.crtime, back.mtime);
        assert_eq!(back.atime, Timestamp { secs: -5, nsec: 1 });
        assert_eq!(back, Inode::parse(&back.to_bytes(256, 12, Some(99)), 12, Some(99)).unwrap());
    }
}

//! The images the oracle hands a kernel. mke2fs makes each one from the
//! typed `--mkfs` description (a seeded UUID and hash seed, a fixed clock),
//! and it must pass `e2fsck -fn` before any kernel sees it. One image per
//! configuration is read back first ([`probe`]): its superblock must carry the
//! block size and journal the model was given, features the model and the
//! engine follow, and room for what the seeds' ops create, since the model
//! bounds neither inodes nor space and a kernel ENOSPC would be no divergence.
//! The scratch directory's own room is checked before each batch, and again
//! after the kernel ran, so a full host disk is reported as such.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use ext4_engine::format::features::feature;
use ext4_engine::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use ext4_model::{FileSystem, Model, MountConfig, Op};
use ext4_testkit::e2fsprogs::e2fsck_clean;

use super::error::{free_bytes, OracleError};
use crate::mke2fs::MkfsArgs;

/// Size of each case's image (a sparse file).
pub const IMAGE_BYTES: u64 = 1 << 30;
/// Room the kernel may take beyond the model's data blocks: directories,
/// extent trees, preallocations. Generous, since the check only has to rule
/// out an image the ops could fill.
const KERNEL_SLACK_BYTES: u64 = 64 << 20;
/// Host bytes an image may grow by beyond the data written into it: inode
/// tables, bitmaps and directories the kernel touches for the first time.
const HOST_SLACK_BYTES: u64 = 8 << 20;
/// Below this much free space after a run, the host disk filled up while
/// the kernel wrote, and its answers are not ext4's.
pub const LOW_WATER_BYTES: u64 = 16 << 20;

pub struct Tools {
    pub mke2fs: PathBuf,
    pub e2fsck: PathBuf,
}

/// mke2fs's arguments for one case's image at `path`.
pub fn mke2fs_args(mkfs: &MkfsArgs, mount: &MountConfig, seed: u64, path: &Path) -> Vec<String> {
    crate::mke2fs::image::mke2fs_args(mkfs, mount, seed, path, IMAGE_BYTES)
}

/// Makes one case's image and checks it with `e2fsck -fn`.
pub fn make_image(tools: &Tools, mkfs: &MkfsArgs, mount: &MountConfig, seed: u64, path: &Path) -> Result<(), OracleError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(OracleError::io("remove old image", path, e)),
        _ => {}
    }
    let args = mke2fs_args(mkfs, mount, seed, path);
    crate::mke2fs::image::run_mke2fs(&tools.mke2fs, &args).map_err(OracleError::Tool)?;
    // Only e2fsck-clean images are ever given to a kernel.
    e2fsck_clean(&tools.e2fsck, path).map(drop).map_err(|e| OracleError::Tool(format!("a fresh image fails e2fsck -fn: {e}")))
}

/// What one case's ops take from an image, by the model's count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Inodes created, counting each creation (a freed inode may not be
    /// reusable at once).
    pub inodes: u64,
    /// Most data blocks in use at once.
    pub data_blocks: u64,
    /// Bytes the ops may write into the image file, blocks rounded up plus
    /// two per op: data the kernel moves or frees stays allocated on the
    /// host, so this counts every write, not what is live.
    pub written_bytes: u64,
}

impl Needs {
    /// Runs `ops` on a fresh model.
    pub fn of(mount: &MountConfig, ops: &[Op]) -> Needs {
        let bs = u64::from(mount.block_size);
        let written = |len: u64| len.div_ceil(bs).saturating_add(2).saturating_mul(bs);
        let written_bytes = ops
            .iter()
            .map(|op| match op {
                Op::Write { len, .. } | Op::Append { len, .. } | Op::Rewrite { len, .. } | Op::WriteFd { len, .. } | Op::DirectWrite { len, .. } | Op::MapWrite { len, .. } => written(u64::from(*len)),
                // Zeroing and small unwritten extents may be written out as zeros.
                Op::Fallocate { len, .. } => written(*len),
                _ => written(0),
            })
            .fold(0u64, u64::saturating_add);
        let Ok(mut model) = Model::new(mount) else { return Needs { written_bytes, ..Needs::default() } };
        let mut needs = Needs { written_bytes, ..Needs::default() };
        for op in ops {
            let before = model.inode_count();
            let _ = model.apply(op);
            needs.inodes += model.inode_count().saturating_sub(before) as u64;
            needs.data_blocks = needs.data_blocks.max(model.used_blocks());
        }
        needs
    }

    pub fn max(self, other: Needs) -> Needs {
        Needs { inodes: self.inodes.max(other.inodes), data_blocks: self.data_blocks.max(other.data_blocks), written_bytes: self.written_bytes.max(other.written_bytes) }
    }
}

/// What a fresh image's superblock says, as far as the oracle cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageFacts {
    pub block_size: u32,
    pub has_journal: bool,
    pub incompat: u32,
    pub ro_compat: u32,
    pub free_inodes: u64,
    /// Free blocks less the reserved ones (the oracle's ops may lack
    /// CAP_SYS_RESOURCE, which reserved blocks need).
    pub usable_blocks: u64,
    /// Bytes the fresh image takes on the host (it is sparse).
    pub host_bytes: u64,
}

/// Reads a fresh image's superblock. `Ok(Err(why))` when the engine cannot
/// read it at all.
pub fn probe(path: &Path) -> Result<Result<ImageFacts, String>, OracleError> {
    let file = std::fs::File::open(path).map_err(|e| OracleError::io("open", path, e))?;
    let mut raw = [0u8; SUPERBLOCK_SIZE];
    file.read_exact_at(&mut raw, SUPERBLOCK_OFFSET).map_err(|e| OracleError::io("read the superblock of", path, e))?;
    let host_bytes = file.metadata().map_err(|e| OracleError::io("stat", path, e))?.blocks() * 512;
    let sb = match Superblock::parse(&raw) {
        Ok(sb) => sb,
        Err(e) => return Ok(Err(format!("the engine cannot read the image mke2fs made: {e}"))),
    };
    Ok(Ok(ImageFacts {
        block_size: sb.block_size(),
        has_journal: sb.has_journal(),
        incompat: sb.feature_incompat,
        ro_compat: sb.feature_ro_compat,
        free_inodes: u64::from(sb.free_inodes_count),
        usable_blocks: sb.free_blocks_count.saturating_sub(sb.r_blocks_count),
        host_bytes,
    }))
}

impl ImageFacts {
    /// Why the seeds' ops cannot be held to the model on such an image, if
    /// so. A block size or journal other than the model's is a harness bug.
    pub fn refusal(&self, mount: &MountConfig, needs: Needs) -> Result<Option<String>, OracleError> {
        if self.block_size != mount.block_size || self.has_journal != mount.has_journal {
            return Err(OracleError::Tool(format!(
                "mke2fs made {}-byte blocks {} a journal; the model has {}-byte blocks {} one",
                self.block_size,
                if self.has_journal { "with" } else { "without" },
                mount.block_size,
                if mount.has_journal { "with" } else { "without" }
            )));
        }
        // mke2fs.conf may add features the arguments never named.
        let unfollowed = [
            (self.incompat & feature::INCOMPAT_EXTENTS == 0, "no extent feature: the model maps files with extents only"),
            (self.incompat & feature::INCOMPAT_FILETYPE == 0, "no filetype feature: the engine does not read such images"),
            (self.ro_compat & feature::RO_COMPAT_QUOTA != 0, "the quota feature: the model keeps no quota inodes or accounting"),
        ];
        if let Some((_, why)) = unfollowed.iter().find(|(set, _)| *set) {
            return Ok(Some(format!("the image has {why}")));
        }
        if needs.inodes > self.free_inodes {
            return Ok(Some(format!("the image has {} free inodes and the ops create up to {}; the model does not run out of inodes", self.free_inodes, needs.inodes)));
        }
        let bs = u64::from(self.block_size);
        let want = needs.data_blocks.saturating_mul(2) + KERNEL_SLACK_BYTES / bs;
        if want > self.usable_blocks {
            return Ok(Some(format!(
                "the image leaves {} MiB to the ops, which hold up to {} MiB of data (twice that and {} MiB of metadata wanted); the model does not run out of space",
                (self.usable_blocks * bs) >> 20,
                (needs.data_blocks * bs) >> 20,
                KERNEL_SLACK_BYTES >> 20
            )));
        }
        Ok(None)
    }

    /// Host bytes one case's image may take: the fresh image, everything the
    /// ops may write, and the slack.
    pub fn host_bytes_for(&self, needs: Needs) -> u64 {
        self.host_bytes.saturating_add(needs.written_bytes).saturating_add(HOST_SLACK_BYTES)
    }
}

/// Fails unless the scratch directory has `need` bytes free for `images` images.
pub fn check_room(scratch: &Path, need: u64, images: usize) -> Result<(), OracleError> {
    let free = free_bytes(scratch)?;
    if free < need {
        return Err(OracleError::ScratchFull {
            path: scratch.to_path_buf(),
            free_mib: free >> 20,
            need: format!("{} image(s) may take up to {} MiB; free some room or point TMPDIR elsewhere", images, need.div_ceil(1 << 20)),
        });
    }
    Ok(())
}

/// Fails if the scratch directory filled up while the kernel wrote.
pub fn check_not_filled(scratch: &Path) -> Result<(), OracleError> {
    let free = free_bytes(scratch)?;
    if free < LOW_WATER_BYTES {
        return Err(OracleError::ScratchFull {
            path: scratch.to_path_buf(),
            free_mib: free >> 20,
            need: "it filled up while the kernel wrote the images, so the kernel's answers are not ext4's".to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_seeded_and_well_formed() {
        let u = crate::mke2fs::image::uuid_for(7);
        assert_eq!(u, crate::mke2fs::image::uuid_for(7));
        assert_ne!(u, crate::mke2fs::image::uuid_for(8));
        assert_eq!(u.len(), 36);
        assert_eq!(u.matches('-').count(), 4);
    }

    fn facts() -> ImageFacts {
        ImageFacts {
            block_size: 4096,
            has_journal: true,
            incompat: feature::INCOMPAT_EXTENTS | feature::INCOMPAT_FILETYPE,
            ro_compat: 0,
            free_inodes: 1000,
            usable_blocks: 100_000,
            host_bytes: 33 << 20,
        }
    }

    #[test]
    fn an_image_too_small_for_the_ops_is_refused_and_a_wrong_one_is_an_error() {
        let mount = MountConfig::default();
        let fits = Needs { inodes: 1000, data_blocks: 1000, written_bytes: 0 };
        assert_eq!(facts().refusal(&mount, fits).unwrap(), None);
        let why = facts().refusal(&mount, Needs { inodes: 1001, ..fits }).unwrap().unwrap();
        assert!(why.contains("1000 free inodes and the ops create up to 1001"), "{why}");
        let why = facts().refusal(&mount, Needs { data_blocks: 45_000, ..fits }).unwrap().unwrap();
        assert!(why.contains("leaves 390 MiB"), "{why}");
        let quota = ImageFacts { ro_compat: feature::RO_COMPAT_QUOTA, ..facts() };
        assert!(quota.refusal(&mount, fits).unwrap().unwrap().contains("quota"));
        let block_mapped = ImageFacts { incompat: feature::INCOMPAT_FILETYPE, ..facts() };
        assert!(block_mapped.refusal(&mount, fits).unwrap().unwrap().contains("extent"));
        let other_bs = ImageFacts { block_size: 1024, ..facts() };
        assert!(matches!(other_bs.refusal(&mount, fits), Err(OracleError::Tool(_))));
        let no_journal = ImageFacts { has_journal: false, ..facts() };
        assert!(matches!(no_journal.refusal(&mount, fits), Err(OracleError::Tool(_))));
    }

    #[test]
    fn needs_count_every_creation_and_the_peak_of_data() {
        let ops: Vec<Op> = vec![
            "create path=\"/a\" perm=644".parse().unwrap(),
            "write path=\"/a\" offset=0 len=8192 seed=1".parse().unwrap(),
            "unlink path=\"/a\"".parse().unwrap(),
            "mkdir path=\"/d\" perm=755".parse().unwrap(),
        ];
        // 2 + 2 blocks for the write, 2 for each other op.
        assert_eq!(Needs::of(&MountConfig::default(), &ops), Needs { inodes: 2, data_blocks: 2, written_bytes: 10 * 4096 });
        // Writes through a descriptor count too, and an orphan holds its
        // blocks until the last close.
        let ops: Vec<Op> = vec![
            "create path=\"/a\" perm=644".parse().unwrap(),
            "open path=\"/a\" slot=1".parse().unwrap(),
            "unlink path=\"/a\"".parse().unwrap(),
            "pwrite slot=1 offset=0 len=12288 seed=1".parse().unwrap(),
            "close slot=1".parse().unwrap(),
        ];
        // 3 + 2 blocks for the pwrite, 2 for each other op.
        assert_eq!(Needs::of(&MountConfig::default(), &ops), Needs { inodes: 1, data_blocks: 3, written_bytes: 13 * 4096 });
    }

    #[test]
    fn the_room_check_names_the_directory_and_the_need() {
        let dir = std::env::temp_dir();
        assert!(check_room(&dir, 1, 1).is_ok());
        let e = check_room(&dir, u64::MAX, 24).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().contains("24 image(s) may take up to"), "{e}");
    }
}

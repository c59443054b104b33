//! The engine's view of storage: a byte-addressed device with a volatile write
//! cache. The engine never learns what sits behind it (memory, a sparse file, or
//! the simulator's seeded disk).
//!
//! Contract, which the simulator's crash model relies on:
//! - `write` may sit in a volatile cache; only after `flush` returns (or for a
//!   write issued with `fua`) is it durable.
//! - A crash may drop, reorder or tear any write not yet durable.
//! - Offsets and lengths are multiples of [`SECTOR_SIZE`].

use std::fmt;

/// Smallest unit a device transfers; every offset and length is a multiple.
pub const SECTOR_SIZE: u64 = 512;

/// What an I/O carries, so a device can account time per class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IoClass {
    /// File contents.
    Data,
    /// Superblock, group descriptors, bitmaps, inode tables, extent and directory blocks.
    Metadata,
    /// Blocks written to or read from the jbd2 journal.
    Journal,
}

/// How a write must be made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteFlags {
    pub class: IoClass,
    /// Force unit access: durable when the call returns, cache or not.
    pub fua: bool,
}

impl WriteFlags {
    pub const DATA: WriteFlags = WriteFlags { class: IoClass::Data, fua: false };
    pub const METADATA: WriteFlags = WriteFlags { class: IoClass::Metadata, fua: false };
    pub const JOURNAL: WriteFlags = WriteFlags { class: IoClass::Journal, fua: false };
}

/// Why a device refused an I/O.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// The medium could not transfer the sector at `offset` (EIO).
    Io { offset: u64 },
    /// The device has turned read-only; writes fail (EROFS at the filesystem).
    ReadOnly,
    /// The store behind the device is full (ENOSPC of a sparse file).
    NoSpace,
    /// Offset/length not sector aligned, or past the end of the device.
    OutOfRange { offset: u64, len: u64, size: u64 },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Io { offset } => write!(f, "I/O error at byte {offset}"),
            DeviceError::ReadOnly => write!(f, "device is read-only"),
            DeviceError::NoSpace => write!(f, "backing store is full"),
            DeviceError::OutOfRange { offset, len, size } => {
                write!(f, "I/O of {len} bytes at {offset} outside a {size}-byte device or unaligned")
            }
        }
    }
}

impl std::error::Error for DeviceError {}

/// A block device as the engine sees it.
pub trait BlockDevice {
    /// Size in bytes; a multiple of [`SECTOR_SIZE`].
    fn size_bytes(&self) -> u64;
    /// Read `buf.len()` bytes at `offset`. Reads see cached (not yet durable) writes.
    fn read(&mut self, offset: u64, buf: &mut [u8], class: IoClass) -> Result<(), DeviceError>;
    /// Write `buf` at `offset`; durable only after [`BlockDevice::flush`] unless `flags.fua`.
    fn write(&mut self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DeviceError>;
    /// Write `bufs` back to back from `offset` as one command, as a bio of
    /// several segments is one. The default joins them for
    /// [`BlockDevice::write`]; a device that can take them apart saves the copy.
    fn write_vectored(&mut self, offset: u64, bufs: &[&[u8]], flags: WriteFlags) -> Result<(), DeviceError> {
        self.write(offset, &bufs.concat(), flags)
    }
    /// Make every write issued so far durable.
    fn flush(&mut self) -> Result<(), DeviceError>;
    /// The device's clock in nanoseconds, which the filesystem's timers
    /// read (commit interval, dirty expiry): simulated time on a simulated
    /// disk. A device without one says 0 and the timers never fire.
    fn now_ns(&self) -> u64 {
        0
    }
}

/// Checks the alignment and bounds rule every implementation shares.
pub fn check_range(offset: u64, len: u64, size: u64) -> Result<(), DeviceError> {
    let aligned = offset % SECTOR_SIZE == 0 && len % SECTOR_SIZE == 0;
    let in_bounds = offset.checked_add(len).is_some_and(|end| end <= size);
    if aligned && in_bounds {
        Ok(())
    } else {
        Err(DeviceError::OutOfRange { offset, len, size })
    }
}

/// Lets a reader borrow a device (open an image on `&mut dev`) and give it back.
impl<T: BlockDevice + ?Sized> BlockDevice for &mut T {
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8], class: IoClass) -> Result<(), DeviceError> {
        (**self).read(offset, buf, class)
    }
    fn write(&mut self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DeviceError> {
        (**self).write(offset, buf, flags)
    }
    fn write_vectored(&mut self, offset: u64, bufs: &[&[u8]], flags: WriteFlags) -> Result<(), DeviceError> {
        (**self).write_vectored(offset, bufs, flags)
    }
    fn flush(&mut self) -> Result<(), DeviceError> {
        (**self).flush()
    }
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}

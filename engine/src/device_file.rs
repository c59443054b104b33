//! A [`BlockDevice`] over a (sparse) image file, so real e2fsprogs can inspect
//! what the engine wrote.
//!
//! - Reads and writes are positional (`pread`/`pwrite`); no seek state.
//! - `flush` is `fdatasync`: after it returns, every earlier write is on disk.
//! - A FUA write is followed by `fdatasync` before the call returns.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::device::{check_range, BlockDevice, DeviceError, IoClass, WriteFlags, SECTOR_SIZE};

/// An image file seen as a block device of fixed size.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    size_bytes: u64,
    writable: bool,
}

impl FileDevice {
    /// Creates (or truncates) `path` as a sparse file of `size_bytes`.
    pub fn create(path: &Path, size_bytes: u64) -> io::Result<Self> {
        if size_bytes % SECTOR_SIZE != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("device size {size_bytes} is not a multiple of {SECTOR_SIZE}"),
            ));
        }
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        file.set_len(size_bytes)?;
        Ok(FileDevice { file, size_bytes, writable: true })
    }

    /// Opens an existing image; its size is rounded down to a whole sector.
    pub fn open(path: &Path, writable: bool) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(writable).open(path)?;
        let len = file.metadata()?.len();
        Ok(FileDevice { file, size_bytes: len - len % SECTOR_SIZE, writable })
    }
}

fn io_error(offset: u64, e: &io::Error) -> DeviceError {
    match e.raw_os_error() {
        Some(code) if code == 28 || code == 27 => DeviceError::NoSpace, // ENOSPC, EFBIG
        Some(30) => DeviceError::ReadOnly,                                // EROFS
        _ => DeviceError::Io { offset },
    }
}

impl BlockDevice for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read(&mut self, offset: u64, buf: &mut [u8], _class: IoClass) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size_bytes)?;
        self.file.read_exact_at(buf, offset).map_err(|e| io_error(offset, &e))
    }

    fn write(&mut self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size_bytes)?;
        if !self.writable {
            return Err(DeviceError::ReadOnly);
        }
        self.file.write_all_at(buf, offset).map_err(|e| io_error(offset, &e))?;
        if flags.fua {
            self.file.sync_data().map_err(|e| io_error(offset, &e))?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        if self.writable {
            self.file.sync_data().map_err(|e| io_error(0, &e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_file_round_trip_and_read_only_refusal() {
        let dir = std::env::temp_dir().join(format!("ext4-engine-devfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dev.img");
        let mut dev = FileDevice::create(&path, 1 << 30).unwrap();
        let data = vec![0x5Au8; 4096];
        dev.write((1 << 30) - 4096, &data, WriteFlags { class: IoClass::Metadata, fua: true }).unwrap();
        dev.flush().unwrap();
        let mut ro = FileDevice::open(&path, false).unwrap();
        assert_eq!(ro.size_bytes(), 1 << 30);
        let mut back = vec![0u8; 4096];
        ro.read((1 << 30) - 4096, &mut back, IoClass::Metadata).unwrap();
        assert_eq!(back, data);
        ro.read(0, &mut back, IoClass::Metadata).unwrap();
        assert!(back.iter().all(|&b| b == 0), "holes read as zero");
        assert_eq!(ro.write(0, &data, WriteFlags::METADATA), Err(DeviceError::ReadOnly));
        assert!(matches!(ro.read(1 << 30, &mut back, IoClass::Data), Err(DeviceError::OutOfRange { .. })));
        drop((dev, ro));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

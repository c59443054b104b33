//! What the kernel logged while a case ran: ext4's warnings and errors
//! about the case's device, and the page allocator's warnings (a
//! `__GFP_NOFAIL` request of order > 1, an allocation failure), from
//! `/dev/kmsg`, read from where the log stood when the case began.
//! A warning is not a divergence (the answers are compared elsewhere), but
//! it is how a kernel says it did something it should not have, so the
//! oracle reports it with the case.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// A reader positioned at the end of the kernel log when opened.
pub struct KernelLog {
    file: Option<File>,
}

impl KernelLog {
    /// From now on; without access to `/dev/kmsg`, it reads nothing.
    pub fn from_now() -> KernelLog {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg").ok().and_then(|mut f| f.seek(SeekFrom::End(0)).ok().map(|_| f));
        KernelLog { file }
    }

    /// ext4's warnings and errors about `device` (e.g. `loop3`) and the
    /// page allocator's warnings (prefixed [`PAGE_ALLOCATOR`]) logged since.
    pub fn lines_about(&mut self, device: &str) -> Vec<String> {
        let Some(file) = self.file.as_mut() else { return Vec::new() };
        let mut out = Vec::new();
        // One record per read; EAGAIN ends the log, EPIPE a record the
        // ring buffer overwrote (skip it and go on).
        let mut buf = vec![0u8; 8192];
        for _ in 0..100_000 {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let record = String::from_utf8_lossy(&buf[..n]);
                    if let Some(line) = ext4_message(&record, device).or_else(|| allocation_warning(&record)) {
                        out.push(line);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(_) => break,
            }
        }
        out
    }
}

/// The message of a `/dev/kmsg` record ("prio,seq,usec,flags;message\n"
/// plus continuation lines) when it is ext4's warning or error about `device`.
fn ext4_message(record: &str, device: &str) -> Option<String> {
    let message = record.split_once(';')?.1.lines().next()?.trim();
    let about = format!("(device {device})");
    let ext4 = message.starts_with("EXT4-fs warning") || message.starts_with("EXT4-fs error");
    (ext4 && message.contains(&about)).then(|| message.to_string())
}

/// How the page allocator's lines start in a case's kernel log.
pub const PAGE_ALLOCATOR: &str = "page allocator: ";

/// The message of a record that is the page allocator's warning: a
/// WARN in mm/page_alloc.c (a no-fail request of order > 1 warned there
/// before 2025) or an allocation failure report.
fn allocation_warning(record: &str) -> Option<String> {
    let message = record.split_once(';')?.1.lines().next()?.trim();
    let warned = message.starts_with("WARNING:") && message.contains("mm/page_alloc.c");
    (warned || message.contains("page allocation failure")).then(|| format!("{PAGE_ALLOCATOR}{message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ext4_warnings_and_errors_about_the_device_are_kept() {
        let warn = "4,1234,41769352933,-;EXT4-fs warning (device loop0): ext4_evict_inode:211: inode #14: comm ext4sim: data will be lost\n";
        assert_eq!(ext4_message(warn, "loop0").as_deref(), Some("EXT4-fs warning (device loop0): ext4_evict_inode:211: inode #14: comm ext4sim: data will be lost"));
        assert_eq!(ext4_message(warn, "loop1"), None, "another device's");
        assert_eq!(ext4_message("6,99,1,-;EXT4-fs (loop0): mounted filesystem with ordered data mode\n", "loop0"), None, "not a warning");
        assert_eq!(ext4_message("3,7,1,-;EXT4-fs error (device loop0): ext4_lookup:1855: inode #2: comm ls: bad entry\n SUBSYSTEM=block\n", "loop0").map(|m| m.ends_with("bad entry")), Some(true));
        assert_eq!(ext4_message("garbage", "loop0"), None);
    }

    #[test]
    fn page_allocator_warnings_are_kept_whatever_the_device() {
        let warn = "4,880,5123456,-;WARNING: CPU: 1 PID: 212 at mm/page_alloc.c:4421 __alloc_pages_slowpath.constprop.0+0x8f1/0xe40\n";
        assert_eq!(allocation_warning(warn).as_deref(), Some("page allocator: WARNING: CPU: 1 PID: 212 at mm/page_alloc.c:4421 __alloc_pages_slowpath.constprop.0+0x8f1/0xe40"));
        let failure = "4,881,5123457,-;kworker/u8:2: page allocation failure: order:4, mode:0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), nodemask=(null)\n";
        assert!(allocation_warning(failure).is_some_and(|l| l.starts_with(PAGE_ALLOCATOR) && l.contains("order:4")));
        assert_eq!(allocation_warning("4,882,1,-;WARNING: CPU: 0 PID: 1 at fs/ext4/inode.c:100 ext4_foo+0x1\n"), None, "another file's WARN");
        assert_eq!(allocation_warning("6,883,1,-;EXT4-fs (loop0): mounted filesystem\n"), None);
    }
}

//! Heap tuning for the simulator process.
//!
//! A lockstep run allocates and frees buffers of up to a MiB on every large
//! read and write. glibc's defaults hand such memory back to the kernel
//! (trim, mmap threshold) and the next op faults it in again, page by
//! zeroed page: a fifth of the run's time. The simulator keeps its heap.
//!
//! What a long run keeps is real: the model's copy of every file and the
//! disk's backing store, half a GiB after 200k ops. Faulting that in 4 KiB at
//! a time costs more than the run's own work on a virtual machine, so the
//! heap asks for transparent huge pages, which only glibc's start-up
//! tunables can switch on: [`use_huge_pages`] re-executes the binary once
//! with `glibc.malloc.hugetlb=1`. Only allocation placement changes; no
//! result depends on it.

/// Keeps freed memory in the process instead of returning it to the kernel.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is called before
    // other threads start, and glibc checks the values.
    unsafe {
        // Blocks below 32 MiB (glibc's largest threshold) come from the heap,
        // which is never trimmed; the top grows in 64 MiB steps.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

const TUNABLE: &str = "glibc.malloc.hugetlb";

/// The `GLIBC_TUNABLES` value to re-execute with, or `None` when there is
/// nothing to gain: the user already chose (any `hugetlb` setting is kept,
/// `=0` is the way to opt out), or the kernel's THP mode is not `madvise`
/// (`always` gives huge pages without asking, `never` refuses them).
fn tunables_with_huge_pages(current: Option<&str>, thp_mode: &str) -> Option<String> {
    if !thp_mode.contains("[madvise]") {
        return None;
    }
    match current {
        Some(t) if t.split(':').any(|kv| kv.split('=').next() == Some(TUNABLE)) => None,
        Some(t) if !t.is_empty() => Some(format!("{t}:{TUNABLE}=1")),
        _ => Some(format!("{TUNABLE}=1")),
    }
}

/// Re-executes this binary with glibc's huge-page tunable when that helps;
/// returns (doing nothing) when it does not or cannot. Call before any
/// thread starts and before output is written: on success it never returns.
pub fn use_huge_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        let thp_mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        let current = std::env::var("GLIBC_TUNABLES").ok();
        let Some(tunables) = tunables_with_huge_pages(current.as_deref(), &thp_mode) else { return };
        let Ok(exe) = std::env::current_exe() else { return };
        let mut args = std::env::args_os();
        let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
        // exec only returns on failure; then the run goes on with small pages.
        let _ = std::process::Command::new(&exe).arg0(arg0).args(args).env("GLIBC_TUNABLES", tunables).exec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_are_asked_for_only_where_they_help() {
        let madvise = "always [madvise] never\n";
        assert_eq!(tunables_with_huge_pages(None, madvise).as_deref(), Some("glibc.malloc.hugetlb=1"));
        assert_eq!(tunables_with_huge_pages(Some(""), madvise).as_deref(), Some("glibc.malloc.hugetlb=1"));
        assert_eq!(
            tunables_with_huge_pages(Some("glibc.malloc.arena_max=2"), madvise).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
        );
        // The user's own choice, opt-out included, is never overridden; this
        // is also what stops a second re-execution.
        assert_eq!(tunables_with_huge_pages(Some("glibc.malloc.hugetlb=0"), madvise), None);
        assert_eq!(tunables_with_huge_pages(Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"), madvise), None);
        // A tunable whose name only starts the same is someone else's.
        assert!(tunables_with_huge_pages(Some("glibc.malloc.hugetlbx=1"), madvise).is_some());
        assert_eq!(tunables_with_huge_pages(None, "[always] madvise never\n"), None);
        assert_eq!(tunables_with_huge_pages(None, "always madvise [never]\n"), None);
        assert_eq!(tunables_with_huge_pages(None, ""), None);
    }
}

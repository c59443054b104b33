//! Heap tuning for the simulator process.
//!
//! A lockstep run allocates and frees buffers of up to a MiB on every large
//! read and write. glibc's defaults hand such memory back to the kernel
//! (trim, mmap threshold) and the next op faults it in again, page by
//! zeroed page: a fifth of the run's time. The simulator keeps its heap.
//!
//! Huge pages are left to the user (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`):
//! whether they help depends on how the host backs the guest's memory. On
//! the machine last measured they made short runs a little faster and the
//! first 200k-op run a third slower (README, Benchmarks).

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

//! Ordinary folio allocations that failed. The page cache asks for a
//! folio no smaller than its mapping's minimum order; at block size > page
//! size fragmented memory may have none even after compaction, and then
//! the op that wanted it answers ENOMEM, or a short count for the bytes
//! it finished before (the model's `op/memory.rs` says which ops may and
//! what each leaves). The record lets the simulator hold the engine to it.

/// The refusal the current op met, and how far the op got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// Bytes of the op done before the refusal: the short count it
    /// answered, or 0 for ENOMEM.
    pub done: u64,
    /// The request refused, for a report.
    pub what: String,
}

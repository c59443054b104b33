//! The mounted filesystem: caches, allocator, extent mapping, directories (in progress).

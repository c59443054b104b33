//! Engine fsck: checks an image for everything e2fsck would object to (in progress).

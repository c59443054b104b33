//! Little- and big-endian field access on byte slices.
//!
//! Callers pass buffers whose length they have checked; an access that would
//! run past the end reads 0 or writes nothing (and trips a debug assertion)
//! instead of panicking, so a parser bug cannot become a crash on bad input.

#[inline]
fn window(b: &[u8], off: usize, len: usize) -> Option<&[u8]> {
    let end = off.checked_add(len)?;
    let w = b.get(off..end);
    debug_assert!(w.is_some(), "read of {len} bytes at {off} past a {}-byte buffer", b.len());
    w
}

#[inline]
fn window_mut(b: &mut [u8], off: usize, len: usize) -> Option<&mut [u8]> {
    let blen = b.len();
    let end = off.checked_add(len)?;
    let w = b.get_mut(off..end);
    debug_assert!(w.is_some(), "write of {len} bytes at {off} past a {blen}-byte buffer");
    w
}

#[inline]
fn array<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    if let Some(w) = window(b, off, N) {
        a.copy_from_slice(w);
    }
    a
}

#[inline]
fn put(b: &mut [u8], off: usize, v: &[u8]) {
    if let Some(w) = window_mut(b, off, v.len()) {
        w.copy_from_slice(v);
    }
}

#[inline]
pub(crate) fn u8_at(b: &[u8], off: usize) -> u8 {
    array::<1>(b, off)[0]
}
#[inline]
pub(crate) fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(array(b, off))
}
#[inline]
pub(crate) fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(array(b, off))
}
#[inline]
pub(crate) fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(array(b, off))
}
#[inline]
pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(array(b, off))
}
#[inline]
pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes(array(b, off))
}
#[inline]
pub(crate) fn be64(b: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(array(b, off))
}
#[inline]
pub(crate) fn be_i32(b: &[u8], off: usize) -> i32 {
    i32::from_be_bytes(array(b, off))
}
#[inline]
pub(crate) fn bytes16(b: &[u8], off: usize) -> [u8; 16] {
    array(b, off)
}

#[inline]
pub(crate) fn put_u8(b: &mut [u8], off: usize, v: u8) {
    put(b, off, &[v]);
}
#[inline]
pub(crate) fn put_le16(b: &mut [u8], off: usize, v: u16) {
    put(b, off, &v.to_le_bytes());
}
#[inline]
pub(crate) fn put_le32(b: &mut [u8], off: usize, v: u32) {
    put(b, off, &v.to_le_bytes());
}
#[inline]
pub(crate) fn put_le64(b: &mut [u8], off: usize, v: u64) {
    put(b, off, &v.to_le_bytes());
}
#[inline]
pub(crate) fn put_be32(b: &mut [u8], off: usize, v: u32) {
    put(b, off, &v.to_be_bytes());
}
#[inline]
pub(crate) fn put_be64(b: &mut [u8], off: usize, v: u64) {
    put(b, off, &v.to_be_bytes());
}
#[inline]
pub(crate) fn put_be_i32(b: &mut [u8], off: usize, v: i32) {
    put(b, off, &v.to_be_bytes());
}
#[inline]
pub(crate) fn put_bytes(b: &mut [u8], off: usize, v: &[u8]) {
    put(b, off, v);
}

/// Combines the low and high 32-bit halves that ext4 splits wide fields into.
#[inline]
pub(crate) fn join64(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

// Splitting a wide value into the narrower fields ext4 stores it in keeps the
// low bits on purpose; the byte split says so without a truncating cast.
#[inline]
pub(crate) fn lo32(v: u64) -> u32 {
    let [a, b, c, d, ..] = v.to_le_bytes();
    u32::from_le_bytes([a, b, c, d])
}
#[inline]
pub(crate) fn hi32(v: u64) -> u32 {
    let [.., a, b, c, d] = v.to_le_bytes();
    u32::from_le_bytes([a, b, c, d])
}
#[inline]
pub(crate) fn lo16(v: u32) -> u16 {
    let [a, b, ..] = v.to_le_bytes();
    u16::from_le_bytes([a, b])
}
#[inline]
pub(crate) fn hi16(v: u32) -> u16 {
    let [.., a, b] = v.to_le_bytes();
    u16::from_le_bytes([a, b])
}
#[inline]
pub(crate) fn lo8(v: u32) -> u8 {
    v.to_le_bytes()[0]
}

/// The same 32 bits read as signed: ext4 keeps signed seconds in u32 fields.
#[inline]
pub(crate) fn signed32(v: u32) -> i32 {
    i32::from_ne_bytes(v.to_ne_bytes())
}
/// The two's complement bits of `v`.
#[inline]
pub(crate) fn bits64(v: i64) -> u64 {
    u64::from_ne_bytes(v.to_ne_bytes())
}

// On-disk u32 sizes, counts and offsets index in-memory buffers, and buffer
// lengths go back out to u64 device offsets.
const _: () = assert!(usize::BITS >= 32 && usize::BITS <= 64);

/// Widens a u32 to an index (lossless: usize has at least 32 bits, asserted above).
#[inline]
pub(crate) fn usize_from_u32(v: u32) -> usize {
    usize::try_from(v).expect("usize has at least 32 bits (asserted at compile time)")
}
/// Widens a length to a device offset (lossless: usize has at most 64 bits, asserted above).
#[inline]
pub(crate) fn u64_from_usize(v: usize) -> u64 {
    u64::try_from(v).expect("usize has at most 64 bits (asserted at compile time)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_each_width() {
        let mut b = [0u8; 24];
        put_le16(&mut b, 0, 0xBEEF);
        put_le32(&mut b, 2, 0x1234_5678);
        put_be32(&mut b, 6, 0xC03B_3998);
        put_le64(&mut b, 10, 0x0102_0304_0506_0708);
        assert_eq!(le16(&b, 0), 0xBEEF);
        assert_eq!(le32(&b, 2), 0x1234_5678);
        assert_eq!(b[6], 0xC0, "big-endian puts the high byte first");
        assert_eq!(be32(&b, 6), 0xC03B_3998);
        assert_eq!(le64(&b, 10), 0x0102_0304_0506_0708);
        assert_eq!(join64(lo32(0xAB_0000_0001), hi32(0xAB_0000_0001)), 0xAB_0000_0001);
        assert_eq!((lo16(0x1234_5678), hi16(0x1234_5678), lo8(0x1234_5678)), (0x5678, 0x1234, 0x78));
        put_be_i32(&mut b, 18, -2);
        assert_eq!((be_i32(&b, 18), be32(&b, 18)), (-2, 0xFFFF_FFFE));
        assert_eq!((signed32(0xFFFF_FFFB), bits64(-1)), (-5, u64::MAX));
    }
}

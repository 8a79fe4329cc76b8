//! The one policy for buffers kept between requests: a thread (or a shard)
//! keeps what a request grew, so the next request of the same size
//! allocates nothing, unless it grew past [`KEEP_BYTES`]. One unusual
//! request must not leave every worker thread holding its peak.

use std::cell::RefCell;

/// A kept buffer larger than this is freed after use.
pub const KEEP_BYTES: usize = 4 << 20;

/// A buffer that knows its heap footprint and how to let it go.
pub trait Buffer {
    /// Bytes of heap it holds (capacity, not length).
    fn heap_bytes(&self) -> usize;
    /// Frees what it holds; what is cheap to keep and bounded may stay.
    fn release(&mut self);
}

impl<T> Buffer for Vec<T> {
    fn heap_bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<T>()
    }
    fn release(&mut self) {
        *self = Vec::new();
    }
}

impl Buffer for String {
    fn heap_bytes(&self) -> usize {
        self.capacity()
    }
    fn release(&mut self) {
        *self = String::new();
    }
}

impl<A: Buffer, B: Buffer> Buffer for (A, B) {
    fn heap_bytes(&self) -> usize {
        self.0.heap_bytes() + self.1.heap_bytes()
    }
    fn release(&mut self) {
        self.0.release();
        self.1.release();
    }
}

/// Frees `buf` if it holds more than [`KEEP_BYTES`]; otherwise leaves it
/// as it is, to be cleared and reused.
#[inline]
pub fn trim<B: Buffer>(buf: &mut B) {
    if buf.heap_bytes() > KEEP_BYTES {
        buf.release();
    }
}

/// A buffer reused by one thread across requests, for a `thread_local!`.
#[derive(Debug, Default)]
pub struct Reused<T>(RefCell<T>);

impl<T: Buffer> Reused<T> {
    /// A kept buffer that starts as `value`.
    pub const fn new(value: T) -> Self {
        Self(RefCell::new(value))
    }

    /// Lends the buffer (as the last request left it) to `f`, then trims it.
    ///
    /// # Panics
    /// If `f` asks for the same buffer again.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut buf = self.0.borrow_mut();
        let out = f(&mut buf);
        trim(&mut *buf);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_buffer_is_kept_and_a_grown_one_freed() {
        let kept = Reused::new(Vec::<u64>::new());
        kept.with(|b| b.extend(0..1000));
        assert!(kept.with(|b| b.capacity()) >= 1000, "kept for reuse");
        kept.with(|b| b.resize(KEEP_BYTES / 8 + 1, 0));
        assert_eq!(
            kept.with(|b| b.capacity()),
            0,
            "freed after outgrowing the limit"
        );
    }

    #[test]
    fn trim_counts_bytes_not_elements() {
        let mut wide = vec![[0u8; 64]; KEEP_BYTES / 64 + 1];
        trim(&mut wide);
        assert_eq!(wide.capacity(), 0);
        let mut narrow = vec![0u8; KEEP_BYTES];
        trim(&mut narrow);
        assert_eq!(narrow.capacity(), KEEP_BYTES);
    }
}

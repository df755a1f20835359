//! Read buffers of connections that wait for their peer, kept per thread
//! for the next reader.
//!
//! A client session spends most of its life waiting for its next command.
//! Holding its 8 KiB read buffer all that time was the largest part of an
//! idle session's memory; instead, a connection that finds nothing to read
//! parks its empty buffer here and takes one back when bytes arrive
//! ([`super::packet::PacketConn`]). The pool is per thread (no lock: a push
//! and a pop per command) and small: it only has to cover the sessions a
//! worker thread is busy with at once; beyond it, buffers are freed.

use bytes::BytesMut;
use std::cell::RefCell;

/// The size of a read buffer as a connection starts with it.
pub const CHUNK: usize = 8 * 1024;

/// Buffers kept per thread at most.
const KEEP: usize = 64;

thread_local! {
    static SPARE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// A read buffer: a parked one, or a new one of [`CHUNK`] bytes.
pub fn take() -> BytesMut {
    // `try_with`: a thread being torn down has no pool any more.
    SPARE
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| BytesMut::with_capacity(CHUNK))
}

/// Parks `buf`'s allocation for the next reader of this thread, and leaves
/// `buf` without one. A buffer that holds bytes stays where it is; one that
/// grew beyond [`CHUNK`] (a large packet) is freed instead.
pub fn park(buf: &mut BytesMut) {
    if !buf.is_empty() || buf.capacity() == 0 {
        return;
    }
    let mut b = std::mem::take(buf);
    // Empty: this moves its start back to the allocation's (no copy, no
    // allocation), so the capacity seen is the whole allocation.
    b.reserve(CHUNK);
    if b.capacity() != CHUNK {
        return;
    }
    // A thread being torn down (a connection dropped by its exit) frees
    // the buffer instead.
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < KEEP {
            s.push(b);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Buf, BufMut};

    #[test]
    fn a_parked_buffer_is_the_next_one_taken_whole_and_empty() {
        let mut b = take();
        b.put_slice(b"abcdef");
        b.advance(6);
        let at = b.as_ptr() as usize - 6;
        park(&mut b);
        assert_eq!(b.capacity(), 0, "the connection keeps no allocation");
        let again = take();
        assert!(again.is_empty());
        assert_eq!(again.capacity(), CHUNK);
        assert_eq!(
            again.as_ptr() as usize,
            at,
            "the same allocation, from its start"
        );
    }

    #[test]
    fn buffers_with_bytes_or_grown_are_not_parked() {
        let mut full = take();
        full.put_slice(b"x");
        park(&mut full);
        assert_eq!(&full[..], b"x");

        let mut big = BytesMut::with_capacity(4 * CHUNK);
        park(&mut big);
        assert_eq!(big.capacity(), 0);
        let next = take();
        assert_eq!(next.capacity(), CHUNK);
    }
}

//! Raw access to one message slot in shared memory.
//!
//! Slots live in memory that the other side writes concurrently, so this module never
//! forms `&SlotHeader` or `&mut SlotHeader`: the plain header fields and the payload are
//! read and written through raw pointers while the protocol gives the caller exclusive
//! use of the slot, and only the atomic `sequence` is ever shared by reference.

use core::marker::PhantomData;
use core::ptr::{self, NonNull};
use core::sync::atomic::AtomicU64;

use gyre_abi::{SlotHeader, SLOT_HEADER_SIZE};

/// The non-atomic header fields of a slot, copied out or in as one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotMeta {
    /// Correlation id.
    pub correlation_id: u64,
    /// Enqueue time, host clock ns.
    pub enqueue_ns: u64,
    /// Message type.
    pub msg_type: u32,
    /// Payload length.
    pub len: u32,
    /// `gyre_abi::flags`.
    pub flags: u32,
    /// Reply status.
    pub status: u32,
}

/// A pointer to one slot: a [`SlotHeader`] followed by `payload` bytes.
///
/// Invariant: `hdr` points to `SLOT_HEADER_SIZE + payload` bytes of live shared memory
/// aligned to 128, owned by a region that lives for `'a`.
#[derive(Debug, Clone, Copy)]
pub struct SlotPtr<'a> {
    hdr: NonNull<SlotHeader>,
    payload: usize,
    _region: PhantomData<&'a ()>,
}

impl<'a> SlotPtr<'a> {
    /// # Safety
    ///
    /// `hdr` must point to a slot of `SLOT_HEADER_SIZE + payload` bytes, aligned to 128,
    /// that stays allocated for `'a`.
    #[inline(always)]
    pub unsafe fn new(hdr: NonNull<u8>, payload: usize) -> Self {
        debug_assert_eq!(hdr.as_ptr() as usize % gyre_abi::SLOT_ALIGN, 0);
        Self {
            hdr: hdr.cast(),
            payload,
            _region: PhantomData,
        }
    }

    /// The slot's sequence word; shared with the other side, so atomic.
    #[inline(always)]
    pub fn sequence(&self) -> &'a AtomicU64 {
        // SAFETY: the slot is live (type invariant); `sequence` is an atomic, so a shared
        // reference to it is sound while other threads or the device access it.
        unsafe { &*ptr::addr_of!((*self.hdr.as_ptr()).sequence) }
    }

    /// The first byte of the slot (its header), for copying whole slots.
    #[inline(always)]
    pub fn header_ptr(&self) -> *mut u8 {
        self.hdr.as_ptr().cast()
    }

    /// Payload capacity in bytes.
    #[inline(always)]
    pub fn payload_capacity(&self) -> usize {
        self.payload
    }

    /// Reads the plain header fields.
    ///
    /// # Safety
    ///
    /// The caller must own the slot under the protocol (it observed the slot published
    /// and has not released it), so nobody writes it concurrently.
    #[inline(always)]
    pub unsafe fn read_meta(&self) -> SlotMeta {
        let h = self.hdr.as_ptr();
        // SAFETY: the caller owns the slot (see above); the pointers are in bounds.
        unsafe {
            SlotMeta {
                correlation_id: ptr::addr_of!((*h).correlation_id).read(),
                enqueue_ns: ptr::addr_of!((*h).enqueue_ns).read(),
                msg_type: ptr::addr_of!((*h).msg_type).read(),
                len: ptr::addr_of!((*h).len).read(),
                flags: ptr::addr_of!((*h).flags).read(),
                status: ptr::addr_of!((*h).status).read(),
            }
        }
    }

    /// Writes the plain header fields (not the sequence).
    ///
    /// # Safety
    ///
    /// The caller must own the slot under the protocol (claimed and not yet published).
    #[inline(always)]
    pub unsafe fn write_meta(&self, m: &SlotMeta) {
        let h = self.hdr.as_ptr();
        // SAFETY: the caller owns the slot; the pointers are in bounds and aligned.
        unsafe {
            ptr::addr_of_mut!((*h).correlation_id).write(m.correlation_id);
            ptr::addr_of_mut!((*h).enqueue_ns).write(m.enqueue_ns);
            ptr::addr_of_mut!((*h).msg_type).write(m.msg_type);
            ptr::addr_of_mut!((*h).len).write(m.len);
            ptr::addr_of_mut!((*h).flags).write(m.flags);
            ptr::addr_of_mut!((*h).status).write(m.status);
        }
    }

    /// The check word (`gyre_abi::check::slot`) of the slot as it would read with
    /// sequence `seq`: the header's words and the payload's first `len` bytes (the
    /// header's `len`), each read with `read_volatile` when `volatile` (a slot another
    /// agent may still be writing, as a device's PCIe writes land), else plainly.
    ///
    /// # Safety
    ///
    /// Plain reads (`volatile` false): the caller owns the slot (claimed and unpublished,
    /// or published to it and unreleased), so nobody writes it concurrently. Volatile
    /// reads: the caller holds the slot's index in flight (it is not reused), and accepts
    /// that the words it reads may be partly written.
    #[inline]
    pub unsafe fn check_with(&self, seq: u64, volatile: bool) -> u64 {
        use gyre_abi::check;
        let w = self.hdr.as_ptr().cast::<u64>();
        // SAFETY: every index below is < words(len, payload) <= 8 + payload / 8 rounded
        // up, inside the slot (the slot is SLOT_HEADER_SIZE + payload bytes, the payload a
        // multiple of 64); the caller's contract covers concurrent writers.
        let read = |j: usize| unsafe {
            if volatile {
                w.add(j).read_volatile()
            } else {
                w.add(j).read()
            }
        };
        let len = (read(3) >> 32) as u32;
        let n = check::words(len, self.payload);
        let mut sum = check::term(seq, 0);
        for j in 1..n {
            if j != check::CHECK_WORD {
                sum = sum.wrapping_add(check::term(read(j), j as u32));
            }
        }
        sum
    }

    /// Writes the check word.
    ///
    /// # Safety
    ///
    /// The caller must own the slot under the protocol (claimed and not yet published).
    #[inline(always)]
    pub unsafe fn write_check(&self, c: u64) {
        // SAFETY: the caller owns the slot; the field is in bounds and aligned.
        unsafe { ptr::addr_of_mut!((*self.hdr.as_ptr()).check).write(c) }
    }

    /// The check word as written, read with `read_volatile`.
    ///
    /// # Safety
    ///
    /// As the volatile case of [`SlotPtr::check_with`].
    #[inline(always)]
    pub unsafe fn check_word_volatile(&self) -> u64 {
        // SAFETY: the field is in bounds and aligned; the caller's contract.
        unsafe { ptr::addr_of!((*self.hdr.as_ptr()).check).read_volatile() }
    }

    /// Raw pointer to the payload.
    #[inline(always)]
    pub fn payload_ptr(&self) -> *mut u8 {
        // SAFETY: the payload starts SLOT_HEADER_SIZE bytes into the slot, in bounds.
        unsafe { self.hdr.as_ptr().cast::<u8>().add(SLOT_HEADER_SIZE) }
    }

    /// The first `len` payload bytes.
    ///
    /// # Safety
    ///
    /// The caller must own the slot for reading for the lifetime of the slice, and
    /// `len <= payload_capacity()`.
    #[inline(always)]
    pub unsafe fn payload(&self, len: usize) -> &'a [u8] {
        debug_assert!(len <= self.payload);
        // SAFETY: in bounds (len <= payload) and nobody writes the slot while the caller
        // owns it.
        unsafe { core::slice::from_raw_parts(self.payload_ptr(), len) }
    }

    /// The whole payload, writable.
    ///
    /// # Safety
    ///
    /// The caller must own the slot for writing (claimed, unpublished) for the lifetime
    /// of the slice, with no other reference to the payload alive.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn payload_mut(&self) -> &'a mut [u8] {
        // SAFETY: in bounds; exclusivity is the caller's obligation above.
        unsafe { core::slice::from_raw_parts_mut(self.payload_ptr(), self.payload) }
    }
}

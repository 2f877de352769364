//! Unwind safety of the claim -> publish window (P1..P4).
//!
//! A producer that claimed indices must publish them: the kernel takes requests in index
//! order and the published head (eager or synced) advances only over a gap-free prefix,
//! so an index claimed and never published would stop every later request for good. In Rust the only way to leave that window early is a
//! panic (a user `AsRef<[u8]>` in [`Channel::try_publish_batch`] that panics; a thread
//! cannot be killed from outside). [`ClaimGuard`] covers it: if the window is left by
//! unwinding, the guard's `Drop`
//!
//! * turns every claimed index whose slot was not written yet into a **tombstone**: a
//!   request of length `u32::MAX`, which every kernel answers with
//!   [`BAD_LENGTH`](gyre_abi::error::BAD_LENGTH) without running the handler (K4);
//! * marks every claimed call, written or not, and every tombstone as an abandoned call,
//!   so its reply is discarded and its slot released by the completion driver (nobody
//!   waits for it: the producer is gone). Sends already written stay sends: `recv`
//!   delivers their replies, in order, as for any accepted send;
//! * publishes the claim, so other producers never wait on it.
//!
//! The same happens, without a panic, when a message's `AsRef` returns a slice longer
//! than the payload after the size check passed: the batch returns
//! [`PublishError::TooLarge`](super::PublishError::TooLarge) and the claim is published
//! with tombstones from that message on (the sends before it are delivered). The kernel may
//! have executed the requests written before the unwind; their callers are gone.

use core::sync::atomic::Ordering::{AcqRel, Acquire, Release};

use super::{word, Channel, Kind, ST_ABANDONED, ST_IDLE};
use crate::region::RingId;
use crate::ring::slot::SlotMeta;

/// The length a tombstone request carries: beyond any payload, so K4 rejects it.
pub const TOMBSTONE_LEN: u32 = u32::MAX;

/// Publishes the claim `[first, first + n)` with tombstones if dropped while armed.
pub(super) struct ClaimGuard<'a> {
    pub(super) ch: &'a Channel,
    pub(super) first: u64,
    pub(super) n: u64,
    pub(super) kind: Kind,
    /// Indices `first..first + written` have their slot written; their sequences are
    /// stored once the whole batch is written (P3), or by the guard.
    pub(super) written: u64,
    pub(super) armed: bool,
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let ch = self.ch;
        let abandoned = word_of(ST_ABANDONED);
        for idx in self.first..self.first + self.n {
            let cell = ch.cell(idx);
            if idx < self.first + self.written {
                if self.kind == Kind::Call {
                    // Only this producer and the driver touch an idle call cell, and the
                    // driver only acts on WAITING / ABANDONED ones.
                    let _ = cell.word.compare_exchange(
                        word(idx, Kind::Call, ST_IDLE),
                        abandoned(idx),
                        AcqRel,
                        Acquire,
                    );
                    ch.add_interest();
                }
                // Written, not stamped: the guard fires only while slots are written,
                // before P3. Stamped here, so the request counts as sent.
                ch.region
                    .slot(RingId::Request, idx)
                    .sequence()
                    .store(idx + 1, Release);
                continue;
            }
            // Not written: the cell first (a reader that sees the sequence sees a
            // discarded call, never a send), then the tombstone, then the sequence.
            cell.word.store(abandoned(idx), Release);
            let slot = ch.region.slot(RingId::Request, idx);
            // SAFETY: `idx` is claimed by this producer and unpublished (its sequence is
            // not stored), so nobody else reads or writes the slot.
            unsafe {
                slot.write_meta(&SlotMeta {
                    correlation_id: idx,
                    enqueue_ns: 0,
                    msg_type: 0,
                    len: TOMBSTONE_LEN,
                    flags: 0,
                    status: 0,
                });
                if ch.checked {
                    // A checked ring takes only slots whose check word holds: the
                    // tombstone is answered BAD_LENGTH like any other.
                    slot.write_check(slot.check_with(idx + 1, false));
                }
            }
            slot.sequence().store(idx + 1, Release);
            ch.add_interest();
        }
        ch.publish_stamped(self.first..self.first + self.n);
        tracing::warn!(
            kernel = %ch.name,
            first = self.first,
            n = self.n,
            written = self.written,
            "producer unwound between claim and publish: claim published with tombstones"
        );
    }
}

fn word_of(st: u64) -> impl Fn(u64) -> u64 {
    move |idx| word(idx, Kind::Call, st)
}

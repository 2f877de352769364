//! Where a loan pool meets its kernel's [`Channel`]: a reply claimed back as a [`Loan`]
//! (from a [`ReplyView`], the channel's proof that the kernel is done with the slot), the
//! release hook that frees the block of a request nobody claimed, and the return of the
//! blocks of unanswered requests once the kernel has stopped for good.
//!
//! These are the host's only moves of a kernel-owned block. Each needs the kernel to be
//! done with the block's slot, which a device kernel does not show on the state word (it
//! only reads it): the proof is the published reply (the view, the hook) or the caller's
//! promise ([`LoanArena::release_unanswered`] is `unsafe`).

use std::sync::Arc;

use super::{Loan, LoanArena, LoanHandle};
use crate::channel::{Channel, ReleaseHook, ReplyView};
use crate::{Error, Result};

impl LoanArena {
    /// Claims the block of a loan kernel's reply as a [`Loan`] of the reply's length: the
    /// reply (a successful one, carrying a handle) must name the block its request was
    /// sent in, still kernel-owned and bound to its slot, with a length that fits. The
    /// view is the proof that the kernel is done with the slot: the channel gives one
    /// only for a published reply.
    ///
    /// # Errors
    ///
    /// [`Error::BadLoan`]: the reply carries no handle, its request carried none, or the
    /// handles do not name one block sent in this slot (the block, if any, stays
    /// kernel-owned; the release of the slot frees it).
    pub fn claim(self: &Arc<Self>, view: &ReplyView<'_>) -> Result<Loan> {
        let bad = |h: Option<LoanHandle>, why| {
            let h = h.unwrap_or(LoanHandle {
                offset: 0,
                len: 0,
                generation: 0,
            });
            Error::BadLoan {
                side: "from the kernel",
                offset: h.offset,
                len: h.len,
                generation: h.generation,
                why,
            }
        };
        // The view's public fields are its holder's to rewrite: what the channel made it
        // for (its channel, index and payload) is read from the fields only it sets.
        if !self.serves(view.channel) {
            return Err(bad(
                None,
                "a reply of another channel than the pool's kernel's",
            ));
        }
        let (index, payload) = (view.published_index, view.published_payload);
        let reply = (payload.len() == LoanHandle::SIZE)
            .then(|| LoanHandle::decode(payload))
            .flatten()
            .ok_or_else(|| bad(None, "the reply carries no handle"))?;
        let request = LoanHandle::decode(view.request())
            .ok_or_else(|| bad(Some(reply), "its request carried no loan"))?;
        // SAFETY: the channel makes a ReplyView only for a published reply of slot
        // `index` (and the view borrows the channel's reply slot, which is not released
        // meanwhile); that channel is the one whose kernel serves this pool (checked
        // above), so the kernel is done with that slot.
        unsafe { self.claim_handles(&reply, &request, index) }
    }

    /// Whether `ch` is the channel this pool is bound to
    /// ([`LoanArena::install_release_hook`]).
    fn serves(&self, ch: &Channel) -> bool {
        self.channel
            .get()
            .is_some_and(|w| core::ptr::eq(w.as_ptr(), ch))
    }

    /// Binds the pool to `ch`, the channel of the kernel that serves it (once: only its
    /// replies claim the pool's blocks, [`LoanArena::claim`]), and installs on it the
    /// hook that frees the block of each request nobody claimed (an error reply, a
    /// dropped call, a protocol error) when the host releases its reply slot. `false`,
    /// and nothing bound, if the pool is bound already (to any channel) or `ch` has a
    /// hook already. The channel calls the hook only for slots whose reply was
    /// published; the hook itself is not handed out, so nothing else can call it.
    ///
    /// # Safety
    ///
    /// `ch` is the channel of the ring whose kernel serves this pool: the slots the
    /// pool's blocks are bound to are `ch`'s request slots. (Bound to another channel,
    /// that channel's replies would claim and free blocks a device kernel is still
    /// using.)
    pub unsafe fn install_release_hook(self: &Arc<Self>, ch: &Arc<Channel>) -> bool {
        if self.channel.get().is_some() {
            return false;
        }
        if !ch.set_release_hook(Arc::new(FreeUnclaimed(self.clone()))) {
            return false;
        }
        // Two racing installs on two hook-less channels: one binds; the other's hook
        // ignores every slot (it serves only the bound channel).
        self.channel.set(Arc::downgrade(ch)).is_ok()
    }

    /// Returns to the pool the blocks of the requests `ch`'s kernel never answered (the
    /// slots between the last reply and the last request), once that kernel has stopped
    /// for good. Returns how many blocks it freed.
    ///
    /// # Safety
    ///
    /// No execution of the kernel serving `ch` is running, and none will be launched on
    /// its region (a shutdown has joined it; no restart or successor follows). A `ch`
    /// other than the pool's own ([`LoanArena::install_release_hook`]) frees nothing.
    pub unsafe fn release_unanswered(&self, ch: &Channel) -> usize {
        if !self.serves(ch) {
            return 0;
        }
        let mut n = 0;
        ch.for_each_unanswered(|index, req| {
            if let Some(h) = LoanHandle::decode(req) {
                // SAFETY: the caller's contract: no kernel will touch slot `index` again.
                if unsafe { self.release_sent(&h, index) } {
                    n += 1;
                }
            }
        });
        n
    }
}

/// The release hook of [`LoanArena::install_release_hook`].
struct FreeUnclaimed(Arc<LoanArena>);

impl ReleaseHook for FreeUnclaimed {
    fn released(&self, ch: &Channel, index: u64, request: &[u8], _status: u32) {
        // Whatever the status: `release_sent` frees only a block bound to this slot and
        // still kernel-owned (not claimed, not held). A handle the slot's sender did not
        // bind (forged, stale, duplicated) frees nothing.
        if !self.0.serves(ch) {
            return; // installed only on the pool's own channel; never another's slots
        }
        if let Some(h) = LoanHandle::decode(request) {
            // SAFETY: the channel calls its release hook only for a reply slot whose
            // reply is published (`Channel::free_run`), and it is the channel of the
            // kernel that serves this pool, so that kernel is done with slot `index`;
            // nobody else holds this hook.
            unsafe { self.0.release_sent(&h, index) };
        }
    }
}

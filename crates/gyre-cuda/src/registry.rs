//! The contexts of this process: at most one [`Context`] per device at any time,
//! including while one is being dropped, and what the process knows of each device's
//! health after a sticky error ([`crate::recovery`]).
//!
//! A device's slot lives from the moment its context is made until that context's `Drop`
//! has finished releasing it (and, after a sticky error, resetting the device's primary
//! context first). [`primary`] hands out the live context of a slot; when the slot's
//! context is being dropped (its last `Arc` is gone but its `Drop` has not finished), it
//! waits for the slot to be released instead of retaining the primary context a second
//! time: two `Context` values on one `CUcontext` would free and reset each other's
//! resources.
//!
//! Opening and closing follow [`crate::recovery`]: a reset context is checked before use,
//! a refused retain is met with a reset, and a device no reset helps answers
//! [`crate::Error::ProcessRestartRequired`] naming the original fault for the rest of the
//! process.

use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::context::Context;
use crate::error::Result;
use crate::probe::CudaInfo;
use crate::recovery::{self, Driver, Fault, Health};
use crate::result;
use crate::sys::CUdevice;

#[derive(Debug)]
struct Slot {
    ordinal: i32,
    ctx: Weak<Context>,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    slots: Vec<Slot>,
    /// Each device's health, once it is other than good.
    health: Vec<(i32, Health)>,
}

impl Registry {
    fn health(&mut self, ordinal: i32) -> &mut Health {
        let at = match self.health.iter().position(|(o, _)| *o == ordinal) {
            Some(at) => at,
            None => {
                self.health.push((ordinal, Health::Good));
                self.health.len() - 1
            }
        };
        &mut self.health[at].1
    }
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    slots: Vec::new(),
    health: Vec::new(),
});
static RELEASED: Condvar = Condvar::new();

/// The context of the device `info` describes, shared with every other user in this
/// process, made current on this thread.
///
/// # Errors
///
/// [`crate::Error::ProcessRestartRequired`] for a device a sticky error left unusable; the
/// driver's error naming the call.
pub(crate) fn primary(info: &CudaInfo) -> Result<Arc<Context>> {
    let ordinal = info.device.ordinal;
    let mut reg = REGISTRY.lock();
    let ctx = loop {
        match reg.slots.iter().find(|s| s.ordinal == ordinal) {
            Some(slot) => match slot.ctx.upgrade() {
                Some(c) => break c,
                // Its last Arc is gone and its Drop is releasing it: wait for that.
                None => RELEASED.wait(&mut reg),
            },
            None => {
                let dev = result::device_get(ordinal)?;
                let raw = recovery::open(&Driver, reg.health(ordinal), dev, ordinal)?;
                let c = Context::wrap(info, dev, raw);
                reg.slots.push(Slot {
                    ordinal,
                    ctx: Arc::downgrade(&c),
                });
                break c;
            }
        }
    };
    drop(reg);
    // Outside the registry lock: a failure drops `ctx`, whose Drop takes it.
    ctx.bind()?;
    Ok(ctx)
}

/// The registry, locked by a context's `Drop` for as long as it releases the device's
/// primary context; [`Released::close`] resets (if poisoned) and releases it, removes the
/// slot and wakes waiters.
pub(crate) fn lock_for_release() -> Released {
    Released(REGISTRY.lock())
}

/// A locked registry during a context's release.
pub(crate) struct Released(MutexGuard<'static, Registry>);

impl Released {
    /// Gives back the primary context of `dev` (device `ordinal`), reset first when
    /// `poisoned` ([`recovery::close`]); frees the slot and wakes whoever waits for it.
    /// Returns whether it was reset.
    pub(crate) fn close(mut self, ordinal: i32, dev: CUdevice, poisoned: Option<Fault>) -> bool {
        let reset = recovery::close(&Driver, self.0.health(ordinal), dev, ordinal, poisoned);
        self.0.slots.retain(|s| s.ordinal != ordinal);
        drop(self);
        RELEASED.notify_all();
        reset
    }
}

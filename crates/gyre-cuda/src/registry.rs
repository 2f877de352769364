//! The contexts of this process: at most one [`Context`] per device at any time,
//! including while one is being dropped.
//!
//! A device's slot lives from the moment its context is made until that context's `Drop`
//! has finished releasing it (and, after a sticky error, resetting the device's primary
//! context). [`primary`] hands out the live context of a slot; when the slot's context is
//! being dropped (its last `Arc` is gone but its `Drop` has not finished), it waits for
//! the slot to be released instead of retaining the primary context a second time: two
//! `Context` values on one `CUcontext` would free and reset each other's resources.
//!
//! After a reset, the next context of that device is checked with a small allocation and
//! a zeroing memset on a fresh stream. NVIDIA documents sticky errors as needing a new
//! process ("to continue using CUDA, the process must be terminated and relaunched"); if
//! the check still fails, the device is marked unusable for the rest of the process and
//! every later [`primary`] returns [`Error::ProcessRestartRequired`].

use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::probe::CudaInfo;
use crate::result;

#[derive(Debug)]
struct Slot {
    ordinal: i32,
    ctx: Weak<Context>,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    slots: Vec<Slot>,
    /// Devices whose primary context was reset after a sticky error: the next context is
    /// checked before use.
    unchecked: Vec<i32>,
    /// Devices unusable for the rest of the process: `(ordinal, code, name)`.
    dead: Vec<(i32, i32, String)>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    slots: Vec::new(),
    unchecked: Vec::new(),
    dead: Vec::new(),
});
static RELEASED: Condvar = Condvar::new();

/// The context of the device `info` describes, shared with every other user in this
/// process, made current on this thread.
///
/// # Errors
///
/// [`Error::ProcessRestartRequired`] for a device a sticky error left unusable; the
/// driver's error naming the call.
pub(crate) fn primary(info: &CudaInfo) -> Result<Arc<Context>> {
    let ordinal = info.device.ordinal;
    let mut reg = REGISTRY.lock();
    let ctx = loop {
        if let Some((_, code, name)) = reg.dead.iter().find(|(o, ..)| *o == ordinal) {
            return Err(Error::ProcessRestartRequired {
                ordinal,
                code: *code,
                name: name.clone(),
            });
        }
        match reg.slots.iter().find(|s| s.ordinal == ordinal) {
            Some(slot) => match slot.ctx.upgrade() {
                Some(c) => break c,
                // Its last Arc is gone and its Drop is releasing it: wait for that.
                None => RELEASED.wait(&mut reg),
            },
            None => {
                let c = Context::retain(info)?;
                if let Some(at) = reg.unchecked.iter().position(|&o| o == ordinal) {
                    reg.unchecked.swap_remove(at);
                    if let Err(e) = check_after_reset(&c) {
                        let code = e.cuda_code().unwrap_or(0);
                        let name = result::error_name(code);
                        tracing::error!(device = ordinal, error = %e, "the CUDA context is still unusable after its reset: a new process is needed");
                        reg.dead.push((ordinal, code, name.clone()));
                        // Its Drop takes the registry: release it first. No slot holds
                        // it, and it made nothing that needs freeing.
                        drop(reg);
                        drop(c);
                        return Err(Error::ProcessRestartRequired {
                            ordinal,
                            code,
                            name,
                        });
                    }
                }
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

/// A device's primary context right after a reset: a small allocation and a zeroing
/// memset on a fresh stream, waited for. A sticky error that survived the reset shows
/// here.
fn check_after_reset(c: &Arc<Context>) -> Result<()> {
    c.bind()?;
    // SAFETY: the context is current; every handle made here is released below, in
    // order, before returning.
    unsafe {
        let p = result::mem_alloc(256)?;
        let s = match result::stream_create() {
            Ok(s) => s,
            Err(e) => {
                let _ = result::mem_free(p);
                return Err(e);
            }
        };
        let r = result::memset_d8_async(p, 0, 256, s)
            .and_then(|()| result::stream_synchronize(s, "the check after a context reset"));
        let _ = result::stream_destroy(s);
        let _ = result::mem_free(p);
        r
    }
}

/// The registry, locked by a context's `Drop` for as long as it releases the device's
/// primary context; [`Released::done`] removes the slot and wakes waiters.
pub(crate) fn lock_for_release() -> Released {
    Released(REGISTRY.lock())
}

/// A locked registry during a context's release.
pub(crate) struct Released(MutexGuard<'static, Registry>);

impl Released {
    /// The context of `ordinal` is released (and the device's primary context was reset
    /// when `reset`): frees the slot and wakes whoever waits for it.
    pub(crate) fn done(mut self, ordinal: i32, reset: bool) {
        self.0.slots.retain(|s| s.ordinal != ordinal);
        if reset && !self.0.unchecked.contains(&ordinal) {
            self.0.unchecked.push(ordinal);
        }
        drop(self);
        RELEASED.notify_all();
    }
}

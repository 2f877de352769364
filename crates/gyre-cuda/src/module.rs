//! Loaded modules, one per distinct image and context, kept loaded for the context's life.
//!
//! Unloading a module may wait for the context's kernels to finish, which a persistent
//! ring kernel never does; and loading one is cheapest done once. So a context keeps each
//! module it ever loaded (keyed by the hash of everything that decided the image, see
//! [`crate::cache::CacheKey`]) and unloads them only when it is dropped. Functions are
//! loaded with the module (`cuFuncLoad` where the driver has it), never at their first
//! launch, so no load happens behind a running ring kernel (see [`crate::probe`] on eager
//! loading). A load itself runs only while no ring kernel runs (`Context::while_idle`);
//! while one does, an image is compiled and *staged* ([`Modules::stage`]) and loaded
//! later.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::result;
use crate::sys::{CUfunction, CUfunction_attribute, CUmodule};

/// A module and the one entry point gyre uses of it.
#[derive(Debug)]
pub(crate) struct Module {
    handle: CUmodule,
    func: CUfunction,
    entry: String,
}

// SAFETY: module and function handles are driver objects usable from any thread with
// their context bound; they are immutable once loaded.
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

impl Module {
    /// The entry point.
    pub(crate) fn function(&self) -> CUfunction {
        self.func
    }

    /// The entry point's name.
    pub(crate) fn entry(&self) -> &str {
        &self.entry
    }

    /// How many blocks of `threads` threads of the entry point fit on one SM at once.
    pub(crate) fn occupancy(&self, ctx: &Context, threads: u32) -> Result<i32> {
        ctx.bind()?;
        // SAFETY: a function of a loaded module of the bound context.
        unsafe { result::occupancy(self.func, threads) }
    }

    /// Registers per thread of the entry point (for reports).
    pub(crate) fn registers(&self, ctx: &Context) -> Result<i32> {
        ctx.bind()?;
        // SAFETY: as above.
        unsafe {
            result::func_attribute(self.func, CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS)
        }
    }
}

/// The modules of one context.
#[derive(Debug, Default)]
pub(crate) struct Modules {
    loaded: Mutex<HashMap<u128, Arc<Module>>>,
    /// Images compiled ahead ([`Modules::stage`]) and not loaded yet, by key.
    staged: Mutex<HashMap<u128, Vec<u8>>>,
}

impl Modules {
    /// The module with key `key`, loaded from `image()` (a CUBIN, or PTX ending in a NUL
    /// byte) the first time, with its entry point `entry` loaded too.
    ///
    /// # Errors
    ///
    /// `image()`'s error; the driver's, naming the call and with the JIT's log.
    pub(crate) fn get_or_load(
        ctx: &Arc<Context>,
        key: u128,
        entry: &str,
        what: &str,
        image: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Arc<Module>> {
        if let Some(m) = ctx.modules.loaded.lock().get(&key) {
            return Ok(m.clone());
        }
        // Compiled outside the lock (NVRTC can take seconds): other launches keep
        // finding their modules meanwhile. Two threads may compile the same image; the
        // first to load it wins.
        let staged = ctx.modules.staged.lock().remove(&key);
        let bytes = match staged {
            Some(b) => b,
            None => image()?,
        };
        let name = CString::new(entry).map_err(|_| Error::InvalidInput {
            what: format!("entry name {entry:?}"),
            reason: "contains a NUL byte",
        })?;
        let mut loaded = ctx.modules.loaded.lock();
        if let Some(m) = loaded.get(&key) {
            return Ok(m.clone());
        }
        let made = ctx.while_idle("cuModuleLoadDataEx", what, || {
            ctx.bind()?;
            // SAFETY: the context is current; `bytes` is a CUBIN or NUL-terminated PTX
            // (the callers' images).
            let handle = unsafe { result::module_load(&bytes, what)? };
            // SAFETY: `handle` was just loaded in the current context.
            match unsafe { result::module_function(handle, &name) } {
                Ok(f) => Ok((handle, f)),
                Err(e) => {
                    // No kernel runs (`while_idle`): unloading cannot wait.
                    // SAFETY: loaded just above; none of its kernels ever ran.
                    let _ = unsafe { result::module_unload(handle) };
                    Err(e)
                }
            }
        });
        let (handle, func) = match made {
            Ok(m) => m,
            Err(e) => {
                if matches!(e, Error::WouldWait { .. }) {
                    // Kept for a load once no kernel runs.
                    ctx.modules.staged.lock().insert(key, bytes);
                }
                return Err(e);
            }
        };
        let m = Arc::new(Module {
            handle,
            func,
            entry: entry.to_owned(),
        });
        loaded.insert(key, m.clone());
        tracing::debug!(entry, what, bytes = bytes.len(), "CUDA module loaded");
        Ok(m)
    }

    /// Compiles the image of `key` now (`image()`), unless it is loaded or staged, and
    /// keeps it for the [`Modules::get_or_load`] that follows: a reload compiles its
    /// handler while the old kernel runs and loads it once that kernel is joined.
    ///
    /// # Errors
    ///
    /// `image()`'s error (a compile error).
    pub(crate) fn stage(
        ctx: &Context,
        key: u128,
        image: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<()> {
        if ctx.modules.loaded.lock().contains_key(&key)
            || ctx.modules.staged.lock().contains_key(&key)
        {
            return Ok(());
        }
        let bytes = image()?;
        ctx.modules.staged.lock().insert(key, bytes);
        Ok(())
    }

    /// How many modules are loaded.
    pub(crate) fn len(&self) -> usize {
        self.loaded.lock().len()
    }

    /// Unloads every module (the context is going away, so none of their kernels runs).
    pub(crate) fn unload_all(&self) {
        for (_, m) in self.loaded.lock().drain() {
            // SAFETY: loaded by `get_or_load`, unloaded once; the context is being
            // dropped, so no kernel of it runs or will run.
            if let Err(e) = unsafe { result::module_unload(m.handle) } {
                tracing::warn!(error = %e, "unloading a CUDA module");
            }
        }
    }

    /// Forgets every module without a driver call: the context is reset, which unloads
    /// them.
    pub(crate) fn forget_all(&self) {
        self.loaded.lock().clear();
        self.staged.lock().clear();
    }
}

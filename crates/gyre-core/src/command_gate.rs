//! [`CommandGate`]: the host's commands to a kernel, held back while a handover waits for
//! the kernel to read `HANDOVER` (`docs/protocol.md` §8, R1 and R4).
//!
//! The command word of the control block has one writer at a time: the gate. Outside a
//! handover a command goes straight in. Between R1 (the gate writes `HANDOVER`) and R4
//! (the successor's command goes in) a command is recorded, not written: writing it would
//! overwrite `HANDOVER` before the kernel read it, the kernel would never stop, and the
//! handover would wait forever. At R4, or when a handover ends early, the last command
//! recorded goes in, so none is lost.
//!
//! Invariants, checked by the loom model `tests/loom_command_gate.rs` on this code:
//!
//! 1. While the gate is held, the word is `HANDOVER`: no command overwrites it.
//! 2. Once the gate is released, the word is the last command given, wherever it came
//!    in (before, during or after the handover).
//!
//! Every write happens under the gate's lock, through the caller's `write` (which in
//! gyre stores the word and rings the kernel's doorbell), so writes are never reordered
//! against each other.
//!
//! A chain's later stage has no gate: its word is written by the stage feeding it and
//! the host's chain view (`TERMINATE`, with a plain store, when the chain stops), so a
//! reload moves it with compare-and-swap: [`hold_stage`] (R1, `RUN` to `HANDOVER`) and
//! [`release_stage`] (R4 or an early end, `HANDOVER` back to `RUN`). Checked by the same
//! loom model:
//!
//! 3. A `TERMINATE` written into a later stage's word is never lost: a reload that finds
//!    it reloads nothing, and one that started before it leaves it for the successor.
//! 4. The kernel always stops (it reads `HANDOVER` or `TERMINATE`), and its successor
//!    never reads `HANDOVER`.

use gyre_abi::command;

#[cfg(gyre_loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(gyre_loom))]
use std::sync::{Mutex, MutexGuard};

/// A command word a later stage's reload moves by compare-and-swap: the control block's
/// (`core`'s atomic), or loom's in the model.
pub trait CommandWord {
    /// `compare_exchange` with acquire-release on success, acquire on failure.
    fn swap_if(&self, current: u32, new: u32) -> Result<u32, u32>;
}

impl CommandWord for core::sync::atomic::AtomicU32 {
    fn swap_if(&self, current: u32, new: u32) -> Result<u32, u32> {
        use core::sync::atomic::Ordering::{AcqRel, Acquire};
        self.compare_exchange(current, new, AcqRel, Acquire)
    }
}

#[cfg(gyre_loom)]
impl CommandWord for loom::sync::atomic::AtomicU32 {
    fn swap_if(&self, current: u32, new: u32) -> Result<u32, u32> {
        use core::sync::atomic::Ordering::{AcqRel, Acquire};
        self.compare_exchange(current, new, AcqRel, Acquire)
    }
}

/// R1 for a chain's later stage: `RUN` to `HANDOVER`.
///
/// # Errors
///
/// The command found instead (`TERMINATE`, `PAUSE`...): the stage was told something
/// else, and there is nothing to reload; the word is left as it is.
///
/// # Examples
///
/// ```
/// use core::sync::atomic::{AtomicU32, Ordering::Relaxed};
/// use gyre_abi::command;
/// use gyre_core::command_gate::{hold_stage, release_stage};
/// let word = AtomicU32::new(command::RUN);
/// hold_stage(&word).expect("running");
/// assert_eq!(word.load(Relaxed), command::HANDOVER);
/// release_stage(&word); // R4
/// assert_eq!(word.load(Relaxed), command::RUN);
/// word.store(command::TERMINATE, Relaxed); // the stage feeding it stopped
/// assert_eq!(hold_stage(&word), Err(command::TERMINATE));
/// ```
pub fn hold_stage<W: CommandWord + ?Sized>(word: &W) -> Result<(), u32> {
    word.swap_if(command::RUN, command::HANDOVER).map(|_| ())
}

/// R4 (or a handover that ends early) for a chain's later stage: `HANDOVER` back to
/// `RUN`, unless a `TERMINATE` came in meanwhile, which the successor (if any) obeys:
/// it drains what it was given, then stops.
pub fn release_stage<W: CommandWord + ?Sized>(word: &W) {
    let _ = word.swap_if(command::HANDOVER, command::RUN);
}

#[derive(Debug)]
struct Gate {
    /// The command last given: what every successor follows.
    user: u32,
    /// `HANDOVER` is in the word: commands are recorded, not written.
    held: bool,
}

/// See the [module documentation](self).
///
/// # Examples
///
/// ```
/// use core::cell::Cell;
/// use gyre_abi::command;
/// use gyre_core::command_gate::CommandGate;
/// let word = Cell::new(command::RUN);
/// let gate = CommandGate::new(command::RUN);
/// gate.hold(|c| word.set(c)); // R1
/// gate.command(command::PAUSE, |c| word.set(c)); // recorded only
/// assert_eq!(word.get(), command::HANDOVER);
/// gate.hand_to_successor(|c| word.set(c)); // R4
/// assert_eq!(word.get(), command::PAUSE);
/// ```
#[derive(Debug)]
pub struct CommandGate {
    gate: Mutex<Gate>,
}

impl CommandGate {
    /// A gate whose word holds `initial` (what the first launch follows).
    pub fn new(initial: u32) -> Self {
        Self {
            gate: Mutex::new(Gate {
                user: initial,
                held: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Gate> {
        // Nothing under the lock panics but `write`; the state stays valid either way.
        self.gate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A host command (run, pause, terminate): written with `write` at once, or, while a
    /// handover holds the gate, recorded for the successor.
    pub fn command(&self, cmd: u32, write: impl FnOnce(u32)) {
        let mut g = self.lock();
        g.user = cmd;
        if !g.held {
            write(cmd);
        }
    }

    /// R1: holds the gate and writes `HANDOVER`.
    pub fn hold(&self, write: impl FnOnce(u32)) {
        let mut g = self.lock();
        g.held = true;
        write(command::HANDOVER);
    }

    /// R4: releases the gate (held or not: a kernel that handed over by itself was never
    /// asked) and writes the last command given. `write` runs under the gate's lock, so
    /// what it stores with the command (the successor's epoch and generation, in gyre)
    /// cannot interleave with another command.
    pub fn hand_to_successor(&self, write: impl FnOnce(u32)) {
        let mut g = self.lock();
        g.held = false;
        write(g.user);
    }

    /// A handover that ends before R4 (the kernel ended for good): if the gate is held,
    /// releases it and writes the last command given over `HANDOVER`, which the kernel
    /// may never read.
    pub fn abandon(&self, write: impl FnOnce(u32)) {
        let mut g = self.lock();
        if g.held {
            g.held = false;
            write(g.user);
        }
    }

    /// The command last given.
    pub fn last(&self) -> u32 {
        self.lock().user
    }

    /// Whether a handover holds the gate.
    pub fn is_held(&self) -> bool {
        self.lock().held
    }
}

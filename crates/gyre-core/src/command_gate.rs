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

use gyre_abi::command;

#[cfg(gyre_loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(gyre_loom))]
use std::sync::{Mutex, MutexGuard};

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

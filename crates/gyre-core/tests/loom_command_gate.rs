//! loom model of the command hold during a handover (`gyre_core::command_gate`,
//! `docs/protocol.md` §8 R1..R4): a user's commands race the handover that asks the
//! kernel to stop with `HANDOVER`.
//!
//! Checked in every interleaving:
//!
//! * the kernel always reads `HANDOVER` (a command written over it would leave the kernel
//!   running and the handover waiting forever: loom reports the endless spin);
//! * once the handover is over, the command word is the user's last command, and the
//!   successor's first read of the word is a command the user gave (or the initial one),
//!   never `HANDOVER`;
//! * a handover abandoned before R4 (the kernel ended for good) also leaves the user's
//!   last command in the word;
//! * a chain's later stage (no gate: `hold_stage` / `release_stage`), reloaded while the
//!   stage feeding it writes `TERMINATE`: the kernel always stops, the `TERMINATE` is
//!   never lost, and the successor never reads `HANDOVER`.
//!
//! Run with (CI does):
//!
//! ```text
//! RUSTFLAGS="--cfg gyre_loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p gyre-core --release --test loom_command_gate
//! ```
#![cfg(gyre_loom)]

use core::sync::atomic::Ordering::{Acquire, Release};

use gyre_abi::{command, state};
use gyre_core::command_gate::{hold_stage, release_stage, CommandGate};
use loom::sync::atomic::AtomicU32;
use loom::sync::Arc;
use loom::thread;

/// The control block words the model needs.
struct Line0 {
    command: AtomicU32,
    state: AtomicU32,
}

/// A running kernel's line 0 and the host's gate, both at `RUN`.
fn running() -> (Arc<Line0>, Arc<CommandGate>) {
    let l = Arc::new(Line0 {
        command: AtomicU32::new(command::RUN),
        state: AtomicU32::new(state::ACTIVE),
    });
    (l, Arc::new(CommandGate::new(command::RUN)))
}

fn write(l: &Line0) -> impl FnOnce(u32) + '_ {
    move |c| l.command.store(c, Release)
}

/// The running kernel: polls the command word until it reads `HANDOVER`, then stops at
/// the batch boundary and writes `HANDED_OVER`. Other commands are followed (here: only
/// read).
fn kernel(l: &Line0) {
    loop {
        if l.command.load(Acquire) == command::HANDOVER {
            l.state.store(state::HANDED_OVER, Release);
            return;
        }
        thread::yield_now();
    }
}

/// R1..R4: hold, wait for the stop, hand the word to the successor; returns the
/// successor's first read of the word.
fn handover(gate: &CommandGate, l: &Line0) -> u32 {
    gate.hold(write(l));
    while l.state.load(Acquire) != state::HANDED_OVER {
        thread::yield_now();
    }
    gate.hand_to_successor(write(l));
    // The successor's K0 reads the word after its launch.
    l.command.load(Acquire)
}

#[test]
fn commands_during_a_handover_wait_for_the_successor() {
    loom::model(|| {
        let (l, gate) = running();
        let k = {
            let l = l.clone();
            thread::spawn(move || kernel(&l))
        };
        let user = {
            let (l, gate) = (l.clone(), gate.clone());
            thread::spawn(move || {
                gate.command(command::PAUSE, write(&l));
                gate.command(command::RUN, write(&l));
                gate.command(command::PAUSE, write(&l));
            })
        };
        let first = handover(&gate, &l);
        k.join().expect("the kernel read HANDOVER");
        user.join().expect("user");
        assert!(
            first == command::RUN || first == command::PAUSE,
            "the successor read {first}"
        );
        assert_eq!(gate.last(), command::PAUSE);
        assert_eq!(
            l.command.load(Acquire),
            command::PAUSE,
            "the last command wins"
        );
        assert!(!gate.is_held());
    });
}

#[test]
fn a_shutdown_racing_a_handover_reaches_the_successor() {
    loom::model(|| {
        let (l, gate) = running();
        let k = {
            let l = l.clone();
            thread::spawn(move || kernel(&l))
        };
        let user = {
            let (l, gate) = (l.clone(), gate.clone());
            thread::spawn(move || gate.command(command::TERMINATE, write(&l)))
        };
        let first = handover(&gate, &l);
        k.join().expect("the kernel read HANDOVER");
        user.join().expect("user");
        assert_ne!(first, command::HANDOVER);
        assert_eq!(l.command.load(Acquire), command::TERMINATE);
    });
}

#[test]
fn an_abandoned_handover_leaves_the_last_command() {
    loom::model(|| {
        let (l, gate) = running();
        let user = {
            let (l, gate) = (l.clone(), gate.clone());
            thread::spawn(move || {
                gate.command(command::PAUSE, write(&l));
                gate.command(command::TERMINATE, write(&l));
            })
        };
        // The kernel died before it read HANDOVER: the handover gives up.
        gate.hold(write(&l));
        gate.abandon(write(&l));
        user.join().expect("user");
        assert_eq!(l.command.load(Acquire), command::TERMINATE);
        assert!(!gate.is_held());
    });
}

/// A chain's later stage: follows `HANDOVER` (hands over) and `TERMINATE` (drains and
/// stops for good), whichever it reads first.
fn stage_kernel(l: &Line0) {
    loop {
        match l.command.load(Acquire) {
            command::HANDOVER => return l.state.store(state::HANDED_OVER, Release),
            command::TERMINATE => return l.state.store(state::TERMINATED, Release),
            _ => thread::yield_now(),
        }
    }
}

#[test]
fn a_later_stages_reload_never_loses_a_terminate() {
    loom::model(|| {
        let (l, _) = running();
        let k = {
            let l = l.clone();
            thread::spawn(move || stage_kernel(&l))
        };
        // The stage feeding it stopped for good: it tells this one to terminate. (A
        // store in the ABI; a swap here, the same write: loom can order a plain store
        // before a compare-and-swap that read the value it overwrote, which the memory
        // model forbids: tokio-rs/loom#282, #389.)
        let feeder = {
            let l = l.clone();
            thread::spawn(move || {
                l.command
                    .swap(command::TERMINATE, core::sync::atomic::Ordering::AcqRel);
            })
        };
        match hold_stage(&l.command) {
            Err(c) => assert_eq!(c, command::TERMINATE, "only the feeder writes"),
            Ok(()) => {
                // R2: the stage stops either way.
                let st = loop {
                    match l.state.load(Acquire) {
                        state::ACTIVE => thread::yield_now(),
                        st => break st,
                    }
                };
                release_stage(&l.command);
                if st == state::HANDED_OVER {
                    // The successor's K0 reads the word after its launch.
                    assert_ne!(l.command.load(Acquire), command::HANDOVER);
                }
            }
        }
        k.join().expect("the stage stopped");
        feeder.join().expect("feeder");
        assert_eq!(
            l.command.load(Acquire),
            command::TERMINATE,
            "the feeder's TERMINATE stays for the successor"
        );
    });
}

//! What one message costs each side of the CPU backend's loop, without the other side
//! running at the same time: the kernel loop (`Stepper`, the C loop of `ring.h` on the
//! bench's thread) answering 1024 published 64-byte echo requests, and the host's
//! `try_publish_uniform` (batches of 64) and `try_recv_batch` (up to 64, each reply
//! copied out) of them.
//!
//! `cargo bench -p gyre-cpu --bench loop_cost` prints `key value` lines, each the median
//! over the rounds, in nanoseconds per message:
//!
//! - `kernel_local_ns`: the kernel answers requests this thread published (every line in
//!   this core's caches): the loop's own work.
//! - `kernel_cross_ns`: the kernel answers requests another thread published from
//!   another core (each request's lines come from that core): the work plus the request
//!   lines' transfers. Its replies' lines are this core's.
//! - `publish_ns`, `recv_ns`: the host's side, every line local.
//! - `floor_local_ns`, `floor_cross_ns`: the same echo written by hand over the same slot
//!   layout (check the sequence, copy the payload, write the reply's header fields and
//!   its sequence), requests from this core and from core 0, measured in the same
//!   rounds: the peer the kernel's figures are read against (`kernel_*_over_floor`, the
//!   median of the per-round ratios), since absolute figures on a shared VM move between
//!   runs.
//!
//! `Stepper::step` forces the kernel's slow path (commands, heartbeat) at every batch,
//! which the running loop takes every 128 polls: a few nanoseconds a message more than
//! the loop pays. The pipelined figures are `benches/throughput.rs`'s (docs/benchmarks.md,
//! "What limits the CPU backend").

use std::sync::Arc;
use std::time::{Duration, Instant};

use gyre_core::channel::{Channel, Kind};
use gyre_core::ring::Geometry;
use gyre_core::SharedRegion;
use gyre_cpu::Stepper;

/// Requests per round: the ring's capacity.
const N: usize = 1024;
/// Requests a publish carries.
const BATCH: usize = 64;
/// Rounds measured (after `WARM_UP` rounds).
const ROUNDS: usize = 400;
const WARM_UP: usize = 5;

/// The bench's thread runs the kernel on core 1; the cross-core producer runs on core 0.
fn pin(core: usize) {
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        eprintln!("note: could not pin to core {core}; figures include migrations");
    }
}

fn per_msg(d: Duration) -> f64 {
    d.as_nanos() as f64 / N as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The slot layout by hand: a ring of `N` 128-byte slots, the sequence in the first word,
/// the payload from byte 64.
#[repr(C, align(128))]
#[derive(Clone, Copy)]
struct Slot {
    seq: u64,
    correlation_id: u64,
    enqueue_ns: u64,
    msg_type: u32,
    len: u32,
    flags: u32,
    status: u32,
    _rest: [u64; 4],
    payload: [u8; 64],
}

const EMPTY: Slot = Slot {
    seq: 0,
    correlation_id: 0,
    enqueue_ns: 0,
    msg_type: 0,
    len: 0,
    flags: 0,
    status: 0,
    _rest: [0; 4],
    payload: [0; 64],
};

/// Writes requests `lap * N ..` into `req` as a producer would (fields, payload, then
/// the sequence).
fn floor_publish(req: &mut [Slot], lap: u64) {
    for (i, s) in req.iter_mut().enumerate() {
        let idx = lap * N as u64 + i as u64;
        s.correlation_id = idx;
        s.msg_type = 1;
        s.len = 64;
        s.payload = [7; 64];
        // Volatile: the stores must happen, as a producer's would.
        // SAFETY: a valid, exclusive reference.
        unsafe { std::ptr::write_volatile(&mut s.seq, idx + 1) };
    }
}

/// The echo by hand: for each request of the lap, check its sequence, copy its payload
/// and header fields into the reply, stamp the reply.
fn floor_echo(req: &[Slot], rep: &mut [Slot], lap: u64) {
    for (i, (q, r)) in req.iter().zip(rep.iter_mut()).enumerate() {
        let idx = lap * N as u64 + i as u64;
        // SAFETY: a valid reference; volatile as a poll would be.
        let seq = unsafe { std::ptr::read_volatile(&q.seq) };
        assert_eq!(seq, idx + 1, "request {idx} not published");
        let len = q.len.min(64) as usize;
        r.payload[..len].copy_from_slice(&q.payload[..len]);
        r.correlation_id = q.correlation_id;
        r.enqueue_ns = q.enqueue_ns;
        r.msg_type = q.msg_type;
        r.len = len as u32;
        r.flags = q.flags;
        r.status = 0;
        // SAFETY: a valid, exclusive reference.
        unsafe { std::ptr::write_volatile(&mut r.seq, idx + 1) };
    }
}

/// One round's figures, in ns per message.
#[derive(Default)]
struct Figures {
    kernel: Vec<f64>,
    floor: Vec<f64>,
    ratio: Vec<f64>,
}

impl Figures {
    fn push(&mut self, kernel: f64, floor: f64) {
        self.kernel.push(kernel);
        self.floor.push(floor);
        self.ratio.push(kernel / floor);
    }

    fn print(self, name: &str) {
        println!("kernel_{name}_ns {:.1}", median(self.kernel));
        println!("floor_{name}_ns {:.1}", median(self.floor));
        println!("kernel_{name}_over_floor {:.2}", median(self.ratio));
    }
}

/// Runs `publish` on core 0 (`other_core`) or here, and hands back what it returns.
fn published_from<T: Send + 'static>(
    other_core: bool,
    publish: impl FnOnce() -> T + Send + 'static,
) -> T {
    if other_core {
        std::thread::spawn(move || {
            pin(0);
            publish()
        })
        .join()
        .expect("producer")
    } else {
        publish()
    }
}

fn main() {
    let region = Arc::new(
        SharedRegion::new_host(Geometry::new(N as u32, 128, 32).expect("geometry"), 0)
            .expect("region"),
    );
    let handler = gyre_core::kernels::echo;
    let mut kernel = Stepper::new(&region, &handler).expect("kernel start");
    let ch = Arc::new(Channel::new(region.clone(), "loop_cost"));
    let mut replies: Vec<gyre_core::Result<[u8; 64]>> = Vec::with_capacity(BATCH);
    let (mut req, mut rep) = (vec![EMPTY; N], vec![EMPTY; N]);
    pin(1);
    let (mut local, mut cross) = (Figures::default(), Figures::default());
    let (mut publish, mut recv) = (vec![], vec![]);
    // Each round measures the kernel and the floor back to back (their ratio is taken per
    // round), requests from this core and from core 0 in alternate rounds.
    for round in 0..WARM_UP + ROUNDS {
        let other_core = round % 2 == 1;
        // gyre: publish a ring's worth of requests, the kernel answers them, the host
        // takes the replies.
        let c = ch.clone();
        let published = published_from(other_core, move || {
            let t = Instant::now();
            for _ in 0..N / BATCH {
                c.try_publish_uniform(Kind::Send, 1, &[7u8; 64 * BATCH], 64)
                    .expect("room for a batch");
            }
            t.elapsed()
        });
        let t = Instant::now();
        let mut answered = 0;
        while answered < N as u64 {
            answered += kernel.step().expect("kernel running");
        }
        let answering = per_msg(t.elapsed());
        let t = Instant::now();
        let mut got = 0;
        while got < N {
            replies.clear();
            got += ch
                .try_recv_batch(BATCH, &mut replies, |v| {
                    let mut m = [0u8; 64];
                    m.copy_from_slice(v.payload);
                    Ok(m)
                })
                .expect("replies");
        }
        let received = per_msg(t.elapsed());
        std::hint::black_box(&replies);
        // The floor over its own slots.
        let lap = round as u64;
        req = published_from(other_core, move || {
            floor_publish(&mut req, lap);
            req
        });
        let t = Instant::now();
        floor_echo(&req, &mut rep, lap);
        let floor = per_msg(t.elapsed());
        std::hint::black_box(&rep);
        if round < WARM_UP {
            continue;
        }
        if other_core {
            cross.push(answering, floor);
        } else {
            local.push(answering, floor);
            publish.push(per_msg(published));
            recv.push(received);
        }
    }
    local.print("local");
    cross.print("cross");
    println!("publish_ns {:.1}", median(publish));
    println!("recv_ns {:.1}", median(recv));
}

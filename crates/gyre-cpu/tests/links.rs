//! The pipeline link of `ring.h` (L1–L4 of `docs/protocol.md` §9; L5–L6, fan-out and by id, in `tests/pipeline_fan.rs`) run by the CPU backend's
//! kernel threads, with no host-side chain view: two stages whose regions are linked,
//! a channel on the first. What the kernels must do by themselves: pass replies on and
//! back to the head (L1), stamp the next stage's message type (L2), tell the next stage
//! to terminate when they stop (L3), stop when the next stage stopped (L4), and refuse a
//! next region of another geometry at K0.

use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gyre_abi::{command, error, link, state};
use gyre_core::chain::{LinkTarget, StageLink};
use gyre_core::channel::{Channel, Kind, PublishError};
use gyre_core::doorbell::Doorbell;
use gyre_core::ring::Geometry;
use gyre_core::{Backend, Handler, IdleStrategy, KernelInstance, LaunchSpec, SharedRegion};

fn region(capacity: u32) -> Arc<SharedRegion> {
    Arc::new(SharedRegion::new_host(Geometry::new(capacity, 128, 4).unwrap(), 0).unwrap())
}

fn spec(
    name: &str,
    handler: Arc<dyn Handler>,
    bell: &Arc<Doorbell>,
    link: StageLink,
) -> LaunchSpec {
    LaunchSpec {
        name: name.into(),
        handler,
        builtin: None,
        idle: IdleStrategy::default(),
        telemetry: true,
        cuda_source: None,
        opencl_source: None,
        lane_handler: None,
        export: None,
        doorbell: Some(bell.clone()),
        reply_bell: None,
        loans: None,
        link: Some(link),
    }
}

fn state_of(r: &SharedRegion) -> (u32, u32) {
    let cb = r.control();
    (cb.state.load(Acquire), cb.error_code.load(Acquire))
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Stage 0 adds 1 (and answers message type 7 only), stage 1 doubles (type 9 only).
struct Two {
    head: Arc<SharedRegion>,
    tail: Arc<SharedRegion>,
    kernels: Vec<Box<dyn KernelInstance>>,
    ch: Channel,
    /// Kept until the kernels are joined (the join orders their threads' last use of
    /// the handlers before the handlers are freed).
    _specs: [LaunchSpec; 2],
}

fn typed(ty: u32, f: fn(u64) -> u64) -> Arc<dyn Handler> {
    Arc::new(
        move |t: u32, req: &[u8], reply: &mut [u8]| -> Result<usize, u32> {
            if t != ty {
                return Err(error::UNKNOWN_TYPE);
            }
            let x = u64::from_le_bytes(req.try_into().map_err(|_| error::HANDLER_REJECTED)?);
            reply[..8].copy_from_slice(&f(x).to_le_bytes());
            Ok(8)
        },
    )
}

fn two() -> Two {
    let (head, tail) = (region(8), region(8));
    let (b0, b1) = (Arc::new(Doorbell::new()), Arc::new(Doorbell::new()));
    let cpu = gyre_cpu::CpuBackend::new();
    let last = spec(
        "links.1",
        typed(9, |x| x * 2),
        &b1,
        StageLink {
            next: LinkTarget::Region(head.clone()),
            flags: link::TO_HEAD | link::FROM_STAGE,
            next_doorbells: Vec::new(),
            next_msg_type: 0,
        },
    );
    let first = spec(
        "links.0",
        typed(7, |x| x + 1),
        &b0,
        StageLink {
            next: LinkTarget::Region(tail.clone()),
            flags: 0,
            next_doorbells: vec![b1.clone()],
            next_msg_type: 9,
        },
    );
    let kernels = vec![
        cpu.launch(tail.clone(), &last).unwrap(),
        cpu.launch(head.clone(), &first).unwrap(),
    ];
    let ch = Channel::new(head.clone(), "links");
    ch.set_doorbell(b0);
    Two {
        head,
        tail,
        kernels,
        ch,
        _specs: [first, last],
    }
}

fn call(ch: &Channel, x: u64) -> gyre_core::Result<u64> {
    let i = ch.try_publish(Kind::Call, 7, &x.to_le_bytes()).unwrap();
    ch.wait_blocking(i, &IdleStrategy::default(), None, |r| {
        Ok(u64::from_le_bytes(r.payload.try_into().unwrap_or_default()))
    })
}

/// [`call`] from one of several callers: waits for a free slot (4 callers share 16).
fn call_when_free(ch: &Channel, x: u64) -> u64 {
    loop {
        match ch.try_publish(Kind::Call, 7, &x.to_le_bytes()) {
            Ok(i) => {
                return ch
                    .wait_blocking(i, &IdleStrategy::default(), None, |r| {
                        Ok(u64::from_le_bytes(r.payload.try_into().unwrap_or_default()))
                    })
                    .unwrap()
            }
            Err(PublishError::Full) => std::thread::yield_now(),
            Err(e) => panic!("{e:?}"),
        }
    }
}

#[test]
fn replies_go_through_both_stages_and_a_terminate_reaches_the_second() {
    let t = two();
    for x in 0..50u64 {
        assert_eq!(call(&t.ch, x).unwrap(), (x + 1) * 2);
    }
    // L3: only the first stage is told; the second follows by itself.
    t.ch.command(command::TERMINATE);
    eventually("both stages to terminate", || {
        state_of(&t.head).0 == state::TERMINATED && state_of(&t.tail).0 == state::TERMINATED
    });
    assert_eq!(state_of(&t.tail), (state::TERMINATED, error::NONE));
    for k in &t.kernels {
        k.join().unwrap();
    }
}

#[test]
fn a_stage_whose_next_stage_stopped_stops_with_stage_stopped() {
    let t = two();
    assert_eq!(call(&t.ch, 1).unwrap(), 4);
    // The second stage stops (told directly, as if it had faulted): L4 stops the first.
    t.tail.control().command.store(command::TERMINATE, Release);
    eventually("the first stage to stop", || {
        state::is_final(state_of(&t.head).0)
    });
    assert_eq!(state_of(&t.head), (state::TERMINATED, error::STAGE_STOPPED));
    for k in &t.kernels {
        k.join().unwrap();
    }
}

#[test]
fn a_next_region_of_another_geometry_faults_k0_and_tells_it_to_terminate() {
    // Stage 0 (8 slots) links to a stage of 16 slots, whose own replies go to a third
    // region of its geometry: only stage 0's link is wrong.
    let (head, tail, sink) = (region(8), region(16), region(16));
    let (b0, b1) = (Arc::new(Doorbell::new()), Arc::new(Doorbell::new()));
    let cpu = gyre_cpu::CpuBackend::new();
    // The specs outlive the joins below (see `Two::_specs`).
    let second_spec = spec(
        "links.1",
        typed(9, |x| x),
        &b1,
        StageLink {
            next: LinkTarget::Region(sink),
            flags: link::TO_HEAD | link::FROM_STAGE,
            next_doorbells: Vec::new(),
            next_msg_type: 0,
        },
    );
    let second = cpu.launch(tail.clone(), &second_spec).unwrap();
    eventually("the second stage to run", || {
        state_of(&tail).0 == state::ACTIVE
    });
    let first_spec = spec(
        "links.0",
        typed(7, |x| x),
        &b0,
        StageLink {
            next: LinkTarget::Region(tail.clone()),
            flags: 0,
            next_doorbells: vec![b1],
            next_msg_type: 9,
        },
    );
    let first = cpu.launch(head.clone(), &first_spec).unwrap();
    eventually("the first stage to fault", || {
        state::is_final(state_of(&head).0)
    });
    assert_eq!(state_of(&head), (state::FAULTED, error::BAD_GEOMETRY));
    // L3 at K0: the second stage was told to terminate, and did.
    eventually("the second stage to terminate", || {
        state::is_final(state_of(&tail).0)
    });
    assert_eq!(state_of(&tail), (state::TERMINATED, error::NONE));
    first.join().unwrap();
    second.join().unwrap();
}

/// L5 + L6 without a host chain view: a head (adds 1) fanning out round-robin to two
/// branches (double), which answer the host by id (both write the head's reply ring and
/// advance its `k2h_head` by compare-and-swap). Four host threads call at once; every
/// reply is right, every ring's published head covers what was written, and a terminate
/// of the head reaches both branches, each counting itself into the join table once.
#[test]
fn a_fan_out_answering_the_host_by_id_from_two_branches() {
    use gyre_core::chain::{LinkTables, RouteMode};
    use gyre_core::region::HostMemory;
    let (head, b1, b2) = (region(16), region(16), region(16));
    let bells: Vec<Arc<Doorbell>> = (0..3).map(|_| Arc::new(Doorbell::new())).collect();
    let tables = Arc::new(
        LinkTables::new(
            Box::new(HostMemory::zeroed(LinkTables::bytes_for(2)).unwrap()),
            2,
        )
        .unwrap(),
    );
    let addr = |r: &SharedRegion| r.base().as_ptr() as u64;
    tables
        .set_route(0, RouteMode::RoundRobin, &[(addr(&b1), 9), (addr(&b2), 9)])
        .unwrap();
    tables.set_join(1, addr(&head), 2).unwrap();
    let table = |entry: usize, regions: Vec<Arc<SharedRegion>>| LinkTarget::Table {
        tables: tables.clone(),
        entry,
        regions,
    };
    let cpu = gyre_cpu::CpuBackend::new();
    let branch = |k: usize| {
        spec(
            &format!("fan.{k}"),
            typed(9, |x| x * 2),
            &bells[k],
            StageLink {
                next: table(1, vec![head.clone()]),
                flags: link::BY_ID | link::TO_HEAD | link::FROM_STAGE | link::BRANCH,
                next_doorbells: Vec::new(),
                next_msg_type: 0,
            },
        )
    };
    let specs = [
        spec(
            "fan.0",
            typed(7, |x| x + 1),
            &bells[0],
            StageLink {
                next: table(0, vec![b1.clone(), b2.clone()]),
                flags: link::FAN_OUT | link::OWN_ID,
                next_doorbells: vec![bells[1].clone(), bells[2].clone()],
                next_msg_type: 0,
            },
        ),
        branch(1),
        branch(2),
    ];
    let kernels = vec![
        cpu.launch(b2.clone(), &specs[2]).unwrap(),
        cpu.launch(b1.clone(), &specs[1]).unwrap(),
        cpu.launch(head.clone(), &specs[0]).unwrap(),
    ];
    let ch = Arc::new(Channel::new(head.clone(), "fan"));
    ch.set_doorbell(bells[0].clone());
    // Joined threads, not scoped ones: ThreadSanitizer sees pthread_join's ordering, not
    // the (uninstrumented) wait of std's scope.
    let callers: Vec<_> = (0..4u64)
        .map(|t| {
            let ch = ch.clone();
            std::thread::spawn(move || {
                for i in 0..300u64 {
                    let x = (t << 20) | i;
                    assert_eq!(call_when_free(&ch, x), (x + 1) * 2);
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
    // The counters are published after the replies (a reply is taken by its sequence,
    // the heads move at each producer's K7): read them once every stage stopped.
    ch.command(command::TERMINATE);
    eventually("every stage to terminate", || {
        [&head, &b1, &b2]
            .iter()
            .all(|r| state_of(r) == (state::TERMINATED, error::NONE))
    });
    assert_eq!(tables.routed(0).unwrap(), [600, 600]);
    for b in [&b1, &b2] {
        let cb = b.control();
        assert_eq!(
            (cb.h2k_head.load(Acquire), cb.h2k_tail.load(Acquire)),
            (600, 600)
        );
    }
    assert_eq!(head.control().k2h_head.load(Acquire), 1200);
    assert_eq!(tables.join_stopped(1), Some(2));
    for k in &kernels {
        k.join().unwrap();
    }
}

//! The copy strategies' budget: what a push and a pull may cost (docs/memory-visibility.md,
//! "How each strategy moves bytes"). Under zero copy nothing is moved and the case only
//! checks the replies.

use gyre::{Backend, KernelSpec};

use super::common::{rt, Target};

/// The copy budget (`docs/memory-visibility.md`, "How each strategy moves bytes"): under a copy
/// strategy a push and a pull each wait for their copies once (a pull that finds more
/// than a batch of replies ready waits once more), and a push issues at most its request
/// slots' ranges (two at the wrap) and the doorbell line. Zero copy moves nothing.
///
/// The CPU backend's emulated engine does not read ahead (`CopyEngine::reads_ahead`: its
/// reads would race with the kernel thread's stores), nor does OpenCL on a CPU device
/// (PoCL's copies are a driver thread's `memcpy`), so there a pull that finds replies
/// waits for the kernel's line, then for the slots: twice.
pub fn copies_wait_once_per_push_and_pull(b: Target) {
    let reads_ahead = match b.backend {
        Backend::Cpu => false,
        #[cfg(feature = "opencl")]
        Backend::OpenCl { platform, device } => gyre_opencl::probe::select(platform, device)
            .is_ok_and(|(_, d)| d.kind != gyre_opencl::DeviceKind::Cpu),
        _ => true,
    };
    let k = rt(b)
        .launch(KernelSpec::<u32, u32>::echo().capacity(64).batch_size(16))
        .unwrap();
    for i in 0..500u32 {
        assert_eq!(k.call_blocking(i).unwrap(), i);
    }
    let msgs: Vec<u32> = (0..48).collect();
    for _ in 0..20 {
        k.try_send_batch(&msgs).unwrap();
        for m in &msgs {
            assert_eq!(k.recv_blocking().unwrap(), *m);
        }
    }
    let Some(s) = k.transfer_stats() else {
        k.shutdown_blocking().unwrap();
        return;
    };
    // Pulls that found more than one batch ready may wait twice; a batch is 16.
    let big_pulls = s.slots_up.div_ceil(16);
    let second_waits = if reads_ahead {
        big_pulls
    } else {
        s.pulls.min(s.slots_up)
    };
    assert!(
        s.syncs <= s.pushes + s.pulls + second_waits,
        "waits {} for {} pushes and {} pulls: {s:?}",
        s.syncs,
        s.pushes,
        s.pulls
    );
    assert!(
        s.h2d_copies <= 3 * s.pushes,
        "at most two slot ranges and the doorbell per push: {s:?}"
    );
    // Each pull copies the kernel's line and at most a window of slots (two ranges at the
    // wrap) and, with more ready than a batch, the rest (two more), plus telemetry reads.
    assert!(
        s.d2h_copies <= 3 * s.pulls + 2 * big_pulls + 3 * s.telemetry_reads,
        "{s:?}"
    );
    k.shutdown_blocking().unwrap();
}

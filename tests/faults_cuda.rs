//! The fault-injection suite on the CUDA backend, where a CUDA driver and device are
//! present (else every case prints `SKIP`, or fails with `GYRE_REQUIRE_CUDA=1`), one case
//! at a time (they share the process's CUDA context). Cases built on Rust closure
//! handlers and the host-killed case skip themselves with a printed reason, as on OpenCL.
//!
//! Beyond the shared suite, the fault only a device has: a handler that faults in device
//! code, killing the kernel without a final state. Its callers fail with `KernelLost`
//! naming the CUDA error, shutdown reports it, and a later launch in the same process
//! works (the poisoned context is reset once the faulted kernel is dropped).

#![cfg(feature = "cuda")]

mod faults;
#[path = "support/cuda.rs"]
mod support;

use std::time::Duration;

use gyre::{Backend, Error, KernelSpec, Runtime};

faults_suite!(
    {
        if !support::available(module_path!()) {
            return;
        }
        Backend::Cuda { device: 0 }
    },
    guard = support::serial()
);

/// A handler that writes through a null pointer: CUDA_ERROR_ILLEGAL_ADDRESS, a sticky
/// error that kills the kernel and poisons the context.
const FAULTING_HANDLER: &str = r#"
#include "gyre/abi.h"
__device__ unsigned int gyre_handler(unsigned int msg_type, const unsigned char *req,
                                     unsigned int req_len, unsigned char *reply,
                                     unsigned int reply_cap, unsigned int *reply_len,
                                     unsigned int lane, unsigned int lanes) {
    (void)msg_type; (void)req; (void)reply; (void)reply_cap; (void)lanes;
    if (lane == 0u && req_len == 8u && req[0] == 0xFFu) {
        *(volatile unsigned int *)16 = 1u;
    }
    for (unsigned int i = lane; i < req_len; i += lanes) reply[i] = req[i];
    *reply_len = req_len;
    return GYRE_ERR_NONE;
}
"#;

#[test]
fn device_fault_fails_callers_then_a_new_launch_works() {
    // A sticky error may leave the process unable to use CUDA: a process of its own.
    if !gyre_cuda::testing::isolated("device_fault_fails_callers_then_a_new_launch_works") {
        return;
    }
    let _one = support::serial();
    if !support::available("device_fault_fails_callers_then_a_new_launch_works") {
        return;
    }
    faults::guarded("device_fault", || {
        let rt = Runtime::builder()
            .backend(Backend::Cuda { device: 0 })
            .build()
            .expect("CUDA runtime");
        let k = rt
            .launch(
                KernelSpec::<u64, u64>::echo()
                    .cuda_handler("faulting.cu", FAULTING_HANDLER)
                    .capacity(64),
            )
            .expect("launch");
        // Healthy first: the handler faults only on the poisoned request.
        assert_eq!(k.call_blocking(7).expect("a normal request"), 7);
        // In flight together: the poisoned request and some after it.
        let mut sends = Vec::new();
        for v in [1u64, u64::MAX, 2, 3] {
            sends.push(k.send_blocking(v));
        }
        let e = k.call_blocking(4).expect_err("the kernel is dead");
        match &e {
            Error::KernelLost { code, cause, .. } => {
                assert_eq!(*code, gyre_abi::error::KERNEL_GONE);
                assert!(cause.contains("CUDA_ERROR"), "{cause}");
            }
            other => panic!("expected KernelLost, got {other}"),
        }
        // Every accepted send ends in a reply or a typed error; none hangs.
        for _ in sends.iter().filter(|s| s.is_ok()) {
            match k.recv_blocking() {
                Ok(_) | Err(Error::KernelLost { .. }) => {}
                Err(other) => panic!("unexpected {other}"),
            }
        }
        let shut = k.shutdown_blocking();
        assert!(matches!(shut, Err(Error::KernelLost { .. })), "{shut:?}");
        // While the faulted kernel's handle lives, its memory holds the broken context.
        drop(k);
        // Same process, same runtime: the context is reset, and either a new kernel
        // works, or the driver keeps the sticky error (NVIDIA documents that it needs a
        // new process) and every launch says so, typed. The GPU kit reports which.
        let k2 = match rt.launch(KernelSpec::<u64, u64>::echo().capacity(64)) {
            Ok(k2) => k2,
            Err(e) => {
                assert!(e.to_string().contains("restart the process"), "{e}");
                eprintln!("after the fault: the driver needs a new process: {e}");
                return;
            }
        };
        for v in 0..1000u64 {
            assert_eq!(k2.call_blocking(v).expect("echo after reset"), v);
        }
        k2.shutdown_blocking().expect("clean shutdown");
        // And a fresh runtime too.
        let rt2 = Runtime::builder()
            .backend(Backend::Cuda { device: 0 })
            .build()
            .expect("runtime");
        let k3 = rt2.launch(KernelSpec::<u64, u64>::echo()).expect("launch");
        assert_eq!(
            k3.call_timeout(9, Duration::from_secs(10)).expect("echo"),
            9
        );
        eprintln!("after the fault: context reset, new kernels work");
        k3.shutdown_blocking().expect("clean shutdown");
    });
}

//! `KernelSpec::telemetry(false)`: the kernel still answers, and its telemetry line only
//! carries state changes (no message counters).

use gyre::{Backend, KernelSpec, KernelState, Runtime};

#[test]
fn a_kernel_without_telemetry_answers_and_counts_nothing() {
    let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
    let k = rt
        .launch(KernelSpec::from_fn("double", |x: u32| x * 2).telemetry(false))
        .unwrap();
    for i in 0..1000u32 {
        assert_eq!(k.call_blocking(i).unwrap(), i * 2);
    }
    let t = k.telemetry().unwrap();
    assert_eq!(t.state, gyre_abi::state::ACTIVE, "the start is written");
    assert_eq!((t.messages_in, t.messages_out), (0, 0));
    assert_eq!((t.busy_polls, t.handler_ns_total), (0, 0));
    assert_eq!(k.state(), KernelState::Active);

    k.shutdown_blocking().unwrap();
    let t = k.telemetry().unwrap();
    assert_eq!(t.state, gyre_abi::state::TERMINATED, "the stop is written");
    assert_eq!((t.messages_in, t.messages_out), (0, 0));
}

#[test]
fn telemetry_is_on_by_default() {
    let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
    let k = rt
        .launch(KernelSpec::from_fn("double", |x: u32| x * 2))
        .unwrap();
    for i in 0..100u32 {
        assert_eq!(k.call_blocking(i).unwrap(), i * 2);
    }
    k.shutdown_blocking().unwrap();
    // The final write (on the stop) carries every answered call.
    assert_eq!(k.telemetry().unwrap().messages_out, 100);
}

//! The conformance suite on the CPU backend, once under each transfer strategy: zero copy
//! (`unified`), and the three copy strategies, whose "device" rings are a separate
//! allocation reached only by the emulated copy engine (`gyre_core::bridge`); and once
//! more under zero copy with checked rings (`checked`: the cost model, read in waves as a
//! PCIe GPU reads them, `docs/protocol.md` "Checked slots").

mod conformance;

mod unified {
    use crate::conformance::Target;
    use gyre::{Backend, TransferStrategy};
    crate::conformance_suite!(Target::new(Backend::Cpu, TransferStrategy::Unified));
}

mod sync {
    use crate::conformance::Target;
    use gyre::{Backend, TransferStrategy};
    crate::conformance_suite!(Target::new(Backend::Cpu, TransferStrategy::Sync));
}

mod async_copy {
    use crate::conformance::Target;
    use gyre::{Backend, TransferStrategy};
    crate::conformance_suite!(Target::new(Backend::Cpu, TransferStrategy::Async));
}

mod dma_polling {
    use crate::conformance::Target;
    use gyre::{Backend, TransferStrategy};
    crate::conformance_suite!(Target::new(
        Backend::Cpu,
        TransferStrategy::DmaPolling {
            poll_interval: gyre_core::strategy::DEFAULT_POLL_INTERVAL
        }
    ));
}

mod checked {
    use crate::conformance::Target;
    crate::conformance_suite!(Target::checked(std::time::Duration::ZERO));
}

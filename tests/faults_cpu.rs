//! The fault-injection suite on the CPU backend.

mod faults;

faults_suite!(gyre::Backend::Cpu);

/// The suite once more on checked rings: the CPU backend under its cost model (zero
/// copy read in waves, as a PCIe GPU reads it; `docs/protocol.md` "Checked slots").
mod checked {
    use crate::faults;
    crate::faults_suite!(faults::Target {
        backend: gyre::Backend::Cpu,
        cost_model: Some(std::time::Duration::ZERO),
    });
}

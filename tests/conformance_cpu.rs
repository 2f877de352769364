//! The conformance suite on the CPU backend.

mod conformance;

conformance_suite!(gyre::Backend::Cpu);

//! The fault-injection suite on the CPU backend.

mod faults;

faults_suite!(gyre::Backend::Cpu);

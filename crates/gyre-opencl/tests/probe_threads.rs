//! Probing OpenCL from several threads at once, as the first OpenCL use of the process:
//! PoCL 3.1 crashes (SIGSEGV) when two threads initialise it together, so every probe
//! goes through one lock (`probe::serialized`). This binary's only test is that race; a
//! regression kills the binary. Without OpenCL every probe returns the same typed error.

#[test]
fn concurrent_first_probes_agree() {
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| match gyre_opencl::probe() {
                Ok(p) => format!("{} platform(s)", p.len()),
                Err(e) => e.to_string(),
            })
        })
        .collect();
    let results: Vec<String> = threads
        .into_iter()
        .map(|t| t.join().expect("probe thread"))
        .collect();
    assert!(results.windows(2).all(|w| w[0] == w[1]), "{results:?}");
}

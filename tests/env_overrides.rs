//! The builder wins over the `GYRE_*` environment: a variable whose setting the builder
//! decides is not read, so an invalid value there cannot fail `build()`. Its own test
//! binary, with one test: it sets process environment variables.

use gyre::{
    memory::{MemoryVisibility, Source},
    Backend, Error, Runtime, TransferStrategy,
};

#[test]
fn invalid_environment_fails_only_what_the_builder_leaves_open() {
    std::env::set_var("GYRE_TRANSFER_STRATEGY", "teleport");
    std::env::set_var("GYRE_POLL_INTERVAL_US", "soon");
    // The builder sets the strategy: neither variable is read.
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .transfer_strategy(TransferStrategy::Sync)
        .build()
        .expect("the builder's strategy wins over an invalid environment");
    assert_eq!(rt.memory_plan().strategy, TransferStrategy::Sync);
    assert_eq!(rt.memory_plan().source, Source::Builder);
    // Left open, the invalid variable is reported, by name.
    match Runtime::builder().backend(Backend::Cpu).build() {
        Err(Error::InvalidArgument { name, value, .. }) => {
            assert_eq!(
                (name, value.as_str()),
                ("GYRE_TRANSFER_STRATEGY", "teleport")
            );
        }
        other => panic!("{other:?}"),
    }
    std::env::remove_var("GYRE_TRANSFER_STRATEGY");
    std::env::remove_var("GYRE_POLL_INTERVAL_US");
    // The same for the visibility.
    std::env::set_var("GYRE_MEMORY_VISIBILITY", "everywhere");
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .memory_visibility(MemoryVisibility::ExplicitDma)
        .build()
        .expect("the builder's visibility wins");
    assert_eq!(rt.memory_plan().visibility, MemoryVisibility::ExplicitDma);
    assert!(Runtime::builder().backend(Backend::Cpu).build().is_err());
    std::env::remove_var("GYRE_MEMORY_VISIBILITY");
}

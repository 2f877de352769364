//! What `#[gyre::handler]` refuses: each file of `tests/ui/` is outside the handler subset
//! (`docs/handlers.md`) and must fail to compile with the error in its `.stderr` file,
//! pointing at the offending span and naming what is allowed. Regenerate the expected
//! output after a deliberate change with `TRYBUILD=overwrite cargo test --test
//! handler_subset`, and read the diff.

#[test]
fn outside_the_subset_is_a_compile_error() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}

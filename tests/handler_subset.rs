//! What must not compile: each file of `tests/ui/` is outside the handler subset of
//! `#[gyre::handler]` (`docs/handlers.md`), or a misuse of the API the types forbid
//! (`loan_spec_types.rs`: a loan kernel's spec and a plain one launched as each other),
//! and must fail to compile with the error in its `.stderr` file, pointing at the
//! offending span and naming what is allowed. Regenerate the expected
//! output after a deliberate change with `TRYBUILD=overwrite cargo test --test
//! handler_subset`, and read the diff.

#[test]
fn outside_the_subset_is_a_compile_error() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}

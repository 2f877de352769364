//! Which optional backends this build includes (the `cuda` and `opencl` cargo features).

/// Why a backend whose cargo feature is off is unavailable.
pub(crate) fn not_built(feature: &str) -> String {
    format!("not in this build: gyre was built without the `{feature}` feature")
}

#[gyre::handler_fn]
fn half(x: f32) -> f32 {
    x * 0.5
}
#[gyre::handler]
fn h(x: f32) -> f32 {
    half(2.0) + x
}
fn main() {}

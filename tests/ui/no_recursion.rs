#[gyre::handler_fn]
fn f(x: u32) -> u32 {
    if x == 0u32 { 0u32 } else { f(x - 1) }
}
fn main() {}

#[gyre::handler]
fn h(x: u32, y: u32) -> u32 {
    x + y
}
fn main() {}

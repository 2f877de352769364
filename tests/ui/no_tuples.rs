#[gyre::handler]
fn h(x: (u32, u32)) -> u32 {
    x.0
}
fn main() {}

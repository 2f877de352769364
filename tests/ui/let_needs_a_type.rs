#[gyre::handler]
fn h(x: u32) -> u32 {
    let k = 5;
    x + k
}
fn main() {}

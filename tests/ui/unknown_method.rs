#[gyre::handler]
fn h(x: u32) -> u32 {
    x.count_ones()
}
fn main() {}

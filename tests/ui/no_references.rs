#[gyre::handler]
fn h(x: [u32; 4]) -> u32 {
    let r = &x;
    r[0]
}
fn main() {}

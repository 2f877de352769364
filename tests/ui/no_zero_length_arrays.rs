#[gyre::handler]
fn h(x: u32) -> u32 {
    let a: [u32; 0] = [];
    let mut n: u32 = x;
    for v in a {
        n = n + v;
    }
    n
}
fn main() {}

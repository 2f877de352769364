#[gyre::handler]
fn h(x: u32) -> u32 {
    println!("{x}");
    x
}
fn main() {}

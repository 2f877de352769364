fn plain(x: u32) -> u32 {
    x
}
#[gyre::handler]
fn h(x: u32) -> u32 {
    plain(x)
}
fn main() {}

#[gyre::handler]
fn h(x: u32) -> u32 {
    match x {
        n if n > 3 => 1,
        _ => 0,
    }
}
fn main() {}

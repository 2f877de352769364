#[gyre::handler(lanes)]
fn h(x: u32, lane: gyre::portable::Lane) -> u32 {
    x + lane.id()
}
fn main() {}

#[gyre::handler(lanes)]
fn h(x: u64, lane: gyre::portable::Lane) -> u64 {
    lane.sum(x)
}
fn main() {}

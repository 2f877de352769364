#[gyre::handler(lanes)]
fn h(x: u32, lane: gyre::portable::Lane) -> u32 {
    let y: u32 = lane.sum(x);
    lane.sum(y)
}
fn main() {}

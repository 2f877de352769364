#[gyre::handler(lanes)]
fn h(x: u32, lane: gyre::portable::Lane) -> u32 {
    let lane: u32 = lane.id();
    lane.max(x)
}
fn main() {}

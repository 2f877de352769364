// A lane-parallel loan handler has no block reduction: lane 0's return is the reply's length.
#[gyre::handler(loan)]
fn wrong(b: gyre::portable::Bytes, lane: gyre::portable::Lane) -> u32 {
    lane.sum(b.len())
}

fn main() {}

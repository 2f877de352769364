// A loan handler takes its block and returns the reply's length.
#[gyre::handler(loan)]
fn wrong(b: gyre::portable::Bytes) -> u64 {
    b.len() as u64
}

fn main() {}

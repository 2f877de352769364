// A loan handler's `Bytes` is not a value: only its methods are.
#[gyre::handler(loan)]
fn copy(b: gyre::portable::Bytes) -> u32 {
    let c = b;
    c.len()
}

fn main() {}

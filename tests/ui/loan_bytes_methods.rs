// A loan handler's `Bytes` offers len(), capacity(), get(i) and set(i, v) only.
#[gyre::handler(loan)]
fn fill(b: gyre::portable::Bytes) -> u32 {
    b.fill(0);
    b.len()
}

fn main() {}

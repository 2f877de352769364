// `set` gives no value: a statement only.
#[gyre::handler(loan)]
fn same(b: gyre::portable::Bytes) -> u32 {
    let x: bool = b.set(0, 2) == b.set(0, 3);
    if x { 1 } else { 0 }
}

fn main() {}

#[derive(Clone, Copy, gyre::DeviceType)]
struct P {
    x: u32,
}
fn main() {}

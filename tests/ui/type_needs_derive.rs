#[derive(Clone, Copy, gyre::Pod, gyre::Zeroable)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
struct P {
    x: u32,
}
#[gyre::handler]
fn h(p: P) -> u32 {
    p.x
}
fn main() {}

#[gyre::handler]
fn h<T: Copy>(x: T) -> T {
    x
}
fn main() {}

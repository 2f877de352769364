//! The Rust meaning of the operators a `#[gyre::handler]` rewrites (see `docs/handlers.md`):
//! the same in every build profile, and the same as `gyre/portable.h` on the device.
//! Integers wrap; floats are IEEE; shift amounts are masked to the width.
//!
//! These are called by the code the macros generate; they are public for that reason.

/// Addition, subtraction, multiplication and negation as handlers define them.
pub trait Arith: Copy {
    /// `a + b`.
    fn add(self, b: Self) -> Self;
    /// `a - b`.
    fn sub(self, b: Self) -> Self;
    /// `a * b`.
    fn mul(self, b: Self) -> Self;
    /// `-a`.
    fn neg(self) -> Self;
    /// `a.abs()`.
    fn abs(self) -> Self;
}

/// Shifts as handlers define them.
pub trait Shift: Copy {
    /// `a << s`, `s` masked to the width.
    fn shl(self, s: u32) -> Self;
    /// `a >> s`, `s` masked to the width (arithmetic on signed types).
    fn shr(self, s: u32) -> Self;
}

/// A shift amount of any integer type, as `u32` (as `x as u32`: the low bits).
pub trait ShiftAmount: Copy {
    /// The amount.
    fn amount(self) -> u32;
}

macro_rules! ints {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn add(self, b: Self) -> Self { self.wrapping_add(b) }
            #[inline(always)]
            fn sub(self, b: Self) -> Self { self.wrapping_sub(b) }
            #[inline(always)]
            fn mul(self, b: Self) -> Self { self.wrapping_mul(b) }
            #[inline(always)]
            fn neg(self) -> Self { (0 as $t).wrapping_sub(self) }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn abs(self) -> Self { if self < 0 as $t { (0 as $t).wrapping_sub(self) } else { self } }
        }
        impl Shift for $t {
            #[inline(always)]
            fn shl(self, s: u32) -> Self { self.wrapping_shl(s) }
            #[inline(always)]
            fn shr(self, s: u32) -> Self { self.wrapping_shr(s) }
        }
        impl ShiftAmount for $t {
            #[inline(always)]
            fn amount(self) -> u32 { self as u32 }
        }
    )*};
}
ints!(u8, u16, u32, u64, usize, i8, i16, i32, i64);

macro_rules! floats {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn add(self, b: Self) -> Self { self + b }
            #[inline(always)]
            fn sub(self, b: Self) -> Self { self - b }
            #[inline(always)]
            fn mul(self, b: Self) -> Self { self * b }
            #[inline(always)]
            fn neg(self) -> Self { -self }
            #[inline(always)]
            fn abs(self) -> Self { <$t>::abs(self) }
        }
    )*};
}
floats!(f32, f64);

/// `a + b`.
#[inline(always)]
pub fn add<T: Arith>(a: T, b: T) -> T {
    a.add(b)
}
/// `a - b`.
#[inline(always)]
pub fn sub<T: Arith>(a: T, b: T) -> T {
    a.sub(b)
}
/// `a * b`.
#[inline(always)]
pub fn mul<T: Arith>(a: T, b: T) -> T {
    a.mul(b)
}
/// `-a`.
#[inline(always)]
pub fn neg<T: Arith>(a: T) -> T {
    a.neg()
}
/// `a.abs()`: wrapping on integers (`i32::MIN.abs()` is `i32::MIN`).
#[inline(always)]
pub fn abs<T: Arith>(a: T) -> T {
    a.abs()
}
/// `a << s`.
#[inline(always)]
pub fn shl<T: Shift, S: ShiftAmount>(a: T, s: S) -> T {
    a.shl(s.amount())
}
/// `a >> s`.
#[inline(always)]
pub fn shr<T: Shift, S: ShiftAmount>(a: T, s: S) -> T {
    a.shr(s.amount())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_wrap_and_shifts_mask() {
        assert_eq!(add(250u8, 10), 4);
        assert_eq!(sub(0u32, 1), u32::MAX);
        assert_eq!(mul(i32::MAX, 2), -2);
        assert_eq!(neg(i8::MIN), i8::MIN);
        assert_eq!(abs(i64::MIN), i64::MIN);
        assert_eq!(abs(-3i16), 3);
        assert_eq!(shl(1u8, 9), 2);
        assert_eq!(shr(-16i32, 2u8), -4);
        assert_eq!(shr(0x80u8, 7i64), 1);
        assert_eq!(add(0.1f32, 0.2), 0.1f32 + 0.2);
        assert_eq!(abs(-0.0f64).to_bits(), 0);
    }
}

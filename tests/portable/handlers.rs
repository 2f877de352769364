//! The handlers of the differential suite (`tests/portable_handlers.rs`), written once in
//! Rust with `#[gyre::handler]`: every scalar type's arithmetic, casts, loops, `match`,
//! structs, arrays, helpers, math functions, runtime panics, and the three built-ins
//! re-expressed.

#![allow(clippy::all)]

use gyre::{portable::Lane, DeviceType, Pod, Zeroable};

// --- integer arithmetic, one handler per type ---------------------------------------------

macro_rules! int_arith {
    ($name:ident, $t:ident) => {
        /// Every integer operator, wrapping, with shifts masked and a divisor made
        /// non-zero (and never `MIN / -1`).
        #[gyre::handler]
        pub fn $name(x: [$t; 2]) -> [$t; 16] {
            let a: $t = x[0];
            let b: $t = x[1];
            let m1: $t = (0 as $t).wrapping_sub(1);
            let mut d: $t = b;
            if d == 0 {
                d = 1;
            }
            if a == $t::MIN && d == m1 {
                d = 2;
            }
            let r: [$t; 16] = [
                a + b,
                a - b,
                a * b,
                a / d,
                a % d,
                a << (b as u32),
                a >> (b as u32),
                a & b,
                a | b,
                a ^ b,
                !a,
                a.wrapping_neg(),
                a.min(b),
                a.max(b),
                if a < b { a } else { b + 1 },
                ((a as i64) * 3 + (b as i64)) as $t,
            ];
            r
        }
    };
}
int_arith!(arith_u8, u8);
int_arith!(arith_u16, u16);
int_arith!(arith_u32, u32);
int_arith!(arith_u64, u64);
int_arith!(arith_i8, i8);
int_arith!(arith_i16, i16);
int_arith!(arith_i32, i32);
int_arith!(arith_i64, i64);

/// Signed-only operators: negation, `abs` (wrapping at MIN), arithmetic `>>`, compound
/// assignment.
#[gyre::handler]
pub fn signed_ops(x: [i32; 2]) -> [i32; 6] {
    let a: i32 = x[0];
    let b: i32 = x[1];
    let mut acc: i32 = a;
    acc += b;
    acc *= 3;
    acc -= -7;
    acc <<= 2;
    acc >>= 1;
    let r: [i32; 6] = [-a, a.abs(), a >> 5, acc, i32::MAX + b, -(b - a)];
    r
}

// --- floats --------------------------------------------------------------------------------

macro_rules! float_arith {
    ($name:ident, $t:ident) => {
        /// IEEE arithmetic and the exactly rounded functions.
        #[gyre::handler]
        pub fn $name(x: [$t; 3]) -> [$t; 16] {
            let a: $t = x[0];
            let b: $t = x[1];
            let c: $t = x[2];
            let r: [$t; 16] = [
                a + b,
                a - b,
                a * b,
                a / b,
                a % b,
                -a,
                a.mul_add(b, c),
                a * b + c,
                a.sqrt(),
                a.abs(),
                a.floor(),
                a.ceil(),
                a.trunc(),
                a.round(),
                a.min(b),
                (a + 0.1) * 2.5,
            ];
            r
        }
    };
}
float_arith!(arith_f32, f32);
float_arith!(arith_f64, f64);

macro_rules! float_math {
    ($name:ident, $t:ident) => {
        /// The transcendental functions: within the bound of docs/handlers.md.
        #[gyre::handler]
        pub fn $name(x: [$t; 2]) -> [$t; 10] {
            let a: $t = x[0];
            let b: $t = x[1];
            let r: [$t; 10] = [
                a.exp(),
                a.exp2(),
                b.ln(),
                b.log2(),
                b.log10(),
                a.sin(),
                a.cos(),
                a.tan(),
                a.tanh(),
                b.powf(a),
            ];
            r
        }
    };
}
float_math!(math_f32, f32);
float_math!(math_f64, f64);

// --- casts ---------------------------------------------------------------------------------

/// One value in every integer type (no padding, so it is `Pod`).
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, DeviceType)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Ints {
    pub u64_: u64,
    pub i64_: i64,
    pub u32_: u32,
    pub i32_: i32,
    pub u16_: u16,
    pub i16_: i16,
    pub u8_: u8,
    pub i8_: i8,
    pub pad: [u8; 2],
}

macro_rules! to_ints {
    ($name:ident, $t:ident) => {
        /// `as` to every integer type: saturating from floats (NaN to 0), wrapping from
        /// integers.
        #[gyre::handler]
        pub fn $name(x: $t) -> Ints {
            Ints {
                u64_: x as u64,
                i64_: x as i64,
                u32_: x as u32,
                i32_: x as i32,
                u16_: x as u16,
                i16_: x as i16,
                u8_: x as u8,
                i8_: x as i8,
                pad: [0u8; 2],
            }
        }
    };
}
to_ints!(f32_to_ints, f32);
to_ints!(f64_to_ints, f64);
to_ints!(i64_to_ints, i64);

/// Floats from integers and from each other (round to nearest).
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, DeviceType)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Floats {
    pub from_u64: f64,
    pub from_i64: f64,
    pub f64_from_f32: f64,
    pub f32_from_u64: f32,
    pub f32_from_i64: f32,
    pub f32_from_f64: f32,
    pub f32_from_u32: f32,
}

/// Integer and float conversions to floats.
#[gyre::handler]
pub fn to_floats(x: [u64; 2]) -> Floats {
    let s: i64 = x[1] as i64;
    let f: f64 = (x[0] as f64) / 3.0;
    Floats {
        from_u64: x[0] as f64,
        from_i64: s as f64,
        f64_from_f32: ((x[1] as u32) as f32) as f64,
        f32_from_u64: x[0] as f32,
        f32_from_i64: s as f32,
        f32_from_f64: f as f32,
        f32_from_u32: (x[0] as u32) as f32,
    }
}

// --- control flow --------------------------------------------------------------------------

/// `for` over ranges (exclusive, inclusive up to the type's MAX), `continue`, `while`,
/// `loop` with `break`.
#[gyre::handler]
pub fn loops(x: [u32; 2]) -> [u32; 5] {
    let n: u32 = x[0] % 100;
    let mut s: u32 = 0;
    for i in 0..n {
        if i % 3 == 0 {
            continue;
        }
        s += i * x[1];
    }
    let mut c: u32 = 0;
    for b in 250u8..=255 {
        c += b as u32;
    }
    let mut w: u32 = x[1] % 1000 + 1;
    let mut steps: u32 = 0;
    while w != 1 && steps < 300 {
        if w % 2 == 0 {
            w /= 2;
        } else {
            w = 3 * w + 1;
        }
        steps += 1;
    }
    let mut k: u32 = 0;
    loop {
        k += 7;
        if k > n {
            break;
        }
    }
    let mut down: u32 = 0;
    for j in (n / 2)..=n {
        down = down * 31 + j;
    }
    [s, c, steps, k, down]
}

/// `match` on integers: literals, negative literals, ranges, or-patterns, a binding, and
/// `match` as a value (annotated, and not: its arms give it the type of `x`).
#[gyre::handler]
pub fn classify(x: i32) -> [i32; 3] {
    let kind: i32 = match x {
        0 => 100,
        -1 | 1 => 101,
        2..=9 => 102,
        -9..=-2 => 103,
        i32::MIN..=-10 => 104,
        big => big % 1000,
    };
    let mut bucket: i32 = 0;
    match x % 4 {
        0 => bucket = 10,
        1 | -1 => {
            bucket = 11;
        }
        _ => {}
    }
    let third = match x % 4 {
        0 => x / 3,
        1 | -1 => 7,
        _ => x.wrapping_mul(2),
    };
    [kind, bucket, third]
}

// --- structs, arrays, helpers ----------------------------------------------------------------

/// A particle with a nested array field.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, DeviceType)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Particle {
    pub pos: [f32; 3],
    pub vel: [f32; 3],
    pub mass: f32,
    pub steps: u32,
}

/// `a + (b - a) * t`.
#[gyre::handler_fn]
pub fn lerp(a: f32, b: f32, t: f32) -> f32 {
    a + (b - a) * t
}

/// Clamped to `[0, 1]`, through another helper.
#[gyre::handler_fn]
pub fn clamp01(x: f32) -> f32 {
    let lo: f32 = lerp(x, 0.0f32, 0.0f32).max(0.0);
    lo.min(1.0)
}

/// Struct literals, field and index assignment, `for` over an array, helpers calling
/// helpers.
#[gyre::handler]
pub fn step(p: Particle) -> Particle {
    let mut q: Particle = p;
    let dt: f32 = 0.01;
    for i in 0..3usize {
        q.pos[i] = q.pos[i] + q.vel[i] * dt;
        q.vel[i] = lerp(q.vel[i], 0.0f32, clamp01(p.mass));
    }
    let mut speed2: f32 = 0.0;
    for v in q.vel {
        speed2 += v * v;
    }
    q.mass = speed2.sqrt();
    q.steps = p.steps + 1;
    q
}

/// A dot product in index order (no FMA: identical on every backend).
#[gyre::handler]
pub fn dot(x: [f32; 16]) -> f32 {
    let mut s: f32 = 0.0;
    for i in 0..8usize {
        s += x[i] * x[i + 8];
    }
    s
}

/// Swaps two fields through a struct literal that reads the old value.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, DeviceType)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Pair {
    pub a: u64,
    pub b: u64,
}

/// `p = Pair { a: p.b, b: p.a }` evaluates the whole literal first, as Rust does.
#[gyre::handler]
pub fn swap(p: Pair) -> Pair {
    let mut q: Pair = p;
    q = Pair { a: q.b, b: q.a };
    let x: u64 = q.a;
    let x = x.wrapping_mul(3);
    Pair { a: x, b: q.b }
}

// --- runtime panics ------------------------------------------------------------------------

/// Divides: a zero divisor panics (the kernel faults with HANDLER_PANIC).
#[gyre::handler]
pub fn divide(x: [u32; 2]) -> u32 {
    x[0] / x[1]
}

/// Indexes: past the end panics.
#[gyre::handler]
pub fn lookup(i: u32) -> u32 {
    let t: [u32; 4] = [10, 20, 30, 40];
    t[i as usize]
}

// --- the built-ins, re-expressed ------------------------------------------------------------

/// `gyre_core::kernels::echo` on 64 bytes.
#[gyre::handler]
pub fn echo64(x: [u8; 64]) -> [u8; 64] {
    x
}

/// `gyre_core::kernels::vec_scale` for up to 14 values (`count` beyond is clamped).
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, DeviceType)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Scale14 {
    pub scale: f32,
    pub count: u32,
    pub data: [f32; 14],
}

/// The scaled values, the rest zero.
#[gyre::handler]
pub fn vec_scale14(v: Scale14) -> [f32; 14] {
    let mut out: [f32; 14] = [0.0; 14];
    let n: u32 = v.count.min(14);
    for i in 0..n {
        out[i as usize] = v.data[i as usize] * v.scale;
    }
    out
}

/// `gyre_core::kernels::reduce_sum`'s sum and count in index order, from `-0.0`.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, DeviceType)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Sum14 {
    pub count: u32,
    pub data: [f32; 14],
}

/// `(sum, count)` as two words.
#[gyre::handler]
pub fn reduce_sum14(v: Sum14) -> [f32; 2] {
    let n: u32 = v.count.min(14);
    let mut s: f32 = -0.0;
    for i in 0..n {
        s += v.data[i as usize];
    }
    [s, n as f32]
}

// --- cases an independent review found (each once wrong or refused) -----------------------

/// `!` of a comparison and of `&&`: a `bool`, also on OpenCL (where `<` gives `int`).
#[gyre::handler]
pub fn not_cmp(x: u32) -> [u32; 3] {
    let inside = x > 2u32 && x < 8u32;
    let a: u32 = if !(x < 5u32) { 1 } else { 0 };
    let b: u32 = if !inside { 100 } else { 200 };
    let c: u32 = match x > 4u32 || !(x > 1u32) {
        true => 7,
        false => 9,
    };
    [a, b, c]
}

/// An unsuffixed literal under `as` takes the target's type when both are integers or
/// both floats.
#[gyre::handler]
pub fn cast_literals(x: u64) -> [u64; 3] {
    [
        x + 3000000000 as u64,
        x ^ 0xFFFF_FFFF as u64,
        (2147483648 as i64) as u64,
    ]
}

/// A float literal under `as f32` is parsed as an `f32`, not rounded through `f64`.
#[gyre::handler]
pub fn cast_float_literal(x: f32) -> f32 {
    x * 1.00000005960464478 as f32
}

/// A path call takes its receiver's type from the path.
#[gyre::handler]
pub fn path_calls(x: u8) -> [f64; 2] {
    [f32::sqrt(2.0) as f64 + (x as f64), u8::max(200, x) as f64]
}

/// A parenthesised struct literal assigned to the local it reads.
#[gyre::handler]
pub fn paren_swap(p: Pair) -> Pair {
    let mut q: Pair = p;
    q = (Pair { a: q.b, b: q.a });
    q
}

/// `i32::abs` by its path wraps at `MIN` too.
#[gyre::handler]
pub fn path_abs(x: i32) -> [i32; 2] {
    [i32::abs(x), x.abs()]
}

#[gyre::handler_fn]
pub fn halve_until_one(n: u32) -> u32 {
    let mut k: u32 = n;
    while k != 1u32 {
        k = k >> 1u32;
    }
    k
}

/// A helper called with an argument whose evaluation panicked returns at once: the
/// request panics instead of spinning in `halve_until_one(0)`.
#[gyre::handler]
pub fn panic_before_helper(x: u32) -> u32 {
    halve_until_one(64u32 / x)
}

#[gyre::handler_fn]
pub fn dup(x: u32) -> u32 {
    x * 2u32
}

#[gyre::handler_fn]
pub fn via(x: u32) -> u32 {
    dup(x)
}

/// A helper named like one of this module's, defined in a function body.
pub fn shadowed_helper() -> gyre::portable::Portable<u32, u32> {
    #[gyre::handler_fn]
    fn dup(x: u32) -> u32 {
        x * 3u32
    }
    #[gyre::handler]
    fn collide(x: u32) -> u32 {
        dup(x) + via(x)
    }
    collide
}

pub mod user_math {
    /// A user's helper named like a scalar method.
    #[gyre::handler_fn]
    pub fn abs(x: i32) -> i32 {
        x + 100
    }
}

/// `m::abs(x)` calls the user's helper (only `i32::abs` & co. are the scalar method).
#[gyre::handler]
pub fn user_abs(x: i32) -> i32 {
    user_math::abs(x) + i32::abs(x)
}

/// Field names that are C keywords, and a raw identifier.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, DeviceType)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Geo {
    pub lat: f32,
    pub long: f32,
    pub r#type: u32,
    pub int: u32,
}

/// Keyword-named fields and locals, a constant-expression array length, `-(lit)`, an
/// attribute on the handler, and a body that ends in a `loop` left by `return`.
#[gyre::handler]
#[inline]
pub fn keywords(g: Geo) -> Geo {
    let int: u32 = g.int + 1;
    let r#type: u32 = g.r#type ^ int;
    let a: [u32; 2 * 2] = [r#type; 2 * 2];
    let small: i8 = (g.int as i8) + -(128i8);
    let mut n: u32 = 0;
    loop {
        n += 1;
        if n > 3 {
            return Geo {
                lat: g.long,
                long: g.lat,
                r#type: a[3] + n,
                int: small as u32,
            };
        }
    }
}

// --- lane-parallel handlers ----------------------------------------------------------------

/// The sum of squares, each lane taking every `count()`th value: an integer sum, the same
/// for every lane count.
#[gyre::handler(lanes)]
pub fn sum_sq_lanes(v: [u32; 16], lane: Lane) -> u32 {
    let mut acc: u32 = 0;
    let mut i: u32 = lane.id();
    while i < 16 {
        acc += v[i as usize] * v[i as usize];
        i += lane.count();
    }
    lane.sum(acc)
}

/// A float dot product over lanes: the lanes' partial sums combined in lane order.
#[gyre::handler(lanes)]
pub fn dot_lanes(x: [f32; 16], lane: Lane) -> f32 {
    let mut acc: f32 = 0.0;
    for i in 0..8u32 {
        if i % lane.count() == lane.id() {
            acc += x[i as usize] * x[(i + 8) as usize];
        }
    }
    lane.sum(acc)
}

/// The largest value, with contiguous chunks per lane.
#[gyre::handler(lanes)]
pub fn max_lanes(v: [i32; 16], lane: Lane) -> i32 {
    let per: u32 = (16 + lane.count() - 1) / lane.count();
    let mut best: i32 = i32::MIN;
    for i in (lane.id() * per)..((lane.id() + 1) * per).min(16) {
        best = best.max(v[i as usize]);
    }
    lane.max(best)
}

/// The smallest float (NaN-ignoring, as `f32::min`).
#[gyre::handler(lanes)]
pub fn min_lanes(v: [f32; 16], lane: Lane) -> f32 {
    let mut m: f32 = f32::INFINITY;
    let mut i: u32 = lane.id();
    while i < 16 {
        m = m.min(v[i as usize]);
        i += lane.count();
    }
    lane.min(m)
}

/// Panics on lanes past the request's limit (an index past the end).
#[gyre::handler(lanes)]
pub fn lane_panics(limit: u32, lane: Lane) -> u32 {
    let t: [u32; 4] = [1, 2, 3, 4];
    let mut x: u32 = 0;
    if lane.id() >= limit {
        x = t[(lane.id() + 4) as usize];
    }
    lane.sum(x + 1)
}

/// Every handler's name and generated device source (for the NVRTC compile check).
#[allow(dead_code)]
pub fn all_sources() -> Vec<(&'static str, String)> {
    macro_rules! list {
        ($($h:ident),*) => { vec![$(($h.name(), $h.c_source())),*] };
    }
    let mut v = list!(
        arith_u8,
        arith_u16,
        arith_u32,
        arith_u64,
        arith_i8,
        arith_i16,
        arith_i32,
        arith_i64,
        signed_ops,
        arith_f32,
        arith_f64,
        math_f32,
        math_f64,
        f32_to_ints,
        f64_to_ints,
        i64_to_ints,
        to_floats,
        loops,
        classify,
        step,
        dot,
        swap,
        divide,
        lookup,
        echo64,
        vec_scale14,
        reduce_sum14,
        sum_sq_lanes,
        dot_lanes,
        max_lanes,
        min_lanes,
        lane_panics,
        not_cmp,
        cast_literals,
        cast_float_literal,
        path_calls,
        paren_swap,
        path_abs,
        user_abs,
        panic_before_helper,
        keywords
    );
    v.push(("collide", shadowed_helper().c_source()));
    v.push((loan_rot13.name(), loan_rot13.c_source()));
    v.push((loan_rot13_lanes.name(), loan_rot13_lanes.c_source()));
    v
}

/// A loan handler (`#[gyre::handler(loan)]`, run on CPU and OpenCL by
/// `tests/portable_loans.rs`): here so that NVRTC compiles the loan form too.
#[gyre::handler(loan)]
pub fn loan_rot13(b: gyre::portable::Bytes) -> u32 {
    let mut i: u32 = 0;
    while i < b.len() {
        let c: u8 = b.get(i);
        if c >= 97 && c <= 122 {
            b.set(i, (c - 97 + 13) % 26 + 97);
        }
        i += 1;
    }
    b.len()
}

/// [`loan_rot13`], lane-parallel (`fn f(b: Bytes, lane: Lane) -> u32`).
#[gyre::handler(loan)]
pub fn loan_rot13_lanes(b: gyre::portable::Bytes, lane: gyre::portable::Lane) -> u32 {
    let mut i: u32 = lane.id();
    while i < b.len() {
        let c: u8 = b.get(i);
        if c >= 97 && c <= 122 {
            b.set(i, (c - 97 + 13) % 26 + 97);
        }
        i += lane.count();
    }
    b.len()
}

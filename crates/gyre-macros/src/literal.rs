//! Literals and constants as exact C text: integers with their type, floats as hexadecimal
//! floating constants (the value Rust parsed, so C never rounds a decimal again).

/// `v` as a C hexadecimal floating constant of `f64` (`0x1.8p+1`), exact.
pub(crate) fn hex_f64(v: f64) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0x0p+0"
        } else {
            "0x0p+0"
        }
        .into();
    }
    let bits = v.to_bits();
    let sign = if bits >> 63 == 1 { "-" } else { "" };
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let frac = bits & ((1u64 << 52) - 1);
    // Subnormals: 0x0.<frac>p-1022.
    let (lead, e) = if exp == 0 {
        (0, -1022)
    } else {
        (1, exp - 1023)
    };
    format!("{sign}0x{lead}.{frac:013x}p{e:+}")
}

/// `v` as a C hexadecimal floating constant of `f32` (`0x1.8p+1f`), exact.
pub(crate) fn hex_f32(v: f32) -> String {
    // Every f32 is exactly an f64; the `f` suffix makes the constant a float, and a float
    // constant whose value is representable is that value.
    format!("{}f", hex_f64(f64::from(v)))
}

/// The C type name of a Rust scalar type name, if it is one.
pub(crate) fn scalar_c(name: &str) -> Option<&'static str> {
    Some(match name {
        "u8" => "uint8_t",
        "u16" => "uint16_t",
        "u32" => "uint32_t",
        "u64" | "usize" => "uint64_t",
        "i8" => "int8_t",
        "i16" => "int16_t",
        "i32" => "int32_t",
        "i64" => "int64_t",
        "f32" => "float",
        "f64" => "double",
        "bool" => "bool",
        _ => return None,
    })
}

/// Whether a Rust scalar type name is an integer type.
pub(crate) fn is_int(name: &str) -> bool {
    matches!(
        name,
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64"
    )
}

/// An integer constant of Rust type `ty` (an integer type name) with value `v` (its bits,
/// as `u128`), as C text.
pub(crate) fn int_c(ty: &str, v: u128) -> String {
    let c = scalar_c(ty).unwrap_or("uint64_t");
    format!("(({c}){}ull)", v as u64)
}

/// The value of an associated constant `T::NAME` of a scalar type, as C text.
pub(crate) fn assoc_const(ty: &str, name: &str) -> Option<String> {
    macro_rules! ints {
        ($($t:ident),*) => {
            match (ty, name) {
                $(
                    (stringify!($t), "MAX") => return Some(int_c(ty, $t::MAX as u128 & u64::MAX as u128)),
                    (stringify!($t), "MIN") => return Some(int_c(ty, $t::MIN as u128 & u64::MAX as u128)),
                    (stringify!($t), "BITS") => return Some(int_c("u32", u128::from($t::BITS))),
                )*
                _ => {}
            }
        };
    }
    ints!(u8, u16, u32, u64, usize, i8, i16, i32, i64);
    macro_rules! floats {
        ($t:ident, $hex:ident) => {
            if ty == stringify!($t) {
                let v = match name {
                    "MAX" => $t::MAX,
                    "MIN" => $t::MIN,
                    "MIN_POSITIVE" => $t::MIN_POSITIVE,
                    "EPSILON" => $t::EPSILON,
                    "INFINITY" => $t::INFINITY,
                    "NEG_INFINITY" => $t::NEG_INFINITY,
                    _ => return None,
                };
                return Some(if v.is_infinite() {
                    let one = if v > 0.0 { "1.0" } else { "-1.0" };
                    format!("(({})({one} / 0.0))", scalar_c(ty).unwrap_or("float"))
                } else {
                    format!("(({}){})", scalar_c(ty).unwrap_or("float"), $hex(v))
                });
            }
        };
    }
    floats!(f32, hex_f32);
    floats!(f64, hex_f64);
    None
}

/// The value of a mathematical constant `core::fNN::consts::NAME`, as C text.
pub(crate) fn math_const(ty: &str, name: &str) -> Option<String> {
    macro_rules! consts {
        ($t:ident, $hex:ident) => {
            if ty == stringify!($t) {
                use core::$t::consts as k;
                let v = match name {
                    "PI" => k::PI,
                    "TAU" => k::TAU,
                    "E" => k::E,
                    "SQRT_2" => k::SQRT_2,
                    "LN_2" => k::LN_2,
                    "LN_10" => k::LN_10,
                    "FRAC_PI_2" => k::FRAC_PI_2,
                    "FRAC_1_SQRT_2" => k::FRAC_1_SQRT_2,
                    _ => return None,
                };
                return Some(format!(
                    "(({}){})",
                    scalar_c(ty).unwrap_or("float"),
                    $hex(v)
                ));
            }
        };
    }
    consts!(f32, hex_f32);
    consts!(f64, hex_f64);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_floats_are_exact() {
        assert_eq!(hex_f64(1.0), "0x1.0000000000000p+0");
        assert_eq!(hex_f64(-2.5), "-0x1.4000000000000p+1");
        assert_eq!(hex_f64(0.1), "0x1.999999999999ap-4");
        assert_eq!(hex_f64(-0.0), "-0x0p+0");
        assert_eq!(hex_f64(f64::from_bits(1)), "0x0.0000000000001p-1022");
        assert_eq!(hex_f32(0.1), "0x1.99999a0000000p-4f");
    }

    #[test]
    fn constants() {
        assert_eq!(
            assoc_const("u8", "MAX").as_deref(),
            Some("((uint8_t)255ull)")
        );
        assert_eq!(
            assoc_const("i8", "MIN").as_deref(),
            Some("((int8_t)18446744073709551488ull)")
        );
        assert!(assoc_const("f32", "INFINITY")
            .unwrap()
            .contains("1.0 / 0.0"));
        assert!(math_const("f64", "PI").is_some());
        assert!(assoc_const("u8", "NOPE").is_none());
    }
}

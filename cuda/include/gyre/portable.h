/*
 * gyre/portable.h -- Rust's semantics for the C that #[gyre::handler] generates
 * (crates/gyre-macros, docs/handlers.md), on the device ports: CUDA C++ (NVRTC) and
 * OpenCL C (functions overloaded with __attribute__((overloadable))). The CPU backend
 * runs the Rust function itself and never includes this file.
 *
 * Every operator whose C meaning differs from Rust's goes through a helper overloaded on
 * the operand type, so a u8 stays a u8 (no integer promotion) and nothing is undefined:
 *   gyre_add/sub/mul/neg      integers wrap (two's complement), floats round to nearest,
 *                             never fused into an FMA (CUDA __fadd_rn..., OpenCL
 *                             FP_CONTRACT OFF)
 *   gyre_div/rem              integers: a zero divisor, or MIN / -1, "panics": *p = 1 and
 *                             the result is 0 (the generated code then returns at once and
 *                             the block loop answers HANDLER_PANIC and faults the kernel,
 *                             as a Rust panic does on the CPU backend); floats: IEEE
 *   gyre_shl/shr              the shift amount is masked to the type's width (Rust's
 *                             wrapping_shl / wrapping_shr); >> is arithmetic on signed types
 *   gyre_and/or/xor/not       bitwise, in the operand type (`!` on bool is logical)
 *   gyre_as_<ctype>(x)        `x as T`: float to integer saturates and maps NaN to 0; integer
 *                             to integer wraps; to float rounds to nearest
 *   gyre_idx(i, n, p)         an index checked against the array length ("panics" past it)
 *   gyre_bytes_get/set        a loan handler's `Bytes` (#[gyre::handler(loan)]): one byte of
 *                             the block, checked against its capacity ("panics" past it;
 *                             a set past it writes nothing)
 * plus the methods of docs/handlers.md (min, max, abs, sqrt, mul_add, floor, ... exp).
 */
#ifndef GYRE_PORTABLE_H
#define GYRE_PORTABLE_H

#include "handler.h"

#if defined(__OPENCL_C_VERSION__)
#pragma OPENCL FP_CONTRACT OFF
#define GYRE_OL __attribute__((overloadable))
#define GYRE_TYPEOF(x) __typeof__(x)
#define GYRE_AUTO __auto_type
typedef uchar uint8_t;
typedef ushort uint16_t;
typedef char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
#if defined(cl_khr_fp64) || defined(__opencl_c_fp64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define GYRE_HAVE_F64 1
#endif
#elif defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GYRE_OL
/* decltype of an lvalue such as a[i] is a reference: strip it. */
template <typename T> struct gyre_noref {
    typedef T type;
};
template <typename T> struct gyre_noref<T &> {
    typedef T type;
};
#define GYRE_TYPEOF(x) typename gyre_noref<decltype(x)>::type
#define GYRE_AUTO auto
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
#define GYRE_HAVE_F64 1
#else
#error "gyre/portable.h is for the device ports (CUDA, OpenCL); the CPU backend runs the Rust function"
#endif

#define GYRE_PF static inline GYRE_DEVICE_FN GYRE_OL

/** The number of elements of a generated array struct (`struct { T v[N]; }`). */
#define GYRE_LEN(a) (sizeof((a).v) / sizeof((a).v[0]))

/** An unsuffixed float literal in a context of type T: the f32 spelling when T is 4 bytes
 *  (parsed by Rust, exact), else the f64 one; never rounded twice. */
#ifdef GYRE_HAVE_F64
#define GYRE_FLIT(T, F64, F32) ((T)(sizeof(T) == 4 ? (double)(F32) : (F64)))
#else
#define GYRE_FLIT(T, F64, F32) ((T)(F32))
#endif

/** An index into an array of n elements: i, or a "panic" (*p = 1) and 0 past the end. */
static inline GYRE_DEVICE_FN uint64_t gyre_idx(uint64_t i, uint64_t n, uint32_t *p) {
    if (i < n) {
        return i;
    }
    *p = 1u;
    return 0u;
}

/** `Bytes::get(i)` of a loan handler: byte i of the block of `cap` bytes, or a "panic"
 *  (*p = 1) and 0 past it (and 0 when an argument already panicked). */
static inline GYRE_DEVICE_FN uint8_t gyre_bytes_get(const GYRE_GLOBAL unsigned char *b,
                                                    uint32_t cap, uint32_t i, uint32_t *p) {
    if (*p == 0u && i < cap) {
        return (uint8_t)b[i];
    }
    *p = 1u;
    return (uint8_t)0u;
}

/** `Bytes::set(i, v)`: byte i of the block becomes v, or a "panic" past the block (and
 *  nothing is written). Nothing is written either when an argument already panicked (C
 *  evaluates them all before the call; Rust would not have called it). Returns 0 (Rust's
 *  `()`: only ever a statement). */
static inline GYRE_DEVICE_FN uint32_t gyre_bytes_set(GYRE_GLOBAL unsigned char *b, uint32_t cap,
                                                     uint32_t i, uint8_t v, uint32_t *p) {
    if (*p != 0u) {
        return 0u;
    }
    if (i < cap) {
        b[i] = (unsigned char)v;
        return 0u;
    }
    *p = 1u;
    return 0u;
}

/* Integers: T, its unsigned working type W (no promotion to int), bits, signedness. */
#define GYRE_INT_OPS(T, W, BITS, SIGNED, MINV, MAXV)                                          \
    GYRE_PF T gyre_add(T a, T b) { return (T)((W)a + (W)b); }                                \
    GYRE_PF T gyre_sub(T a, T b) { return (T)((W)a - (W)b); }                                \
    GYRE_PF T gyre_mul(T a, T b) { return (T)((W)a * (W)b); }                                \
    GYRE_PF T gyre_neg(T a) { return (T)((W)0 - (W)a); }                                     \
    GYRE_PF T gyre_div(T a, T b, uint32_t *p) {                                              \
        if (b == (T)0 || (SIGNED && a == (T)(MINV) && b == (T)-1)) {                         \
            *p = 1u;                                                                         \
            return (T)0;                                                                     \
        }                                                                                    \
        return (T)(a / b);                                                                   \
    }                                                                                        \
    GYRE_PF T gyre_rem(T a, T b, uint32_t *p) {                                              \
        if (b == (T)0 || (SIGNED && a == (T)(MINV) && b == (T)-1)) {                         \
            *p = 1u;                                                                         \
            return (T)0;                                                                     \
        }                                                                                    \
        return (T)(a % b);                                                                   \
    }                                                                                        \
    GYRE_PF T gyre_shl(T a, uint32_t s) { return (T)((W)a << (s & ((BITS)-1u))); }           \
    GYRE_PF T gyre_shr(T a, uint32_t s) { return (T)(a >> (s & ((BITS)-1u))); }              \
    GYRE_PF T gyre_and(T a, T b) { return (T)(a & b); }                                      \
    GYRE_PF T gyre_or(T a, T b) { return (T)(a | b); }                                       \
    GYRE_PF T gyre_xor(T a, T b) { return (T)(a ^ b); }                                      \
    GYRE_PF T gyre_not(T a) { return (T)~a; }                                                \
    GYRE_PF T gyre_min(T a, T b) { return b < a ? b : a; }                                   \
    GYRE_PF T gyre_max(T a, T b) { return a < b ? b : a; }                                   \
    GYRE_PF T gyre_abs(T a) { return (SIGNED && a < (T)0) ? gyre_neg(a) : a; }

GYRE_INT_OPS(uint8_t, uint32_t, 8u, 0, 0, 0xffu)
GYRE_INT_OPS(uint16_t, uint32_t, 16u, 0, 0, 0xffffu)
GYRE_INT_OPS(uint32_t, uint32_t, 32u, 0, 0, 0xffffffffu)
GYRE_INT_OPS(uint64_t, uint64_t, 64u, 0, 0, 0xffffffffffffffffull)
GYRE_INT_OPS(int8_t, uint32_t, 8u, 1, -128, 127)
GYRE_INT_OPS(int16_t, uint32_t, 16u, 1, -32768, 32767)
GYRE_INT_OPS(int32_t, uint32_t, 32u, 1, (-2147483647 - 1), 2147483647)
GYRE_INT_OPS(int64_t, uint64_t, 64u, 1, (-9223372036854775807ll - 1ll), 9223372036854775807ll)

GYRE_PF bool gyre_and(bool a, bool b) { return a && b; }
GYRE_PF bool gyre_or(bool a, bool b) { return a || b; }
GYRE_PF bool gyre_xor(bool a, bool b) { return a != b; }
GYRE_PF bool gyre_not(bool a) { return !a; }

/* Floats: IEEE operations rounded to nearest, never contracted. */
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GYRE_FADD(a, b) __fadd_rn(a, b)
#define GYRE_FSUB(a, b) __fsub_rn(a, b)
#define GYRE_FMUL_(a, b) __fmul_rn(a, b)
#define GYRE_FDIV(a, b) __fdiv_rn(a, b)
#define GYRE_FSQRT(a) __fsqrt_rn(a)
#define GYRE_DADD(a, b) __dadd_rn(a, b)
#define GYRE_DSUB(a, b) __dsub_rn(a, b)
#define GYRE_DMUL(a, b) __dmul_rn(a, b)
#define GYRE_DDIV(a, b) __ddiv_rn(a, b)
#define GYRE_DSQRT(a) __dsqrt_rn(a)
#define GYRE_MATH(f, fd) f
#else
#define GYRE_FADD(a, b) ((a) + (b))
#define GYRE_FSUB(a, b) ((a) - (b))
#define GYRE_FMUL_(a, b) ((a) * (b))
#define GYRE_FDIV(a, b) ((a) / (b))
#define GYRE_FSQRT(a) sqrt(a)
#define GYRE_DADD(a, b) ((a) + (b))
#define GYRE_DSUB(a, b) ((a) - (b))
#define GYRE_DMUL(a, b) ((a) * (b))
#define GYRE_DDIV(a, b) ((a) / (b))
#define GYRE_DSQRT(a) sqrt(a)
#define GYRE_MATH(f, fd) fd
#endif

/* F, its add/sub/mul/div/sqrt, and the CUDA spelling of each math function (sqrtf for
 * float, sqrt for double; OpenCL's are overloaded under the double's name). */
#define GYRE_FLOAT_OPS(F, ADD, SUB, MUL, DIV, SQRT, S)                                          \
    GYRE_PF F gyre_add(F a, F b) { return ADD(a, b); }                                       \
    GYRE_PF F gyre_sub(F a, F b) { return SUB(a, b); }                                       \
    GYRE_PF F gyre_mul(F a, F b) { return MUL(a, b); }                                       \
    GYRE_PF F gyre_neg(F a) { return -a; }                                                   \
    GYRE_PF F gyre_div(F a, F b, uint32_t *p) {                                              \
        (void)p;                                                                             \
        return DIV(a, b);                                                                    \
    }                                                                                        \
    GYRE_PF F gyre_rem(F a, F b, uint32_t *p) {                                              \
        (void)p;                                                                             \
        return GYRE_MATH(fmod##S, fmod)(a, b);                                               \
    }                                                                                        \
    GYRE_PF F gyre_sqrt(F a) { return SQRT(a); }                                             \
    GYRE_PF F gyre_abs(F a) { return GYRE_MATH(fabs##S, fabs)(a); }                          \
    GYRE_PF F gyre_floor(F a) { return GYRE_MATH(floor##S, floor)(a); }                      \
    GYRE_PF F gyre_ceil(F a) { return GYRE_MATH(ceil##S, ceil)(a); }                         \
    GYRE_PF F gyre_trunc(F a) { return GYRE_MATH(trunc##S, trunc)(a); }                      \
    GYRE_PF F gyre_round(F a) { return GYRE_MATH(round##S, round)(a); }                      \
    GYRE_PF F gyre_min(F a, F b) { return GYRE_MATH(fmin##S, fmin)(a, b); }                  \
    GYRE_PF F gyre_max(F a, F b) { return GYRE_MATH(fmax##S, fmax)(a, b); }                  \
    GYRE_PF F gyre_mul_add(F a, F b, F c) { return GYRE_MATH(fma##S, fma)(a, b, c); }        \
    GYRE_PF F gyre_exp(F a) { return GYRE_MATH(exp##S, exp)(a); }                            \
    GYRE_PF F gyre_exp2(F a) { return GYRE_MATH(exp2##S, exp2)(a); }                         \
    GYRE_PF F gyre_ln(F a) { return GYRE_MATH(log##S, log)(a); }                             \
    GYRE_PF F gyre_log2(F a) { return GYRE_MATH(log2##S, log2)(a); }                         \
    GYRE_PF F gyre_log10(F a) { return GYRE_MATH(log10##S, log10)(a); }                      \
    GYRE_PF F gyre_sin(F a) { return GYRE_MATH(sin##S, sin)(a); }                            \
    GYRE_PF F gyre_cos(F a) { return GYRE_MATH(cos##S, cos)(a); }                            \
    GYRE_PF F gyre_tan(F a) { return GYRE_MATH(tan##S, tan)(a); }                            \
    GYRE_PF F gyre_tanh(F a) { return GYRE_MATH(tanh##S, tanh)(a); }                         \
    GYRE_PF F gyre_powf(F a, F b) { return GYRE_MATH(pow##S, pow)(a, b); }

GYRE_FLOAT_OPS(float, GYRE_FADD, GYRE_FSUB, GYRE_FMUL_, GYRE_FDIV, GYRE_FSQRT, f)
#ifdef GYRE_HAVE_F64
GYRE_FLOAT_OPS(double, GYRE_DADD, GYRE_DSUB, GYRE_DMUL, GYRE_DDIV, GYRE_DSQRT, )
#endif

/* `x as T`. Integer and bool sources convert as C does (wrapping to unsigned, two's
 * complement to signed); float sources to an integer saturate, NaN to 0; anything to a
 * float rounds to nearest. */
#define GYRE_AS_INT_FROM_INT(T, S) GYRE_PF T gyre_as_##T(S x) { return (T)x; }
#define GYRE_AS_INT_FROM_FLOAT(T, F, LO, HI, MINV, MAXV)                                         \
    GYRE_PF T gyre_as_##T(F x) {                                                             \
        return x != x ? (T)0 : x >= (F)(HI) ? (T)(MAXV) : x <= (F)(LO) ? (T)(MINV) : (T)x;   \
    }
#define GYRE_AS_FROM_INTS(T)                                                                  \
    GYRE_AS_INT_FROM_INT(T, uint8_t)                                                         \
    GYRE_AS_INT_FROM_INT(T, uint16_t)                                                        \
    GYRE_AS_INT_FROM_INT(T, uint32_t)                                                        \
    GYRE_AS_INT_FROM_INT(T, uint64_t)                                                        \
    GYRE_AS_INT_FROM_INT(T, int8_t)                                                          \
    GYRE_AS_INT_FROM_INT(T, int16_t)                                                         \
    GYRE_AS_INT_FROM_INT(T, int32_t)                                                         \
    GYRE_AS_INT_FROM_INT(T, int64_t)                                                         \
    GYRE_AS_INT_FROM_INT(T, bool)
#ifdef GYRE_HAVE_F64
#define GYRE_AS_INT(T, LO, HI, MINV, MAXV)                                                    \
    GYRE_AS_FROM_INTS(T)                                                                     \
    GYRE_AS_INT_FROM_FLOAT(T, float, LO, HI, MINV, MAXV)                                     \
    GYRE_AS_INT_FROM_FLOAT(T, double, LO, HI, MINV, MAXV)
#else
#define GYRE_AS_INT(T, LO, HI, MINV, MAXV)                                                    \
    GYRE_AS_FROM_INTS(T)                                                                     \
    GYRE_AS_INT_FROM_FLOAT(T, float, LO, HI, MINV, MAXV)
#endif

GYRE_AS_INT(uint8_t, -1.0, 256.0, 0, 0xffu)
GYRE_AS_INT(uint16_t, -1.0, 65536.0, 0, 0xffffu)
GYRE_AS_INT(uint32_t, -1.0, 4294967296.0, 0, 0xffffffffu)
GYRE_AS_INT(uint64_t, -1.0, 18446744073709551616.0, 0, 0xffffffffffffffffull)
GYRE_AS_INT(int8_t, -128.0, 128.0, -128, 127)
GYRE_AS_INT(int16_t, -32768.0, 32768.0, -32768, 32767)
GYRE_AS_INT(int32_t, -2147483648.0, 2147483648.0, (-2147483647 - 1), 2147483647)
GYRE_AS_INT(int64_t, -9223372036854775808.0, 9223372036854775808.0,
            (-9223372036854775807ll - 1ll), 9223372036854775807ll)

#define GYRE_AS_FLOAT_FROM(F, S) GYRE_PF F gyre_as_##F(S x) { return (F)x; }
#define GYRE_AS_FLOAT_FROM_INTS(F)                                                            \
    GYRE_AS_FLOAT_FROM(F, uint8_t)                                                           \
    GYRE_AS_FLOAT_FROM(F, uint16_t)                                                          \
    GYRE_AS_FLOAT_FROM(F, uint32_t)                                                          \
    GYRE_AS_FLOAT_FROM(F, uint64_t)                                                          \
    GYRE_AS_FLOAT_FROM(F, int8_t)                                                            \
    GYRE_AS_FLOAT_FROM(F, int16_t)                                                           \
    GYRE_AS_FLOAT_FROM(F, int32_t)                                                           \
    GYRE_AS_FLOAT_FROM(F, int64_t)                                                           \
    GYRE_AS_FLOAT_FROM(F, float)
GYRE_AS_FLOAT_FROM_INTS(float)
#ifdef GYRE_HAVE_F64
GYRE_AS_FLOAT_FROM(float, double)
GYRE_AS_FLOAT_FROM_INTS(double)
GYRE_AS_FLOAT_FROM(double, double)
#endif

/** Copies n bytes of a request payload into a private value, and a private value into
 *  the reply payload. */
static inline GYRE_DEVICE_FN void gyre_copy_in(unsigned char *dst, const GYRE_GLOBAL unsigned char *src,
                                               uint32_t n) {
    uint32_t i;
    for (i = 0u; i < n; ++i) {
        dst[i] = src[i];
    }
}
static inline GYRE_DEVICE_FN void gyre_copy_out(GYRE_GLOBAL unsigned char *dst, const unsigned char *src,
                                                uint32_t n) {
    uint32_t i;
    for (i = 0u; i < n; ++i) {
        dst[i] = src[i];
    }
}
/** Sets n bytes of a private value to zero. */
static inline GYRE_DEVICE_FN void gyre_zero_bytes(unsigned char *dst, uint32_t n) {
    uint32_t i;
    for (i = 0u; i < n; ++i) {
        dst[i] = 0u;
    }
}

#endif /* GYRE_PORTABLE_H */

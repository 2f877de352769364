//! Checks that the C mirror `cuda/include/gyre/abi.h` agrees with this crate, number by
//! number.
//!
//! A probe program is generated from the field and constant lists below, compiled as C11
//! with the host C compiler (found by the `cc` crate) against the header, and run; it
//! prints `sizeof` / `alignof` of each struct, `offsetof` / `sizeof` of every field and
//! the value of every constant, which are compared with `size_of`, `align_of`,
//! [`core::mem::offset_of!`] and the Rust constants.
//!
//! Coverage is enforced, not hoped for:
//! * each struct's field list is checked by an exhaustive destructuring pattern, so a
//!   field added to a Rust struct without being listed here is a compile error;
//! * every `pub const` declared in `src/lib.rs` must appear in [`constants`];
//! * every `#define GYRE_*` in the header must be a checked constant or a known helper;
//! * a field or constant missing from the header fails the probe's compilation.
//!
//! The header is also compiled as C++17 (compile only), and once more without any host
//! header and with `__CUDACC_RTC__` defined, as an approximation of NVRTC: it checks the
//! NVRTC branch (its own fixed-width typedefs, no includes) except its `GYRE_OFFSETOF`,
//! whose EDG `__INTADDR__` primitive only NVRTC knows and which is replaced here by
//! `__builtin_offsetof`.
//!
//! A missing C compiler fails these tests rather than skipping them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use gyre_abi::{
    check, command, error, flags, host_flags, link, loan, route, state, ControlBlock, JoinTable,
    RingPlacement, RouteTable, SlotHeader, TelemetryBuffer, ABI_VERSION, MAGIC, MAX_CAPACITY,
    MAX_SLOT_SIZE, MIN_CAPACITY, MIN_SLOT_SIZE, PLACEMENT_OFFSET, SLOT_ALIGN, SLOT_HEADER_SIZE,
};

/// The include directory holding `gyre/abi.h`.
const INCLUDE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../cuda/include");
/// The C mirror itself.
const HEADER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../cuda/include/gyre/abi.h");
/// The single source of truth, scanned for its `pub const` declarations.
const LIB_RS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs");

/// `#define GYRE_*` names in the header that are helpers, not ABI constants.
const HELPER_MACROS: &[&str] = &[
    "GYRE_ABI_H",
    "GYRE_OFFSETOF",
    "GYRE_ALIGN",
    "GYRE_ALIGNOF",
    "GYRE_STATIC_ASSERT",
    "GYRE_STATE_IS_FINAL",
    "GYRE_STATE_IS_STOPPED",
];

/// The target triple of this test binary. Build-script variables (`TARGET`, `HOST`, ...)
/// are absent when a test runs, so `cc` is told explicitly; the probe runs natively, so
/// host and target are the same.
const TARGET: &str = target_triple();

const fn target_triple() -> &'static str {
    if cfg!(all(
        target_arch = "x86_64",
        target_os = "linux",
        target_env = "gnu"
    )) {
        "x86_64-unknown-linux-gnu"
    } else if cfg!(all(
        target_arch = "aarch64",
        target_os = "linux",
        target_env = "gnu"
    )) {
        "aarch64-unknown-linux-gnu"
    } else if cfg!(all(
        target_arch = "x86_64",
        target_os = "linux",
        target_env = "musl"
    )) {
        "x86_64-unknown-linux-musl"
    } else if cfg!(all(
        target_arch = "aarch64",
        target_os = "linux",
        target_env = "musl"
    )) {
        "aarch64-unknown-linux-musl"
    } else if cfg!(all(target_arch = "x86_64", target_os = "macos")) {
        "x86_64-apple-darwin"
    } else if cfg!(all(target_arch = "aarch64", target_os = "macos")) {
        "aarch64-apple-darwin"
    } else {
        ""
    }
}

// ---- the Rust side ------------------------------------------------------------------

/// Offset and size of one field.
struct Field {
    name: &'static str,
    offset: usize,
    size: usize,
}

/// Size, alignment and fields of one struct, with its C name.
struct Layout {
    rust: &'static str,
    c: &'static str,
    size: usize,
    align: usize,
    fields: Vec<Field>,
}

/// `size_of` the field that `project` borrows.
fn field_size<S, F>(_project: fn(&S) -> &F) -> usize {
    size_of::<F>()
}

/// Builds the [`Layout`] of `$ty` from its complete field list.
macro_rules! layout {
    ($ty:ident => $c:literal { $($f:ident),+ $(,)? }) => {{
        /// Never called: fails to compile ("pattern requires `..`") when `$ty` has a
        /// field that is not in the list.
        #[allow(dead_code)]
        fn exhaustive(v: &$ty) {
            // An error here means a field of the Rust struct is missing from layouts().
            let $ty { $($f: _),+ } = v;
        }
        Layout {
            rust: stringify!($ty),
            c: $c,
            size: size_of::<$ty>(),
            align: align_of::<$ty>(),
            fields: vec![$(Field {
                name: stringify!($f),
                offset: offset_of!($ty, $f),
                size: field_size::<$ty, _>(|v| &v.$f),
            }),+],
        }
    }};
}

fn layouts() -> Vec<Layout> {
    vec![
        layout!(ControlBlock => "gyre_control_block" {
            magic, abi_version, command, capacity, slot_size, batch_size, host_timeout_ms,
            host_flags, h2k_head, k2h_tail, host_heartbeat, epoch_us, generation,
            state, error_code, h2k_tail, k2h_head, kernel_heartbeat, processed, _reserved2,
        }),
        layout!(SlotHeader => "gyre_slot_header" {
            sequence, correlation_id, enqueue_ns, msg_type, len, flags, status, check, _reserved,
        }),
        layout!(TelemetryBuffer => "gyre_telemetry_buffer" {
            seq, state, messages_in, messages_out, errors, busy_polls, idle_polls,
            handler_ns_total, handler_ns_max, heartbeat_ms,
        }),
        layout!(RouteTable => "gyre_route" {
            mode, count, key_offset, rr, msg_type, _reserved, target, head, released, ring,
        }),
        layout!(RingPlacement => "gyre_placement" {
            request_ring, _reserved,
        }),
        layout!(JoinTable => "gyre_join" {
            target, producers, _reserved0, stopped, _reserved,
        }),
    ]
}

/// One constant: its Rust path (relative to the crate root), its C macro, its value.
struct Constant {
    rust: String,
    c: &'static str,
    value: u64,
}

macro_rules! constants {
    ($($($seg:ident)::+ => $c:ident),+ $(,)?) => {
        vec![$(Constant {
            rust: stringify!($($seg)::+).replace(' ', ""),
            c: stringify!($c),
            value: $($seg)::+ as u64,
        }),+]
    };
}

fn constants() -> Vec<Constant> {
    constants![
        MAGIC => GYRE_MAGIC,
        ABI_VERSION => GYRE_ABI_VERSION,
        SLOT_ALIGN => GYRE_SLOT_ALIGN,
        SLOT_HEADER_SIZE => GYRE_SLOT_HEADER_SIZE,
        PLACEMENT_OFFSET => GYRE_PLACEMENT_OFFSET,
        MIN_SLOT_SIZE => GYRE_MIN_SLOT_SIZE,
        MAX_SLOT_SIZE => GYRE_MAX_SLOT_SIZE,
        MIN_CAPACITY => GYRE_MIN_CAPACITY,
        MAX_CAPACITY => GYRE_MAX_CAPACITY,
        command::RUN => GYRE_CMD_RUN,
        command::PAUSE => GYRE_CMD_PAUSE,
        command::TERMINATE => GYRE_CMD_TERMINATE,
        command::HANDOVER => GYRE_CMD_HANDOVER,
        state::UNINIT => GYRE_STATE_UNINIT,
        state::LAUNCHING => GYRE_STATE_LAUNCHING,
        state::ACTIVE => GYRE_STATE_ACTIVE,
        state::PAUSED => GYRE_STATE_PAUSED,
        state::DRAINING => GYRE_STATE_DRAINING,
        state::TERMINATED => GYRE_STATE_TERMINATED,
        state::FAULTED => GYRE_STATE_FAULTED,
        state::HANDED_OVER => GYRE_STATE_HANDED_OVER,
        error::NONE => GYRE_ERR_NONE,
        error::HANDLER_PANIC => GYRE_ERR_HANDLER_PANIC,
        error::BAD_SEQUENCE => GYRE_ERR_BAD_SEQUENCE,
        error::BAD_LENGTH => GYRE_ERR_BAD_LENGTH,
        error::BAD_MAGIC => GYRE_ERR_BAD_MAGIC,
        error::BAD_ABI_VERSION => GYRE_ERR_BAD_ABI_VERSION,
        error::BAD_GEOMETRY => GYRE_ERR_BAD_GEOMETRY,
        error::HOST_HEARTBEAT_STALE => GYRE_ERR_HOST_HEARTBEAT_STALE,
        error::HANDLER_REJECTED => GYRE_ERR_HANDLER_REJECTED,
        error::UNKNOWN_TYPE => GYRE_ERR_UNKNOWN_TYPE,
        error::KERNEL_GONE => GYRE_ERR_KERNEL_GONE,
        error::TRANSFER_FAILED => GYRE_ERR_TRANSFER_FAILED,
        error::BAD_LOAN => GYRE_ERR_BAD_LOAN,
        error::STAGE_STOPPED => GYRE_ERR_STAGE_STOPPED,
        error::USER_BASE => GYRE_ERR_USER_BASE,
        loan::HANDLE_SIZE => GYRE_LOAN_HANDLE_SIZE,
        loan::WORD_STRIDE => GYRE_LOAN_WORD_STRIDE,
        loan::OWNER_SHIFT => GYRE_LOAN_OWNER_SHIFT,
        loan::ORDER_SHIFT => GYRE_LOAN_ORDER_SHIFT,
        loan::OWNER_FREE => GYRE_LOAN_OWNER_FREE,
        loan::OWNER_HOST => GYRE_LOAN_OWNER_HOST,
        loan::OWNER_KERNEL => GYRE_LOAN_OWNER_KERNEL,
        loan::OWNER_BUSY => GYRE_LOAN_OWNER_BUSY,
        link::TO_HEAD => GYRE_LINK_TO_HEAD,
        link::FROM_STAGE => GYRE_LINK_FROM_STAGE,
        link::BY_ID => GYRE_LINK_BY_ID,
        link::FAN_OUT => GYRE_LINK_FAN_OUT,
        link::OWN_ID => GYRE_LINK_OWN_ID,
        link::BRANCH => GYRE_LINK_BRANCH,
        link::RESTARTS => GYRE_LINK_RESTARTS,
        route::MAX_BRANCHES => GYRE_ROUTE_MAX_BRANCHES,
        route::ROUND_ROBIN => GYRE_ROUTE_ROUND_ROBIN,
        route::KEY => GYRE_ROUTE_KEY,
        flags::CALL => GYRE_FLAG_CALL,
        host_flags::DOORBELL => GYRE_HOST_FLAG_DOORBELL,
        host_flags::CHECKED => GYRE_HOST_FLAG_CHECKED,
        check::CHECK_WORD => GYRE_CHECK_WORD,
        check::HEADER_WORDS => GYRE_CHECK_HEADER_WORDS,
        check::KEY => GYRE_CHECK_KEY,
    ]
}

/// States probed through `GYRE_STATE_IS_FINAL` (every state, and one past the last).
const PROBED_STATES: u32 = 8;

/// Every `pub const` (not `pub const fn`) in `src/lib.rs`, as `NAME` or `module::NAME`.
fn declared_rust_constants() -> BTreeSet<String> {
    let src = std::fs::read_to_string(LIB_RS).unwrap_or_else(|e| panic!("read {LIB_RS}: {e}"));
    let mut module: Option<&str> = None;
    let mut out = BTreeSet::new();
    for line in src.lines() {
        if let Some(rest) = line.strip_prefix("pub mod ") {
            module = Some(rest.trim_end_matches(['{', ' ']));
        } else if line.starts_with('}') {
            module = None;
        } else if let Some(rest) = line.trim_start().strip_prefix("pub const ") {
            if rest.starts_with("fn ") {
                continue;
            }
            let name = rest.split(':').next().unwrap_or_default().trim();
            out.insert(match module {
                Some(m) => format!("{m}::{name}"),
                None => name.to_string(),
            });
        }
    }
    out
}

/// Every `#define GYRE_*` name in the header.
fn defined_c_macros() -> BTreeSet<String> {
    let src = std::fs::read_to_string(HEADER).unwrap_or_else(|e| panic!("read {HEADER}: {e}"));
    src.lines()
        .filter_map(|l| l.trim_start().strip_prefix('#'))
        .filter_map(|l| l.trim_start().strip_prefix("define"))
        .map(|l| {
            let l = l.trim_start();
            let end = l.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            l[..end.unwrap_or(l.len())].to_string()
        })
        .filter(|name| name.starts_with("GYRE_"))
        .collect()
}

// ---- compiling and running ------------------------------------------------------------

/// A fresh scratch directory for one test.
fn scratch_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("c_probe-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// The host C (or C++) compiler as `cc` finds it, with its default flags for [`TARGET`].
fn compiler(cpp: bool, out_dir: &Path) -> cc::Tool {
    let lang = if cpp { "C++" } else { "C" };
    assert!(
        !TARGET.is_empty(),
        "c_probe: no target triple known for arch {} / os {}; add it to target_triple()",
        std::env::consts::ARCH,
        std::env::consts::OS,
    );
    let tool = cc::Build::new()
        .cpp(cpp)
        .target(TARGET)
        .host(TARGET)
        .opt_level(0)
        .debug(false)
        .cargo_metadata(false)
        .cargo_warnings(false)
        .out_dir(out_dir)
        .try_get_compiler()
        .unwrap_or_else(|e| {
            panic!("c_probe: no {lang} compiler found for {TARGET}: {e} (this test needs one)")
        });
    assert!(
        tool.is_like_gnu() || tool.is_like_clang(),
        "c_probe: the {lang} compiler {} is not gcc- or clang-like; the probe uses their flags",
        tool.path().display(),
    );
    tool
}

/// Runs `cmd`; panics with its output unless it succeeds. Returns its stdout.
fn run(mut cmd: Command, what: &str) -> String {
    // The program and its arguments, without the environment `cc` attaches.
    let shown = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("c_probe: cannot start {what}: {e} ({shown}); is a C/C++ compiler installed?")
    });
    assert!(
        out.status.success(),
        "c_probe: {what} failed ({}):\n{shown}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    String::from_utf8(out.stdout).expect("probe output is UTF-8")
}

/// Strict warning flags for compiling the header.
const STRICT: &[&str] = &["-Wall", "-Wextra", "-pedantic", "-Werror"];

/// The C source of the probe: one output line per number to compare.
fn probe_source(layouts: &[Layout], constants: &[Constant]) -> String {
    let mut s = String::from(
        "#include <stdio.h>\n\
         #include <stddef.h>\n\
         #include \"gyre/abi.h\"\n\
         \n\
         #define STRUCT(T) printf(\"struct %s %llu %llu\\n\", #T, \
         (unsigned long long)sizeof(T), (unsigned long long)_Alignof(T));\n\
         #define FIELD(T, f) printf(\"field %s.%s %llu %llu\\n\", #T, #f, \
         (unsigned long long)offsetof(T, f), (unsigned long long)sizeof(((T *)0)->f));\n\
         #define CONST(c) printf(\"const %s %llu\\n\", #c, (unsigned long long)(c));\n\
         \n\
         int main(void) {\n",
    );
    for l in layouts {
        writeln!(s, "    STRUCT({})", l.c).unwrap();
        for f in &l.fields {
            writeln!(s, "    FIELD({}, {})", l.c, f.name).unwrap();
        }
    }
    for c in constants {
        writeln!(s, "    CONST({})", c.c).unwrap();
    }
    writeln!(
        s,
        "    for (unsigned s = 0; s < {PROBED_STATES}u; ++s)\n        \
         printf(\"is_final %u %d\\n\", s, GYRE_STATE_IS_FINAL(s) ? 1 : 0);\n    \
         return 0;\n}}"
    )
    .unwrap();
    s
}

/// Compiles and runs the probe; returns its output as `key -> numbers`.
fn run_probe(layouts: &[Layout], constants: &[Constant]) -> BTreeMap<String, Vec<u64>> {
    let dir = scratch_dir("layout");
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, probe_source(layouts, constants)).expect("write probe.c");

    let mut cmd = compiler(false, &dir).to_command();
    cmd.arg("-std=c11")
        .args(STRICT)
        .arg("-I")
        .arg(INCLUDE_DIR)
        .arg(&src)
        .arg("-o")
        .arg(&exe);
    run(cmd, "compiling the C11 probe against gyre/abi.h");
    let out = run(Command::new(&exe), "the C probe");

    let mut map = BTreeMap::new();
    for line in out.lines() {
        let mut words = line.split_whitespace();
        let (kind, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let nums = words
            .map(|w| {
                w.parse()
                    .unwrap_or_else(|e| panic!("probe line {line:?}: {e}"))
            })
            .collect();
        assert!(
            map.insert(format!("{kind} {name}"), nums).is_none(),
            "probe printed {kind} {name} twice"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    map
}

// ---- the tests ---------------------------------------------------------------------------

/// Every size, alignment, field offset, field size and constant agrees between Rust and C.
#[test]
fn c_header_matches_rust_layout_and_constants() {
    let layouts = layouts();
    let constants = constants();
    let probe = run_probe(&layouts, &constants);

    let mut errors = Vec::new();
    let mut check = |key: String, what: &str, rust_name: String, rust: u64, idx: usize| match probe
        .get(&key)
        .and_then(|v| v.get(idx))
    {
        Some(&c) if c == rust => {}
        Some(&c) => errors.push(format!(
            "{what} mismatch for {}: Rust {rust_name} = {rust}, C = {c}",
            key.split_once(' ').map_or(key.as_str(), |(_, n)| n),
        )),
        None => errors.push(format!("probe did not report {what} of `{key}`")),
    };
    for l in &layouts {
        let key = format!("struct {}", l.c);
        check(
            key.clone(),
            "size",
            format!("size_of::<{}>()", l.rust),
            l.size as u64,
            0,
        );
        check(
            key,
            "align",
            format!("align_of::<{}>()", l.rust),
            l.align as u64,
            1,
        );
        for f in &l.fields {
            let key = format!("field {}.{}", l.c, f.name);
            let rust = format!("offset_of!({}, {})", l.rust, f.name);
            check(key.clone(), "offset", rust, f.offset as u64, 0);
            let rust = format!("size_of({}::{})", l.rust, f.name);
            check(key, "field size", rust, f.size as u64, 1);
        }
    }
    for c in &constants {
        check(
            format!("const {}", c.c),
            "value",
            format!("gyre_abi::{}", c.rust),
            c.value,
            0,
        );
    }
    for s in 0..PROBED_STATES {
        let rust = format!("state::is_final({s})");
        check(
            format!("is_final {s}"),
            "GYRE_STATE_IS_FINAL",
            rust,
            state::is_final(s).into(),
            0,
        );
    }
    assert!(
        errors.is_empty(),
        "gyre/abi.h disagrees with gyre-abi:\n  {}",
        errors.join("\n  ")
    );
}

/// Every constant of `src/lib.rs` and every `GYRE_*` macro of the header is compared.
#[test]
fn every_constant_is_covered() {
    let constants = constants();
    let covered_rust: BTreeSet<String> = constants.iter().map(|c| c.rust.clone()).collect();
    let covered_c: BTreeSet<&str> = constants.iter().map(|c| c.c).collect();

    let mut errors = Vec::new();
    for name in declared_rust_constants().difference(&covered_rust) {
        errors.push(format!(
            "gyre_abi::{name} is declared in src/lib.rs but not compared with abi.h: \
             add it to constants() in tests/c_probe.rs and a GYRE_* macro to the header"
        ));
    }
    for name in defined_c_macros() {
        if !covered_c.contains(name.as_str()) && !HELPER_MACROS.contains(&name.as_str()) {
            errors.push(format!(
                "{name} is defined in abi.h but has no Rust counterpart in constants() \
                 (or is a helper missing from HELPER_MACROS)"
            ));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// Every byte of each ABI struct belongs to a named field: no implicit padding, whose
/// contents would be unspecified on both sides.
#[test]
fn abi_structs_have_no_implicit_padding() {
    for l in layouts() {
        let mut fields: Vec<&Field> = l.fields.iter().collect();
        fields.sort_by_key(|f| f.offset);
        let mut at = 0;
        for f in fields {
            assert_eq!(
                f.offset, at,
                "{}.{} starts at byte {} but the previous field ends at {at}",
                l.rust, f.name, f.offset
            );
            at += f.size;
        }
        assert_eq!(
            at, l.size,
            "{}: fields end at byte {at}, the struct at {}",
            l.rust, l.size
        );
    }
}

/// The header is valid C++17 (compile only), and compiles without any host header when
/// `__CUDACC_RTC__` is defined, as under NVRTC.
#[test]
fn header_compiles_as_cpp17_and_without_host_headers() {
    let dir = scratch_dir("cpp");
    let src = dir.join("abi_check.cpp");
    std::fs::write(
        &src,
        "#include \"gyre/abi.h\"\n\
         #include <type_traits>\n\
         static_assert(std::is_standard_layout<gyre_control_block>::value, \"layout\");\n\
         static_assert(std::is_standard_layout<gyre_slot_header>::value, \"layout\");\n\
         static_assert(std::is_standard_layout<gyre_telemetry_buffer>::value, \"layout\");\n\
         static_assert(std::is_trivially_copyable<gyre_control_block>::value, \"copy\");\n\
         static_assert(std::is_trivially_copyable<gyre_slot_header>::value, \"copy\");\n\
         static_assert(std::is_trivially_copyable<gyre_telemetry_buffer>::value, \"copy\");\n\
         unsigned gyre_abi_check(const gyre_control_block *cb) {\n\
         \x20   return cb->magic == GYRE_MAGIC ? cb->state : GYRE_STATE_FAULTED;\n\
         }\n",
    )
    .expect("write abi_check.cpp");

    let tool = compiler(true, &dir);
    let mut cmd = tool.to_command();
    cmd.arg("-std=c++17")
        .args(STRICT)
        .arg("-I")
        .arg(INCLUDE_DIR)
        .arg("-c")
        .arg(&src)
        .arg("-o")
        .arg(dir.join("abi_check.o"));
    run(cmd, "compiling gyre/abi.h as C++17");

    // NVRTC provides no host headers: the header must need none under __CUDACC_RTC__.
    // gcc/clang lack NVRTC's __INTADDR__, so the (overridable) offsetof is theirs.
    let mut cmd = tool.to_command();
    cmd.args([
        "-std=c++17",
        "-nostdinc",
        "-D__CUDACC_RTC__",
        "-DGYRE_OFFSETOF(type,field)=__builtin_offsetof(type,field)",
        "-fsyntax-only",
        "-x",
        "c++",
    ])
    .args(STRICT)
    .arg(HEADER);
    run(
        cmd,
        "compiling gyre/abi.h as C++17 without host headers (__CUDACC_RTC__)",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

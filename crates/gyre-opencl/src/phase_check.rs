//! A handler's phase function run over one work-group of `lanes` work-items the way the
//! block loop (`gyre/block.h`, K5) runs it, a barrier after every phase, but without the
//! ring: requests from one buffer, replies to another, one request after the other.
//!
//! It exists because PoCL miscompiles the multi-lane build of the whole ring loop (the
//! ring kernel runs one work-item per group there, see [`crate::backend::CPU_LANES`]),
//! while this small kernel, with its barriers in a loop, builds and runs: so the
//! multi-lane paths of device handlers (lane strides, block-shared words, phases) execute
//! on a real OpenCL implementation in CI. `tests/portable_handlers.rs` checks the
//! lane-parallel handlers `#[gyre::handler(lanes)]` generates with it.

use gyre_core::region::RegionMemory as _;
use opencl3::command_queue::CommandQueue;
use opencl3::kernel::Kernel;

use crate::backend::OpenClBackend;
use crate::error::{check, Result};
use crate::memory::SvmRegion;
use crate::program::{self, Handler};

/// The entry point of the phase-check kernel.
pub const ENTRY: &str = "gyre_phase_check";

const KERNEL: &str = r#"
__kernel void gyre_phase_check(__global const unsigned char *reqs, __global unsigned char *replies,
                               __global uint *out, uint n, uint req_len, uint reply_cap,
                               uint msg_type, uint in_place) {
    __local gyre_hblock hb;
    gyre_hlane l;
    uint r;
    l.u64 = 0ul;
    l.u32 = 0u;
    l.f32 = 0.0f;
    for (r = 0u; r < n; ++r) {
        uint phase = 0u;
        if (get_local_id(0) == 0u) {
            hb.status = 0u;
            hb.reply_len = 0u;
            hb.panicked = 0u;
        }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        while (phase != GYRE_PHASE_DONE) {
            gyre_hcall c;
            uint next;
            c.reply = replies + (ulong)r * reply_cap;
            /* A loan kernel's request is its reply block (the host copied it there). */
            c.req = in_place != 0u ? c.reply : reqs + (ulong)r * req_len;
            c.msg_type = msg_type;
            c.req_len = req_len;
            c.reply_cap = reply_cap;
            c.lane = (uint)get_local_id(0);
            c.lanes = (uint)get_local_size(0);
            c.seq = 0u;
            next = GYRE_HANDLER_PHASE(phase, &c, &l, &hb);
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            phase = next;
        }
        if (get_local_id(0) == 0u) {
            out[3u * r] = hb.status;
            out[3u * r + 1u] = hb.reply_len;
            out[3u * r + 2u] = hb.panicked;
        }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    }
}
"#;

/// What the handler answered to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `b->status`.
    pub status: u32,
    /// `b->reply_len`.
    pub reply_len: u32,
    /// `b->panicked`: the block loop would answer HANDLER_PANIC and fault.
    pub panicked: bool,
    /// The first `reply_len` bytes of the reply.
    pub reply: Vec<u8>,
}

/// Runs `handler`'s phase function over one work-group of `lanes` work-items for each of
/// `requests` (all of one length), with message type `msg_type` and `reply_cap` bytes of
/// reply room each.
///
/// # Errors
///
/// [`crate::Error::Build`] with the compiler's log, [`crate::Error::Cl`] for a failed
/// call (a work-group size the device refuses among them).
pub fn run(
    backend: &OpenClBackend,
    handler: Handler<'_>,
    lanes: u32,
    msg_type: u32,
    requests: &[Vec<u8>],
    reply_cap: u32,
) -> Result<Vec<Answer>> {
    run_with(
        backend, handler, lanes, msg_type, requests, reply_cap, false,
    )
}

/// [`run`] for a loan kernel's handler: each request is copied to the start of a block
/// of `block` bytes, which the handler gets as both its request and its reply (in place,
/// as the block loop passes a loan), and the answer's bytes are the block's.
///
/// # Errors
///
/// As [`run`].
pub fn run_loans(
    backend: &OpenClBackend,
    handler: Handler<'_>,
    lanes: u32,
    requests: &[Vec<u8>],
    block: u32,
) -> Result<Vec<Answer>> {
    run_with(backend, handler, lanes, 0, requests, block, true)
}

fn run_with(
    backend: &OpenClBackend,
    handler: Handler<'_>,
    lanes: u32,
    msg_type: u32,
    requests: &[Vec<u8>],
    reply_cap: u32,
    in_place: bool,
) -> Result<Vec<Answer>> {
    let (ctx, registry, info, options) = backend.parts();
    let req_len = requests.first().map_or(0, Vec::len);
    let source = program::expand_source(
        "phase_check.cl",
        &format!(
            "#include \"gyre/port_opencl.h\"\n#include \"gyre/handler.h\"\n#line 1 \"{}\"\n{}\n#line 1 \"phase_check.cl\"\n{KERNEL}",
            handler.name(),
            handler.source()
        ),
    );
    let built = program::build(ctx, info, handler.name(), &source, &options.to_cl_options())?;
    let kernel = check("clCreateKernel", Kernel::create(&built, ENTRY), || {
        format!(", {ENTRY}")
    })?;
    let queue = check(
        "clCreateCommandQueueWithProperties",
        opencl3::command_queue::CommandQueue::create_default_with_properties(ctx, 0, 0),
        || ", in-order, for the phase check".into(),
    )?;
    let n = requests.len();
    let reqs = SvmRegion::zeroed(ctx, registry, (n * req_len).max(128))?;
    let replies = SvmRegion::zeroed(ctx, registry, (n * reply_cap as usize).max(128))?;
    let out = SvmRegion::zeroed(ctx, registry, (n * 12).max(128))?;
    for (k, r) in requests.iter().enumerate() {
        debug_assert_eq!(r.len(), req_len);
        // SAFETY: `reqs` holds n * req_len bytes, no kernel runs yet; r has req_len bytes.
        unsafe {
            core::ptr::copy_nonoverlapping(
                r.as_ptr(),
                reqs.base().as_ptr().add(k * req_len),
                req_len.min(r.len()),
            );
        }
        if in_place {
            // SAFETY: `replies` holds n * reply_cap bytes, no kernel runs yet; at most
            // reply_cap of r's bytes are copied to the start of block k.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    r.as_ptr(),
                    replies.base().as_ptr().add(k * reply_cap as usize),
                    r.len().min(reply_cap as usize),
                );
            }
        }
    }
    let group = [lanes as usize];
    let scalars = [
        n as u32,
        req_len as u32,
        reply_cap,
        msg_type,
        u32::from(in_place),
    ];
    // SAFETY: three SVM pointers of this context, each large enough for what the kernel
    // touches (n requests, n replies, 3 words per request); five uint scalars; they
    // outlive the command (clFinish below).
    unsafe {
        for (i, buf) in [&reqs, &replies, &out].into_iter().enumerate() {
            check(
                "clSetKernelArgSVMPointer",
                kernel.set_arg_svm_pointer(i as u32, buf.base().as_ptr().cast()),
                || ", phase check".into(),
            )?;
        }
        for (i, v) in scalars.iter().enumerate() {
            check("clSetKernelArg", kernel.set_arg(3 + i as u32, v), || {
                ", phase check".into()
            })?;
        }
        check(
            "clEnqueueNDRangeKernel",
            queue.enqueue_nd_range_kernel(
                kernel.get(),
                1,
                std::ptr::null(),
                group.as_ptr(),
                group.as_ptr(),
                &[],
            ),
            || format!(", one work-group of {lanes} work-items"),
        )?;
    }
    check("clFinish", CommandQueue::finish(&queue), || {
        ", phase check".into()
    })?;
    let word = |i: usize| -> u32 {
        // SAFETY: the kernel finished; `out` holds 3 words per request (fine-grained SVM).
        unsafe { core::ptr::read_volatile(out.base().as_ptr().cast::<u32>().add(i)) }
    };
    Ok((0..n)
        .map(|k| {
            let reply_len = word(3 * k + 1);
            let take = (reply_len as usize).min(reply_cap as usize);
            let mut reply = vec![0u8; take];
            // SAFETY: the kernel finished; reply k lies within `replies`.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    replies.base().as_ptr().add(k * reply_cap as usize),
                    reply.as_mut_ptr(),
                    take,
                );
            }
            Answer {
                status: word(3 * k),
                reply_len,
                panicked: word(3 * k + 2) != 0,
                reply,
            }
        })
        .collect())
}

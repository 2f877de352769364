// cuda/probes/fastpath_probe.cu -- the design probe behind gyre's checked-slot fast path
// (docs/protocol.md, "Checked slots"). A standalone CUDA program, like the reference floor
// program it extends: it measures, on one GPU and in one run,
//
//   1. the floor: a word ping-pong through mapped pinned memory (persistent kernel);
//   2. a 128-byte slot ping-pong seen in ONE read wave: the kernel reads the whole slot
//      (8 lanes x 16 B, independent loads) and accepts it when its sequence is the index's
//      and its check word is the hash of the rest; the reply goes back the same way, with
//      no fence per message (the host checks the hash); with and without one fence per
//      batch, and polling a window of 1 or 32 slots;
//   3. windowed batches: 128 lanes read a window of W slots in one wave, answer the ready
//      prefix, then one fence and one tail store per batch; the next window's loads are
//      issued before this window's replies are written;
//   4. the units the hardware keeps whole: the host writes 16-byte units (one SSE store;
//      two 8-byte stores as the positive control) while the GPU reads them with one 16-byte
//      load, and the other way round; also whether a 64-byte line read by 4 lanes is a
//      snapshot;
//   5. the price of a system fence with and without posted stores in flight.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 cuda/probes/fastpath_probe.cu -o fastpath_probe && ./fastpath_probe
#include <cuda_runtime.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e = (x);                                                                   \
        if (e != cudaSuccess) {                                                                \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__);   \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

typedef unsigned long long u64;
typedef unsigned int u32;

static inline u64 now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
static void report(const char *name, std::vector<u64> &v) {
    std::sort(v.begin(), v.end());
    double mean = 0;
    for (u64 x : v) mean += x;
    mean /= v.size();
    printf("%-44s p50 %7.2f us  p99 %7.2f us  p99.9 %7.2f us  mean %7.2f us\n", name,
           v[v.size() / 2] / 1e3, v[v.size() * 99 / 100] / 1e3, v[v.size() * 999 / 1000] / 1e3,
           mean / 1e3);
}

// ---- the check word: a sum of mixed words, so lanes can each hash their own 16 bytes -----
__host__ __device__ __forceinline__ u64 fmix64(u64 x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}
__host__ __device__ __forceinline__ u64 term(u64 w, u32 j) {
    return fmix64(w ^ (0x9e3779b97f4a7c15ull * (u64)(j + 1)));
}
// slot words: 0 seq, 1 corr, 2 enq, 3 type|len, 4 flags|status, 5 check, 6-7 reserved,
// 8..15 payload (64 B)
struct __align__(128) Slot {
    u64 w[16];
};
static u64 host_hash(const u64 *w) {
    u64 h = 0;
    for (u32 j = 0; j < 16; ++j)
        if (j != 5) h += term(w[j], j);
    return h;
}

__device__ __forceinline__ void ld16(const void *p, u64 &a, u64 &b) {
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
__device__ __forceinline__ void st16(void *p, u64 a, u64 b) {
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ u64 ld8(const void *p) {
    u64 v;
    asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st8(void *p, u64 v) {
    asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ u64 gtime() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// ---- 1. floor ----------------------------------------------------------------------------
__global__ void pingpong(volatile u64 *h2k, volatile u64 *k2h, u64 n) {
    for (u64 i = 1; i <= n; ++i) {
        while (*h2k != i) {
        }
        *k2h = i;
    }
}

// ---- 2 + 3. the checked-slot ring kernel ---------------------------------------------------
// ctl: [0] stop flag (host), [16] k2h_tail (host: replies consumed), [32] tail (kernel:
// requests answered). Ring of `cap` slots each way. 128 lanes; a window of `win` slots
// (<= 256) per wave; at most `batch` answered per batch; fence: one system fence per batch
// before the tail store (1) or none (0).
struct Shared {
    u32 first_bad;
    u32 stop;
    u64 k2h_tail;
};
// flags of the ring kernel (and the host's side of F_NOHASH)
#define F_FENCE 1u  /* one system fence per batch, before the tail store */
#define F_NOHASH 2u /* accept on the sequence alone (measures the check's price) */
#define F_NOSTOP 4u /* read the stop word every 64 empty polls, not every poll */
#define F_LDCV 8u   /* ld.global.cv instead of ld.volatile */
#define F_STWT 16u  /* st.global.wt instead of st.volatile */
static bool g_hash = true;

__device__ __forceinline__ void ldu(const void *p, u64 &a, u64 &b, u32 flags) {
    if (flags & F_LDCV)
        asm volatile("ld.global.cv.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
    else
        ld16(p, a, b);
}
__device__ __forceinline__ void stu(void *p, u64 a, u64 b, u32 flags) {
    if (flags & F_STWT)
        asm volatile("st.global.wt.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
    else
        st16(p, a, b);
}

// PER = 16-byte units per lane (win * 8 / lanes, rounded up): a compile-time count, so the
// loaded words stay in registers and the loads of a window are in flight together.
template <u32 PER>
__global__ void ring(u64 *ctl, const Slot *req, Slot *rep, u32 cap, u32 win, u32 batch,
                     u32 flags, u64 stop_at) {
    __shared__ Shared sh;
    const u32 lane = threadIdx.x;
    const u32 L = blockDim.x;
    u64 tail = 0;
    u32 idle = 0;
    // units of the window: unit u = lane + L * k, slot u / 8, part u % 8 (16 B each)
    const u32 units = win * 8;
    u64 a[PER], b[PER];
    u64 ktail = 0;
#pragma unroll
    for (u32 k = 0; k < PER; ++k) {
        const u32 u = lane + L * k;
        if (u < units) ldu(&req[(tail + u / 8) & (cap - 1)].w[(u % 8) * 2], a[k], b[k], flags);
    }
    if (lane == 0) ktail = ld8(&ctl[2]);
    while (tail < stop_at) {
        if (lane == 0) {
            sh.first_bad = win;
            sh.k2h_tail = ktail;
            if (!(flags & F_NOSTOP) || (idle & 63u) == 63u) sh.stop = ld8(&ctl[0]) != 0;
            else sh.stop = 0;
        }
        __syncthreads();
#pragma unroll
        for (u32 k = 0; k < PER; ++k) {
            const u32 u = lane + L * k;
            const u32 part = u % 8;
            const u64 idx = tail + u / 8;
            u64 h = 0;
            if (!(flags & F_NOHASH)) {
                h += term(a[k], part * 2);
                if (part * 2 + 1 != 5) h += term(b[k], part * 2 + 1);
                h += __shfl_xor_sync(0xffffffffu, h, 1);
                h += __shfl_xor_sync(0xffffffffu, h, 2);
                h += __shfl_xor_sync(0xffffffffu, h, 4);
            }
            const u64 seq = __shfl_sync(0xffffffffu, a[k], (lane & ~7u));
            const u64 chk = __shfl_sync(0xffffffffu, b[k], (lane & ~7u) + 2);
            const bool ok = u < units && seq == idx + 1 && ((flags & F_NOHASH) || chk == h);
            if (u < units && part == 0 && !ok) atomicMin(&sh.first_bad, u / 8);
        }
        __syncthreads();
        u32 n = sh.first_bad;
        if (n > batch) n = batch;
        const u64 room = sh.k2h_tail + cap - tail;
        if (n > room) n = (u32)room;
        // keep the verified units, then issue the next window's loads before writing the
        // replies
        u64 ra[PER], rb[PER];
#pragma unroll
        for (u32 k = 0; k < PER; ++k) {
            ra[k] = a[k];
            rb[k] = b[k];
        }
        const u64 next = tail + n;
#pragma unroll
        for (u32 k = 0; k < PER; ++k) {
            const u32 u = lane + L * k;
            if (u < units) ldu(&req[(next + u / 8) & (cap - 1)].w[(u % 8) * 2], a[k], b[k], flags);
        }
        if (lane == 0) ktail = ld8(&ctl[2]);
        if (n == 0) {
            if (sh.stop) break;
            ++idle;
            __syncthreads();
            continue;
        }
        idle = 0;
        // replies: the request's words, a new check word (the echo keeps the words, so it
        // is the request's: recomputed anyway, as a handler would)
#pragma unroll
        for (u32 k = 0; k < PER; ++k) {
            const u32 u = lane + L * k;
            const u32 part = u % 8;
            const u32 s = u / 8;
            u64 x = ra[k], y = rb[k];
            if (!(flags & F_NOHASH)) {
                u64 h = term(x, part * 2);
                if (part * 2 + 1 != 5) h += term(y, part * 2 + 1);
                h += __shfl_xor_sync(0xffffffffu, h, 1);
                h += __shfl_xor_sync(0xffffffffu, h, 2);
                h += __shfl_xor_sync(0xffffffffu, h, 4);
                if (part == 2) y = h;
            }
            if (u < units && s < n) stu(&rep[(tail + s) & (cap - 1)].w[part * 2], x, y, flags);
        }
        if (flags & F_FENCE) __threadfence_system();
        __syncthreads();
        tail = next;
        if (lane == 0) st8(&ctl[4], tail);
    }
}

static void launch_ring(cudaStream_t st, u64 *ctl, const Slot *req, Slot *rep, u32 cap,
                        u32 win, u32 batch, u32 flags, u64 stop_at, u32 lanes) {
    const u32 per = (win * 8 + lanes - 1) / lanes;
    if (per <= 1) ring<1><<<1, lanes, 0, st>>>(ctl, req, rep, cap, win, batch, flags, stop_at);
    else if (per <= 2) ring<2><<<1, lanes, 0, st>>>(ctl, req, rep, cap, win, batch, flags, stop_at);
    else if (per <= 4) ring<4><<<1, lanes, 0, st>>>(ctl, req, rep, cap, win, batch, flags, stop_at);
    else if (per <= 8) ring<8><<<1, lanes, 0, st>>>(ctl, req, rep, cap, win, batch, flags, stop_at);
    else ring<16><<<1, lanes, 0, st>>>(ctl, req, rep, cap, win, batch, flags, stop_at);
    CK(cudaGetLastError());
}

static void fill(Slot *s, u64 i) {
    u64 w[16];
    w[0] = i + 1;
    w[1] = i;
    w[2] = 0;
    w[3] = (64ull << 32) | 1;
    w[4] = 1;
    w[6] = w[7] = 0;
    for (int j = 8; j < 16; ++j) w[j] = i * 31 + j;
    w[5] = g_hash ? host_hash(w) : 0;
    volatile u64 *d = s->w;
    for (int j = 1; j < 16; ++j) d[j] = w[j];
    std::atomic_thread_fence(std::memory_order_release);
    d[0] = w[0];
}
// 0 pending, 1 ok, 2 wrong payload
static int take(const Slot *s, u64 i) {
    volatile const u64 *d = s->w;
    if (d[0] != i + 1) return 0;
    u64 w[16];
    for (int j = 0; j < 16; ++j) w[j] = d[j];
    if (w[0] != i + 1 || (g_hash && w[5] != host_hash(w))) return 0;
    return w[15] == i * 31 + 15 ? 1 : 2;
}

struct RingRun {
    u64 *ctl;
    Slot *req, *rep;
    u32 cap;
};

static void ring_rtt(cudaStream_t st, const char *name, u32 win, u32 flags, u64 n, u32 lanes = 128) {
    g_hash = !(flags & F_NOHASH);
    const u32 cap = 1024;
    char *h;
    size_t bytes = 256 + 2 * cap * sizeof(Slot);
    CK(cudaHostAlloc(&h, bytes, cudaHostAllocMapped));
    memset(h, 0, bytes);
    u64 *ctl = (u64 *)h;
    Slot *req = (Slot *)(h + 256), *rep = req + cap;
    const u64 warm = 2000;
    launch_ring(st, ctl, req, rep, cap, win, win, flags, n + warm, lanes);
    std::vector<u64> v;
    u64 bad = 0;
    for (u64 i = 0; i < n + warm; ++i) {
        u64 t = now_ns();
        fill(&req[i & (cap - 1)], i);
        int r;
        const u64 t_wait = now_ns();
        while ((r = take(&rep[i & (cap - 1)], i)) == 0) {
            if (now_ns() - t_wait > 2000000000ull) {
                printf("%s: TIMEOUT waiting for reply %llu\n", name, i);
                ((volatile u64 *)ctl)[0] = 1;
                CK(cudaStreamSynchronize(st));
                CK(cudaFreeHost(h));
                return;
            }
        }
        if (r == 2) ++bad;
        ((volatile u64 *)ctl)[2] = i + 1;
        if (i >= warm) v.push_back(now_ns() - t);
    }
    ((volatile u64 *)ctl)[0] = 1;
    CK(cudaStreamSynchronize(st));
    report(name, v);
    if (bad) printf("  WRONG PAYLOADS: %llu\n", bad);
    CK(cudaFreeHost(h));
}

// one host thread keeps up to cap in flight: writes up to B, reads what came back
static void ring_tput(cudaStream_t st, u32 B, u32 flags, int threads, u32 lanes = 128) {
    g_hash = !(flags & F_NOHASH);
    const u32 cap = 4096;
    const u32 win = B < 256 ? B : 256;
    char *h;
    size_t bytes = 256 + 2 * cap * sizeof(Slot);
    CK(cudaHostAlloc(&h, bytes, cudaHostAllocMapped));
    memset(h, 0, bytes);
    u64 *ctl = (u64 *)h;
    Slot *req = (Slot *)(h + 256), *rep = req + cap;
    const u64 n = B <= 1 ? 200000 : 4000000;
    launch_ring(st, ctl, req, rep, cap, win, B, flags, n, lanes);
    std::atomic<u64> recvd{0};
    u64 bad = 0;
    u64 t0 = now_ns();
    if (threads == 1) {
        u64 sent = 0, got = 0, last = now_ns(), lastgot = 0;
        while (got < n) {
            if (got != lastgot) {
                lastgot = got;
                last = now_ns();
            } else if (now_ns() - last > 2000000000ull) {
                printf("B=%u: TIMEOUT at %llu of %llu\n", B, got, n);
                ((volatile u64 *)ctl)[0] = 1;
                CK(cudaStreamSynchronize(st));
                CK(cudaFreeHost(h));
                return;
            }
            u64 want = std::min<u64>(B, n - sent);
            if (want > 0 && sent + want - got <= cap) {
                for (u64 i = sent; i < sent + want; ++i) fill(&req[i & (cap - 1)], i);
                sent += want;
            }
            u64 g0 = got;
            while (got < sent) {
                int r = take(&rep[got & (cap - 1)], got);
                if (r == 0) break;
                if (r == 2) ++bad;
                ++got;
                if (got - g0 >= B) break;
            }
            if (got != g0) ((volatile u64 *)ctl)[2] = got;
        }
    } else {
        const u64 deadline = t0 + 10000000000ull;
        std::atomic<bool> late{false};
        std::thread cons([&] {
            u64 got = 0;
            while (got < n) {
                if (now_ns() > deadline) {
                    late = true;
                    ((volatile u64 *)ctl)[0] = 1;
                    break;
                }
                int r = take(&rep[got & (cap - 1)], got);
                if (r == 0) continue;
                ++got;
                if ((got & 31) == 0 || got == n) {
                    ((volatile u64 *)ctl)[2] = got;
                    recvd.store(got, std::memory_order_release);
                }
            }
        });
        u64 sent = 0;
        while (sent < n) {
            u64 want = std::min<u64>(B, n - sent);
            while (sent + want - recvd.load(std::memory_order_acquire) > cap && !late) {
            }
            if (late) break;
            for (u64 i = sent; i < sent + want; ++i) fill(&req[i & (cap - 1)], i);
            sent += want;
        }
        cons.join();
        if (late) printf("B=%u, 2 threads: TIMEOUT\n", B);
    }
    u64 dt = now_ns() - t0;
    CK(cudaStreamSynchronize(st));
    printf("checked ring B=%4u flags=%2u lanes=%3u host threads=%d: %7.2f M msg/s%s\n", B,
           flags, lanes, threads, (double)n / dt * 1e3, bad ? "  WRONG PAYLOADS" : "");
    CK(cudaFreeHost(h));
}

// ---- 4. units kept whole ------------------------------------------------------------------
// The host writes 64 units of 16 B (4 lines) with value v in all four words, units in
// increasing order. GPU lanes read them: a unit with unequal words is torn; a line (4
// lanes, units 4L..4L+3, one coalesced request) whose later unit is newer than an earlier
// one was not read as one snapshot.
__global__ void read_units(const u32 *units, u64 iters, u64 *out) {
    const u32 lane = threadIdx.x; // 128 lanes: 2 passes over 64 units
    const u32 u = lane % 64;
    u64 torn = 0, nonsnap = 0, reads = 0;
    for (u64 it = 0; it < iters; ++it) {
        u32 x0, x1, x2, x3;
        asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                     : "l"(units + 4 * u)
                     : "memory");
        ++reads;
        if (x0 != x1 || x0 != x2 || x0 != x3) ++torn;
        // line check among the 4 lanes of a line
        const u32 prev = __shfl_up_sync(0xffffffffu, x0, 1);
        if ((u % 4) != 0 && x0 > prev) ++nonsnap;
    }
    atomicAdd(&out[0], torn);
    atomicAdd(&out[1], nonsnap);
    atomicAdd(&out[2], reads);
}
__global__ void write_units(u32 *units, u64 iters, u32 split) {
    const u32 lane = threadIdx.x; // 64 lanes, one unit each
    for (u64 it = 1; it <= iters; ++it) {
        const u32 v = (u32)it;
        if (split) {
            asm volatile("st.volatile.global.v2.u32 [%0], {%1,%2};" ::"l"(units + 4 * lane), "r"(v), "r"(v) : "memory");
            asm volatile("st.volatile.global.v2.u32 [%0], {%1,%2};" ::"l"(units + 4 * lane + 2), "r"(v), "r"(v) : "memory");
        } else {
            asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(units + 4 * lane), "r"(v), "r"(v), "r"(v), "r"(v) : "memory");
        }
    }
}

static void units_host_writes(cudaStream_t st, bool split) {
    u32 *h;
    CK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped));
    memset(h, 0, 4096);
    u64 *out;
    CK(cudaHostAlloc(&out, 64, cudaHostAllocMapped));
    memset(out, 0, 64);
    std::atomic<bool> stop{false};
    std::thread w([&] {
        u32 v = 0;
        while (!stop.load(std::memory_order_relaxed)) {
            ++v;
            for (int u = 0; u < 64; ++u) {
                if (split) {
                    volatile u64 *p = (volatile u64 *)(h + 4 * u);
                    const u64 x = ((u64)v << 32) | v;
                    p[0] = x;
                    p[1] = x;
                } else {
                    _mm_store_si128((__m128i *)(h + 4 * u), _mm_set1_epi32((int)v));
                }
            }
        }
    });
    read_units<<<1, 128, 0, st>>>(h, 200000, out);
    CK(cudaStreamSynchronize(st));
    stop = true;
    w.join();
    printf("host writes 16-B units (%s), GPU 16-B loads: %llu reads, %llu torn units, %llu "
           "non-snapshot 64-B lines\n",
           split ? "two 8-B stores: positive control" : "one SSE store", out[2], out[0], out[1]);
    CK(cudaFreeHost(h));
    CK(cudaFreeHost(out));
}

static void units_gpu_writes(cudaStream_t st, bool split) {
    u32 *h;
    CK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped));
    memset(h, 0, 4096);
    write_units<<<1, 64, 0, st>>>(h, 3000000, split ? 1 : 0);
    CK(cudaGetLastError());
    u64 reads = 0, torn = 0;
    while (cudaStreamQuery(st) == cudaErrorNotReady) {
        for (int u = 0; u < 64; ++u) {
            __m128i x = _mm_load_si128((const __m128i *)(h + 4 * u));
            u32 w[4];
            _mm_storeu_si128((__m128i *)w, x);
            ++reads;
            if (w[0] != w[1] || w[0] != w[2] || w[0] != w[3]) ++torn;
        }
    }
    CK(cudaStreamSynchronize(st));
    printf("GPU writes 16-B units (%s), host 16-B loads: %llu reads, %llu torn units\n",
           split ? "two 8-B stores: positive control" : "one st.v4", reads, torn);
    CK(cudaFreeHost(h));
}

// ---- 5. fences ----------------------------------------------------------------------------
__global__ void fences(u64 *sys, u64 *out) {
    const int N = 1000;
    u64 t0 = gtime();
    for (int i = 0; i < N; ++i) __threadfence_system();
    u64 t1 = gtime();
    for (int i = 0; i < N; ++i) {
        st8(sys + (i & 7) * 8, i);
        __threadfence_system();
    }
    u64 t2 = gtime();
    for (int i = 0; i < N; ++i) {
        st8(sys + (i & 7) * 8, i);
        asm volatile("fence.acq_rel.sys;" ::: "memory");
    }
    u64 t3 = gtime();
    for (int i = 0; i < N; ++i) {
        st8(sys + (i & 7) * 8, i);
        __threadfence();
    }
    u64 t4 = gtime();
    out[0] = (t1 - t0) / N;
    out[1] = (t2 - t1) / N;
    out[2] = (t3 - t2) / N;
    out[3] = (t4 - t3) / N;
}

__global__ void empty() {}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    int drv = 0;
    cudaDriverGetVersion(&drv);
    printf("device: %s, sm_%d%d, driver API %d\n", prop.name, prop.major, prop.minor, drv);
    CK(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceMapHost));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const u64 N = 20000;
    {
        std::vector<u64> v;
        for (int i = 0; i < 2000; ++i) {
            empty<<<1, 1, 0, st>>>();
            CK(cudaStreamSynchronize(st));
        }
        for (u64 i = 0; i < N; ++i) {
            u64 t = now_ns();
            empty<<<1, 1, 0, st>>>();
            CK(cudaStreamSynchronize(st));
            v.push_back(now_ns() - t);
        }
        report("launch+sync (empty kernel)", v);
    }
    {
        u64 *h;
        CK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped));
        memset(h, 0, 4096);
        volatile u64 *h2k = h, *k2h = h + 16;
        pingpong<<<1, 1, 0, st>>>(h, h + 16, N + 2000);
        CK(cudaGetLastError());
        std::vector<u64> v;
        for (u64 i = 1; i <= N + 2000; ++i) {
            u64 t = now_ns();
            *h2k = i;
            while (*k2h != i) {
            }
            if (i > 2000) v.push_back(now_ns() - t);
        }
        CK(cudaStreamSynchronize(st));
        report("floor: mapped word ping-pong", v);
        CK(cudaFreeHost(h));
    }
    ring_rtt(st, "slot w1: hash, stop read each poll", 1, 0, N);
    ring_rtt(st, "slot w1: no hash", 1, F_NOHASH, N);
    ring_rtt(st, "slot w1: hash, stop read /64", 1, F_NOSTOP, N);
    ring_rtt(st, "slot w1: no hash, stop read /64", 1, F_NOHASH | F_NOSTOP, N);
    ring_rtt(st, "slot w1: hash, /64, ld.cv", 1, F_NOSTOP | F_LDCV, N);
    ring_rtt(st, "slot w1: hash, /64, st.wt", 1, F_NOSTOP | F_STWT, N);
    ring_rtt(st, "slot w1: hash, /64, fence per batch", 1, F_NOSTOP | F_FENCE, N);
    ring_rtt(st, "slot w1: hash, /64, 32 lanes", 1, F_NOSTOP, N, 32);
    ring_rtt(st, "slot w32: hash, /64", 32, F_NOSTOP, N);
    ring_rtt(st, "slot w8: hash, /64", 8, F_NOSTOP, N);
    for (u32 B : {1u, 8u, 32u, 64u, 256u}) ring_tput(st, B, F_NOSTOP | F_FENCE, 1);
    for (u32 B : {32u, 64u, 256u}) ring_tput(st, B, F_NOSTOP | F_FENCE, 2);
    for (u32 B : {32u, 64u, 256u}) ring_tput(st, B, F_NOSTOP | F_FENCE, 2, 512);
    for (u32 B : {32u, 256u}) ring_tput(st, B, F_NOSTOP | F_FENCE | F_NOHASH, 2, 512);
    for (u32 B : {32u, 256u}) ring_tput(st, B, F_NOSTOP | F_FENCE | F_LDCV, 2, 512);
    if (argc > 1 && strcmp(argv[1], "ring") == 0) return 0;
    units_host_writes(st, false);
    units_host_writes(st, true);
    units_gpu_writes(st, false);
    units_gpu_writes(st, true);
    {
        u64 *h, *out;
        CK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped));
        CK(cudaHostAlloc(&out, 64, cudaHostAllocMapped));
        fences<<<1, 1, 0, st>>>(h, out);
        CK(cudaStreamSynchronize(st));
        printf("fence.sc.sys alone %llu ns; st.sys + fence.sc.sys %llu ns; st.sys + "
               "fence.acq_rel.sys %llu ns; st.sys + fence.gpu %llu ns\n",
               out[0], out[1], out[2], out[3]);
    }
    printf("done\n");
    return 0;
}

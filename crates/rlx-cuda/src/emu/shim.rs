//! The host runtime the emulator compiles in front of a generated program: CUDA's (and
//! HIP's, which spells them the same) thread indices, `__syncthreads` over cooperative
//! fibers (one `ucontext` per thread of a block; a barrier switches back to the
//! scheduler), `__shared__` as function-static storage (blocks run one after another),
//! and `atomicCAS`. HIP's dialect differs only in its preamble lines (comments and
//! compiler pragmas, which the host compiler ignores or honours alike) and its shuffle.
//!
//! Warp shuffles (`__shfl_xor_sync(mask, v, lane_mask, width)`, CUDA: the full warp of
//! 32 threads takes part; `__shfl_xor(v, lane_mask, width)`, HIP: the `width`-thread
//! segment takes part) have the devices' semantics: every thread of the group offers
//! its value in an exchange slot and waits at a group-local barrier (the fiber switches
//! back to the scheduler); when every thread of the group waits at its shuffle of the
//! same sequence number, the group runs on and each thread reads its partner's slot
//! (lane `lane ^ lane_mask` of its `width` segment; its own value when that lane lies
//! outside the segment). Two slots per thread, alternating by sequence number, keep a
//! fast partner's next offer from overwriting a value not yet read. A group whose
//! threads do not all reach the same shuffle (some exited, wait at `__syncthreads` or
//! at another shuffle; a partial warp; a mask other than the full warp's) is reported,
//! as is a shuffle in a launch run without fibers.

/// C++ text defining the CUDA built-ins the generated code uses.
pub const SHIM: &str = r#"
#define RLX_EMU 1
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
struct rlx_dim3 { unsigned x, y, z; };
static rlx_dim3 threadIdx, blockIdx, blockDim, gridDim;

// `waiting`: 0 runnable, 1 at `__syncthreads`, 2 at a shuffle of `group` threads (its
// `shuffles`-th).
struct RlxFiber { ucontext_t ctx; int done; int waiting; int group; unsigned long long shuffles; };
static ucontext_t rlx_main_ctx;
static RlxFiber* rlx_fibers = 0;
static char* rlx_stacks = 0;
static int rlx_cap = 0, rlx_cur = 0;
static const size_t RLX_STACK = 256 * 1024;
static void (*rlx_body)(const void*) = 0;
static const void* rlx_arg = 0;
static int rlx_error = 0;
// Two exchange slots per thread (shuffles); whether a block runs on fibers; the first
// misuse of a shuffle (3: outside fibers, 4: a partial warp mask).
static unsigned long long* rlx_xchg = 0;
static int rlx_in_block = 0;
static int rlx_misuse = 0;

static void __syncthreads() {
  rlx_fibers[rlx_cur].waiting = 1;
  swapcontext(&rlx_fibers[rlx_cur].ctx, &rlx_main_ctx);
}
template <typename T> static T rlx_shfl_xor(T v, int lane_mask, int width, int group) {
  static_assert(sizeof(T) <= 8, "shuffles exchange at most 8 bytes");
  if (!rlx_in_block) { if (!rlx_misuse) rlx_misuse = 3; return v; }
  const int t = rlx_cur;
  RlxFiber* f = &rlx_fibers[t];
  const int slot = 2 * t + (int)(f->shuffles & 1);
  unsigned long long w = 0;
  memcpy(&w, &v, sizeof(T));
  rlx_xchg[slot] = w;
  f->waiting = 2; f->group = group;
  swapcontext(&f->ctx, &rlx_main_ctx);
  f->shuffles++;
  const int lane = t % width;
  int src = lane ^ lane_mask;
  if (src < 0 || src >= width) src = lane;
  const int from = t - lane + src;
  T r;
  memcpy(&r, &rlx_xchg[2 * from + (slot & 1)], sizeof(T));
  return r;
}
template <typename T>
static T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  if (mask != 0xffffffffu && !rlx_misuse) rlx_misuse = 4;
  return rlx_shfl_xor(v, lane_mask, width, 32);
}
template <typename T> static T __shfl_xor(T v, int lane_mask, int width = 32) {
  return rlx_shfl_xor(v, lane_mask, width, width);
}
static unsigned long long atomicCAS(unsigned long long* p, unsigned long long cmp,
                                    unsigned long long val) {
  unsigned long long old = *p;
  if (old == cmp) *p = val;
  return old;
}
static void rlx_fiber_entry() {
  rlx_body(rlx_arg);
  rlx_fibers[rlx_cur].done = 1;
}
static void rlx_set_thread(int t) {
  threadIdx.x = t % blockDim.x;
  threadIdx.y = (t / blockDim.x) % blockDim.y;
  threadIdx.z = t / (blockDim.x * blockDim.y);
}
// Whether the group of thread `t` (waiting at a shuffle) all waits at the same shuffle.
static int rlx_group_ready(int t, int n) {
  const RlxFiber* f = &rlx_fibers[t];
  const int g = f->group;
  if (g <= 0) return 0;
  const int base = t - t % g;
  if (base + g > n) return 0;
  for (int u = base; u < base + g; u++) {
    const RlxFiber* o = &rlx_fibers[u];
    if (o->done || o->waiting != 2 || o->group != g || o->shuffles != f->shuffles) return 0;
  }
  return 1;
}
// Run one block whose threads meet at barriers and shuffles: every live thread runs until
// it waits or finishes; then the shuffles whose groups are complete open (those threads
// run on), and only when no thread waits at a shuffle the block barrier opens. A thread
// that finishes while others wait at a barrier (1), or a shuffle group that cannot
// complete (2), is a bug in the generated code (CUDA would hang or misbehave): reported,
// not hidden.
static int rlx_run_block(int n) {
  if (n > rlx_cap) {
    free(rlx_fibers); free(rlx_stacks); free(rlx_xchg);
    rlx_fibers = (RlxFiber*)calloc(n, sizeof(RlxFiber));
    rlx_stacks = (char*)malloc((size_t)n * RLX_STACK);
    rlx_xchg = (unsigned long long*)calloc(2 * (size_t)n, sizeof(unsigned long long));
    rlx_cap = n;
  }
  for (int t = 0; t < n; t++) {
    RlxFiber* f = &rlx_fibers[t];
    f->done = 0; f->waiting = 0; f->group = 0; f->shuffles = 0;
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = rlx_stacks + (size_t)t * RLX_STACK;
    f->ctx.uc_stack.ss_size = RLX_STACK;
    f->ctx.uc_link = &rlx_main_ctx;
    makecontext(&f->ctx, (void (*)())rlx_fiber_entry, 0);
  }
  for (;;) {
    for (int t = 0; t < n; t++) {
      if (rlx_fibers[t].done || rlx_fibers[t].waiting) continue;
      rlx_cur = t;
      rlx_set_thread(t);
      swapcontext(&rlx_main_ctx, &rlx_fibers[t].ctx);
    }
    int shuffling = 0, opened = 0;
    for (int t = 0; t < n; t++) {
      if (rlx_fibers[t].done || rlx_fibers[t].waiting != 2) continue;
      shuffling = 1;
      if (!rlx_group_ready(t, n)) continue;
      const int g = rlx_fibers[t].group, base = t - t % g;
      for (int u = base; u < base + g; u++) rlx_fibers[u].waiting = 0;
      opened = 1;
    }
    if (opened) continue;
    if (shuffling) return 2;
    int live = 0, done = 0;
    for (int t = 0; t < n; t++) {
      if (rlx_fibers[t].done) done++; else live++;
      rlx_fibers[t].waiting = 0;
    }
    if (live == 0) return 0;
    if (done > 0) return 1;
  }
}
extern "C" int rlx_emu_run(void (*body)(const void*), const void* arg, unsigned gx,
                           unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                           int sync) {
  rlx_body = body; rlx_arg = arg; rlx_error = 0; rlx_misuse = 0;
  gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;
  blockDim.x = bx; blockDim.y = by; blockDim.z = bz;
  int n = (int)(bx * by * bz);
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
        if (sync) {
          rlx_in_block = 1;
          int r = rlx_run_block(n);
          rlx_in_block = 0;
          if (r) return r;
        } else {
          for (int t = 0; t < n; t++) { rlx_set_thread(t); body(arg); }
        }
        if (rlx_misuse) return rlx_misuse;
      }
  return 0;
}
"#;

//! The host runtime the emulator compiles in front of a generated program: CUDA's (and
//! HIP's, which spells them the same) thread indices, `__syncthreads` over cooperative
//! fibers (one `ucontext` per thread of a block; a barrier switches back to the
//! scheduler), `__shared__` as function-static storage (blocks run one after another),
//! and `atomicCAS`. HIP's dialect differs only in its preamble lines (comments and
//! compiler pragmas, which the host compiler ignores or honours alike).

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

struct RlxFiber { ucontext_t ctx; int done; int waiting; };
static ucontext_t rlx_main_ctx;
static RlxFiber* rlx_fibers = 0;
static char* rlx_stacks = 0;
static int rlx_cap = 0, rlx_cur = 0;
static const size_t RLX_STACK = 256 * 1024;
static void (*rlx_body)(const void*) = 0;
static const void* rlx_arg = 0;
static int rlx_error = 0;

static void __syncthreads() {
  rlx_fibers[rlx_cur].waiting = 1;
  swapcontext(&rlx_fibers[rlx_cur].ctx, &rlx_main_ctx);
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
// Run one block whose threads meet at barriers: every live thread runs until it waits or
// finishes; then the barrier opens. A thread that finishes while others wait is a bug
// in the generated code (CUDA would hang or misbehave): reported, not hidden.
static int rlx_run_block(int n) {
  if (n > rlx_cap) {
    free(rlx_fibers); free(rlx_stacks);
    rlx_fibers = (RlxFiber*)calloc(n, sizeof(RlxFiber));
    rlx_stacks = (char*)malloc((size_t)n * RLX_STACK);
    rlx_cap = n;
  }
  for (int t = 0; t < n; t++) {
    RlxFiber* f = &rlx_fibers[t];
    f->done = 0; f->waiting = 0;
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = rlx_stacks + (size_t)t * RLX_STACK;
    f->ctx.uc_stack.ss_size = RLX_STACK;
    f->ctx.uc_link = &rlx_main_ctx;
    makecontext(&f->ctx, (void (*)())rlx_fiber_entry, 0);
  }
  for (;;) {
    for (int t = 0; t < n; t++) {
      if (rlx_fibers[t].done) continue;
      rlx_cur = t;
      rlx_set_thread(t);
      swapcontext(&rlx_main_ctx, &rlx_fibers[t].ctx);
    }
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
  rlx_body = body; rlx_arg = arg; rlx_error = 0;
  gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;
  blockDim.x = bx; blockDim.y = by; blockDim.z = bz;
  int n = (int)(bx * by * bz);
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
        if (sync) {
          if (rlx_run_block(n)) return 1;
        } else {
          for (int t = 0; t < n; t++) { rlx_set_thread(t); body(arg); }
        }
      }
  return 0;
}
"#;

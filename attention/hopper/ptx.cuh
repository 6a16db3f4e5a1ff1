// Thin wrappers over the Hopper (sm_90a) instructions the kernels use: mbarriers, TMA bulk tensor
// copies, wgmma fences and matrix descriptors, named barriers, register reallocation.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "wgmma_ops.cuh"

namespace skipsoftmax::hopper {

// ln 2: natural log-sum-exps from the kernels' base-2 ones.
inline constexpr float kLn2 = 0.693147180559945309f;

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier ---------------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(std::uint64_t* bar, std::uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals));
}

// Makes barrier initialisation visible to the async proxy (the TMA unit) before first use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// `count` arrivals at once (on behalf of other threads).
__device__ __forceinline__ void mbar_arrive(std::uint64_t* bar, std::uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}

__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, std::uint32_t phase) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(phase)
      : "memory");
}

// ---- TMA --------------------------------------------------------------------------------------

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}

// 3-D tile load into shared memory, completing on `bar` with its byte count.
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, std::uint64_t* bar,
                                            int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads (wgmma,
// TMA) of the same memory.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- programmatic dependent launch --------------------------------------------------------------

// Lets the grid launched after this one as a programmatic dependent start (it must wait).
__device__ __forceinline__ void launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
// Waits until the grids this one depends on have completed and their memory is visible.
__device__ __forceinline__ void wait_on_dependencies() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// ---- wgmma ------------------------------------------------------------------------------------

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// wgmma_wait, kept behind the computation of `dep`. ptxas hoists a wait above independent work
// (its scheduler does not know that the wait blocks), which turns a softmax meant to overlap a
// product into a wait for it. A branch on `dep` ends the basic block, and ptxas does not move the
// wait above it. It is never taken: `dep` is a sum of exponentials, and NVIDIA arithmetic never
// yields the bit pattern 0xffffffff (its NaN is 0x7fffffff).
template <int kPending>
__device__ __forceinline__ void wgmma_wait_behind(float dep) {
  if (__float_as_uint(dep) == 0xffffffffu) __trap();
  wgmma_wait<kPending>();
}

// Pins registers that an in-flight wgmma reads or writes: the compiler may not move their reads,
// writes or copies across this point (call it around issue and after the wait).
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_registers(int (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_registers(std::uint32_t (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(d[i][j])::"memory");
  }
}

// Matrix descriptor of a 128-byte-swizzled shared-memory operand whose 1024-byte swizzle atoms
// are 1024-byte aligned. For K-major operands (8 rows of 128 bytes per atom) sbo is the byte
// distance between 8-row groups and lbo is unused; for MN-major operands lbo is the distance
// between 64-element column blocks and sbo the distance between 8-row (8-k) groups.
__device__ __forceinline__ std::uint64_t make_smem_desc(const void* p, std::uint32_t lbo,
                                                        std::uint32_t sbo) {
  std::uint64_t d = 0;
  d |= static_cast<std::uint64_t>((smem_addr(p) & 0x3FFFF) >> 4);
  d |= static_cast<std::uint64_t>((lbo >> 4) & 0x3FFF) << 16;
  d |= static_cast<std::uint64_t>((sbo >> 4) & 0x3FFF) << 32;
  d |= static_cast<std::uint64_t>(1) << 62;  // 128-byte swizzle
  return d;
}

// ---- warpgroup coordination -------------------------------------------------------------------

__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// AND of `pred` over the `threads` threads meeting at named barrier `id` (a whole-warpgroup vote
// in one instruction).
__device__ __forceinline__ bool named_barrier_and(int id, int threads, bool pred) {
  std::uint32_t out;
  asm volatile(
      "{\n"
      ".reg .pred pi, po;\n"
      "setp.ne.b32 pi, %1, 0;\n"
      "bar.red.and.pred po, %2, %3, pi;\n"
      "selp.u32 %0, 1, 0, po;\n"
      "}\n"
      : "=r"(out)
      : "r"(static_cast<std::uint32_t>(pred)), "r"(id), "r"(threads)
      : "memory");
  return out != 0;
}

template <int kRegs>
__device__ __forceinline__ void reg_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void reg_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// Two floats to one register of two 16-bit values (low half first), as wgmma's A operand wants.
template <bool kBf16>
__device__ __forceinline__ std::uint32_t pack_half2(float lo, float hi) {
  std::uint32_t r;
  if constexpr (kBf16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace skipsoftmax::hopper

// What a skipped tile costs when its vote's Q K^T runs in int8 (a certified pre-filter: int8
// scores with a rigorous error bound, docs/KERNELS.md) against bf16, on the causal prefill grid.
// No softmax and no V: per CTA (128 query rows of one query head) every KV tile up to the
// diagonal is copied by TMA, multiplied by wgmma, reduced to row maxima, compared with the bound's
// threshold and voted on by the warpgroup, as a voting loop treats a skipped tile. Each arm is
// timed beside our dense kernel and our skip kernel at a lambda that skips nearly every tile, in
// one process, and written to JSON (command, git revision, GPU).
#include <cuda.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <type_traits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../kernels/common/tensor_map.h"
#include "../kernels/hopper/ptx.cuh"
#include "bench_timing.h"
#include "file_io.h"
#include "skipsoftmax/prefill.h"
#include "skipsoftmax_git_revision.h"
#include "structured_inputs.cuh"

namespace {

using namespace skipsoftmax;

constexpr int kHeadDim = 128, kRows = 128, kKeys = 128, kStages = 4;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// One int8 product step: m64n128k32, s32 accumulators (64 a thread), both operands K-major in
// shared memory; scale_d = 0 overwrites d.
__device__ __forceinline__ void wgmma_s8(int (&d)[64], std::uint64_t a, std::uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]),
        "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]),
        "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]),
        "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]),
        "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]),
        "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]),
        "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]),
        "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]),
        "+r"(d[63])
      : "l"(a), "l"(b), "r"(scale_d));
}

// kInt8: int8 Q and K (128-byte rows, one column block) or bf16 (256-byte rows, two blocks of 64).
// kVoters: voting warpgroups. With one, it takes both 64-row halves of the CTA, one after the
// other (kPipelined false: 64 accumulators) or both in flight (128 accumulators). With two, each
// takes one half, and kPipelined issues a tile's product before the previous tile's maxima are
// reduced (two accumulator sets), as the voting loop keeps two score tiles in flight.
template <bool kInt8, int kVoters, bool kPipelined>
struct Probe {
  static constexpr int kElemBytes = kInt8 ? 1 : 2;
  static constexpr int kBlocks = kInt8 ? 1 : 2;           // 128-byte column blocks of a row
  static constexpr int kSteps = kInt8 ? 4 : 8;            // k steps of 32 bytes over a row
  static constexpr int kTileBytes = kKeys * kHeadDim * kElemBytes;
  static constexpr int kThreads = 128 * (1 + kVoters);

  struct alignas(1024) Smem {
    unsigned char q[kRows * kHeadDim * kElemBytes];  // [block][row][128 bytes], swizzled
    unsigned char k[kStages][kTileBytes];
    std::uint64_t full_q, full[kStages], empty[kStages];
  };

  struct Params {
    CUtensorMap tma_q, tma_k;
    const float2* bound;  // [heads_kv][tiles]: the tile's residual and key norms (int8 arms)
    unsigned long long* skipped;
    float* first_max;     // [128 rows][4]: each thread's maximum over its own columns of the
                          // first CTA's first tile (query rows 0-127 of head 0, keys 0-127)
    int num_m_blocks, group, tiles;
    float threshold;
  };

  // Byte offset (16-byte units) of k step kk of a K-major operand whose column blocks hold
  // `rows` rows of 128 bytes.
  __device__ static std::uint32_t step(int kk, int rows) {
    return (((kk * 32) / 128) * rows * 128 + (kk * 32) % 128) >> 4;
  }

  // The accumulators may not be read or written across this point (around issue and waits).
  template <typename Acc>
  __device__ static void pin(Acc (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      if constexpr (kInt8) {
        asm volatile("" : "+r"(d[i])::"memory");
      } else {
        asm volatile("" : "+f"(d[i])::"memory");
      }
    }
  }

  template <typename Acc>
  __device__ static void issue(Acc (&d)[64], const Smem& s, int half, int stage) {
    const std::uint64_t dq = hopper::make_smem_desc(s.q + half * 64 * 128, 16, 1024);
    const std::uint64_t dk = hopper::make_smem_desc(s.k[stage], 16, 1024);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      if constexpr (kInt8) {
        wgmma_s8(d, dq + step(kk, kRows), dk + step(kk, kKeys), kk > 0);
      } else {
        hopper::Wgmma<true, 128>::ss(d, dq + step(kk, kRows), dk + step(kk, kKeys), kk > 0);
      }
    }
    hopper::wgmma_commit();
    pin(d);
  }

  // This thread's two rows against the threshold, on its own columns (the rule is monotone in
  // the maximum); the int8 arms add the tile's bound and keep a lower bound of the running max.
  template <typename Acc>
  __device__ static bool row_votes(const Acc (&d)[64], float2 bound, float (&m)[2], float thr,
                                   float* record) {
    bool skip = true;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      Acc mx = d[2 * r];
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        mx = max(mx, max(d[4 * c + 2 * r], d[4 * c + 2 * r + 1]));
      }
      // Row 16 w + lane / 4 (+ 8) of the half, columns 8 c + 2 (lane % 4) + {0, 1}.
      if (record != nullptr) {
        const int lane = threadIdx.x % 32, row = 16 * (threadIdx.x % 128 / 32) + lane / 4 + 8 * r;
        record[row * 4 + lane % 4] = static_cast<float>(mx);
      }
      float hi, lo;
      if constexpr (kInt8) {
        const float x = static_cast<float>(mx) * 0.01f;  // the row's and tile's scales
        const float e = 0.5f * bound.x + 0.25f * bound.y;
        hi = x + e;
        lo = x - e;
      } else {
        hi = lo = mx;
      }
      skip &= hi < m[r] + thr;
      m[r] = fmaxf(m[r], lo);
    }
    return skip;
  }

  __device__ static void voter(const Params& p, Smem& s, int v, int head, int n_tiles) {
    using Acc = std::conditional_t<kInt8, int, float>;
    constexpr int kHalvesPerVoter = 2 / kVoters;
    const int tid = threadIdx.x % 128;
    const int kv_head = head / p.group;
    float m[kHalvesPerVoter][2];
    for (auto& h : m) h[0] = h[1] = 0.f;
    unsigned skipped = 0;
    hopper::mbar_wait(&s.full_q, 0);
    for (int t = 0; t < n_tiles; ++t) {
      const int stage = t % kStages;
      hopper::mbar_wait(&s.full[stage], (t / kStages) & 1);
      const float2 bound = kInt8 ? __ldg(&p.bound[kv_head * p.tiles + t]) : make_float2(0.f, 0.f);
      bool skip = true;
      // The first CTA's first tile is recorded for the host's check of the products.
      const bool first = t == 0 && head == 0 && blockIdx.x + 1 == gridDim.x;
      const auto record = [&](int half) { return first ? p.first_max + half * 64 * 4 : nullptr; };
      if constexpr (kPipelined && kVoters == 1) {
        Acc d0[64], d1[64];
        issue(d0, s, 0, stage);
        issue(d1, s, 1, stage);
        hopper::wgmma_wait<1>();
        pin(d0);
        skip &= row_votes(d0, bound, m[0], p.threshold, record(0));
        hopper::wgmma_wait<0>();
        pin(d1);
        skip &= row_votes(d1, bound, m[1], p.threshold, record(1));
      } else {
#pragma unroll
        for (int h = 0; h < kHalvesPerVoter; ++h) {
          Acc d[64];
          const int half = v * kHalvesPerVoter + h;
          issue(d, s, half, stage);
          hopper::wgmma_wait<0>();
          pin(d);
          skip &= row_votes(d, bound, m[h], p.threshold, record(half));
        }
      }
      if (tid % 32 == 0) hopper::mbar_arrive(&s.empty[stage]);
      skipped += hopper::named_barrier_and(1 + v, 128, skip);
    }
    if (tid == 0) atomicAdd(p.skipped, skipped);
  }

  // Two voters, one half each, with tile t + 1's product in flight while tile t's maxima are
  // reduced and voted on.
  __device__ static void voter_ahead(const Params& p, Smem& s, int v, int head, int n_tiles) {
    using Acc = std::conditional_t<kInt8, int, float>;
    const int tid = threadIdx.x % 128;
    const int kv_head = head / p.group;
    float m[2] = {0.f, 0.f};
    unsigned skipped = 0;
    Acc d0[64], d1[64];
    const auto start = [&](Acc (&d)[64], int t) {
      hopper::mbar_wait(&s.full[t % kStages], (t / kStages) & 1);
      issue(d, s, v, t % kStages);
    };
    // Waits until at most kPending products are in flight, then votes on tile t from d.
    const auto finish = [&]<int kPending>(Acc (&d)[64], int t) {
      hopper::wgmma_wait<kPending>();
      pin(d);
      const float2 bound = kInt8 ? __ldg(&p.bound[kv_head * p.tiles + t]) : make_float2(0.f, 0.f);
      const bool first = t == 0 && head == 0 && blockIdx.x + 1 == gridDim.x;
      const bool skip =
          row_votes(d, bound, m, p.threshold, first ? p.first_max + v * 64 * 4 : nullptr);
      if (tid % 32 == 0) hopper::mbar_arrive(&s.empty[t % kStages]);
      skipped += hopper::named_barrier_and(1 + v, 128, skip);
    };
    hopper::mbar_wait(&s.full_q, 0);
    start(d0, 0);
    int t = 0;
    for (; t + 2 < n_tiles; t += 2) {
      start(d1, t + 1);
      finish.template operator()<1>(d0, t);
      start(d0, t + 2);
      finish.template operator()<1>(d1, t + 1);
    }
    // One or two tiles left, the first of them in flight in d0.
    if (t + 1 < n_tiles) {
      start(d1, t + 1);
      finish.template operator()<1>(d0, t);
      finish.template operator()<0>(d1, t + 1);
    } else {
      finish.template operator()<0>(d0, t);
    }
    if (tid == 0) atomicAdd(p.skipped, skipped);
  }

  __device__ static void cta(const Params& p) {
    extern __shared__ __align__(1024) unsigned char raw[];
    Smem& s = *reinterpret_cast<Smem*>(raw);
    const int m_block = p.num_m_blocks - 1 - blockIdx.x;  // the longest causal rows first
    const int head = blockIdx.y;
    const int n_tiles = m_block + 1;
    if (threadIdx.x == 0) {
      hopper::mbar_init(&s.full_q, 1);
      for (int i = 0; i < kStages; ++i) {
        hopper::mbar_init(&s.full[i], 1);
        hopper::mbar_init(&s.empty[i], 4 * kVoters);
      }
      hopper::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x < 128) {
      if (threadIdx.x != 0) return;
      hopper::mbar_arrive_expect_tx(&s.full_q, kRows * kHeadDim * kElemBytes);
      for (int b = 0; b < kBlocks; ++b) {
        hopper::tma_load_3d(s.q + b * kRows * 128, &p.tma_q, &s.full_q, b * 128 / kElemBytes,
                            head, m_block * kRows);
      }
      for (int t = 0; t < n_tiles; ++t) {
        const int stage = t % kStages;
        hopper::mbar_wait(&s.empty[stage], ((t / kStages) & 1) ^ 1);
        hopper::mbar_arrive_expect_tx(&s.full[stage], kTileBytes);
        for (int b = 0; b < kBlocks; ++b) {
          hopper::tma_load_3d(s.k[stage] + b * kKeys * 128, &p.tma_k, &s.full[stage],
                              b * 128 / kElemBytes, head / p.group, t * kKeys);
        }
      }
      return;
    }
    if constexpr (kPipelined && kVoters == 2) {
      voter_ahead(p, s, threadIdx.x / 128 - 1, head, n_tiles);
    } else {
      voter(p, s, threadIdx.x / 128 - 1, head, n_tiles);
    }
  }
};

template <bool kInt8, int kVoters, bool kPipelined>
__global__ void __launch_bounds__(Probe<kInt8, kVoters, kPipelined>::kThreads)
    probe_kernel(const __grid_constant__ typename Probe<kInt8, kVoters, kPipelined>::Params p) {
  Probe<kInt8, kVoters, kPipelined>::cta(p);
}

// [rows, heads, 128] bytes (int8) as TMA sees it: boxes of 128 bytes x 1 x 128 rows, 128-byte
// swizzled, as the 16-bit maps of tensor_map.h.
CUtensorMap int8_map(const void* base, std::int64_t rows, int heads) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {kHeadDim, static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {kHeadDim, static_cast<cuuint64_t>(heads) * kHeadDim};
  const cuuint32_t box[3] = {128, 1, kRows};
  const cuuint32_t unit[3] = {1, 1, 1};
  const CUresult r = common::encode_tiled("vote_probe")(
      &map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<void*>(base), dims, strides, box, unit,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) throw std::runtime_error("vote_probe: cuTensorMapEncodeTiled failed for int8");
  return map;
}

__global__ void fill_bytes(unsigned char* x, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    x[i] = static_cast<unsigned char>(h % 61) - 30;  // int8 in [-30, 30]
  }
}

struct Options {
  int length = 32768, heads_q = 32, heads_kv = 8, warmup = 3, rounds = 30;
  double skip_lambda = 0.3;
  std::string json, command;
};

template <bool kInt8, int kVoters, bool kPipelined>
std::function<void()> probe_arm(const void* q, const void* k, const float2* bound,
                                unsigned long long* skipped, float* first_max, const Options& o) {
  using P = Probe<kInt8, kVoters, kPipelined>;
  typename P::Params p{};
  if constexpr (kInt8) {
    p.tma_q = int8_map(q, o.length, o.heads_q);
    p.tma_k = int8_map(k, o.length, o.heads_kv);
  } else {
    p.tma_q = common::make_tensor_map("vote_probe", q, o.length, o.heads_q, kHeadDim, kRows,
                                      DType::kBF16);
    p.tma_k = common::make_tensor_map("vote_probe", k, o.length, o.heads_kv, kHeadDim, kKeys,
                                      DType::kBF16);
  }
  p.bound = bound;
  p.skipped = skipped;
  p.first_max = first_max;
  p.num_m_blocks = o.length / kRows;
  p.group = o.heads_q / o.heads_kv;
  p.tiles = o.length / kKeys;
  p.threshold = -4.f;
  // One CTA a multiprocessor in every arm, as the voting warpgroup of a prefill CTA would run.
  constexpr int kSmem = std::max<int>(sizeof(typename P::Smem), 120 * 1024);
  check(cudaFuncSetAttribute(probe_kernel<kInt8, kVoters, kPipelined>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem),
        "smem");
  const dim3 grid(p.num_m_blocks, o.heads_q);
  return [p, grid] {
    probe_kernel<kInt8, kVoters, kPipelined><<<grid, P::kThreads, kSmem>>>(p);
    check(cudaGetLastError(), "probe launch");
  };
}

// Runs `launch` once and compares the recorded row maxima of the first CTA's first tile (query
// rows 0-127 of head 0 against keys 0-127 of KV head 0) with the host's products: exact for int8,
// within fp32 rounding for bf16. Throws on a mismatch: a wrong descriptor or layout would time a
// different product.
void check_products(const std::string& arm, const std::function<void()>& launch, bool int8,
                    const void* q, const void* k, float* first_max, const Options& o) {
  launch();
  check(cudaDeviceSynchronize(), "probe");
  std::vector<float> got(kRows * 4);
  check(cudaMemcpy(got.data(), first_max, got.size() * 4, cudaMemcpyDeviceToHost), "copy");
  const int eb = int8 ? 1 : 2;
  std::vector<unsigned char> qh(static_cast<std::size_t>(kRows) * o.heads_q * kHeadDim * eb);
  std::vector<unsigned char> kh(static_cast<std::size_t>(kKeys) * o.heads_kv * kHeadDim * eb);
  check(cudaMemcpy(qh.data(), q, qh.size(), cudaMemcpyDeviceToHost), "copy");
  check(cudaMemcpy(kh.data(), k, kh.size(), cudaMemcpyDeviceToHost), "copy");
  const auto value = [&](const std::vector<unsigned char>& x, int row, int heads, int d) {
    const std::size_t i = (static_cast<std::size_t>(row) * heads) * kHeadDim + d;  // head 0
    if (int8) return static_cast<double>(static_cast<signed char>(x[i]));
    std::uint32_t bits = static_cast<std::uint32_t>(x[2 * i] | (x[2 * i + 1] << 8)) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return static_cast<double>(f);
  };
  double worst = 0.0;
  for (int r = 0; r < kRows; ++r) {
    double want = -1e300;
    for (int key = 0; key < kKeys; ++key) {
      double dot = 0.0;
      for (int d = 0; d < kHeadDim; ++d) dot += value(qh, r, o.heads_q, d) * value(kh, key, o.heads_kv, d);
      want = std::max(want, dot);
    }
    const float* g = &got[r * 4];
    const double have = std::max(std::max(g[0], g[1]), std::max(g[2], g[3]));
    worst = std::max(worst, std::abs(have - want) / std::max(1.0, std::abs(want)));
  }
  if (worst > (int8 ? 0.0 : 1e-4)) {
    throw std::runtime_error(arm + ": row maxima off the host's products (relative " +
                             std::to_string(worst) + ")");
  }
}

std::string gpu_name() {
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  return prop.name;
}

nlohmann::json run(const Options& o) {
  const std::int64_t len = o.length;
  const std::size_t q_elems = len * o.heads_q * kHeadDim, kv_elems = len * o.heads_kv * kHeadDim;
  void *q16, *k16, *v16, *out, *q8, *k8;
  float2* bound;
  float* first_max;
  std::int32_t* cu;
  unsigned long long *skipped, *stats;
  check(cudaMalloc(&q16, q_elems * 2), "malloc");
  check(cudaMalloc(&k16, kv_elems * 2), "malloc");
  check(cudaMalloc(&v16, kv_elems * 2), "malloc");
  check(cudaMalloc(&out, q_elems * 2), "malloc");
  check(cudaMalloc(&q8, q_elems), "malloc");
  check(cudaMalloc(&k8, kv_elems), "malloc");
  check(cudaMalloc(&bound, o.heads_kv * (len / kKeys) * sizeof(float2)), "malloc");
  check(cudaMalloc(&cu, 8), "malloc");
  check(cudaMalloc(&first_max, kRows * 4 * sizeof(float)), "malloc");
  check(cudaMalloc(&skipped, 8), "malloc");
  check(cudaMalloc(&stats, 16), "malloc");
  const bench::StructuredShape shape;
  bench::fill_structured(q16, true, len, o.heads_q, kHeadDim, len, bench::Role::kQuery, shape, 1,
                         nullptr);
  bench::fill_structured(k16, true, len, o.heads_kv, kHeadDim, len, bench::Role::kKey, shape, 2,
                         nullptr);
  bench::fill_structured(v16, true, len, o.heads_kv, kHeadDim, len, bench::Role::kValue, shape, 3,
                         nullptr);
  fill_bytes<<<528, 256>>>(static_cast<unsigned char*>(q8), q_elems, 1);
  fill_bytes<<<528, 256>>>(static_cast<unsigned char*>(k8), kv_elems, 2);
  check(cudaMemset(bound, 0, o.heads_kv * (len / kKeys) * sizeof(float2)), "memset");
  const std::int32_t cu_host[2] = {0, static_cast<std::int32_t>(len)};
  check(cudaMemcpy(cu, cu_host, 8, cudaMemcpyHostToDevice), "cu");
  check(cudaDeviceSynchronize(), "fill");

  PrefillArguments a;
  a.q = q16;
  a.k = k16;
  a.v = v16;
  a.out = out;
  a.cu_seqlens_q = a.cu_seqlens_k = cu;
  a.batch = 1;
  a.total_q = a.total_k = len;
  a.max_seqlen_q = a.max_seqlen_k = o.length;
  a.num_heads_q = o.heads_q;
  a.num_heads_kv = o.heads_kv;
  PrefillArguments skip = a;
  skip.threshold = Threshold::flat(o.skip_lambda);
  skip.force_kernel = KernelChoice::kSkip;
  // The skip arm's sparsity, from one launch with statistics.
  PrefillArguments counted = skip;
  counted.stats = stats;
  check(cudaMemset(stats, 0, 16), "memset");
  run_prefill(counted, nullptr, nullptr);
  unsigned long long visited_skipped[2];
  check(cudaMemcpy(visited_skipped, stats, 16, cudaMemcpyDeviceToHost), "stats");

  const std::vector<std::string> names = {
      "dense",         "skip",          "int8 1 voter",  "int8 1 voter, halves pipelined",
      "int8 2 voters", "int8 2 voters, next tile in flight", "bf16 1 voter", "bf16 2 voters",
      "bf16 2 voters, next tile in flight"};
  const std::vector<std::function<void()>> arms = {
      [&] { run_prefill(a, nullptr, nullptr); },
      [&] { run_prefill(skip, nullptr, nullptr); },
      probe_arm<true, 1, false>(q8, k8, bound, skipped, first_max, o),
      probe_arm<true, 1, true>(q8, k8, bound, skipped, first_max, o),
      probe_arm<true, 2, false>(q8, k8, bound, skipped, first_max, o),
      probe_arm<true, 2, true>(q8, k8, bound, skipped, first_max, o),
      probe_arm<false, 1, false>(q16, k16, bound, skipped, first_max, o),
      probe_arm<false, 2, false>(q16, k16, bound, skipped, first_max, o),
      probe_arm<false, 2, true>(q16, k16, bound, skipped, first_max, o)};
  for (std::size_t i = 2; i < arms.size(); ++i) {
    const bool int8 = names[i].rfind("int8", 0) == 0;
    check_products(names[i], arms[i], int8, int8 ? q8 : q16, int8 ? k8 : k16, first_max, o);
  }
  const std::vector<double> ms = bench::interleaved_median_ms(arms, o.warmup, o.rounds, 1);

  const double tiles = static_cast<double>(o.heads_q) * (len / kRows) * (len / kRows + 1) / 2;
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-32s %9s %12s %14s\n", "arm", "ms", "x dense", "us per tile/SM");
  for (std::size_t i = 0; i < arms.size(); ++i) {
    const double per_tile_us = ms[i] * 1e3 * 132 / tiles;
    std::printf("%-32s %9.3f %12.3f %14.3f\n", names[i].c_str(), ms[i], ms[i] / ms[0], per_tile_us);
    rows.push_back({{"arm", names[i]}, {"ms", ms[i]}, {"x_dense", ms[i] / ms[0]},
                    {"us_per_tile_per_sm", per_tile_us}});
  }
  const double sparsity = static_cast<double>(visited_skipped[1]) / visited_skipped[0];
  std::printf("skip arm: lambda %g, %.1f%% of %llu tiles skipped\n", o.skip_lambda,
              100 * sparsity, visited_skipped[0]);
  for (void* ptr : {q16, k16, v16, out, q8, k8}) cudaFree(ptr);
  cudaFree(bound);
  cudaFree(first_max);
  cudaFree(cu);
  cudaFree(skipped);
  cudaFree(stats);
  return {{"length", o.length}, {"heads_q", o.heads_q}, {"heads_kv", o.heads_kv},
          {"head_dim", kHeadDim}, {"causal", true}, {"vote_tiles", "128 rows x 128 keys per CTA"},
          {"skip_lambda", o.skip_lambda}, {"skip_sparsity", sparsity}, {"arms", rows}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Cost of a skipped tile with an int8 or bf16 vote, beside the dense kernel"};
  app.add_option("--length", o.length, "Tokens (causal, one sequence; a multiple of 128)")
      ->check(CLI::Range(128, 1 << 20));
  app.add_option("--heads-q", o.heads_q, "Query heads");
  app.add_option("--heads-kv", o.heads_kv, "KV heads");
  app.add_option("--rounds", o.rounds, "Timed rounds (one launch an arm a round)");
  app.add_option("--skip-lambda", o.skip_lambda, "Flat lambda of the skip-kernel arm");
  app.add_option("--json", o.json, "Write the results here");
  CLI11_PARSE(app, argc, argv);
  for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
  try {
    if (o.length % kRows != 0) throw std::invalid_argument("--length must be a multiple of 128");
    if (o.heads_kv <= 0 || o.heads_q % o.heads_kv != 0) {
      throw std::invalid_argument("--heads-q must be a multiple of --heads-kv");
    }
    if (!hopper_gpu_available()) {
      std::fprintf(stderr, "vote_probe: no Hopper GPU (compute capability 9.0)\n");
      return 1;
    }
    nlohmann::json j = run(o);
    j["command"] = o.command;
    j["git_revision"] = SKIPSOFTMAX_GIT_REVISION;
    j["gpu"] = gpu_name();
    if (!o.json.empty()) write_json_file(o.json, j);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vote_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}

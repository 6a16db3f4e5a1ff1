// What a skipped tile costs when its vote's Q K^T runs in int8 (a certified pre-filter: int8
// scores with a rigorous error bound, docs/KERNELS.md) against bf16, on the causal prefill grid.
// No softmax and no V: per CTA (128 query rows of one query head) every KV tile up to the
// diagonal is copied by TMA, multiplied by wgmma, reduced to row maxima, compared with the bound's
// threshold and voted on by the warpgroup, as a voting loop treats a skipped tile. Each arm is
// timed beside our dense kernel and our skip kernel at a lambda that skips nearly every tile, in
// one process and on the prefill benchmark's shape (batch = tokens / length), and written to JSON
// (command, git revision, GPU).
#include <cuda.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "common/tensor_map.h"
#include "hopper/ptx.cuh"
#include "bench_record.h"
#include "bench_util.h"
#include "file_io.h"
#include "skipsoftmax/prefill.h"
#include "structured_inputs.cuh"

namespace {

using namespace skipsoftmax;
using bench::check;

// 4 K stages, one more than the prefill kernel at head dim 128: the probe has no V stages, and
// the spare stage keeps its copies off the critical path (4 stages measured within 1% of 3 in the
// kernel).
constexpr int kHeadDim = 128, kRows = 128, kKeys = 128, kStages = 4;

// One int8 product step: m64n128k32, s32 accumulators (64 a thread), both operands K-major in
// shared memory; scale_d = 0 overwrites d.
__device__ __forceinline__ void wgmma_s8(int (&d)[64], std::uint64_t a, std::uint64_t b,
                                         int scale_d) {
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

// The CTA whose products the host checks: its tile `tile` (query rows 128 m_block.. of head
// `head` in sequence `seq` against keys 128 tile..), recorded by each thread over its own columns.
struct Recorded {
  int seq, head, m_block, tile;
  float* maxima;  // [128 rows][4 threads of a quad]
};

// kInt8: int8 Q and K (128-byte rows, one column block) or bf16 (256-byte rows, two blocks of 64).
// kVoters: voting warpgroups. With one, it takes both 64-row halves of the CTA, one after the
// other (kPipelined false: 64 accumulators) or both in flight (128 accumulators). With two, each
// takes one half, and kPipelined issues a tile's product before the previous tile's maxima are
// reduced (two accumulator sets), as the voting loop keeps two score tiles in flight.
template <bool kInt8, int kVoters, bool kPipelined>
struct Probe {
  using Acc = std::conditional_t<kInt8, int, float>;
  static constexpr int kElemBytes = kInt8 ? 1 : 2;
  static constexpr int kBlocks = kInt8 ? 1 : 2;  // 128-byte column blocks of a row
  static constexpr int kSteps = kInt8 ? 4 : 8;   // k steps of 32 bytes over a row
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
    // Skips voted, summed over the launch: the verdicts must reach memory, or the compiler would
    // drop the vote the probe times.
    unsigned long long* skipped;
    Recorded recorded;
    int length, group;  // tokens a sequence (query tiles and KV tiles: length / 128 each)
    float threshold;
  };

  // Byte offset (16-byte units) of k step kk of a K-major operand whose column blocks hold
  // `rows` rows of 128 bytes.
  __device__ static std::uint32_t step(int kk, int rows) {
    return (((kk * 32) / 128) * rows * 128 + (kk * 32) % 128) >> 4;
  }

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
    hopper::fence_registers(d);
  }

  // This thread's two rows against the threshold, on its own columns (the rule is monotone in
  // the maximum). The int8 arms convert the maximum with a stand-in for the row's and tile's
  // scales, add a stand-in bound from the tile's norms and keep a lower bound of the running
  // maximum: the arithmetic of a certified vote, whose verdicts the probe does not use.
  // `record` (or null) receives the row maxima at [row][lane % 4].
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
        const float x = static_cast<float>(mx) * 0.01f;
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

  // Where this half's maxima of tile t go, if this is the recorded CTA's tile.
  __device__ static float* record_at(const Params& p, int seq, int head, int m_block, int t,
                                     int half) {
    const Recorded& r = p.recorded;
    const bool hit = seq == r.seq && head == r.head && m_block == r.m_block && t == r.tile;
    return hit ? r.maxima + half * 64 * 4 : nullptr;
  }

  // The tile's bound terms (the int8 arms read them as a certified vote would; bf16 has none).
  __device__ static float2 tile_bound(const Params& p, int kv_head, int t) {
    return kInt8 ? __ldg(&p.bound[kv_head * (p.length / kKeys) + t]) : make_float2(0.f, 0.f);
  }

  // Frees the K stage (one arrival a warp) and returns the warpgroup's verdict, 1 for skip.
  __device__ static unsigned release_and_vote(Smem& s, int stage, int v, bool skip) {
    if (threadIdx.x % 32 == 0) hopper::mbar_arrive(&s.empty[stage]);
    return hopper::named_barrier_and(1 + v, 128, skip);
  }

  __device__ static void voter(const Params& p, Smem& s, int v, int seq, int head, int m_block,
                               int n_tiles) {
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
      const float2 bound = tile_bound(p, kv_head, t);
      bool skip = true;
      if constexpr (kPipelined && kVoters == 1) {
        Acc d0[64], d1[64];
        issue(d0, s, 0, stage);
        issue(d1, s, 1, stage);
        hopper::wgmma_wait<1>();
        hopper::fence_registers(d0);
        skip &= row_votes(d0, bound, m[0], p.threshold, record_at(p, seq, head, m_block, t, 0));
        hopper::wgmma_wait<0>();
        hopper::fence_registers(d1);
        skip &= row_votes(d1, bound, m[1], p.threshold, record_at(p, seq, head, m_block, t, 1));
      } else {
#pragma unroll
        for (int h = 0; h < kHalvesPerVoter; ++h) {
          Acc d[64];
          const int half = v * kHalvesPerVoter + h;
          issue(d, s, half, stage);
          hopper::wgmma_wait<0>();
          hopper::fence_registers(d);
          skip &= row_votes(d, bound, m[h], p.threshold, record_at(p, seq, head, m_block, t, half));
        }
      }
      skipped += release_and_vote(s, stage, v, skip);
    }
    if (tid == 0) atomicAdd(p.skipped, skipped);
  }

  // Two voters, one half each, with tile t + 1's product in flight while tile t's maxima are
  // reduced and voted on.
  __device__ static void voter_ahead(const Params& p, Smem& s, int v, int seq, int head,
                                     int m_block, int n_tiles) {
    const int tid = threadIdx.x % 128;
    const int kv_head = head / p.group;
    float m[2] = {0.f, 0.f};
    unsigned skipped = 0;
    Acc d0[64], d1[64];
    const auto start = [&](Acc(&d)[64], int t) {
      hopper::mbar_wait(&s.full[t % kStages], (t / kStages) & 1);
      issue(d, s, v, t % kStages);
    };
    // Waits until at most kPending products are in flight, then votes on tile t from d.
    const auto finish = [&]<int kPending>(Acc(&d)[64], int t) {
      hopper::wgmma_wait<kPending>();
      hopper::fence_registers(d);
      const float2 bound = tile_bound(p, kv_head, t);
      const bool skip = row_votes(d, bound, m, p.threshold, record_at(p, seq, head, m_block, t, v));
      skipped += release_and_vote(s, t % kStages, v, skip);
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

  // Thread 0: Q once, then the CTA's KV tiles in order through the stages.
  __device__ static void produce(const Params& p, Smem& s, int row0, int head, int m_block,
                                 int n_tiles) {
    hopper::mbar_arrive_expect_tx(&s.full_q, kRows * kHeadDim * kElemBytes);
    for (int b = 0; b < kBlocks; ++b) {
      hopper::tma_load_3d(s.q + b * kRows * 128, &p.tma_q, &s.full_q, b * 128 / kElemBytes, head,
                          row0 + m_block * kRows);
    }
    for (int t = 0; t < n_tiles; ++t) {
      const int stage = t % kStages;
      hopper::mbar_wait(&s.empty[stage], ((t / kStages) & 1) ^ 1);
      hopper::mbar_arrive_expect_tx(&s.full[stage], kTileBytes);
      for (int b = 0; b < kBlocks; ++b) {
        hopper::tma_load_3d(s.k[stage] + b * kKeys * 128, &p.tma_k, &s.full[stage],
                            b * 128 / kElemBytes, head / p.group, row0 + t * kKeys);
      }
    }
  }

  __device__ static void cta(const Params& p) {
    extern __shared__ __align__(1024) unsigned char raw[];
    Smem& s = *reinterpret_cast<Smem*>(raw);
    const int m_block = p.length / kRows - 1 - blockIdx.x;  // the longest causal rows first
    const int head = blockIdx.y, seq = blockIdx.z;
    const int n_tiles = m_block + 1;
    if (threadIdx.x == 0) {
      hopper::mbar_init(&s.full_q, 1);
      for (int i = 0; i < kStages; ++i) {
        hopper::mbar_init(&s.full[i], 1);
        hopper::mbar_init(&s.empty[i], 4 * kVoters);  // one arrival per voting warp
      }
      hopper::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x < 128) {
      if (threadIdx.x == 0) produce(p, s, seq * p.length, head, m_block, n_tiles);
      return;
    }
    const int v = threadIdx.x / 128 - 1;
    if constexpr (kPipelined && kVoters == 2) {
      voter_ahead(p, s, v, seq, head, m_block, n_tiles);
    } else {
      voter(p, s, v, seq, head, m_block, n_tiles);
    }
  }
};

template <bool kInt8, int kVoters, bool kPipelined>
__global__ void __launch_bounds__(Probe<kInt8, kVoters, kPipelined>::kThreads)
    probe_kernel(const __grid_constant__ typename Probe<kInt8, kVoters, kPipelined>::Params p) {
  Probe<kInt8, kVoters, kPipelined>::cta(p);
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
  std::int64_t tokens = 65536;  // batch = tokens / length, at least 1: the prefill bench's shape
  double skip_lambda = 0.3;
  std::string json, command;
};

// Device memory of one run, freed on every path.
struct Buffers {
  std::vector<void*> owned;
  template <typename T>
  T* alloc(std::size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "malloc");
    owned.push_back(p);
    return static_cast<T*>(p);
  }
  ~Buffers() {
    for (void* p : owned) cudaFree(p);
  }
};

struct Inputs {
  int batch;
  std::int64_t total;  // batch * length rows
  void *q16, *k16, *v16, *out, *q8, *k8;
  float2* bound;
  std::int32_t* cu;
  unsigned long long *skipped, *stats;
  Recorded recorded;
};

Inputs make_inputs(const Options& o, Buffers& mem) {
  Inputs in{};
  in.batch = static_cast<int>(std::max<std::int64_t>(1, o.tokens / o.length));
  in.total = static_cast<std::int64_t>(in.batch) * o.length;
  const std::size_t q_elems = in.total * o.heads_q * kHeadDim;
  const std::size_t kv_elems = in.total * o.heads_kv * kHeadDim;
  in.q16 = mem.alloc<void>(q_elems * 2);
  in.k16 = mem.alloc<void>(kv_elems * 2);
  in.v16 = mem.alloc<void>(kv_elems * 2);
  in.out = mem.alloc<void>(q_elems * 2);
  in.q8 = mem.alloc<void>(q_elems);
  in.k8 = mem.alloc<void>(kv_elems);
  const std::size_t bound_bytes = o.heads_kv * (o.length / kKeys) * sizeof(float2);
  in.bound = mem.alloc<float2>(bound_bytes);
  in.cu = mem.alloc<std::int32_t>((in.batch + 1) * 4);
  in.skipped = mem.alloc<unsigned long long>(8);
  in.stats = mem.alloc<unsigned long long>(in.batch * 16);
  // Checked: the last sequence's head 5 (KV head 1 with the default group of 4), the query tile
  // and KV tile 5 (the diagonal; stage 1, second phase), or the largest that exist.
  const int last_block = o.length / kRows - 1;
  in.recorded = {in.batch - 1, std::min(5, o.heads_q - 1), std::min(5, last_block),
                 std::min(5, last_block), mem.alloc<float>(kRows * 4 * sizeof(float))};
  const bench::StructuredShape shape;
  bench::fill_structured(in.q16, true, in.total, o.heads_q, kHeadDim, o.length, bench::Role::kQuery,
                         shape, 1, nullptr);
  bench::fill_structured(in.k16, true, in.total, o.heads_kv, kHeadDim, o.length, bench::Role::kKey,
                         shape, 2, nullptr);
  bench::fill_structured(in.v16, true, in.total, o.heads_kv, kHeadDim, o.length,
                         bench::Role::kValue, shape, 3, nullptr);
  const int blocks = bench::device_properties().multiProcessorCount * 4;
  fill_bytes<<<blocks, 256>>>(static_cast<unsigned char*>(in.q8), q_elems, 1);
  fill_bytes<<<blocks, 256>>>(static_cast<unsigned char*>(in.k8), kv_elems, 2);
  check(cudaMemset(in.bound, 0, bound_bytes), "memset");
  std::vector<std::int32_t> cu(in.batch + 1);
  for (int b = 0; b <= in.batch; ++b) cu[b] = b * o.length;
  check(cudaMemcpy(in.cu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice), "cu");
  check(cudaDeviceSynchronize(), "fill");
  return in;
}

template <bool kInt8, int kVoters, bool kPipelined>
std::function<void()> probe_arm(const Inputs& in, const Options& o) {
  using P = Probe<kInt8, kVoters, kPipelined>;
  typename P::Params p{};
  const CUtensorMapDataType type =
      kInt8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  p.tma_q = common::make_tensor_map("vote_probe", kInt8 ? in.q8 : in.q16, in.total, o.heads_q,
                                    kHeadDim, kRows, type, P::kElemBytes);
  p.tma_k = common::make_tensor_map("vote_probe", kInt8 ? in.k8 : in.k16, in.total, o.heads_kv,
                                    kHeadDim, kKeys, type, P::kElemBytes);
  p.bound = in.bound;
  p.skipped = in.skipped;
  p.recorded = in.recorded;
  p.length = o.length;
  p.group = o.heads_q / o.heads_kv;
  p.threshold = -4.f;  // with the running maxima starting at 0, as a voting loop's comparisons
  // At least 120 KB of shared memory, so that one CTA runs a multiprocessor (2 x 120 KB > 228 KB)
  // in every arm, as the voting warpgroups of a prefill CTA do.
  constexpr int kSmem = std::max<int>(sizeof(typename P::Smem), 120 * 1024);
  auto* kernel = probe_kernel<kInt8, kVoters, kPipelined>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem), "smem");
  const dim3 grid(o.length / kRows, o.heads_q, in.batch);
  return [p, grid, kernel] {
    kernel<<<grid, P::kThreads, kSmem>>>(p);
    check(cudaGetLastError(), "probe launch");
  };
}

// Runs `launch` once and compares the recorded maxima (in.recorded: each thread's over its own
// columns of a row) with the host's products: exact for int8, within fp32 rounding for bf16. The
// record is poisoned with NaN first, so a slot left unwritten fails. A wrong descriptor, stage or
// layout would time another product.
void check_products(const std::string& arm, const std::function<void()>& launch, bool int8,
                    const Inputs& in, const Options& o) {
  const Recorded& r = in.recorded;
  check(cudaMemset(r.maxima, 0xff, kRows * 4 * sizeof(float)), "poison");
  launch();
  check(cudaDeviceSynchronize(), "probe");
  std::vector<float> got(kRows * 4);
  check(cudaMemcpy(got.data(), r.maxima, got.size() * 4, cudaMemcpyDeviceToHost), "copy");
  const int eb = int8 ? 1 : 2;
  const std::int64_t q_row0 = r.seq * std::int64_t{o.length} + r.m_block * kRows;
  const std::int64_t k_row0 = r.seq * std::int64_t{o.length} + r.tile * kKeys;
  // The rows of the recorded tile, all heads (bytes).
  const auto rows = [&](const void* base, std::int64_t row0, int heads, int count) {
    std::vector<unsigned char> h(static_cast<std::size_t>(count) * heads * kHeadDim * eb);
    const auto* src = static_cast<const unsigned char*>(base) + row0 * heads * kHeadDim * eb;
    check(cudaMemcpy(h.data(), src, h.size(), cudaMemcpyDeviceToHost), "copy");
    return h;
  };
  const std::vector<unsigned char> qh = rows(int8 ? in.q8 : in.q16, q_row0, o.heads_q, kRows);
  const std::vector<unsigned char> kh = rows(int8 ? in.k8 : in.k16, k_row0, o.heads_kv, kKeys);
  const auto value = [&](const std::vector<unsigned char>& x, int row, int heads, int head, int d) {
    const std::size_t i = (static_cast<std::size_t>(row) * heads + head) * kHeadDim + d;
    if (int8) return static_cast<double>(static_cast<signed char>(x[i]));
    const std::uint32_t bits = static_cast<std::uint32_t>(x[2 * i] | (x[2 * i + 1] << 8)) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return static_cast<double>(f);
  };
  const int kv_head = r.head / (o.heads_q / o.heads_kv);
  // Each record slot j of a row holds the maximum over that thread's columns 8 c + 2 j + {0, 1}.
  double worst = 0.0;
  for (int row = 0; row < kRows; ++row) {
    double want[4];
    std::fill(want, want + 4, -std::numeric_limits<double>::infinity());
    for (int key = 0; key < kKeys; ++key) {
      double dot = 0.0;
      for (int d = 0; d < kHeadDim; ++d) {
        dot += value(qh, row, o.heads_q, r.head, d) * value(kh, key, o.heads_kv, kv_head, d);
      }
      want[key % 8 / 2] = std::max(want[key % 8 / 2], dot);
    }
    for (int j = 0; j < 4; ++j) {
      const double have = got[row * 4 + j];
      const double err = std::abs(have - want[j]) / std::max(1.0, std::abs(want[j]));
      worst = std::isnan(have) ? std::numeric_limits<double>::infinity() : std::max(worst, err);
    }
  }
  if (worst > (int8 ? 0.0 : 1e-4)) {
    throw std::runtime_error(arm + ": row maxima off the host's products (relative " +
                             std::to_string(worst) + ")");
  }
}

nlohmann::json run(const Options& o) {
  Buffers mem;
  const Inputs in = make_inputs(o, mem);
  PrefillArguments dense;
  dense.q = in.q16;
  dense.k = in.k16;
  dense.v = in.v16;
  dense.out = in.out;
  dense.cu_seqlens_q = dense.cu_seqlens_k = in.cu;
  dense.batch = in.batch;
  dense.total_q = dense.total_k = in.total;
  dense.max_seqlen_q = dense.max_seqlen_k = o.length;
  dense.num_heads_q = o.heads_q;
  dense.num_heads_kv = o.heads_kv;
  PrefillArguments skip = dense;
  skip.threshold = Threshold::flat(o.skip_lambda);
  skip.force_kernel = KernelChoice::kSkip;
  // The skip arm's sparsity, from one launch with statistics.
  PrefillArguments counted = skip;
  counted.stats = in.stats;
  check(cudaMemset(in.stats, 0, in.batch * 16), "memset");
  run_prefill(counted, nullptr, nullptr);
  std::vector<unsigned long long> st(2 * in.batch);
  check(cudaMemcpy(st.data(), in.stats, st.size() * 8, cudaMemcpyDeviceToHost), "stats");
  double visited = 0, skipped = 0;
  for (int b = 0; b < in.batch; ++b) {
    visited += static_cast<double>(st[2 * b]);
    skipped += static_cast<double>(st[2 * b + 1]);
  }

  const std::vector<std::string> names = {"dense",
                                          "skip",
                                          "int8 1 voter",
                                          "int8 1 voter, halves pipelined",
                                          "int8 2 voters",
                                          "int8 2 voters, next tile in flight",
                                          "bf16 1 voter",
                                          "bf16 2 voters",
                                          "bf16 2 voters, next tile in flight"};
  const std::vector<std::function<void()>> arms = {[&] { run_prefill(dense, nullptr, nullptr); },
                                                   [&] { run_prefill(skip, nullptr, nullptr); },
                                                   probe_arm<true, 1, false>(in, o),
                                                   probe_arm<true, 1, true>(in, o),
                                                   probe_arm<true, 2, false>(in, o),
                                                   probe_arm<true, 2, true>(in, o),
                                                   probe_arm<false, 1, false>(in, o),
                                                   probe_arm<false, 2, false>(in, o),
                                                   probe_arm<false, 2, true>(in, o)};
  for (std::size_t i = 2; i < arms.size(); ++i) {
    check_products(names[i], arms[i], names[i].rfind("int8", 0) == 0, in, o);
  }
  const std::vector<double> ms = bench::interleaved_median_ms(arms, o.warmup, o.rounds, 1);

  const int sms = bench::device_properties().multiProcessorCount;
  const double blocks = o.length / kRows;
  const double tiles = o.heads_q * in.batch * blocks * (blocks + 1) / 2;
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%d x %d tokens, %d/%d heads, head dim %d, causal\n", in.batch, o.length, o.heads_q,
              o.heads_kv, kHeadDim);
  std::printf("%-36s %9s %9s %9s %15s\n", "arm", "ms", "x dense", "x skip", "us a tile an SM");
  for (std::size_t i = 0; i < arms.size(); ++i) {
    const double per_tile_us = ms[i] * 1e3 * sms / tiles;
    std::printf("%-36s %9.3f %9.3f %9.3f %15.3f\n", names[i].c_str(), ms[i], ms[i] / ms[0],
                ms[i] / ms[1], per_tile_us);
    rows.push_back({{"arm", names[i]},
                    {"ms", ms[i]},
                    {"x_dense", ms[i] / ms[0]},
                    {"x_skip", ms[i] / ms[1]},
                    {"us_per_tile_per_sm", per_tile_us}});
  }
  std::printf("skip arm: lambda %g, %.1f%% of %.0f tiles skipped\n", o.skip_lambda,
              100 * skipped / visited, visited);
  return {{"length", o.length},
          {"batch", in.batch},
          {"heads_q", o.heads_q},
          {"heads_kv", o.heads_kv},
          {"head_dim", kHeadDim},
          {"causal", true},
          {"vote_tiles", "128 rows x 128 keys per CTA"},
          {"skip_lambda", o.skip_lambda},
          {"skip_sparsity", skipped / visited},
          {"arms", rows}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Cost of a skipped tile with an int8 or bf16 vote, beside the dense kernel"};
  app.add_option("--length", o.length, "Tokens a sequence (causal; a multiple of 128)")
      ->check(CLI::Range(128, 1 << 20));
  app.add_option("--tokens", o.tokens, "Tokens a launch (batch = tokens / length, at least 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--heads-q", o.heads_q, "Query heads")->check(CLI::PositiveNumber);
  app.add_option("--heads-kv", o.heads_kv, "KV heads")->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "Timed rounds (one launch an arm a round)")
      ->check(CLI::PositiveNumber);
  app.add_option("--skip-lambda", o.skip_lambda, "Flat lambda of the skip-kernel arm")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--json", o.json, "Write the results here");
  CLI11_PARSE(app, argc, argv);
  o.command = bench::command_line(argc, argv);
  try {
    if (o.length % kRows != 0) throw std::invalid_argument("--length must be a multiple of 128");
    if (o.heads_q % o.heads_kv != 0) {
      throw std::invalid_argument("--heads-q must be a multiple of --heads-kv");
    }
    if (!o.json.empty()) check_output_file(o.json);
    if (!hopper_gpu_available()) throw std::runtime_error("no Hopper GPU (compute capability 9.0)");
    bench::write_record(run(o), o.json, o.command);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vote_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}

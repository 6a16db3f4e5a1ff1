// How fast a read of a decode call's size can go, with its work cut as the decode grid cuts it
// (one fixed range a CTA) and taken dynamically (chunks from a counter, a persistent grid whose
// copies run on across chunks). A batch-1 decode call reads 16-256 MB; a plain read of that size
// stays well below the copy bandwidth of a large buffer (docs/KERNELS.md, "The paged decode
// kernel"), and identical decode CTAs were seen to end up to 25% apart, the same SMs fast in every
// call. If chunks taken dynamically read such a size markedly faster than fixed ranges, a
// persistent decode kernel is worth building; if not, the batch-1 floor is the start and end of
// the call, not its balance.
//
// Every arm but the LSU reader and the copy is one warp a CTA copying tiles of 16 KB (a decode K
// or V tile at head dim 128) from global to shared memory by 1-D bulk copies into 7 stages (the
// decode kernel's 4 + 3 at head dim 128: 112 KB, two CTAs an SM), each lane reading one word of a
// landed tile. Times: CUDA events around each call after a read sweep of the L2, arms interleaved
// round-robin, median; written to JSON with the command, git revision and GPU.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/tensor_map.h"
#include "hopper/ptx.cuh"
#include "bench_record.h"
#include "bench_util.h"
#include "file_io.h"

namespace {

using namespace skipsoftmax;
using bench::check;

constexpr int kTileBytes = 16384;
constexpr int kStages = 7;
constexpr int kSmemBytes = kStages * kTileBytes;

struct Work {
  const std::uint8_t* src;
  long long tiles;     // 16 KB tiles to read
  int chunk_tiles;     // dynamic: tiles a chunk
  unsigned* counters;  // dynamic: [0] the next chunk, [1] CTAs done (the last resets both)
  unsigned* sink;      // written only if the XOR of the words read equals a constant
  long long* stamps;   // [gridDim.x][2] %globaltimer at the CTA's start and end
};

__device__ __forceinline__ long long global_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void bulk_load(void* dst, const void* src, std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(hopper::smem_addr(dst)),
      "l"(src), "r"(kTileBytes), "r"(hopper::smem_addr(bar))
      : "memory");
}

// Every arm's end: the XOR of the words read is stored only if it equals a constant (so that no
// load can be dropped), and one thread stamps the CTA's start and end.
__device__ __forceinline__ void finish(unsigned acc, unsigned* sink, long long* stamps,
                                       long long t0, bool leader) {
  if (acc == 0x9e3779b9u) sink[0] = acc;
  if (leader) {
    stamps[2 * blockIdx.x] = t0;
    stamps[2 * blockIdx.x + 1] = global_ns();
  }
}

// The tiles a CTA reads, in order: one range (static), or chunks taken from the counter, the one
// after the current chunk requested as it starts, so that its id has arrived when the copies reach
// it. Every lane keeps the cursor; lane 0's atomic result is broadcast.
template <bool kDynamic>
struct Cursor {
  long long tile = 0, end = 0;
  unsigned ahead = 0;
  bool done = false;

  __device__ void start(const Work& w) {
    if constexpr (kDynamic) {
      if (threadIdx.x == 0) ahead = atomicAdd(&w.counters[0], 1);
    } else {
      tile = w.tiles * blockIdx.x / gridDim.x;
      end = w.tiles * (blockIdx.x + 1) / gridDim.x;
    }
  }

  // The next tile to copy, or -1.
  __device__ long long next(const Work& w) {
    if (tile < end) return tile++;
    if (!kDynamic || done) return -1;
    const long long begin = static_cast<long long>(__shfl_sync(~0u, ahead, 0)) * w.chunk_tiles;
    if (begin >= w.tiles) {
      done = true;
      return -1;
    }
    tile = begin;
    end = min(begin + w.chunk_tiles, w.tiles);
    if (threadIdx.x == 0) ahead = atomicAdd(&w.counters[0], 1);
    return tile++;
  }
};

template <bool kDynamic>
__global__ void __launch_bounds__(32) read_tiles(Work w) {
  extern __shared__ __align__(1024) std::uint8_t stage[];
  __shared__ std::uint64_t full[kStages];
  const long long t0 = global_ns();
  const int lane = threadIdx.x;
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) hopper::mbar_init(&full[s], 1);
    hopper::fence_barrier_init();
  }
  __syncwarp();
  Cursor<kDynamic> c;
  c.start(w);
  long long issued = 0;
  auto issue = [&](int s) {
    const long long t = c.next(w);
    if (t < 0) return;
    if (lane == 0) {
      hopper::mbar_arrive_expect_tx(&full[s], kTileBytes);
      bulk_load(stage + s * kTileBytes, w.src + t * kTileBytes, &full[s]);
    }
    ++issued;
  };
  for (int s = 0; s < kStages; ++s) issue(s);
  unsigned acc = 0;
  for (long long i = 0; i < issued; ++i) {
    const int s = static_cast<int>(i % kStages);
    hopper::mbar_wait(&full[s], static_cast<std::uint32_t>(i / kStages) & 1);
    acc ^= reinterpret_cast<const unsigned*>(stage + s * kTileBytes)[lane * 128];
    __syncwarp();
    hopper::fence_proxy_async();  // the words read before the copy that overwrites them
    issue(s);
  }
  finish(acc, w.sink, w.stamps, t0, lane == 0);
  if (kDynamic && lane == 0) {
    __threadfence();
    if (atomicAdd(&w.counters[1], 1) == gridDim.x - 1) {
      atomicExch(&w.counters[0], 0);
      atomicExch(&w.counters[1], 0);
    }
  }
}

// The same 7 stages of 16 KB, filled by TMA tensor copies in a decode call's pattern: the bytes
// are a K and a V cache [tokens, heads, 128] of bf16 (the layout of paged_kv.h with consecutive
// pages), a CTA owns one (head, split) as the decode grid does, and reads the split's tiles of 64
// tokens, K then V. A stage is filled by kBoxes boxes of 64 columns x 1 head x (64 x 2 / kBoxes)
// rows: 8 boxes of 16 rows is the decode kernel's (one per key slice and column half). With
// kHeadMajor the cache is [heads, tokens, 128] instead (each head's rows contiguous).
struct BoxWork {
  CUtensorMap k, v;
  int tokens, splits;
  bool head_major;  // the maps are [heads x tokens, 1, 128]: a head's rows are contiguous
  unsigned* sink;
  long long* stamps;
};

// The (head, split) a CTA of the decode-shaped grids owns, and its tiles [begin, begin + n).
struct SplitTiles {
  int head, tiles, begin, n;
  __device__ explicit SplitTiles(const BoxWork& w)
      : head(blockIdx.x / w.splits), tiles(w.tokens / 64) {
    const int split = blockIdx.x % w.splits;
    begin = tiles * split / w.splits;
    n = tiles * (split + 1) / w.splits - begin;
  }
};

template <int kBoxes>
__global__ void __launch_bounds__(32) read_boxes(const __grid_constant__ BoxWork w) {
  extern __shared__ __align__(1024) std::uint8_t stage[];
  __shared__ std::uint64_t full[kStages];
  constexpr int kBoxRows = 64 * 2 / kBoxes;
  constexpr int kBoxBytes = kTileBytes / kBoxes;
  const long long t0 = global_ns();
  const int lane = threadIdx.x;
  const SplitTiles my(w);
  const int head = my.head, begin = my.begin;
  const int loads = 2 * my.n;  // K, then V, of each tile
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) hopper::mbar_init(&full[s], 1);
    hopper::fence_barrier_init();
  }
  __syncwarp();
  auto issue = [&](int j) {
    if (j >= loads || lane != 0) return;
    const int s = j % kStages, tile = begin + j / 2;
    const CUtensorMap* map = j % 2 == 0 ? &w.k : &w.v;
    hopper::mbar_arrive_expect_tx(&full[s], kTileBytes);
#pragma unroll
    for (int b = 0; b < kBoxes; ++b) {
      // Box b: column half b % 2, rows (b / 2) x kBoxRows of the tile.
      const int row = 64 * tile + kBoxRows * (b / 2);
      hopper::tma_load_3d(stage + s * kTileBytes + b * kBoxBytes, map, &full[s], 64 * (b % 2),
                          w.head_major ? 0 : head, w.head_major ? head * w.tokens + row : row);
    }
  };
  for (int j = 0; j < kStages; ++j) issue(j);
  unsigned acc = 0;
  for (int j = 0; j < loads; ++j) {
    const int s = j % kStages;
    hopper::mbar_wait(&full[s], static_cast<std::uint32_t>(j / kStages) & 1);
    acc ^= reinterpret_cast<const unsigned*>(stage + s * kTileBytes)[lane * 128];
    __syncwarp();
    hopper::fence_proxy_async();
    issue(j + kStages);
  }
  finish(acc, w.sink, w.stamps, t0, lane == 0);
}

// The decode kernel's pipeline on the same boxes, its math replaced by a wait of `work` cycles
// split between the scores and P V: per tile t, K of tile t + 3 is requested (4 K stages) and K of
// t awaited, and the scores' work is done. A tile is kept with probability keep_pct / 100 (by a
// hash of head and tile; tile 0, the sink, and the sequence's last 4 tiles, the local band,
// always), and only a kept tile's V is requested, after its vote, and its P V's work done:
// - kDeferred false, as the kernel: V of tile t into V stage t % 3, and P V of tile t - 3 (if
//   kept) awaited in iteration t, whatever the tiles between;
// - kDeferred true: the kept tiles queue for the 3 V stages, and the oldest one's P V runs only
//   when a fourth needs a stage (and at the split's end), so that a run of skipped tiles never
//   waits for a kept tile's V.
struct ShapedWork {
  BoxWork box;
  long long work;  // cycles a tile
  int keep_pct;
};

__device__ __forceinline__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

__device__ __forceinline__ bool kept_tile(int head, int tile, int tiles, int keep_pct) {
  if (tile == 0 || tile >= tiles - 4 || keep_pct >= 100) return true;
  const unsigned h =
      (static_cast<unsigned>(head) * 0x9e3779b9u) ^ (static_cast<unsigned>(tile) * 0x85ebca6bu);
  return ((h ^ (h >> 15)) * 0xc2b2ae35u >> 8) % 100u < static_cast<unsigned>(keep_pct);
}

template <bool kDeferred>
__global__ void __launch_bounds__(32) read_decode_shaped(const __grid_constant__ ShapedWork sw) {
  extern __shared__ __align__(1024) std::uint8_t stage[];
  __shared__ std::uint64_t full[kStages];
  constexpr int kK = 4, kV = 3, kAhead = 3;
  constexpr int kBoxes = 8, kBoxRows = 16, kBoxBytes = kTileBytes / kBoxes;
  const BoxWork& w = sw.box;
  const long long t0 = global_ns();
  const int lane = threadIdx.x;
  const SplitTiles my(w);
  const int head = my.head, tiles = my.tiles, begin = my.begin, n = my.n;
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) hopper::mbar_init(&full[s], 1);
    hopper::fence_barrier_init();
  }
  __syncwarp();
  // Stages 0-3 hold K, 4-6 V.
  auto issue = [&](const CUtensorMap* map, int s, int tile) {
    if (lane != 0) return;
    hopper::mbar_arrive_expect_tx(&full[s], kTileBytes);
#pragma unroll
    for (int b = 0; b < kBoxes; ++b) {
      hopper::tma_load_3d(stage + s * kTileBytes + b * kBoxBytes, map, &full[s], 64 * (b % 2), head,
                          64 * (begin + tile) + kBoxRows * (b / 2));
    }
  };
  unsigned acc = 0, v_phase = 0;
  auto take = [&](int s, unsigned parity) {
    hopper::mbar_wait(&full[s], parity);
    acc ^= reinterpret_cast<const unsigned*>(stage + s * kTileBytes)[lane * 128];
  };
  auto take_v = [&](int vs) {  // waits for V stage vs and runs its P V
    take(kK + vs, (v_phase >> vs) & 1u);
    v_phase ^= 1u << vs;
    spin(sw.work / 2);
  };
  const auto kept = [&](int t) { return kept_tile(head, begin + t, tiles, sw.keep_pct); };
  int queued = 0, next_stage = 0;  // kDeferred: kept tiles awaiting P V; the next V stage
  for (int j = 0; j < kAhead && j < n; ++j) issue(&w.k, j % kK, j);
  for (int t = 0; t < n + (kDeferred ? 0 : kV); ++t) {
    if (t + kAhead < n) issue(&w.k, (t + kAhead) % kK, t + kAhead);
    if (t < n) {
      take(t % kK, static_cast<unsigned>(t / kK) & 1u);
      spin(sw.work / 2);
    }
    if constexpr (kDeferred) {
      if (kept(t)) {
        if (queued == kV) {  // the oldest kept tile's stage is the one this tile takes
          take_v(next_stage);
          --queued;
        }
        __syncwarp();
        hopper::fence_proxy_async();
        issue(&w.v, kK + next_stage, t);
        next_stage = (next_stage + 1) % kV;
        ++queued;
      }
    } else {
      if (t >= kV && kept(t - kV)) take_v(t % kV);
      __syncwarp();
      hopper::fence_proxy_async();
      if (t < n && kept(t)) issue(&w.v, kK + t % kV, t);
    }
  }
  if constexpr (kDeferred) {
    for (; queued > 0; --queued) {
      take_v((next_stage + kV - queued) % kV);
    }
  }
  finish(acc, w.sink, w.stamps, t0, lane == 0);
}

// The decode kernel's shape more closely, dense: four warps a CTA, each copying its own 16-key
// slice of a tile (two boxes of 16 rows, completing on its own mbarrier a stage, as the kernel's
// key slices), one CTA barrier a tile, `work` cycles a tile split around it, K requested three
// tiles ahead and V after P V into the stage just read. With kPaged each tile lies on the page
// the page table names (a shuffled order, one page of 64 rows a tile, read by each warp an
// iteration ahead, as the kernel's slice_row).
struct WarpsWork {
  BoxWork box;
  long long work;
  const int* pages;  // [tokens / 64] the physical page of each tile (kPaged)
};

template <bool kPaged>
__global__ void __launch_bounds__(128) read_decode_warps(const __grid_constant__ WarpsWork ww) {
  extern __shared__ __align__(1024) std::uint8_t stage[];
  constexpr int kK = 4, kV = 3, kAhead = 3, kSliceBytes = kTileBytes / 4;
  __shared__ std::uint64_t k_full[kK][4], v_full[kV][4];
  const BoxWork& w = ww.box;
  const long long t0 = global_ns();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const SplitTiles my(w);
  const int head = my.head, tiles = my.tiles, begin = my.begin, n = my.n;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kK; ++s) {
      for (int j = 0; j < 4; ++j) hopper::mbar_init(&k_full[s][j], 1);
    }
    for (int s = 0; s < kV; ++s) {
      for (int j = 0; j < 4; ++j) hopper::mbar_init(&v_full[s][j], 1);
    }
    hopper::fence_barrier_init();
  }
  __syncthreads();
  const auto first_row = [&](int t) {
    const int tile = min(begin + t, tiles - 1);
    return 64 * (kPaged ? __ldg(ww.pages + tile) : tile);
  };
  // This warp's slice of a tile: boxes of 16 rows x 64 columns, one per column half.
  const auto issue = [&](const CUtensorMap* map, std::uint8_t* tile_smem, std::uint64_t* bar,
                         int row) {
    if (lane != 0) return;
    hopper::mbar_arrive_expect_tx(bar, kSliceBytes);
    for (int b = 0; b < 2; ++b) {
      hopper::tma_load_3d(tile_smem + b * (kTileBytes / 2) + warp * (kSliceBytes / 2), map, bar,
                          64 * b, head, row + 16 * warp);
    }
  };
  std::uint8_t* k_smem = stage;
  std::uint8_t* v_smem = stage + kK * kTileBytes;
  int row[kAhead + 1];
  for (int j = 0; j <= kAhead; ++j) row[j] = first_row(j);
  for (int j = 0; j < kAhead && j < n; ++j) {
    issue(&w.k, k_smem + j * kTileBytes, &k_full[j][warp], row[j]);
  }
  unsigned acc = 0, k_phase = 0, v_phase = 0;
  for (int t = 0; t < n + kV; ++t) {
    const int row_next = first_row(t + kAhead + 1);
    if (t + kAhead < n) {
      const int s = (t + kAhead) % kK;
      issue(&w.k, k_smem + s * kTileBytes, &k_full[s][warp], row[kAhead]);
    }
    if (t < n) {
      const int s = t % kK;
      hopper::mbar_wait(&k_full[s][warp], (k_phase >> s) & 1u);
      k_phase ^= 1u << s;
      acc ^= reinterpret_cast<const unsigned*>(k_smem + s * kTileBytes)[warp * 512 + lane];
      spin(ww.work / 2);
      __syncthreads();
    }
    const int vs = t % kV;
    if (t >= kV) {
      hopper::mbar_wait(&v_full[vs][warp], (v_phase >> vs) & 1u);
      v_phase ^= 1u << vs;
      acc ^= reinterpret_cast<const unsigned*>(v_smem + vs * kTileBytes)[warp * 512 + lane];
      spin(ww.work / 2);
    }
    __syncwarp();
    hopper::fence_proxy_async();
    if (t < n) issue(&w.v, v_smem + vs * kTileBytes, &v_full[vs][warp], row[0]);
    for (int j = 0; j < kAhead; ++j) row[j] = row[j + 1];
    row[kAhead] = row_next;
  }
  finish(acc, w.sink, w.stamps, t0, threadIdx.x == 0);
}

// The same, with the copies issued by a fifth warp (a producer, as the prefill kernel's): it
// requests K of tile t + 3 once the four consumer warps have released its stage (after the
// scores of tile t - 1) and V of tile t once they have released its stage (after the P V of tile
// t - 3), each tile's K and V whole (8 boxes a stage, one barrier), so that no copy waits for a
// consumer's work beyond the stage it needs. The consumers synchronize a tile on a named barrier
// of their 128 threads.
template <bool kPaged>
__global__ void __launch_bounds__(160) read_decode_producer(const __grid_constant__ WarpsWork ww) {
  extern __shared__ __align__(1024) std::uint8_t stage[];
  constexpr int kK = 4, kV = 3, kAhead = 3, kConsumers = 4;
  __shared__ std::uint64_t k_full[kK], k_empty[kK], v_full[kV], v_empty[kV];
  const BoxWork& w = ww.box;
  const long long t0 = global_ns();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const SplitTiles my(w);
  const int head = my.head, begin = my.begin, n = my.n;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kK; ++s) {
      hopper::mbar_init(&k_full[s], 1);
      hopper::mbar_init(&k_empty[s], kConsumers);
    }
    for (int s = 0; s < kV; ++s) {
      hopper::mbar_init(&v_full[s], 1);
      hopper::mbar_init(&v_empty[s], kConsumers);
    }
    hopper::fence_barrier_init();
  }
  __syncthreads();
  std::uint8_t* k_smem = stage;
  std::uint8_t* v_smem = stage + kK * kTileBytes;
  unsigned acc = 0;
  if (warp == kConsumers) {
    if (lane == 0) {
      const auto first_row = [&](int t) {
        return 64 * (kPaged ? __ldg(ww.pages + begin + t) : begin + t);
      };
      const auto issue = [&](const CUtensorMap* map, std::uint8_t* dst, std::uint64_t* bar,
                             int row) {
        hopper::mbar_arrive_expect_tx(bar, kTileBytes);
        for (int b = 0; b < 8; ++b) {
          hopper::tma_load_3d(dst + (b % 2) * (kTileBytes / 2) + (b / 2) * 2048, map, bar,
                              64 * (b % 2), head, row + 16 * (b / 2));
        }
      };
      for (int j = 0; j < kAhead && j < n; ++j)
        issue(&w.k, k_smem + j * kTileBytes, &k_full[j], first_row(j));
      for (int t = 0; t < n; ++t) {
        if (t + kAhead < n) {
          const int j = t + kAhead, s = j % kK;
          if (j >= kK) hopper::mbar_wait(&k_empty[s], static_cast<std::uint32_t>(j / kK - 1) & 1);
          issue(&w.k, k_smem + s * kTileBytes, &k_full[s], first_row(j));
        }
        const int vs = t % kV;
        if (t >= kV) hopper::mbar_wait(&v_empty[vs], static_cast<std::uint32_t>(t / kV - 1) & 1);
        issue(&w.v, v_smem + vs * kTileBytes, &v_full[vs], first_row(t));
      }
    }
  } else {
    for (int t = 0; t < n + kV; ++t) {
      if (t < n) {
        const int s = t % kK;
        hopper::mbar_wait(&k_full[s], static_cast<std::uint32_t>(t / kK) & 1);
        acc ^= reinterpret_cast<const unsigned*>(k_smem + s * kTileBytes)[warp * 512 + lane];
        spin(ww.work / 2);
        hopper::named_barrier_sync(1, 32 * kConsumers);
        if (lane == 0) hopper::mbar_arrive(&k_empty[s]);
      }
      if (t >= kV) {
        const int vs = t % kV;
        hopper::mbar_wait(&v_full[vs], static_cast<std::uint32_t>((t - kV) / kV) & 1);
        acc ^= reinterpret_cast<const unsigned*>(v_smem + vs * kTileBytes)[warp * 512 + lane];
        spin(ww.work / 2);
        __syncwarp();
        if (lane == 0) hopper::mbar_arrive(&v_empty[vs]);
      }
    }
  }
  finish(acc, w.sink, w.stamps, t0, threadIdx.x == 0);
}

// The LSU reader of bench/decode_sdpa.py: a grid-stride loop, four 16-byte loads in flight a
// thread (also the L2 sweep between calls).
__global__ void read_lsu(const uint4* __restrict__ a, long long n, unsigned* sink) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const long long j = i + u * stride;
      v[u] = j < n ? a[j] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

__global__ void fill_words(unsigned* p, long long n) {
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    p[i] = static_cast<unsigned>(i * 2654435761u);
  }
}

struct Options {
  std::vector<int> mib{32, 128, 256, 1024};
  std::vector<int> chunks{4, 8, 16};
  std::vector<long long> work{0, 1000, 2000};  // decode-shaped arms: cycles of work a tile
  std::vector<int> keep{100, 25};              // and the share of tiles kept, %
  int rounds = 30;
  std::string json, command;
};

struct Arm {
  std::string name;
  std::function<void()> run;
  int ctas = 0;  // bulk arms: CTAs whose stamps the arm's last call leaves
};

nlohmann::json spread(const std::vector<long long>& st, int ctas) {
  long long first = st[0];
  for (int b = 0; b < ctas; ++b) first = std::min(first, st[2 * b]);
  std::vector<double> ends;
  for (int b = 0; b < ctas; ++b) ends.push_back((st[2 * b + 1] - first) * 1e-3);
  std::sort(ends.begin(), ends.end());
  auto at = [&](double q) { return ends[static_cast<std::size_t>(q * (ends.size() - 1))]; };
  return {{"cta_end_us_min", ends.front()},
          {"cta_end_us_p10", at(0.1)},
          {"cta_end_us_median", at(0.5)},
          {"cta_end_us_p90", at(0.9)},
          {"cta_end_us_max", ends.back()}};
}

nlohmann::json run(const Options& o) {
  const int sms = bench::device_properties().multiProcessorCount;
  const long long max_bytes = static_cast<long long>(*std::max_element(o.mib.begin(), o.mib.end()))
                              << 20;
  const long long copy_bytes = 2ll << 30, sweep_bytes = 256ll << 20;
  std::uint8_t *src = nullptr, *dst = nullptr, *sweep = nullptr;
  unsigned *counters = nullptr, *sink = nullptr;
  long long* stamps = nullptr;
  int* pages = nullptr;
  check(cudaMalloc(&src, std::max(max_bytes, copy_bytes)), "src");
  check(cudaMalloc(&dst, std::max(max_bytes / 2, copy_bytes / 2)), "dst");
  check(cudaMalloc(&sweep, sweep_bytes), "sweep");
  check(cudaMalloc(&counters, 2 * sizeof(unsigned)), "counters");
  check(cudaMalloc(&sink, sizeof(unsigned)), "sink");
  check(cudaMalloc(&stamps, 2 * 8 * sms * sizeof(long long)), "stamps");
  check(cudaMalloc(&pages, max_bytes / (2 * 8 * 256 * 64) * sizeof(int)), "pages");
  check(cudaMemset(counters, 0, 2 * sizeof(unsigned)), "counters");
  fill_words<<<4 * sms, 256>>>(reinterpret_cast<unsigned*>(src),
                               std::max(max_bytes, copy_bytes) / 4);
  fill_words<<<4 * sms, 256>>>(reinterpret_cast<unsigned*>(sweep), sweep_bytes / 4);
  check(cudaDeviceSynchronize(), "fill");
  for (auto* k : {read_tiles<false>, read_tiles<true>}) {
    check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes), "smem");
  }
  for (auto* k :
       {read_decode_shaped<false>, read_decode_shaped<true>}) {  // as the kernel; deferred
    check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes), "smem");
  }
  for (auto* k : {read_decode_warps<false>, read_decode_warps<true>, read_decode_producer<false>,
                  read_decode_producer<true>}) {
    check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes), "smem");
  }
  for (auto* k : {read_boxes<2>, read_boxes<4>, read_boxes<8>}) {
    check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes), "smem");
  }
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, read_tiles<true>, 32, kSmemBytes),
        "occupancy");
  const auto lsu = [&](const void* p, long long bytes) {
    read_lsu<<<4 * sms, 512>>>(static_cast<const uint4*>(p), bytes / 16, sink);
  };
  const auto flush = [&] { lsu(sweep, sweep_bytes); };

  // The copy bandwidth the decode targets are measured against: bytes read plus written.
  const double copy_ms = bench::interleaved_median_ms(
      {[&] { check(cudaMemcpyAsync(dst, src, copy_bytes / 2, cudaMemcpyDeviceToDevice), "copy"); }},
      3, 10, 1)[0];
  const double copy_bps = copy_bytes / (copy_ms * 1e-3);

  nlohmann::json sizes = nlohmann::json::array();
  for (int mib : o.mib) {
    const long long bytes = static_cast<long long>(mib) << 20;
    std::vector<Arm> arms;
    const auto bulk = [&](bool dynamic, int ctas, int chunk) {
      Work w{src, bytes / kTileBytes, chunk, counters, sink, stamps};
      return [=] {
        if (dynamic) {
          read_tiles<true><<<ctas, 32, kSmemBytes>>>(w);
        } else {
          read_tiles<false><<<ctas, 32, kSmemBytes>>>(w);
        }
        check(cudaGetLastError(), "read launch");
      };
    };
    const int full = per_sm * sms;
    arms.push_back(
        {"static ranges, " + std::to_string(full) + " CTAs", bulk(false, full, 0), full});
    arms.push_back({"static ranges, 256 CTAs", bulk(false, 256, 0), 256});
    for (int chunk : o.chunks) {
      arms.push_back({"dynamic chunks of " + std::to_string(chunk) + " tiles, " +
                          std::to_string(full) + " CTAs",
                      bulk(true, full, chunk), full});
    }
    // The decode grid's pattern: 8 KV heads, one CTA a (head, split), splits filling the wave.
    constexpr int kHeads = 8;
    const int tokens = static_cast<int>(bytes / (2 * kHeads * 256));
    const int splits = full / kHeads;
    // The K and V maps of a cache of `tokens` rows with boxes of 128 / n rows.
    const auto box_work = [&](int n, bool head_major, CUtensorMapL2promotion promo) {
      BoxWork w{};
      const std::uint8_t* v = src + bytes / 2;
      const std::int64_t rows = head_major ? std::int64_t{kHeads} * tokens : tokens;
      const int heads = head_major ? 1 : kHeads;
      w.k = common::make_tensor_map("read_balance", src, rows, heads, 128, 128 / n,
                                    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, promo);
      w.v = common::make_tensor_map("read_balance", v, rows, heads, 128, 128 / n,
                                    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, promo);
      w.head_major = head_major;
      w.tokens = tokens;
      w.splits = splits;
      w.sink = sink;
      w.stamps = stamps;
      return w;
    };
    const auto boxes = [&](int n, bool head_major, CUtensorMapL2promotion promo) {
      const BoxWork w = box_work(n, head_major, promo);
      auto* kernel = n == 2 ? read_boxes<2> : n == 4 ? read_boxes<4> : read_boxes<8>;
      return [=] {
        kernel<<<kHeads * splits, 32, kSmemBytes>>>(w);
        check(cudaGetLastError(), "boxes launch");
      };
    };
    for (int n : {8, 4, 2}) {
      arms.push_back({"[tokens, heads, 128] boxes of " + std::to_string(128 / n) +
                          " rows (decode: 16), L2 promotion 128 B",
                      boxes(n, false, CU_TENSOR_MAP_L2_PROMOTION_L2_128B), kHeads * splits});
    }
    arms.push_back({"[heads, tokens, 128] boxes of 64 rows, L2 promotion 128 B",
                    boxes(2, true, CU_TENSOR_MAP_L2_PROMOTION_L2_128B), kHeads * splits});
    arms.push_back({"[heads, tokens, 128] boxes of 16 rows, L2 promotion 128 B",
                    boxes(8, true, CU_TENSOR_MAP_L2_PROMOTION_L2_128B), kHeads * splits});
    // The decode kernel's maps: boxes of 16 rows, L2 promotion 128 B.
    const BoxWork decode_maps = box_work(8, false, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
    for (long long work : o.work) {
      for (int keep : o.keep) {
        for (bool deferred : {false, true}) {
          if (keep >= 100 && deferred) continue;  // nothing to defer
          ShapedWork sw{};
          sw.box = decode_maps;
          sw.work = work;
          sw.keep_pct = keep;
          auto* kernel = deferred ? read_decode_shaped<true> : read_decode_shaped<false>;
          arms.push_back({"decode-shaped, " + std::to_string(work) + " cycles a tile, " +
                              std::to_string(keep) + "% kept" +
                              (keep >= 100 ? ""
                               : deferred  ? ", P V deferred"
                                           : ", P V 3 behind"),
                          [=] {
                            kernel<<<kHeads * splits, 32, kSmemBytes>>>(sw);
                            check(cudaGetLastError(), "shaped launch");
                          },
                          kHeads * splits});
        }
      }
    }
    // A shuffled page order for the paged arms (the same for every head, as a cache's page table).
    std::vector<int> order(tokens / 64);
    for (int i = 0; i < static_cast<int>(order.size()); ++i) order[i] = i;
    std::mt19937 rng(mib);
    std::shuffle(order.begin(), order.end(), rng);
    check(cudaMemcpy(pages, order.data(), order.size() * sizeof(int), cudaMemcpyHostToDevice),
          "pages");
    for (long long work : o.work) {
      for (bool paged : {false, true}) {
        WarpsWork ww{};
        ww.box = decode_maps;
        ww.work = work;
        ww.pages = pages;
        for (bool producer : {false, true}) {
          auto* kernel = producer
                             ? (paged ? read_decode_producer<true> : read_decode_producer<false>)
                             : (paged ? read_decode_warps<true> : read_decode_warps<false>);
          const int threads = producer ? 160 : 128;
          arms.push_back({std::string("decode-shaped, 4 warps") +
                              (producer ? " and a producer" : "") + ", " + std::to_string(work) +
                              " cycles a tile" + (paged ? ", shuffled pages" : ""),
                          [=] {
                            kernel<<<kHeads * splits, threads, kSmemBytes>>>(ww);
                            check(cudaGetLastError(), "warps launch");
                          },
                          kHeads * splits});
        }
      }
    }
    arms.push_back({"[tokens, heads, 128] boxes of 16 rows, L2 promotion 256 B",
                    boxes(8, false, CU_TENSOR_MAP_L2_PROMOTION_L2_256B), kHeads * splits});
    arms.push_back({"LSU grid-stride read", [&, bytes] { lsu(src, bytes); }});
    arms.push_back(
        {"copy of the same bytes (half read, half written)", [&, bytes] {
           check(cudaMemcpyAsync(dst, src + bytes / 2, bytes / 2, cudaMemcpyDeviceToDevice),
                 "copy");
         }});
    // Each timed call follows the L2 sweep, outside its events.
    std::vector<std::vector<float>> all(arms.size());
    std::vector<nlohmann::json> spreads(arms.size());
    cudaEvent_t a, b;
    check(cudaEventCreate(&a), "event");
    check(cudaEventCreate(&b), "event");
    for (auto& arm : arms) {
      for (int i = 0; i < 3; ++i) arm.run();
    }
    for (int r = 0; r < o.rounds; ++r) {
      for (std::size_t j = 0; j < arms.size(); ++j) {
        const std::size_t k = r % 2 == 0 ? j : arms.size() - 1 - j;
        flush();
        check(cudaEventRecord(a), "record");
        arms[k].run();
        check(cudaEventRecord(b), "record");
        check(cudaEventSynchronize(b), "sync");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, a, b), "elapsed");
        all[k].push_back(ms);
        if (r + 2 >= o.rounds && arms[k].ctas > 0) {
          std::vector<long long> st(2 * arms[k].ctas);
          check(
              cudaMemcpy(st.data(), stamps, st.size() * sizeof(long long), cudaMemcpyDeviceToHost),
              "stamps");
          spreads[k] = spread(st, arms[k].ctas);
        }
      }
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    nlohmann::json rows = nlohmann::json::array();
    std::printf("%d MiB (copy of 2 GiB: %.2f TB/s read + written)\n", mib, copy_bps / 1e12);
    for (std::size_t k = 0; k < arms.size(); ++k) {
      auto t = all[k];
      std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
      const double ms = t[t.size() / 2];
      const double share = bytes / (ms * 1e-3) / copy_bps;
      std::printf("  %-56s %9.2f us  %6.1f%% of the copy\n", arms[k].name.c_str(), ms * 1e3,
                  100 * share);
      nlohmann::json row{{"arm", arms[k].name}, {"median_us", ms * 1e3}, {"of_copy", share}};
      if (!spreads[k].is_null()) row["last_call"] = spreads[k];
      rows.push_back(row);
    }
    sizes.push_back({{"mib", mib}, {"arms", rows}});
  }
  for (void* p : {static_cast<void*>(src), static_cast<void*>(dst), static_cast<void*>(sweep),
                  static_cast<void*>(counters), static_cast<void*>(sink),
                  static_cast<void*>(stamps), static_cast<void*>(pages)}) {
    cudaFree(p);
  }
  return {{"copy_bytes_per_s", copy_bps}, {"ctas_per_sm", per_sm},
          {"tile_bytes", kTileBytes},     {"stages", kStages},
          {"rounds", o.rounds},           {"sizes", sizes}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"A decode-sized read: fixed ranges a CTA against chunks taken dynamically"};
  app.add_option("--mib", o.mib, "Sizes to read, MiB")->check(CLI::Range(1, 8192));
  app.add_option("--chunks", o.chunks, "Tiles of 16 KB a dynamic chunk")
      ->check(CLI::Range(1, 4096));
  app.add_option("--work", o.work, "Cycles of work a tile of the decode-shaped arms")
      ->check(CLI::Range(0, 100000));
  app.add_option("--keep", o.keep, "Shares of tiles the decode-shaped arms keep, %")
      ->check(CLI::Range(0, 100));
  app.add_option("--rounds", o.rounds, "Timed rounds (one call an arm a round)")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", o.json, "Write the results here");
  CLI11_PARSE(app, argc, argv);
  o.command = bench::command_line(argc, argv);
  try {
    if (!o.json.empty()) check_output_file(o.json);
    bench::write_record(run(o), o.json, o.command);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "read_balance: %s\n", e.what());
    return 1;
  }
  return 0;
}

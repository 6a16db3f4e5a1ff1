// Hopper prefill attention on the GPU: a dense kernel and its skip-softmax twin, compiled apart.
//
// Usage, as in CUTLASS's device adapters: fill PrefillArguments, ask can_implement(), then
// run_prefill() on a stream. The dense or skip kernel is chosen by choose_prefill_kernel() (the
// dispatch rule of threshold.h); each sequence of a skip launch looks its lambda up on the device.
// This header is free of CUDA headers: pointers are device pointers, the stream is a cudaStream_t
// passed as void*.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "skipsoftmax/paged_kv.h"
#include "skipsoftmax/threshold.h"
#include "skipsoftmax/tiling.h"

namespace skipsoftmax {

enum class DType { kF16, kBF16 };
const char* to_string(DType dtype);

struct PrefillArguments {
  DType dtype = DType::kBF16;
  int head_dim = 128;       // 64, 128 or 256
  const void* q = nullptr;  // [total_q, num_heads_q, head_dim]
  const void* k = nullptr;  // [total_k, num_heads_kv, head_dim]; unused if paged
  const void* v = nullptr;  // [total_k, num_heads_kv, head_dim]; unused if paged
  void* out = nullptr;      // [total_q, num_heads_q, head_dim]
  // device, [batch + 1] offsets: from 0, never decreasing, ending at total_q / total_k. They stay
  // on the device, so only run_prefill_host checks them. Every sequence with queries needs keys,
  // and a causal one at least as many keys as queries (else its rows are NaN).
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_k = nullptr;
  int batch = 0;
  std::int64_t total_q = 0;
  std::int64_t total_k = 0;
  int max_seqlen_q = 0;  // the longest query chunk of the batch
  // The longest KV of the batch, exactly: the dispatch rule reads it (a batch of one runs the
  // dense kernel when the lambda of this length is 0).
  int max_seqlen_k = 0;
  int num_heads_q = 0;
  int num_heads_kv = 0;
  bool causal = true;  // bottom-right aligned
  // Sliding window (local layers such as Gemma 3's): query at position p sees keys
  // [p - window + 1, p]. Needs causal; 0: none. The dense kernel runs windowed launches: skipping
  // is not applied to local layers.
  int window = 0;
  // Chunked prefill over a paged KV cache: when paged_kv.k_pages is set, K and V of every
  // sequence (its history followed by this chunk, already appended by the caller) are read from
  // the pages, and cu_seqlens_k still gives each sequence's KV length as prefix sums. Without
  // k_pages every paged_kv field must stay empty (can_implement refuses a partial one).
  PagedKv paged_kv;
  std::optional<double> softmax_scale;  // default 1 / sqrt(head_dim)
  Threshold threshold;                  // dense, per-length table or flat lambda
  // Device, [batch] float32: one lambda per sequence, read by the kernel at launch (so it may
  // change between CUDA-graph replays). Set, it replaces `threshold` (which must stay dense) and
  // the skip kernel runs unless force_kernel says otherwise; a value outside (0, 1), NaN
  // included, makes its sequence exact dense.
  const float* lambdas = nullptr;
  KvOrder kv_order = KvOrder::kSinkThenReverse;
  // Skip kernel only: [batch][2] tiles visited and skipped per sequence, accumulated (zero it
  // first). Null: no statistics, no cost.
  unsigned long long* stats = nullptr;
  // Device, [total_q, num_heads_q] float32: each row's log-sum-exp in natural log, log of the sum
  // over the keys the kernel computed (skipped tiles excluded) of exp(softmax_scale * q.k); -inf
  // for a row that sees no key. With it, outputs over disjoint key sets merge exactly (split-KV,
  // cascades, context parallelism). Null: not written.
  float* lse = nullptr;
  // Overrides the dispatch rule (benchmarks and tests of the guard run the skip kernel at
  // lambda = 0).
  std::optional<KernelChoice> force_kernel;
};

// The tiling the kernels vote with: 64 query rows (one consumer warpgroup) x kv tile of 128 keys
// (64 for head dim 256). The CPU reference reproduces the GPU's decisions with this TileShape.
TileShape prefill_vote_tiles(int head_dim, KvOrder order);

// Empty when the kernels can run these arguments; else the reason.
std::string can_implement(const PrefillArguments& args);

// The kernel run_prefill launches for these arguments: force_kernel, else choose_prefill_kernel.
KernelChoice prefill_kernel_choice(const PrefillArguments& args);

// Bytes of device workspace run_prefill needs (none today; part of the contract).
std::size_t prefill_workspace_size(const PrefillArguments& args);

// Launches the chosen kernel on `stream` (a cudaStream_t). Throws std::invalid_argument when
// can_implement fails and std::runtime_error on a CUDA error (an error that earlier work left
// pending is reported, and consumed, before the launch). Returns the kernel it launched.
KernelChoice run_prefill(const PrefillArguments& args, void* workspace, void* stream);

// Whether the calling thread's current CUDA device is one the kernels run on (compute
// capability 9.0).
bool hopper_gpu_available();

}  // namespace skipsoftmax

namespace skipsoftmax {

// Prefill on tensors held in host memory (16-bit values: fp16 or bf16 bits), for tools and tests:
// copies them to the device, runs run_prefill on the default stream, copies the output back.
// `args` gives everything but the device pointers (q, k, v, out, cu_seqlens and stats are
// filled in here); its lambdas, when set, point to host memory ([batch], uploaded here), and a
// non-null lse asks for the log-sum-exps in the result. Throws like run_prefill, and
// std::runtime_error when no Hopper GPU is present; the arguments and the host tensors' sizes and
// offsets are checked first (std::invalid_argument), so that a bad argument is named on any
// machine.
struct HostPrefillResult {
  std::vector<std::uint16_t> out;         // [total_q, num_heads_q, head_dim]
  std::vector<unsigned long long> stats;  // [batch][2] visited, skipped (skip kernel only)
  std::vector<float> lse;                 // [total_q, num_heads_q] when args.lse was set
  KernelChoice kernel = KernelChoice::kDense;
  double kernel_ms = 0.0;  // one launch, timed with CUDA events
};
HostPrefillResult run_prefill_host(PrefillArguments args, const std::vector<std::uint16_t>& q,
                                   const std::vector<std::uint16_t>& k,
                                   const std::vector<std::uint16_t>& v,
                                   const std::vector<std::int32_t>& cu_seqlens_q,
                                   const std::vector<std::int32_t>& cu_seqlens_k);

// The float64 CPU reference (reference.h) on a launch's arguments whose pointers are host
// pointers: q, k, v or the pages (16-bit values), cu_seqlens, the page table, out and stats. It
// takes the kernels' vote tiles, visit order and dispatch, so it makes their skip decisions;
// paged K and V are gathered through the page table, `out` is written in the launch's dtype
// (rounded through float), lse (when set) in float, and stats are added to by a skip launch
// only, as on the GPU; lambdas, when set, is read from host memory. Checks
// what run_prefill_host checks, then throws like run_prefill. No GPU needed: the fallback of a
// machine without one, and an oracle for engines. Returns the kernel run_prefill would launch.
KernelChoice run_prefill_reference(const PrefillArguments& args);

}  // namespace skipsoftmax

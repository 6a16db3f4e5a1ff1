// Hopper paged decode attention: the new query tokens of each sequence (one, or a few for
// speculative verification) against its paged KV cache.
// A dense kernel and its skip-softmax twin, compiled apart, chosen by choose_decode_kernel().
//
// Every query head of a GQA group is processed by the same CTA, so each K/V byte is read once.
// Long contexts are cut into num_splits contiguous ranges of KV tiles (split_tile_range of
// tiling.h), each with its own running maximum and its own votes, merged by a combine kernel by
// log-sum-exp; the CPU reference's reference_decode with the same tile_k and num_splits makes
// exactly the same skip decisions. A skipped tile's V is never loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "skipsoftmax/paged_kv.h"
#include "skipsoftmax/prefill.h"
#include "skipsoftmax/threshold.h"

namespace skipsoftmax {

struct DecodeArguments {
  DType dtype = DType::kBF16;
  int head_dim = 128;       // 64, 128 or 256
  const void* q = nullptr;  // device, [batch, q_len, num_heads_q, head_dim]
  void* out = nullptr;      // device, [batch, q_len, num_heads_q, head_dim]
  // New tokens per sequence, already in the cache: token i sits at position seq_len - q_len + i
  // and sees the keys up to it (causal). q_len x (Hq / Hkv) <= 16; every sequence must hold at
  // least q_len tokens. All rows of a GQA group vote together on each tile.
  int q_len = 1;
  PagedKv kv;                              // the cache, already holding the new tokens' K and V
  const std::int32_t* seq_lens = nullptr;  // device, [batch]: cached tokens, the new ones included
  int batch = 0;
  // The longest seq_lens entry, exactly: sizes the split and drives the dispatch (a batch of one
  // runs the dense kernel when the lambda of this length is 0). The kernel also reads the page
  // table for this length before a sequence's own length arrives, and again where they differ.
  int max_seq_len = 0;
  int num_heads_q = 0;
  int num_heads_kv = 0;
  std::optional<double> softmax_scale;  // default 1 / sqrt(head_dim)
  // Sliding window (local layers such as Gemma 3's): the new token sees its last `window` keys.
  // Windowed launches run the dense kernel (skipping is not applied to local layers). 0: none.
  int window = 0;
  Threshold threshold;  // the decode table (dense, per-length table or flat)
  // Device, [batch] float32: one lambda per sequence, as PrefillArguments::lambdas (replaces a
  // dense `threshold`; outside (0, 1) or NaN: that sequence runs dense).
  const float* lambdas = nullptr;
  int num_splits = 0;  // 0: chosen from all the arguments (decode_num_splits)
  // Skip kernel only: [batch][2] tiles visited and skipped per sequence, accumulated.
  unsigned long long* stats = nullptr;
  // Device, [batch, q_len, num_heads_q] float32: each row's natural log-sum-exp over the keys
  // computed, as PrefillArguments::lse (after the split combine). Null: not written.
  float* lse = nullptr;
  std::optional<KernelChoice> force_kernel;
};

// Keys per KV tile of the decode kernels: the vote unit is (GQA group, split, tile of this many
// keys); reference_decode reproduces the decisions with TileShape{.tile_k = decode_tile_k(d)}
// in forward order.
int decode_tile_k(int head_dim);

// The kernel run_decode launches for these arguments: force_kernel, else choose_decode_kernel.
KernelChoice decode_kernel_choice(const DecodeArguments& args);

// The number of splits run_decode uses for these arguments (resolves num_splits = 0).
int decode_num_splits(const DecodeArguments& args);

// Empty when the kernels can run these arguments; else the reason.
std::string can_implement(const DecodeArguments& args);

// Bytes of device workspace (split partial outputs and log-sum-exps) run_decode needs for
// arguments that can_implement accepts (else std::invalid_argument); the workspace must be
// 16-byte aligned (as cudaMalloc returns it). The size follows the split count, which depends on
// every argument and is not monotonic in any: a larger batch may split less, and a skip launch
// splits finer than a dense one at the same shape (at 32 / 8 heads, d128: 1.6 MB at batch 48, 0 at
// 64). Size it with the arguments of each launch; a caller that keeps one buffer (CUDA graphs)
// fixes num_splits, with which the size grows with batch and q_len alone. The combine kernel
// reads the workspace after run_decode returns: it must outlive the stream's work, and two
// streams need two workspaces.
std::size_t decode_workspace_size(const DecodeArguments& args);

// Launches the decode (and combine) kernels on `stream`; `workspace` holds `workspace_bytes`
// bytes, at least decode_workspace_size(args). Throws std::invalid_argument when can_implement
// fails or the workspace is too small, std::runtime_error on a CUDA error (an error that earlier
// work left pending is reported, and consumed, before the launch). Returns the kernel family
// launched.
KernelChoice run_decode(const DecodeArguments& args, void* workspace, std::size_t workspace_bytes,
                        void* stream);

}  // namespace skipsoftmax

namespace skipsoftmax {

// Decode on tensors held in host memory (16-bit values: fp16 or bf16 bits), for tools and tests:
// copies them to the device, runs run_decode on the default stream, copies the output back.
// `args` gives everything but the device pointers (lambdas, when set, in host memory; a non-null
// lse asks for the log-sum-exps in the result). Throws like run_decode, and
// std::runtime_error when no Hopper GPU is present; the arguments, the host tensors' sizes, the
// lengths (within [q_len, max_seq_len], the longest equal to max_seq_len) and the page ids they
// reach are checked first (std::invalid_argument), so that a bad argument is named on any machine.
struct HostDecodeResult {
  std::vector<std::uint16_t> out;         // [batch, q_len, num_heads_q, head_dim]
  std::vector<unsigned long long> stats;  // [batch][2] visited, skipped (skip kernel only)
  std::vector<float> lse;                 // [batch, q_len, num_heads_q] when args.lse was set
  KernelChoice kernel = KernelChoice::kDense;
  int num_splits = 1;
  double kernel_ms = 0.0;  // one call (decode and combine), timed with CUDA events
};
HostDecodeResult run_decode_host(DecodeArguments args, const std::vector<std::uint16_t>& q,
                                 const std::vector<std::uint16_t>& k_pages,
                                 const std::vector<std::uint16_t>& v_pages,
                                 const std::vector<std::int32_t>& page_table,
                                 const std::vector<std::int32_t>& seq_lens);

// The float64 CPU reference on a launch's arguments whose pointers are host pointers, as
// run_prefill_reference (prefill.h) is for prefill: the kernels' tile and the split count
// decode_num_splits gives (where no GPU is present, the H100/H200's), so the GPU's skip decisions.
KernelChoice run_decode_reference(const DecodeArguments& args);

}  // namespace skipsoftmax

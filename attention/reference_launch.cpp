// run_prefill_reference and run_decode_reference: the float64 CPU reference on a launch's
// arguments held in host memory, with the kernels' vote tiles, visit order and dispatch.
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "bits16.h"
#include "host_checks.h"
#include "skipsoftmax/decode.h"
#include "skipsoftmax/prefill.h"
#include "skipsoftmax/reference.h"

namespace skipsoftmax {
namespace {

std::vector<float> widen(const void* bits, std::int64_t count, DType dtype) {
  const auto* b = static_cast<const std::uint16_t*>(bits);
  std::vector<float> x(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) x[i] = from_bits(b[i], dtype);
  return x;
}

void narrow(const std::vector<double>& x, void* bits, DType dtype) {
  auto* b = static_cast<std::uint16_t*>(bits);
  for (std::size_t i = 0; i < x.size(); ++i) b[i] = to_bits(static_cast<float>(x[i]), dtype);
}

// The skip kernel adds visited and skipped tiles per sequence; the dense kernel writes nothing.
void add_stats(const AttentionStats& st, KernelChoice kernel, unsigned long long* stats) {
  if (stats == nullptr || kernel != KernelChoice::kSkip) return;
  for (std::size_t b = 0; b < st.sequences.size(); ++b) {
    stats[2 * b] += static_cast<unsigned long long>(st.sequences[b].tiles_total);
    stats[2 * b + 1] += static_cast<unsigned long long>(st.sequences[b].tiles_skipped);
  }
}

// The launch's threshold as the reference takes it: what the chosen kernel runs with.
void set_threshold(ReferenceOptions& opt, KernelChoice kernel, const Threshold& threshold,
                   const float* lambdas, int batch) {
  if (kernel != KernelChoice::kSkip) return;  // opt.threshold stays dense
  if (lambdas != nullptr) {
    opt.lambdas.assign(lambdas, lambdas + batch);
  } else {
    opt.threshold = threshold;
  }
}

void narrow_lse(const std::vector<double>& lse, float* to) {
  if (to == nullptr) return;
  for (std::size_t i = 0; i < lse.size(); ++i) to[i] = static_cast<float>(lse[i]);
}

}  // namespace

KernelChoice run_prefill_reference(const PrefillArguments& a) {
  if (const std::string why = can_implement(a); !why.empty()) {
    throw std::invalid_argument("prefill: " + why);
  }
  const std::span<const std::int32_t> cu_q(a.cu_seqlens_q, std::size_t(a.batch) + 1);
  const std::span<const std::int32_t> cu_k(a.cu_seqlens_k, std::size_t(a.batch) + 1);
  common::check_offsets("prefill", "cu_seqlens_q", cu_q, a.batch, a.total_q, a.max_seqlen_q);
  // Paged launches take total_k unread (the pages hold the keys): the offsets give it.
  const bool paged = a.paged_kv.k_pages != nullptr;
  const std::int64_t total_k = paged ? cu_k.back() : a.total_k;
  common::check_offsets("prefill", "cu_seqlens_k", cu_k, a.batch, total_k, a.max_seqlen_k);

  const std::int64_t kv_row = std::int64_t{a.num_heads_kv} * a.head_dim;  // one token's K
  std::vector<float> q = widen(a.q, a.total_q * a.num_heads_q * a.head_dim, a.dtype);
  std::vector<float> k, v;
  if (!paged) {
    k = widen(a.k, a.total_k * kv_row, a.dtype);
    v = widen(a.v, a.total_k * kv_row, a.dtype);
  } else {
    // Each sequence's history and chunk, gathered from its pages into [total_k, heads, dim].
    const PagedKv& kv = a.paged_kv;
    std::vector<std::int64_t> lengths;
    for (int b = 0; b < a.batch; ++b) lengths.push_back(cu_k[b + 1] - cu_k[b]);
    const std::span<const std::int32_t> table(kv.page_table,
                                              std::size_t(a.batch) * kv.max_pages_per_seq);
    common::check_page_ids("prefill", kv, table, a.batch, lengths);
    const auto* kp = static_cast<const std::uint16_t*>(kv.k_pages);
    const auto* vp = static_cast<const std::uint16_t*>(kv.v_pages);
    k.resize(static_cast<std::size_t>(total_k * kv_row));
    v.resize(k.size());
    for (int b = 0; b < a.batch; ++b) {
      for (std::int64_t t = 0; t < lengths[b]; ++t) {
        const std::int64_t page = table[std::size_t(b) * kv.max_pages_per_seq + t / kv.page_size];
        const std::int64_t from = (page * kv.page_size + t % kv.page_size) * kv_row;
        const std::int64_t to = (cu_k[b] + t) * kv_row;
        for (std::int64_t i = 0; i < kv_row; ++i) {
          k[to + i] = from_bits(kp[from + i], a.dtype);
          v[to + i] = from_bits(vp[from + i], a.dtype);
        }
      }
    }
  }

  PrefillProblem p;
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.num_heads_q = a.num_heads_q;
  p.num_heads_kv = a.num_heads_kv;
  p.head_dim = a.head_dim;
  p.cu_seqlens_q.assign(cu_q.begin(), cu_q.end());
  p.cu_seqlens_k.assign(cu_k.begin(), cu_k.end());
  p.causal = a.causal;
  p.window = a.window;
  p.softmax_scale = a.softmax_scale;
  const KernelChoice kernel = prefill_kernel_choice(a);
  ReferenceOptions opt;
  set_threshold(opt, kernel, a.threshold, a.lambdas, a.batch);
  opt.tiles = prefill_vote_tiles(a.head_dim, a.kv_order);
  opt.collect_mass = false;
  std::vector<double> out(q.size());
  std::vector<double> lse(a.lse ? static_cast<std::size_t>(a.total_q * a.num_heads_q) : 0);
  opt.lse = a.lse ? lse.data() : nullptr;
  const AttentionStats st = reference_prefill(p, opt, out.data());
  narrow(out, a.out, a.dtype);
  narrow_lse(lse, a.lse);
  add_stats(st, kernel, a.stats);
  return kernel;
}

KernelChoice run_decode_reference(const DecodeArguments& a) {
  if (const std::string why = can_implement(a); !why.empty()) {
    throw std::invalid_argument("decode: " + why);
  }
  const PagedKv& kv = a.kv;
  const std::span<const std::int32_t> table(kv.page_table,
                                            std::size_t(a.batch) * kv.max_pages_per_seq);
  const std::span<const std::int32_t> seq_lens(a.seq_lens, std::size_t(a.batch));
  common::check_decode_lengths(a, table, seq_lens);

  const std::int64_t cache = kv.num_pages * kv.page_size * a.num_heads_kv * a.head_dim;
  const std::vector<float> q =
      widen(a.q, std::int64_t{a.batch} * a.q_len * a.num_heads_q * a.head_dim, a.dtype);
  const std::vector<float> k = widen(kv.k_pages, cache, a.dtype);
  const std::vector<float> v = widen(kv.v_pages, cache, a.dtype);

  DecodeProblem p;
  p.q = q.data();
  p.q_len = a.q_len;
  p.kv.k_pages = k.data();
  p.kv.v_pages = v.data();
  p.kv.num_pages = kv.num_pages;
  p.kv.page_size = kv.page_size;
  p.kv.page_table.assign(table.begin(), table.end());
  p.kv.max_pages_per_seq = kv.max_pages_per_seq;
  p.kv.seq_lens.assign(seq_lens.begin(), seq_lens.end());
  p.num_heads_q = a.num_heads_q;
  p.num_heads_kv = a.num_heads_kv;
  p.head_dim = a.head_dim;
  p.window = a.window;
  p.softmax_scale = a.softmax_scale;
  const KernelChoice kernel = decode_kernel_choice(a);
  ReferenceOptions opt;
  set_threshold(opt, kernel, a.threshold, a.lambdas, a.batch);
  opt.tiles = TileShape{.tile_k = decode_tile_k(a.head_dim)};
  opt.num_splits = decode_num_splits(a);
  opt.collect_mass = false;
  std::vector<double> out(q.size());
  std::vector<double> lse(a.lse ? q.size() / a.head_dim : 0);
  opt.lse = a.lse ? lse.data() : nullptr;
  const AttentionStats st = reference_decode(p, opt, out.data());
  narrow(out, a.out, a.dtype);
  narrow_lse(lse, a.lse);
  add_stats(st, kernel, a.stats);
  return kernel;
}

}  // namespace skipsoftmax

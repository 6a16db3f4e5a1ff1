#include "skipsoftmax/c_api.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "skipsoftmax/prefill.h"

namespace {

void set_error(char* error, int error_len, const std::string& message) {
  if (error == nullptr || error_len <= 0) return;
  const std::size_t n = std::min(message.size(), static_cast<std::size_t>(error_len - 1));
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

skipsoftmax::Threshold threshold_of(const skipsoftmax_prefill_args& a) {
  if (a.table_rows <= 0) return skipsoftmax::Threshold::flat(a.flat_lambda);
  std::vector<skipsoftmax::ScaleTableRow> rows;
  for (int i = 0; i < a.table_rows; ++i) rows.push_back({a.table_bins[i], a.table_scales[i]});
  return skipsoftmax::Threshold::table(skipsoftmax::ScaleTable(std::move(rows)));
}

}  // namespace

extern "C" int skipsoftmax_prefill(const skipsoftmax_prefill_args* args, void* stream, char* error,
                                   int error_len) {
  try {
    if (args == nullptr) throw std::invalid_argument("args is NULL");
    const skipsoftmax_prefill_args& a = *args;
    if (a.kv_order < 0 || a.kv_order > 2) throw std::invalid_argument("kv_order must be 0, 1 or 2");
    skipsoftmax::PrefillArguments p;
    p.dtype = a.dtype == SKIPSOFTMAX_BF16 ? skipsoftmax::DType::kBF16 : skipsoftmax::DType::kF16;
    p.head_dim = a.head_dim;
    p.q = a.q;
    p.k = a.k;
    p.v = a.v;
    p.out = a.out;
    p.cu_seqlens_q = a.cu_seqlens_q;
    p.cu_seqlens_k = a.cu_seqlens_k;
    p.batch = a.batch;
    p.total_q = a.total_q;
    p.total_k = a.total_k;
    p.max_seqlen_q = a.max_seqlen_q;
    p.max_seqlen_k = a.max_seqlen_k;
    p.kv_history = a.kv_history != 0;
    p.num_heads_q = a.num_heads_q;
    p.num_heads_kv = a.num_heads_kv;
    p.causal = a.causal != 0;
    if (a.softmax_scale > 0) p.softmax_scale = a.softmax_scale;
    p.threshold = threshold_of(a);
    p.kv_order = static_cast<skipsoftmax::KvOrder>(a.kv_order);
    p.stats = a.stats;
    if (a.force_kernel == SKIPSOFTMAX_DENSE) p.force_kernel = skipsoftmax::KernelChoice::kDense;
    if (a.force_kernel == SKIPSOFTMAX_SKIP) p.force_kernel = skipsoftmax::KernelChoice::kSkip;
    const auto choice = skipsoftmax::run_prefill(p, nullptr, stream);
    return choice == skipsoftmax::KernelChoice::kSkip ? SKIPSOFTMAX_SKIP : SKIPSOFTMAX_DENSE;
  } catch (const std::exception& e) {
    set_error(error, error_len, e.what());
    return -1;
  }
}

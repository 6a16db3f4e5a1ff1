#include "skipsoftmax/c_api.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "skipsoftmax/decode.h"
#include "skipsoftmax/diffusion.h"
#include "skipsoftmax/prefill.h"

namespace {

void set_error(char* error, int error_len, const std::string& message) {
  if (error == nullptr || error_len <= 0) return;
  const std::size_t n = std::min(message.size(), static_cast<std::size_t>(error_len - 1));
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

// A caller built against another c_api.h passes a struct of another size (its first field, if it
// has one, is its size): refused before any other field is read.
template <typename Args>
const Args& checked(const Args* args, const char* name) {
  if (args == nullptr) throw std::invalid_argument("args is NULL");
  if (args->struct_size != sizeof(Args)) {
    throw std::invalid_argument(std::string(name) + ".struct_size is " +
                                std::to_string(args->struct_size) + ", this library's " + name +
                                " has " + std::to_string(sizeof(Args)) + " bytes: build against " +
                                "its c_api.h and start from " + name + "_init");
  }
  return *args;
}

template <typename Args>
skipsoftmax::Threshold threshold_of(const Args& a) {
  if (a.table_rows < 0 || a.table_rows > skipsoftmax::kMaxKernelTableRows) {
    throw std::invalid_argument("table_rows must lie in [0, " +
                                std::to_string(skipsoftmax::kMaxKernelTableRows) + "], got " +
                                std::to_string(a.table_rows));
  }
  if (a.table_rows == 0) return skipsoftmax::Threshold::flat(a.flat_lambda);
  if (a.table_bins == nullptr || a.table_scales == nullptr) {
    throw std::invalid_argument("table_rows is " + std::to_string(a.table_rows) +
                                " but table_bins or table_scales is NULL");
  }
  std::vector<skipsoftmax::ScaleTableRow> rows;
  for (int i = 0; i < a.table_rows; ++i) rows.push_back({a.table_bins[i], a.table_scales[i]});
  return skipsoftmax::Threshold::table(skipsoftmax::ScaleTable(std::move(rows)));
}

template <typename Args>
std::optional<skipsoftmax::KernelChoice> forced(const Args& a) {
  if (a.force_kernel == SKIPSOFTMAX_DENSE) return skipsoftmax::KernelChoice::kDense;
  if (a.force_kernel == SKIPSOFTMAX_SKIP) return skipsoftmax::KernelChoice::kSkip;
  if (a.force_kernel != SKIPSOFTMAX_AUTO) {
    throw std::invalid_argument(
        "force_kernel must be SKIPSOFTMAX_AUTO, SKIPSOFTMAX_DENSE or "
        "SKIPSOFTMAX_SKIP, got " +
        std::to_string(a.force_kernel));
  }
  return std::nullopt;
}

// softmax_scale <= 0 asks for the default 1 / sqrt(head_dim); NaN or infinity is an error.
std::optional<double> scale_of(double softmax_scale) {
  if (!std::isfinite(softmax_scale)) {
    throw std::invalid_argument("softmax_scale must be finite (<= 0: 1 / sqrt(head_dim)), got " +
                                std::to_string(softmax_scale));
  }
  if (softmax_scale > 0) return softmax_scale;
  return std::nullopt;
}

skipsoftmax::DType dtype_of(int dtype) {
  if (dtype != SKIPSOFTMAX_BF16 && dtype != SKIPSOFTMAX_FP16) {
    throw std::invalid_argument("dtype must be SKIPSOFTMAX_FP16 or SKIPSOFTMAX_BF16");
  }
  return dtype == SKIPSOFTMAX_BF16 ? skipsoftmax::DType::kBF16 : skipsoftmax::DType::kF16;
}

int dtype_code(skipsoftmax::DType dtype) {
  return dtype == skipsoftmax::DType::kBF16 ? SKIPSOFTMAX_BF16 : SKIPSOFTMAX_FP16;
}

skipsoftmax::DecodeArguments decode_arguments(const skipsoftmax_decode_args* args) {
  const skipsoftmax_decode_args& a = checked(args, "skipsoftmax_decode_args");
  skipsoftmax::DecodeArguments d;
  d.dtype = dtype_of(a.dtype);
  d.head_dim = a.head_dim;
  d.q = a.q;
  d.out = a.out;
  d.kv = {a.k_pages, a.v_pages, a.num_pages, a.page_size, a.page_table, a.max_pages_per_seq};
  d.seq_lens = a.seq_lens;
  d.batch = a.batch;
  d.max_seq_len = a.max_seq_len;
  d.num_heads_q = a.num_heads_q;
  d.num_heads_kv = a.num_heads_kv;
  d.softmax_scale = scale_of(a.softmax_scale);
  d.threshold = threshold_of(a);
  d.num_splits = a.num_splits;
  d.window = a.window;
  d.q_len = a.q_len == 0 ? 1 : a.q_len;  // negative: can_implement says so
  d.stats = a.stats;
  d.force_kernel = forced(a);
  d.lambdas = a.lambdas;
  d.lse = a.lse;
  return d;
}

skipsoftmax::PrefillArguments prefill_arguments(const skipsoftmax_prefill_args* args) {
  const skipsoftmax_prefill_args& a = checked(args, "skipsoftmax_prefill_args");
  if (a.kv_order < 0 || a.kv_order > 2) throw std::invalid_argument("kv_order must be 0, 1 or 2");
  skipsoftmax::PrefillArguments p;
  p.dtype = dtype_of(a.dtype);
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
  p.num_heads_q = a.num_heads_q;
  p.num_heads_kv = a.num_heads_kv;
  p.causal = a.causal != 0;
  p.softmax_scale = scale_of(a.softmax_scale);
  p.threshold = threshold_of(a);
  p.kv_order = static_cast<skipsoftmax::KvOrder>(a.kv_order);
  p.stats = a.stats;
  p.force_kernel = forced(a);
  p.window = a.window;
  p.paged_kv = {a.k_pages, a.v_pages, a.num_pages, a.page_size, a.page_table, a.max_pages_per_seq};
  p.lambdas = a.lambdas;
  p.lse = a.lse;
  return p;
}

// The status of the exception being handled, its message in error: the C++ API throws
// std::invalid_argument for arguments and std::runtime_error for CUDA errors.
int fail(char* error, int error_len) {
  try {
    throw;
  } catch (const std::invalid_argument& e) {
    set_error(error, error_len, e.what());
    return SKIPSOFTMAX_ERROR_ARGUMENT;
  } catch (const std::runtime_error& e) {
    set_error(error, error_len, e.what());
    return SKIPSOFTMAX_ERROR_CUDA;
  } catch (const std::exception& e) {
    set_error(error, error_len, e.what());
  } catch (...) {
    set_error(error, error_len, "an unknown exception");
  }
  return SKIPSOFTMAX_ERROR_INTERNAL;
}

int kernel_code(skipsoftmax::KernelChoice choice) {
  return choice == skipsoftmax::KernelChoice::kSkip ? SKIPSOFTMAX_SKIP : SKIPSOFTMAX_DENSE;
}

// The defaults of the fields both argument structs have (see skipsoftmax_*_args_init).
template <typename CArgs, typename Defaults>
void init_common(CArgs* args, const Defaults& d) {
  std::memset(args, 0, sizeof *args);
  args->struct_size = sizeof *args;
  args->dtype = dtype_code(d.dtype);
  args->head_dim = d.head_dim;
  args->window = d.window;
  args->force_kernel = SKIPSOFTMAX_AUTO;
}

}  // namespace

extern "C" const char* skipsoftmax_version(void) { return SKIPSOFTMAX_VERSION; }

// The defaults that the C++ structs hold as plain values are read off them; their optional fields
// (softmax scale, forced kernel) are absent there and 0 / SKIPSOFTMAX_AUTO here, the threshold
// dense in both.
extern "C" void skipsoftmax_prefill_args_init(skipsoftmax_prefill_args* args) {
  if (args == nullptr) return;
  const skipsoftmax::PrefillArguments d;
  init_common(args, d);
  args->causal = d.causal ? 1 : 0;
  args->kv_order = static_cast<int>(d.kv_order);
}

extern "C" void skipsoftmax_decode_args_init(skipsoftmax_decode_args* args) {
  if (args == nullptr) return;
  const skipsoftmax::DecodeArguments d;
  init_common(args, d);
  args->num_splits = d.num_splits;
  args->q_len = d.q_len;
}

extern "C" int skipsoftmax_decode(const skipsoftmax_decode_args* args, void* stream, char* error,
                                  int error_len) {
  try {
    const skipsoftmax::DecodeArguments d = decode_arguments(args);
    if (args->workspace_bytes < 0) {
      throw std::invalid_argument("workspace_bytes must be >= 0, got " +
                                  std::to_string(args->workspace_bytes));
    }
    return kernel_code(skipsoftmax::run_decode(
        d, args->workspace, static_cast<std::size_t>(args->workspace_bytes), stream));
  } catch (...) {
    return fail(error, error_len);
  }
}

extern "C" int64_t skipsoftmax_decode_workspace_size(const skipsoftmax_decode_args* args,
                                                     int* num_splits, char* error, int error_len) {
  try {
    const skipsoftmax::DecodeArguments d = decode_arguments(args);
    const std::size_t bytes = skipsoftmax::decode_workspace_size(d);  // checks the arguments
    if (num_splits != nullptr) *num_splits = skipsoftmax::decode_num_splits(d);
    return static_cast<int64_t>(bytes);
  } catch (...) {
    return fail(error, error_len);
  }
}

extern "C" int skipsoftmax_prefill(const skipsoftmax_prefill_args* args, void* stream, char* error,
                                   int error_len) {
  try {
    const skipsoftmax::PrefillArguments p = prefill_arguments(args);
    return kernel_code(skipsoftmax::run_prefill(p, nullptr, stream));
  } catch (...) {
    return fail(error, error_len);
  }
}

extern "C" int skipsoftmax_prefill_can_implement(const skipsoftmax_prefill_args* args, char* error,
                                                 int error_len) {
  try {
    const skipsoftmax::PrefillArguments p = prefill_arguments(args);
    if (const std::string why = skipsoftmax::can_implement(p); !why.empty()) {
      throw std::invalid_argument("prefill: " + why);
    }
    return kernel_code(skipsoftmax::prefill_kernel_choice(p));
  } catch (...) {
    return fail(error, error_len);
  }
}

extern "C" int skipsoftmax_prefill_reference(const skipsoftmax_prefill_args* args, char* error,
                                             int error_len) {
  try {
    return kernel_code(skipsoftmax::run_prefill_reference(prefill_arguments(args)));
  } catch (...) {
    return fail(error, error_len);
  }
}

extern "C" int skipsoftmax_decode_reference(const skipsoftmax_decode_args* args, char* error,
                                            int error_len) {
  try {
    return kernel_code(skipsoftmax::run_decode_reference(decode_arguments(args)));
  } catch (...) {
    return fail(error, error_len);
  }
}

struct skipsoftmax_diffusion_config {
  std::vector<std::string> warnings;  // filled by the gate's sink; first member: outlives config
  std::optional<skipsoftmax::DiffusionSkipConfig> config;
};

extern "C" int skipsoftmax_diffusion_config_load(const char* component_dir,
                                                 const char* request_json, int secondary,
                                                 skipsoftmax_diffusion_config** config, char* error,
                                                 int error_len) {
  try {
    if (component_dir == nullptr || request_json == nullptr || config == nullptr) {
      throw std::invalid_argument("component_dir, request_json and config must not be NULL");
    }
    auto handle = std::make_unique<skipsoftmax_diffusion_config>();
    const skipsoftmax::DiffusionRequest request =
        skipsoftmax::parse_diffusion_request(request_json);
    auto* warnings = &handle->warnings;
    const auto sink = [warnings](const std::string& w) { warnings->push_back(w); };
    handle->config =
        secondary ? skipsoftmax::load_secondary_diffusion_config(component_dir, request, sink)
                  : skipsoftmax::load_diffusion_config(component_dir, request, sink);
    *config = handle.release();
    return 0;
  } catch (const std::runtime_error& e) {  // a file that cannot be read is the argument's
    set_error(error, error_len, e.what());
    return SKIPSOFTMAX_ERROR_ARGUMENT;
  } catch (...) {
    return fail(error, error_len);
  }
}

extern "C" double skipsoftmax_diffusion_lambda(skipsoftmax_diffusion_config* config,
                                               const char* module_name, int64_t max_kv_len,
                                               double timestep) {
  if (config == nullptr || !config->config) return 0.0;
  const std::optional<double> t =
      std::isnan(timestep) ? std::nullopt : std::optional<double>(timestep);
  return config->config->lambda_for(module_name ? module_name : "", max_kv_len, t);
}

extern "C" int skipsoftmax_diffusion_config_messages(const skipsoftmax_diffusion_config* config,
                                                     char* text, int text_len) {
  std::string all;
  if (config != nullptr && config->config) {
    for (const std::string& n : config->config->notes()) all += n + "\n";
    for (const std::string& w : config->warnings) all += w + "\n";
  }
  set_error(text, text_len, all);
  return static_cast<int>(all.size());
}

extern "C" void skipsoftmax_diffusion_config_free(skipsoftmax_diffusion_config* config) {
  delete config;
}

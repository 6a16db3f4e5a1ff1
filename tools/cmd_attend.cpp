// skipsoftmax attend: prefill attention with skip-softmax on .npy tensors.
//
// Everything is checked before anything is written; the stats file is written first and removed
// again if the output cannot be written, so a failed run leaves neither file behind.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "bits16.h"
#include "commands.h"
#include "file_io.h"
#include "npy.h"
#include "skipsoftmax/decode.h"
#include "skipsoftmax/prefill.h"
#include "skipsoftmax/reference.h"
#include "skipsoftmax/threshold.h"
#include "skipsoftmax/tiling.h"
#include "softmax_scale.h"
#include "table_json.h"

namespace skipsoftmax::cli {
namespace {

namespace fs = std::filesystem;

#if SKIPSOFTMAX_HAVE_CUDA
constexpr bool kHaveCuda = true;
#else
constexpr bool kHaveCuda = false;
#endif

struct AttendArgs {
  std::string q, k, v;
  std::string cu_seqlens_q, cu_seqlens_k;  // empty: no ragged batch
  // Decode over a paged KV cache (instead of --k/--v): q [batch, (q_len,) Hq, D].
  std::string k_pages, v_pages, page_table, seq_lens;
  std::optional<int> num_splits;  // decode only; default 1
  bool causal = false;
  std::int64_t window = 0;  // sliding window in keys; 0: none
  std::string scale_table;
  std::optional<double> threshold;  // nullopt: dense unless a table is given
  std::optional<double> softmax_scale;
  std::optional<int> tile_q, tile_k;  // default: 128 x 128 (cpu), the kernel's vote tiles (cuda)
  std::string kv_order = to_string(TileShape{}.order);
  std::string backend = "cpu";
  std::string cuda_dtype;  // empty: fp16 for fp16 inputs, bf16 for fp32 inputs
  int threads = 0;
  std::string out_dtype;  // empty: the input dtype
  std::string out, stats;
};

// What the flags ask for, checked before the tensors are read.
struct Settings {
  ReferenceOptions options;
  std::optional<NpyDtype> out_dtype;
};

// q, k, v widened to float: [tokens, heads, head_dim] with the sequences' boundaries.
struct Inputs {
  NpyDtype dtype = NpyDtype::kF32;
  std::vector<std::int64_t> q_shape;  // as given; the output has the same shape
  std::vector<float> q, k, v;
  int heads_q = 0, heads_kv = 0, head_dim = 0;
  std::vector<std::int64_t> cu_q, cu_k;  // [batch + 1]
};

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

constexpr int kMaxTile = 4096;  // rows or keys of a vote tile on the CPU

KvOrder parse_order(const std::string& name) {
  const std::optional<KvOrder> order = parse_kv_order(name);
  if (!order) fail("unknown --kv-order '" + name + "' (valid: " + kv_order_names() + ")");
  return *order;
}

std::optional<NpyDtype> parse_out_dtype(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name == "f16") return NpyDtype::kF16;
  if (name == "f32") return NpyDtype::kF32;
  if (name == "f64") return NpyDtype::kF64;
  fail("unknown --out-dtype '" + name + "' (valid: f16, f32, f64)");
}

Threshold parse_threshold(const AttendArgs& a) {
  if (!a.scale_table.empty()) return Threshold::table(read_scale_table_file(a.scale_table));
  if (!a.threshold) return Threshold::dense();
  try {
    return Threshold::flat(*a.threshold);
  } catch (const std::invalid_argument& e) {
    fail(std::string("--threshold: ") + e.what());
  }
}

// Checked before any work: an output that cannot be written fails at once, naming its flag.
void check_output(const std::string& path, const char* flag) {
  try {
    check_output_file(path);
  } catch (const std::invalid_argument& e) {
    fail(std::string(flag) + " " + e.what());
  }
}

// The vote tiles: the flags' for the CPU reference (default 128 x 128); the kernel's for cuda,
// where a flag that asks for other tiles is an error rather than silently ignored.
TileShape parse_tiles(const AttendArgs& a, int head_dim) {
  const KvOrder order = parse_order(a.kv_order);
  if (a.backend == "cuda") {
    const TileShape kernel = prefill_vote_tiles(head_dim, order);
    if ((a.tile_q && *a.tile_q != kernel.tile_q) || (a.tile_k && *a.tile_k != kernel.tile_k)) {
      fail("--backend cuda votes on " + std::to_string(kernel.tile_q) + " x " +
           std::to_string(kernel.tile_k) + " tiles for head dim " + std::to_string(head_dim) +
           "; drop --tile-q/--tile-k or give those values");
    }
    return kernel;
  }
  const TileShape defaults;
  return {a.tile_q.value_or(defaults.tile_q), a.tile_k.value_or(defaults.tile_k), order};
}

Settings parse_settings(const AttendArgs& a) {
  if (a.backend == "cuda" && !kHaveCuda) {
    fail(
        "--backend cuda: this build has no GPU kernels (nvcc was not found when it was "
        "configured); use --backend cpu");
  }
  if (a.backend != "cpu" && a.backend != "cuda") {
    fail("unknown --backend '" + a.backend + "' (valid: cpu, cuda)");
  }
  if (a.window < 0 || a.window > std::numeric_limits<int>::max()) {
    fail("--window must lie in [0, 2^31) (0: none), got " + std::to_string(a.window));
  }
  if (a.window > 0 && !a.causal && a.k_pages.empty()) {
    fail("--window needs --causal (a sliding window looks back)");
  }
  if (!a.cuda_dtype.empty() && a.cuda_dtype != "fp16" && a.cuda_dtype != "bf16") {
    fail("unknown --cuda-dtype '" + a.cuda_dtype + "' (valid: fp16, bf16)");
  }
  if (!a.cuda_dtype.empty() && a.backend != "cuda") {
    fail("--cuda-dtype applies to --backend cuda (the cpu reference computes in float64)");
  }
  // The reference holds a tile's scores per thread: past kMaxTile a tile only costs memory
  // (4 GB for a 64-token input), since no sequence of a CPU run is that long.
  for (const auto& [flag, tile] :
       {std::pair{"--tile-q", a.tile_q}, std::pair{"--tile-k", a.tile_k}}) {
    if (tile && *tile <= 0)
      fail(std::string(flag) + " must be positive, got " + std::to_string(*tile));
    if (tile && *tile > kMaxTile) {
      fail(std::string(flag) + " must be at most " + std::to_string(kMaxTile) + ", got " +
           std::to_string(*tile));
    }
  }
  check_threads(a.threads);
  // Both backends take the kernels' scales (1e308 made the reference's rows NaN).
  if (const std::string why = softmax_scale_problem(a.softmax_scale); !why.empty()) {
    fail("--softmax-scale: " + why);
  }
  if (!a.stats.empty() && same_file(a.stats, a.out)) {
    fail("--stats " + a.stats + " and --out " + a.out + " name the same file");
  }
  const std::vector<ReadPath> inputs = {{"--q", a.q},
                                        {"--k", a.k},
                                        {"--v", a.v},
                                        {"--cu-seqlens-q", a.cu_seqlens_q},
                                        {"--cu-seqlens-k", a.cu_seqlens_k},
                                        {"--k-pages", a.k_pages},
                                        {"--v-pages", a.v_pages},
                                        {"--page-table", a.page_table},
                                        {"--seq-lens", a.seq_lens},
                                        {"--scale-table", a.scale_table}};
  check_not_an_input(a.out, "--out", inputs);
  if (!a.stats.empty()) check_not_an_input(a.stats, "--stats", inputs);
  check_output(a.out, "--out");
  if (!a.stats.empty()) check_output(a.stats, "--stats");

  Settings s;
  parse_order(a.kv_order);  // checked here; the tiles are set once the head dim is known
  s.options.num_threads = a.threads;
  s.options.threshold = parse_threshold(a);
  s.out_dtype = parse_out_dtype(a.out_dtype);
  return s;
}

NpyArray read_tensor(const std::string& path) {
  NpyArray array = read_npy(path);
  if (array.dtype != NpyDtype::kF16 && array.dtype != NpyDtype::kF32) {
    fail(path + ": dtype " + npy_descr(array.dtype) +
         " is not supported: attend takes fp16 (<f2) " + "or fp32 (<f4)");
  }
  if (array.shape.size() != 3 && array.shape.size() != 4) {
    fail(path + ": shape " + npy_shape_string(array.shape) +
         " must be [total, heads, head_dim] or [batch, seqlen, heads, head_dim]");
  }
  return array;
}

// [tokens, heads, head_dim] -> (batch, tokens per sequence, heads, head_dim) with batch 1;
// [B, S, H, D] -> (B, S, H, D).
struct Layout {
  std::int64_t batch, seqlen, heads, head_dim;
};
Layout layout_of(const NpyArray& a) {
  const auto& s = a.shape;
  return s.size() == 4 ? Layout{s[0], s[1], s[2], s[3]} : Layout{1, s[0], s[1], s[2]};
}

int small_dim(const std::string& path, const char* what, std::int64_t value) {
  if (value <= 0 || value > std::numeric_limits<int>::max()) {
    fail(path + ": " + what + " must be in [1, 2^31), got " + std::to_string(value));
  }
  return static_cast<int>(value);
}

// Attention of finite inputs: a NaN or an infinity is refused, named by file and element.
void check_finite(const std::string& path, const std::vector<float>& values, std::size_t begin,
                  std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    if (!std::isfinite(values[i])) {
      std::ostringstream msg;
      msg << path << ": element " << i << " is " << values[i] << "; attend takes finite inputs";
      fail(msg.str());
    }
  }
}
void check_finite(const std::string& path, const std::vector<float>& values) {
  check_finite(path, values, 0, values.size());
}

void check_qkv_shapes(const AttendArgs& a, const NpyArray& q, const NpyArray& k,
                      const NpyArray& v) {
  if (k.dtype != q.dtype || v.dtype != q.dtype) {
    fail(std::string("q, k and v must share one dtype, got ") + npy_descr(q.dtype) + ", " +
         npy_descr(k.dtype) + ", " + npy_descr(v.dtype));
  }
  if (k.shape.size() != q.shape.size()) {
    fail(a.k + ": shape " + npy_shape_string(k.shape) + " and q's " + npy_shape_string(q.shape) +
         " differ in rank");
  }
  if (v.shape != k.shape) {
    fail(a.v + ": shape " + npy_shape_string(v.shape) + " must equal k's " +
         npy_shape_string(k.shape));
  }
  const Layout lq = layout_of(q), lk = layout_of(k);
  if (lq.batch != lk.batch) {
    fail("batch sizes differ: q has " + std::to_string(lq.batch) + ", k " +
         std::to_string(lk.batch));
  }
  if (lq.head_dim != lk.head_dim) {
    fail("head_dim mismatch: q has " + std::to_string(lq.head_dim) + ", k and v " +
         std::to_string(lk.head_dim));
  }
  const int hq = small_dim(a.q, "heads", lq.heads), hkv = small_dim(a.k, "heads", lk.heads);
  small_dim(a.q, "head_dim", lq.head_dim);
  small_dim(a.q, q.shape.size() == 4 ? "batch" : "tokens", q.shape[0]);
  small_dim(a.q, "tokens per sequence", lq.seqlen);
  small_dim(a.k, "tokens per sequence", lk.seqlen);
  if (hq % hkv != 0) {
    fail("query heads (" + std::to_string(hq) + ") must be a multiple of kv heads (" +
         std::to_string(hkv) + ")");
  }
  if (q.shape.size() == 4 && !a.cu_seqlens_q.empty()) {
    fail("--cu-seqlens-q/-k apply to 3-D [total, heads, head_dim] inputs; " + a.q +
         " is 4-D [batch, seqlen, heads, head_dim]");
  }
}

// [batch + 1] offsets: start at 0, never decrease, end at `total`.
std::vector<std::int64_t> read_cu_seqlens(const std::string& path, std::int64_t total,
                                          const char* tensor) {
  const NpyArray array = read_npy(path);
  if (array.shape.size() != 1 || array.shape[0] < 2) {
    fail(path + ": cu_seqlens must be 1-D with batch + 1 >= 2 entries, got shape " +
         npy_shape_string(array.shape));
  }
  const std::vector<std::int64_t> cu = to_int64_vector(array, path);
  if (cu.front() != 0) fail(path + ": cu_seqlens must start at 0, got " + std::to_string(cu[0]));
  for (std::size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      fail(path + ": cu_seqlens must not decrease, but entry " + std::to_string(i) + " (" +
           std::to_string(cu[i]) + ") < entry " + std::to_string(i - 1) + " (" +
           std::to_string(cu[i - 1]) + ")");
    }
  }
  if (cu.back() != total) {
    fail(path + ": cu_seqlens must end at the " + tensor + " token count " + std::to_string(total) +
         ", got " + std::to_string(cu.back()));
  }
  return cu;
}

std::vector<std::int64_t> uniform_cu_seqlens(const Layout& l) {
  std::vector<std::int64_t> cu(static_cast<std::size_t>(l.batch) + 1);
  for (std::size_t b = 0; b < cu.size(); ++b) cu[b] = static_cast<std::int64_t>(b) * l.seqlen;
  return cu;
}

void check_sequences(const AttendArgs& a, const Inputs& in) {
  if (in.cu_q.size() != in.cu_k.size()) {
    fail("cu_seqlens disagree on the batch: " + a.cu_seqlens_q + " has " +
         std::to_string(in.cu_q.size()) + " entries, " + a.cu_seqlens_k + " " +
         std::to_string(in.cu_k.size()));
  }
  if (!a.causal) return;
  for (std::size_t b = 0; b + 1 < in.cu_q.size(); ++b) {
    const std::int64_t q_len = in.cu_q[b + 1] - in.cu_q[b];
    const std::int64_t kv_len = in.cu_k[b + 1] - in.cu_k[b];
    if (kv_len < q_len) {
      fail("sequence " + std::to_string(b) + ": --causal needs kv_len >= q_len, got q_len " +
           std::to_string(q_len) + ", kv_len " + std::to_string(kv_len));
    }
  }
}

Inputs load_inputs(const AttendArgs& a) {
  const NpyArray q = read_tensor(a.q), k = read_tensor(a.k), v = read_tensor(a.v);
  check_qkv_shapes(a, q, k, v);
  const Layout lq = layout_of(q), lk = layout_of(k);
  Inputs in;
  in.dtype = q.dtype;
  in.q_shape = q.shape;
  in.heads_q = static_cast<int>(lq.heads);
  in.heads_kv = static_cast<int>(lk.heads);
  in.head_dim = static_cast<int>(lq.head_dim);
  if (a.cu_seqlens_q.empty()) {
    in.cu_q = uniform_cu_seqlens(lq);
    in.cu_k = uniform_cu_seqlens(lk);
  } else {
    in.cu_q = read_cu_seqlens(a.cu_seqlens_q, lq.seqlen, "q");
    in.cu_k = read_cu_seqlens(a.cu_seqlens_k, lk.seqlen, "k");
  }
  check_sequences(a, in);
  in.q = to_float_vector(q, a.q);
  in.k = to_float_vector(k, a.k);
  in.v = to_float_vector(v, a.v);
  check_finite(a.q, in.q);
  check_finite(a.k, in.k);
  check_finite(a.v, in.v);
  return in;
}

nlohmann::json sequence_json(const SequenceStats& s) {
  return {{"q_len", s.q_len},
          {"kv_len", s.kv_len},
          {"lambda", s.lambda},
          {"tiles_total", s.tiles_total},
          {"tiles_skipped", s.tiles_skipped},
          {"sparsity", s.sparsity()},
          {"mass_share", s.mass_share},
          {"mass_share_max", s.mass_share_max},
          {"nan_rows", s.nan_rows}};
}

nlohmann::json stats_json(const AttendArgs& a, const Settings& s, const AttentionStats& st) {
  nlohmann::json sequences = nlohmann::json::array();
  for (const SequenceStats& seq : st.sequences) sequences.push_back(sequence_json(seq));
  return {{"backend", a.backend},
          {"causal", a.causal},
          {"window", a.window},
          {"tile_q", s.options.tiles.tile_q},
          {"tile_k", s.options.tiles.tile_k},
          {"kv_order", to_string(s.options.tiles.order)},
          {"threshold", s.options.threshold.describe()},
          {"tiles_total", st.tiles_total},
          {"tiles_skipped", st.tiles_skipped},
          {"sparsity", st.sparsity()},
          {"mass_share", st.mass_share},
          {"nan_rows", st.nan_rows},
          {"sequences", std::move(sequences)}};
}

// An fp16 output must hold every value: rounding past fp16's largest finite value would write
// infinities without a word.
void check_out_dtype_holds(const std::vector<double>& out, NpyDtype dtype) {
  if (dtype != NpyDtype::kF16) return;
  constexpr double kHalfMax = 65504.0;  // the largest finite fp16 value
  std::size_t beyond = 0;
  double largest = 0.0;
  for (double x : out) {
    if (std::isfinite(x) && std::abs(x) > kHalfMax) {
      ++beyond;
      largest = std::max(largest, std::abs(x));
    }
  }
  if (beyond > 0) {
    fail("--out-dtype f16: " + std::to_string(beyond) + " output values lie beyond fp16's range " +
         "(|x| up to " + std::to_string(largest) + ", fp16 holds " +
         std::to_string(static_cast<int>(kHalfMax)) + "); use f32");
  }
}

// The output and the stats are committed together: a failure while writing either leaves both
// previous files as they were.
void write_results(const AttendArgs& a, const NpyArray& out, const nlohmann::json& stats) {
  OutputSet outputs;
  outputs.add(a.out, [&](std::ostream& o) { write_npy(o, out, a.out); });
  if (!a.stats.empty()) outputs.add_json(a.stats, stats);
  outputs.commit();
}

PrefillProblem problem_of(const AttendArgs& a, const Inputs& in) {
  PrefillProblem p;
  p.q = in.q.data();
  p.k = in.k.data();
  p.v = in.v.data();
  p.num_heads_q = in.heads_q;
  p.num_heads_kv = in.heads_kv;
  p.head_dim = in.head_dim;
  p.cu_seqlens_q = in.cu_q;
  p.cu_seqlens_k = in.cu_k;
  p.causal = a.causal;
  p.window = a.window;
  p.softmax_scale = a.softmax_scale;
  return p;
}

// The CPU reference in float64.
AttentionStats run_cpu(const AttendArgs& a, const Settings& s, const Inputs& in,
                       std::vector<double>& out) {
  out.assign(in.q.size(), 0.0);
  return reference_prefill(problem_of(a, in), s.options, out.data());
}

#if SKIPSOFTMAX_HAVE_CUDA
std::vector<std::int32_t> to_int32(const std::vector<std::int64_t>& cu) {
  std::vector<std::int32_t> out;
  for (std::int64_t x : cu) {
    if (x >= (std::int64_t{1} << 31)) fail("--backend cuda: more than 2^31 tokens");
    out.push_back(static_cast<std::int32_t>(x));
  }
  return out;
}

// The Hopper kernels. Tile counts come from the GPU; the skipped softmax mass is not measured
// there (it would cost the exponentials the kernel skips), so it is reported as null.
AttentionStats run_cuda(const AttendArgs& a, const Settings& s, const Inputs& in,
                        std::vector<double>& out, KernelChoice& kernel) {
  validate(problem_of(a, in));  // sequences and shapes, with the reference's messages
  const DType dtype = !a.cuda_dtype.empty()
                          ? (a.cuda_dtype == "bf16" ? DType::kBF16 : DType::kF16)
                          : (in.dtype == NpyDtype::kF16 ? DType::kF16 : DType::kBF16);
  PrefillArguments args;
  args.dtype = dtype;
  args.head_dim = in.head_dim;
  args.batch = static_cast<int>(in.cu_q.size()) - 1;
  args.total_q = in.cu_q.back();
  args.total_k = in.cu_k.back();
  for (int b = 0; b < args.batch; ++b) {
    const std::int64_t lq = in.cu_q[b + 1] - in.cu_q[b], lk = in.cu_k[b + 1] - in.cu_k[b];
    args.max_seqlen_q = std::max<int>(args.max_seqlen_q, static_cast<int>(lq));
    args.max_seqlen_k = std::max<int>(args.max_seqlen_k, static_cast<int>(lk));
  }
  args.num_heads_q = in.heads_q;
  args.num_heads_kv = in.heads_kv;
  args.causal = a.causal;
  args.softmax_scale = a.softmax_scale;
  args.threshold = s.options.threshold;
  args.kv_order = s.options.tiles.order;
  args.window = static_cast<int>(a.window);
  const HostPrefillResult r =
      run_prefill_host(args, to_bits(in.q, dtype), to_bits(in.k, dtype), to_bits(in.v, dtype),
                       to_int32(in.cu_q), to_int32(in.cu_k));
  kernel = r.kernel;
  out = from_bits(r.out, dtype);
  AttentionStats st;
  for (int b = 0; b < args.batch; ++b) {
    SequenceStats q;
    q.q_len = in.cu_q[b + 1] - in.cu_q[b];
    q.kv_len = in.cu_k[b + 1] - in.cu_k[b];
    q.lambda = s.options.threshold.lambda_for(q.kv_len);
    if (r.kernel == KernelChoice::kSkip) {
      q.tiles_total = static_cast<std::int64_t>(r.stats[2 * b]);
      q.tiles_skipped = static_cast<std::int64_t>(r.stats[2 * b + 1]);
    }
    for (std::int64_t t = in.cu_q[b] * in.heads_q; t < in.cu_q[b + 1] * in.heads_q; ++t) {
      for (int d = 0; d < in.head_dim; ++d) {
        if (std::isnan(out[t * in.head_dim + d])) {
          ++q.nan_rows;
          break;
        }
      }
    }
    st.tiles_total += q.tiles_total;
    st.tiles_skipped += q.tiles_skipped;
    st.nan_rows += q.nan_rows;
    st.sequences.push_back(q);
  }
  return st;
}
#endif

void run_attend_decode(const AttendArgs& a, Settings s);

void run_attend(const AttendArgs& a) {
  const bool decode =
      !a.k_pages.empty() || !a.v_pages.empty() || !a.page_table.empty() || !a.seq_lens.empty();
  if (decode) return run_attend_decode(a, parse_settings(a));
  if (a.k.empty() || a.v.empty()) {
    fail(
        "give --k and --v (prefill), or --k-pages, --v-pages, --page-table and --seq-lens "
        "(decode)");
  }
  if (a.num_splits) fail("--num-splits applies to decode (--k-pages ...), not to prefill");
  Settings s = parse_settings(a);
  const Inputs in = load_inputs(a);
  s.options.tiles = parse_tiles(a, in.head_dim);

  std::vector<double> out;
  const auto start = std::chrono::steady_clock::now();
  AttentionStats st;
  std::string kernel = "cpu reference";
#if SKIPSOFTMAX_HAVE_CUDA
  if (a.backend == "cuda") {
    KernelChoice choice{};
    st = run_cuda(a, s, in, out, choice);
    kernel = std::string(to_string(choice)) + " kernel";
  } else {
    st = run_cpu(a, s, in, out);
  }
#else
  st = run_cpu(a, s, in, out);
#endif
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;

  nlohmann::json stats = stats_json(a, s, st);
  stats["kernel"] = kernel;
  if (a.backend == "cuda") {
    stats["mass_share"] = nullptr;
    for (auto& seq : stats["sequences"]) seq["mass_share"] = seq["mass_share_max"] = nullptr;
  }
  check_out_dtype_holds(out, s.out_dtype.value_or(in.dtype));
  write_results(a, make_npy_float(s.out_dtype.value_or(in.dtype), in.q_shape, out), stats);
  std::printf(
      "%s (%s): %zu sequence%s, %lld of %lld tiles skipped (sparsity %.2f%%), mass share %s, "
      "%lld NaN rows, %.3f s\n",
      a.backend.c_str(), kernel.c_str(), st.sequences.size(), st.sequences.size() == 1 ? "" : "s",
      static_cast<long long>(st.tiles_skipped), static_cast<long long>(st.tiles_total),
      100.0 * st.sparsity(),
      a.backend == "cuda" ? "not measured on the GPU" : std::to_string(st.mass_share).c_str(),
      static_cast<long long>(st.nan_rows), elapsed.count());
}

// ---- decode over a paged KV cache --------------------------------------------------------

// The decode flags that prefill has no use for, and the prefill flags decode has no use for.
void check_decode_flags(const AttendArgs& a) {
  if (a.k_pages.empty() || a.v_pages.empty() || a.page_table.empty() || a.seq_lens.empty()) {
    fail("decode needs all of --k-pages, --v-pages, --page-table and --seq-lens");
  }
  if (!a.k.empty() || !a.v.empty()) fail("decode takes --k-pages/--v-pages, not --k/--v");
  if (!a.cu_seqlens_q.empty()) fail("decode takes --seq-lens, not --cu-seqlens-q/-k");
  if (a.causal || a.window > 0) {
    fail("decode attends to the whole cache: --causal and --window do not apply");
  }
  if (a.tile_q) fail("decode votes over all query heads of a GQA group: --tile-q does not apply");
  if (a.num_splits) check_decode_splits(*a.num_splits, "--num-splits");
  if (a.backend == "cuda") {
    if (a.tile_k && *a.tile_k != decode_tile_k(0)) {
      fail("--backend cuda decodes with tiles of " + std::to_string(decode_tile_k(0)) +
           " keys; drop --tile-k or give that value");
    }
    if (parse_order(a.kv_order) != KvOrder::kForward) {
      fail("--backend cuda decodes in forward order; drop --kv-order or give forward");
    }
  }
}

std::vector<std::int64_t> read_index_vector(const std::string& path, std::size_t rank,
                                            const char* what) {
  const NpyArray array = read_npy(path);
  if (array.shape.size() != rank) {
    fail(path + ": " + what + " must be " + std::to_string(rank) + "-D, got shape " +
         npy_shape_string(array.shape));
  }
  return to_int64_vector(array, path);
}

#if SKIPSOFTMAX_HAVE_CUDA
// The paged decode kernels on the same inputs; tile counts come from the GPU.
AttentionStats run_cuda_decode(const AttendArgs& a, const Settings& s, const NpyArray& q,
                               const DecodeProblem& p, std::vector<double>& out,
                               KernelChoice& kernel) {
  const DType dtype = !a.cuda_dtype.empty()
                          ? (a.cuda_dtype == "bf16" ? DType::kBF16 : DType::kF16)
                          : (q.dtype == NpyDtype::kF16 ? DType::kF16 : DType::kBF16);
  const std::size_t kv_count =
      static_cast<std::size_t>(p.kv.num_pages) * p.kv.page_size * p.num_heads_kv * p.head_dim;
  const std::vector<float> qf(p.q, p.q + out.size());
  const std::vector<float> kf(p.kv.k_pages, p.kv.k_pages + kv_count);
  const std::vector<float> vf(p.kv.v_pages, p.kv.v_pages + kv_count);
  DecodeArguments args;
  args.dtype = dtype;
  args.head_dim = p.head_dim;
  args.batch = static_cast<int>(p.kv.seq_lens.size());
  std::vector<std::int32_t> lens;
  for (std::int64_t len : p.kv.seq_lens) {
    if (len <= 0 || len >= (std::int64_t{1} << 31))
      fail("--seq-lens: lengths must lie in [1, 2^31)");
    lens.push_back(static_cast<std::int32_t>(len));
    args.max_seq_len = std::max(args.max_seq_len, lens.back());
  }
  args.q_len = p.q_len;
  args.num_heads_q = p.num_heads_q;
  args.num_heads_kv = p.num_heads_kv;
  args.kv.num_pages = p.kv.num_pages;
  args.kv.page_size = p.kv.page_size;
  args.kv.max_pages_per_seq = p.kv.max_pages_per_seq;
  args.softmax_scale = a.softmax_scale;
  args.threshold = s.options.threshold;
  args.num_splits = a.num_splits.value_or(1);
  const HostDecodeResult r = run_decode_host(args, to_bits(qf, dtype), to_bits(kf, dtype),
                                             to_bits(vf, dtype), p.kv.page_table, lens);
  kernel = r.kernel;
  const std::vector<double> values = from_bits(r.out, dtype);
  out.assign(values.begin(), values.end());
  AttentionStats st;
  for (int b = 0; b < args.batch; ++b) {
    SequenceStats seq;
    seq.q_len = p.q_len;
    seq.kv_len = lens[b];
    seq.lambda = s.options.threshold.lambda_for(seq.kv_len);
    if (r.kernel == KernelChoice::kSkip) {
      seq.tiles_total = static_cast<std::int64_t>(r.stats[2 * b]);
      seq.tiles_skipped = static_cast<std::int64_t>(r.stats[2 * b + 1]);
    }
    for (std::int64_t h = 0; h < std::int64_t{p.q_len} * p.num_heads_q; ++h) {
      for (int d = 0; d < p.head_dim; ++d) {
        if (std::isnan(out[(b * p.q_len * p.num_heads_q + h) * p.head_dim + d])) {
          ++seq.nan_rows;
          break;
        }
      }
    }
    st.tiles_total += seq.tiles_total;
    st.tiles_skipped += seq.tiles_skipped;
    st.nan_rows += seq.nan_rows;
    st.sequences.push_back(seq);
  }
  return st;
}
#endif

void run_attend_decode(const AttendArgs& a, Settings s) {
  check_decode_flags(a);
  const NpyArray q = read_tensor(a.q), kp = read_npy(a.k_pages), vp = read_npy(a.v_pages);
  // [batch, Hq, D]: one new token per sequence; [batch, q_len, Hq, D]: q_len new tokens each.
  if (q.shape.size() != 3 && q.shape.size() != 4) {
    fail(a.q + ": decode queries are [batch, Hq, D] or [batch, q_len, Hq, D], got shape " +
         npy_shape_string(q.shape));
  }
  const std::size_t rank = q.shape.size();
  if (kp.shape.size() != 4) {
    fail(a.k_pages + ": the paged cache is [num_pages, page_size, Hkv, D], got shape " +
         npy_shape_string(kp.shape));
  }
  if (kp.dtype != q.dtype || vp.dtype != q.dtype) {
    fail(std::string("q and the paged caches must share one dtype, got ") + npy_descr(q.dtype) +
         ", " + npy_descr(kp.dtype) + ", " + npy_descr(vp.dtype));
  }
  if (vp.shape != kp.shape) {
    fail(a.v_pages + ": shape " + npy_shape_string(vp.shape) + " must equal --k-pages' " +
         npy_shape_string(kp.shape));
  }
  const std::int64_t batch = small_dim(a.q, "batch", q.shape[0]);
  small_dim(a.k_pages, "num_pages", kp.shape[0]);
  if (kp.shape[3] != q.shape[rank - 1]) {
    fail("head_dim mismatch: q has " + std::to_string(q.shape[rank - 1]) + ", the caches " +
         std::to_string(kp.shape[3]));
  }
  const std::vector<std::int64_t> seq_lens = read_index_vector(a.seq_lens, 1, "seq_lens");
  if (static_cast<std::int64_t>(seq_lens.size()) != batch) {
    fail(a.seq_lens + ": " + std::to_string(seq_lens.size()) + " sequences, q has " +
         std::to_string(batch));
  }
  const NpyArray table_array = read_npy(a.page_table);
  if (table_array.shape.size() != 2 || table_array.shape[0] != batch) {
    fail(a.page_table + ": the page table is [batch = " + std::to_string(batch) +
         ", max_pages], got shape " + npy_shape_string(table_array.shape));
  }
  std::vector<std::int32_t> page_table;
  for (std::int64_t page : to_int64_vector(table_array, a.page_table)) {
    if (page < std::numeric_limits<std::int32_t>::min() ||
        page > std::numeric_limits<std::int32_t>::max()) {
      fail(a.page_table + ": page id " + std::to_string(page) + " does not fit 32 bits");
    }
    page_table.push_back(static_cast<std::int32_t>(page));
  }

  const std::vector<float> qf = to_float_vector(q, a.q), kf = to_float_vector(kp, a.k_pages),
                           vf = to_float_vector(vp, a.v_pages);
  DecodeProblem p;
  p.q = qf.data();
  p.kv = {kf.data(),   vf.data(),
          kp.shape[0], small_dim(a.k_pages, "page_size", kp.shape[1]),
          page_table,  small_dim(a.page_table, "max_pages", table_array.shape[1]),
          seq_lens};
  p.q_len = rank == 4 ? small_dim(a.q, "q_len", q.shape[1]) : 1;
  p.num_heads_q = small_dim(a.q, "heads", q.shape[rank - 2]);
  p.num_heads_kv = small_dim(a.k_pages, "heads", kp.shape[2]);
  p.head_dim = small_dim(a.q, "head_dim", q.shape[rank - 1]);
  p.softmax_scale = a.softmax_scale;
  validate(p);  // page ids, lengths and shapes, with the reference's messages
  check_finite(a.q, qf);
  // Only the cache rows the sequences hold: unused page slots may hold anything.
  const std::size_t row = static_cast<std::size_t>(p.num_heads_kv) * p.head_dim;
  for (std::size_t b = 0; b < seq_lens.size(); ++b) {
    for (std::int64_t t = 0; t < seq_lens[b]; ++t) {
      const std::int64_t page = page_table[b * p.kv.max_pages_per_seq + t / p.kv.page_size];
      const std::size_t slot = static_cast<std::size_t>(page * p.kv.page_size + t % p.kv.page_size);
      check_finite(a.k_pages, kf, slot * row, (slot + 1) * row);
      check_finite(a.v_pages, vf, slot * row, (slot + 1) * row);
    }
  }
  const TileShape defaults;
  const int default_tile_k = a.backend == "cuda" ? decode_tile_k(p.head_dim) : defaults.tile_k;
  s.options.tiles = {1, a.tile_k.value_or(default_tile_k), parse_order(a.kv_order)};
  s.options.num_splits = a.num_splits.value_or(1);

  std::vector<double> out(qf.size());
  const auto start = std::chrono::steady_clock::now();
  AttentionStats st;
  std::string kernel = "cpu reference";
#if SKIPSOFTMAX_HAVE_CUDA
  if (a.backend == "cuda") {
    KernelChoice choice{};
    st = run_cuda_decode(a, s, q, p, out, choice);
    kernel = std::string(to_string(choice)) + " kernel";
  } else {
    st = reference_decode(p, s.options, out.data());
  }
#else
  st = reference_decode(p, s.options, out.data());
#endif
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;

  nlohmann::json stats = stats_json(a, s, st);
  stats["mode"] = "decode";
  stats["kernel"] = kernel;
  if (a.backend == "cuda") {
    stats["mass_share"] = nullptr;
    for (auto& seq : stats["sequences"]) seq["mass_share"] = seq["mass_share_max"] = nullptr;
  }
  stats["tile_q"] = nullptr;  // the vote's rows are the query heads of a GQA group
  stats["num_splits"] = s.options.num_splits;
  stats["page_size"] = p.kv.page_size;
  check_out_dtype_holds(out, s.out_dtype.value_or(q.dtype));
  write_results(a, make_npy_float(s.out_dtype.value_or(q.dtype), q.shape, out), stats);
  std::printf(
      "%s decode (%s): %lld sequences, %d split%s, %lld of %lld tiles skipped (sparsity %.2f%%), "
      "mass share %s, %lld NaN rows, %.3f s\n",
      a.backend.c_str(), kernel.c_str(), static_cast<long long>(batch), s.options.num_splits,
      s.options.num_splits == 1 ? "" : "s", static_cast<long long>(st.tiles_skipped),
      static_cast<long long>(st.tiles_total), 100.0 * st.sparsity(),
      a.backend == "cuda" ? "not measured on the GPU" : std::to_string(st.mass_share).c_str(),
      static_cast<long long>(st.nan_rows), elapsed.count());
}

void add_attend(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "attend",
      "Skip-softmax attention on .npy tensors: prefill (CPU reference or GPU) or paged decode");
  auto a = std::make_shared<AttendArgs>();
  cmd->add_option("--q", a->q,
                  "Queries [total_q, Hq, D] or [B, Sq, Hq, D] (decode: [B, Hq, D] or "
                  "[B, q_len, Hq, D]), fp16 or fp32")
      ->required();
  cmd->add_option("--k", a->k, "Keys [total_k, Hkv, D] or [B, Sk, Hkv, D]");
  cmd->add_option("--v", a->v, "Values, shaped like the keys");
  cmd->add_option("--k-pages", a->k_pages,
                  "Decode: paged key cache [num_pages, page_size, Hkv, D] (instead of --k/--v)");
  cmd->add_option("--v-pages", a->v_pages, "Decode: paged value cache, shaped like --k-pages");
  cmd->add_option("--page-table", a->page_table, "Decode: [B, max_pages] page ids (int32/int64)");
  cmd->add_option("--seq-lens", a->seq_lens, "Decode: [B] cached tokens per sequence");
  cmd->add_option("--num-splits", a->num_splits,
                  "Decode: split-KV parts, each with its own running maximum (default 1)");
  auto* cu_q = cmd->add_option("--cu-seqlens-q", a->cu_seqlens_q, "Query offsets [batch + 1]");
  auto* cu_k = cmd->add_option("--cu-seqlens-k", a->cu_seqlens_k, "KV offsets [batch + 1]");
  cu_q->needs(cu_k);
  cu_k->needs(cu_q);
  cmd->add_flag("--causal", a->causal, "Causal mask, bottom-right aligned");
  cmd->add_option(
      "--window", a->window,
      "Sliding window: a query sees its last W keys (needs --causal; cuda: dense only)");
  auto* table = cmd->add_option("--scale-table", a->scale_table, "Scale table JSON file");
  auto* threshold = cmd->add_option("--threshold", a->threshold, "Flat lambda in [0, 1)");
  table->excludes(threshold);
  cmd->add_option("--softmax-scale", a->softmax_scale, "Default 1/sqrt(head_dim)");
  cmd->add_option("--tile-q", a->tile_q,
                  "Query rows per vote (cpu default 128; cuda: the kernel's)");
  cmd->add_option("--tile-k", a->tile_k, "Keys per KV tile (cpu default 128; cuda: the kernel's)");
  cmd->add_option("--kv-order", a->kv_order, "KV tile order: " + kv_order_names())
      ->capture_default_str();
  cmd->add_option("--backend", a->backend, "cpu (float64 reference) or cuda (Hopper kernels)")
      ->capture_default_str();
  cmd->add_option("--cuda-dtype", a->cuda_dtype,
                  "fp16 or bf16 for --backend cuda; default fp16 for fp16 inputs, bf16 for fp32");
  cmd->add_option("--threads", a->threads, "CPU threads, 0 for all")->capture_default_str();
  cmd->add_option("--out-dtype", a->out_dtype, "f16, f32 or f64; default the input dtype");
  cmd->add_option("--out", a->out, "Output .npy, shaped like q")->required();
  cmd->add_option("--stats", a->stats, "Skip statistics JSON");
  cmd->callback([a] { run_attend(*a); });
}

const Registration reg{20, &add_attend};

}  // namespace
}  // namespace skipsoftmax::cli

// `skipsoftmax attend` end to end: the built tool on .npy files, against direct reference calls.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "file_io.h"
#include "npy.h"
#include "skipsoftmax/reference.h"
#include "synthetic.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;

constexpr int kHq = 4, kHkv = 2, kDim = 32;

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Flags of one attend run; set() replaces a flag already there.
class Args {
 public:
  Args& set(const std::string& flag, const std::string& value = "") {
    erase(flag);
    flags_.emplace_back(flag, value);
    return *this;
  }
  Args& erase(const std::string& flag) {
    std::erase_if(flags_, [&](const auto& f) { return f.first == flag; });
    return *this;
  }
  std::string str() const {
    std::string out;
    for (const auto& [flag, value] : flags_) {
      out += " " + flag + (value.empty() ? "" : " '" + value + "'");
    }
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::string>> flags_;
};

// Queries of a chunk are the last q_len positions of their sequence (bottom-right causal).
struct Batch {
  std::vector<float> q, k, v;  // [total, heads, kDim]
  std::vector<std::int64_t> cu_q = {0}, cu_k = {0};
};

Batch make_batch(const std::vector<std::int64_t>& q_lens,
                 const std::vector<std::int64_t>& kv_lens) {
  Batch b;
  for (std::size_t i = 0; i < q_lens.size(); ++i) {
    SyntheticSpec spec{kv_lens[i], kHq, kHkv, kDim};
    spec.seed = 11 + i;
    const SyntheticQkv s = make_structured_qkv(spec);
    const auto q_values = static_cast<std::ptrdiff_t>(q_lens[i] * kHq * kDim);
    b.q.insert(b.q.end(), s.q.end() - q_values, s.q.end());
    b.k.insert(b.k.end(), s.k.begin(), s.k.end());
    b.v.insert(b.v.end(), s.v.begin(), s.v.end());
    b.cu_q.push_back(b.cu_q.back() + q_lens[i]);
    b.cu_k.push_back(b.cu_k.back() + kv_lens[i]);
  }
  return b;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

PrefillProblem problem_of(const Batch& b, bool causal) {
  PrefillProblem p;
  p.q = b.q.data();
  p.k = b.k.data();
  p.v = b.v.data();
  p.num_heads_q = kHq;
  p.num_heads_kv = kHkv;
  p.head_dim = kDim;
  p.cu_seqlens_q = b.cu_q;
  p.cu_seqlens_k = b.cu_k;
  p.causal = causal;
  return p;
}

// Helpers are public: the bad-input cases call them through a CliAttendTest&.
class CliAttendTest : public test::TempDirTest {
 public:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write_floats(const std::string& name, NpyDtype dtype, std::vector<std::int64_t> shape,
                           const std::vector<float>& values) const {
    write_npy_atomic(path(name), make_npy_float(dtype, std::move(shape), widen(values)));
    return path(name);
  }
  std::string write_ints(const std::string& name, NpyDtype dtype,
                         const std::vector<std::int64_t>& values) const {
    const auto n = static_cast<std::int64_t>(values.size());
    write_npy_atomic(path(name), make_npy_int(dtype, {n}, values));
    return path(name);
  }

  // Writes q.npy, k.npy, v.npy ([total, heads, kDim]) and, for more than one sequence,
  // cu_q.npy and cu_k.npy; returns the flags naming them.
  Args write_batch(const Batch& b, NpyDtype dtype = NpyDtype::kF32) const {
    const auto rows = [](const std::vector<float>& x, int heads) {
      return static_cast<std::int64_t>(x.size()) / (heads * kDim);
    };
    Args args;
    args.set("--q", write_floats("q.npy", dtype, {rows(b.q, kHq), kHq, kDim}, b.q));
    args.set("--k", write_floats("k.npy", dtype, {rows(b.k, kHkv), kHkv, kDim}, b.k));
    args.set("--v", write_floats("v.npy", dtype, {rows(b.v, kHkv), kHkv, kDim}, b.v));
    if (b.cu_q.size() > 2) {
      args.set("--cu-seqlens-q", write_ints("cu_q.npy", NpyDtype::kI32, b.cu_q));
      args.set("--cu-seqlens-k", write_ints("cu_k.npy", NpyDtype::kI64, b.cu_k));
    }
    return args.set("--out", path("O.npy"));
  }

  // Runs `skipsoftmax attend` with args, after `shell` (say, a ulimit) in the same shell.
  static RunResult run(const Args& args, const std::string& shell = "") {
    const std::string command =
        shell + std::string(SKIPSOFTMAX_TOOL) + " attend" + args.str() + " 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) return {};
    RunResult r;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.output.append(buf, n);
    const int status = pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
  }

  // Runs the tool and expects success; returns the output array read back.
  NpyArray run_ok(const Args& args) const {
    const RunResult r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return read_npy(path("O.npy"));
  }
};

std::vector<double> reference_output(const PrefillProblem& p, const ReferenceOptions& opt,
                                     AttentionStats* stats = nullptr) {
  std::vector<double> out(static_cast<std::size_t>(p.cu_seqlens_q.back()) * kHq * kDim);
  const AttentionStats st = reference_prefill(p, opt, out.data());
  if (stats) *stats = st;
  return out;
}

std::vector<float> narrow(const std::vector<double>& v) { return {v.begin(), v.end()}; }

TEST_F(CliAttendTest, RaggedCausalRunMatchesTheReference) {
  const Batch b = make_batch({100, 77, 1}, {300, 77, 13});
  Args args = write_batch(b);
  args.set("--causal").set("--threshold", "0.05").set("--tile-q", "32").set("--tile-k", "64");
  args.set("--kv-order", "sink-reverse").set("--threads", "3").set("--stats", path("S.json"));
  const RunResult r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 sequences"), std::string::npos) << r.output;

  ReferenceOptions opt;
  opt.threshold = Threshold::flat(0.05);
  opt.tiles = {32, 64, KvOrder::kSinkThenReverse};
  AttentionStats expected;
  const std::vector<double> ref = reference_output(problem_of(b, true), opt, &expected);
  const NpyArray out = read_npy(path("O.npy"));
  EXPECT_EQ(out.dtype, NpyDtype::kF32);
  EXPECT_EQ(out.shape, (std::vector<std::int64_t>{178, kHq, kDim}));
  EXPECT_EQ(to_float_vector(out, "O.npy"), narrow(ref));

  const nlohmann::json stats = read_json_file(path("S.json"));
  EXPECT_EQ(stats["backend"], "cpu");
  EXPECT_EQ(stats["tile_q"], 32);
  EXPECT_EQ(stats["tile_k"], 64);
  EXPECT_EQ(stats["kv_order"], "sink-reverse");
  EXPECT_EQ(stats["threshold"], opt.threshold.describe());
  EXPECT_EQ(stats["tiles_total"], expected.tiles_total);
  EXPECT_EQ(stats["tiles_skipped"], expected.tiles_skipped);
  EXPECT_GT(expected.tiles_skipped, 0);  // the run exercises skipping
  EXPECT_DOUBLE_EQ(stats["sparsity"].get<double>(), expected.sparsity());
  EXPECT_DOUBLE_EQ(stats["mass_share"].get<double>(), expected.mass_share);
  EXPECT_EQ(stats["nan_rows"], 0);
  ASSERT_EQ(stats["sequences"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const nlohmann::json& s = stats["sequences"][i];
    const SequenceStats& e = expected.sequences[i];
    EXPECT_EQ(s["q_len"], e.q_len);
    EXPECT_EQ(s["kv_len"], e.kv_len);
    EXPECT_EQ(s["lambda"], e.lambda);
    EXPECT_EQ(s["tiles_total"], e.tiles_total);
    EXPECT_EQ(s["tiles_skipped"], e.tiles_skipped);
    EXPECT_DOUBLE_EQ(s["sparsity"].get<double>(), e.sparsity());
    EXPECT_DOUBLE_EQ(s["mass_share"].get<double>(), e.mass_share);
    EXPECT_DOUBLE_EQ(s["mass_share_max"].get<double>(), e.mass_share_max);
    EXPECT_EQ(s["nan_rows"], e.nan_rows);
  }
}

TEST_F(CliAttendTest, Fp16InputsGiveFp16OutputUnlessAskedOtherwise) {
  Batch b = make_batch({64}, {64});
  for (std::vector<float>* x : {&b.q, &b.k, &b.v}) {
    for (float& f : *x) f = half_to_float(float_to_half(f));  // what the .npy files will hold
  }
  Args args = write_batch(b, NpyDtype::kF16);
  args.set("--causal");
  const std::vector<double> ref = reference_output(problem_of(b, true), {});

  const NpyArray half = run_ok(args);
  EXPECT_EQ(half.dtype, NpyDtype::kF16);
  EXPECT_EQ(half.data, make_npy_float(NpyDtype::kF16, half.shape, ref).data);

  const NpyArray wide = run_ok(args.set("--out-dtype", "f64"));
  EXPECT_EQ(wide.dtype, NpyDtype::kF64);
  EXPECT_EQ(wide.data, make_npy_float(NpyDtype::kF64, wide.shape, ref).data);
}

TEST_F(CliAttendTest, LambdaZeroIsDenseBitForBit) {
  Args args = write_batch(make_batch({200, 50}, {200, 120}));
  args.set("--causal").set("--tile-q", "16").set("--tile-k", "32").set("--stats", path("S.json"));
  const NpyArray dense = run_ok(args);
  const NpyArray zero = run_ok(args.set("--threshold", "0"));
  EXPECT_EQ(zero.data, dense.data);
  EXPECT_EQ(read_json_file(path("S.json"))["tiles_skipped"], 0);
}

TEST_F(CliAttendTest, ScaleTableGivesEachSequenceItsLambda) {
  Args args = write_batch(make_batch({300, 100}, {300, 100}));
  write_json_file(path("T.json"), nlohmann::json::parse("[[64, 12.0]]"));
  args.set("--scale-table", path("T.json")).set("--stats", path("S.json")).set("--causal");
  args.set("--tile-q", "16").set("--tile-k", "32");
  run_ok(args);
  const nlohmann::json stats = read_json_file(path("S.json"));
  EXPECT_EQ(stats["sequences"][0]["lambda"], 12.0 / 300);
  EXPECT_EQ(stats["sequences"][1]["lambda"], 12.0 / 100);
  EXPECT_GT(stats["tiles_skipped"].get<std::int64_t>(), 0);
}

TEST_F(CliAttendTest, FourDimensionalInputIsAUniformBatch) {
  const Batch b = make_batch({50, 50}, {70, 70});
  const Args ragged = write_batch(b).set("--causal");
  const NpyArray from_ragged = run_ok(ragged);

  Args uniform = ragged;
  uniform.erase("--cu-seqlens-q").erase("--cu-seqlens-k");
  uniform.set("--q", write_floats("q4.npy", NpyDtype::kF32, {2, 50, kHq, kDim}, b.q));
  uniform.set("--k", write_floats("k4.npy", NpyDtype::kF32, {2, 70, kHkv, kDim}, b.k));
  uniform.set("--v", write_floats("v4.npy", NpyDtype::kF32, {2, 70, kHkv, kDim}, b.v));
  const NpyArray from_uniform = run_ok(uniform);
  EXPECT_EQ(from_uniform.shape, (std::vector<std::int64_t>{2, 50, kHq, kDim}));
  EXPECT_EQ(from_uniform.data, from_ragged.data);
}

// Each case changes the flags or files of a valid run and must fail with its message.
struct BadCase {
  std::string name;
  std::string message;  // substring of the error
  std::function<void(CliAttendTest&, Args&)> change;
};

TEST_F(CliAttendTest, BadInputFailsAndLeavesNoOutput) {
  const std::vector<float> q(8 * kHq * kDim, 0.5f), kv(8 * kHkv * kDim, 0.25f);
  const auto file = [](CliAttendTest& t, Args& a, const std::string& flag, NpyDtype dtype,
                       std::vector<std::int64_t> shape) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    const std::string name = flag.substr(2) + "_bad.npy";
    a.set(flag, t.write_floats(name, dtype, std::move(shape),
                               std::vector<float>(static_cast<std::size_t>(n), 1.0f)));
  };
  const auto cu = [](CliAttendTest& t, Args& a, std::vector<std::int64_t> q_offsets) {
    a.set("--cu-seqlens-q", t.write_ints("cuq.npy", NpyDtype::kI64, q_offsets));
    a.set("--cu-seqlens-k", t.write_ints("cuk.npy", NpyDtype::kI32, {0, 4, 8}));
  };
  const std::vector<BadCase> cases = {
    {"q fp64", "dtype <f8 is not supported",
     [&](auto& t, auto& a) {
       file(t, a, "--q", NpyDtype::kF64, {8, kHq, kDim});
     }},
    {"q int", "dtype <i4 is not supported",
     [](auto& t, auto& a) {
       a.set("--q", t.write_ints("qi.npy", NpyDtype::kI32, {1, 2}));
     }},
    {"mixed dtypes", "share one dtype",
     [&](auto& t, auto& a) {
       file(t, a, "--k", NpyDtype::kF16, {8, kHkv, kDim});
     }},
    {"rank 2", "must be [total, heads, head_dim]",
     [&](auto& t, auto& a) {
       file(t, a, "--q", NpyDtype::kF32, {8, kHq * kDim});
     }},
    {"rank mismatch", "differ in rank",
     [&](auto& t, auto& a) {
       file(t, a, "--q", NpyDtype::kF32, {1, 8, kHq, kDim});
     }},
    {"Hq % Hkv", "multiple of kv heads",
     [&](auto& t, auto& a) {
       file(t, a, "--q", NpyDtype::kF32, {8, 3, kDim});
     }},
    {"D mismatch", "head_dim mismatch",
     [&](auto& t, auto& a) {
       file(t, a, "--q", NpyDtype::kF32, {8, kHq, 16});
     }},
    {"v shape", "must equal k's",
     [&](auto& t, auto& a) {
       file(t, a, "--v", NpyDtype::kF32, {7, kHkv, kDim});
     }},
    {"cu length", "disagree on the batch",
     [&](auto& t, auto& a) {
       cu(t, a, {0, 8});
     }},
    {"cu start", "must start at 0",
     [&](auto& t, auto& a) {
       cu(t, a, {1, 4, 8});
     }},
    {"cu decreasing", "must not decrease",
     [&](auto& t, auto& a) {
       cu(t, a, {0, 5, 4, 8});
     }},
    {"cu end", "must end at the q token count 8",
     [&](auto& t, auto& a) {
       cu(t, a, {0, 4, 7});
     }},
    {"queries without keys", "queries with no keys",
     [](auto& t, auto& a) {
       a.set("--cu-seqlens-q", t.write_ints("cuq.npy", NpyDtype::kI64, {0, 4, 8}));
       a.set("--cu-seqlens-k", t.write_ints("cuk.npy", NpyDtype::kI64, {0, 0, 8}));
     }},
    {"cu 2-D", "must be 1-D",
     [&](auto& t, auto& a) {
       cu(t, a, {0, 4, 8});
       file(t, a, "--cu-seqlens-q", NpyDtype::kF32, {3, 1});
     }},
    {"cu float", "expected an integer array",
     [&](auto& t, auto& a) {
       cu(t, a, {0, 4, 8});
       file(t, a, "--cu-seqlens-k", NpyDtype::kF32, {3});
     }},
    {"cu alone", "requires",
     [](auto& t, auto& a) {
       a.set("--cu-seqlens-q", t.write_ints("cuq.npy", NpyDtype::kI64, {0, 8}));
     }},
    {"cu with 4-D", "apply to 3-D",
     [&](auto& t, auto& a) {
       file(t, a, "--q", NpyDtype::kF32, {1, 8, kHq, kDim});
       file(t, a, "--k", NpyDtype::kF32, {1, 8, kHkv, kDim});
       file(t, a, "--v", NpyDtype::kF32, {1, 8, kHkv, kDim});
       cu(t, a, {0, 8});
     }},
    {"causal kv < q", "--causal needs kv_len >= q_len",
     [&](auto& t, auto& a) {
       file(t, a, "--k", NpyDtype::kF32, {4, kHkv, kDim});
       file(t, a, "--v", NpyDtype::kF32, {4, kHkv, kDim});
       a.set("--causal");
     }},
    {"tile-q 0", "--tile-q must be positive", [](auto&, auto& a) { a.set("--tile-q", "0"); }},
    {"tile-k -1", "--tile-k must be positive", [](auto&, auto& a) { a.set("--tile-k", "-1"); }},
    // A tile far beyond every sequence allocated gigabytes.
    {"tile-k huge", "--tile-k must be at most 4096, got 100000000",
     [](auto&, auto& a) { a.set("--tile-k", "100000000"); }},
    {"tile-q huge", "--tile-q must be at most 4096, got 5000",
     [](auto&, auto& a) { a.set("--tile-q", "5000"); }},
    {"threshold 1", "outside [0, 1)", [](auto&, auto& a) { a.set("--threshold", "1"); }},
    {"threshold < 0", "outside [0, 1)", [](auto&, auto& a) { a.set("--threshold", "-0.1"); }},
    {"table and threshold", "excludes",
     [](auto& t, auto& a) {
       write_json_file(t.path("T.json"), nlohmann::json::parse("[[64, 12.0]]"));
       a.set("--scale-table", t.path("T.json")).set("--threshold", "0.1");
     }},
    {"bad table", "seqlen_bin must be an integer in [1, 9e15]",
     [](auto& t, auto& a) {
       write_json_file(t.path("T.json"), nlohmann::json::parse("[[0, 12.0]]"));
       a.set("--scale-table", t.path("T.json"));
     }},
    {"window < 0", "--window must lie in [0, 2^31)",
     [](auto&, auto& a) { a.set("--causal").set("--window", "-1"); }},
    {"window 2^32 + 5", "--window must lie in [0, 2^31)",
     [](auto&, auto& a) { a.set("--causal").set("--window", "4294967301"); }},
    {"NaN in q", "element 5 is nan; attend takes finite inputs",
     [&](auto& t, auto& a) {
       std::vector<float> bad = q;
       bad[5] = std::numeric_limits<float>::quiet_NaN();
       a.set("--q", t.write_floats("q_nan.npy", NpyDtype::kF32, {8, kHq, kDim}, bad));
     }},
    {"infinity in v", "is inf; attend takes finite inputs",
     [&](auto& t, auto& a) {
       std::vector<float> bad = kv;
       bad.back() = std::numeric_limits<float>::infinity();
       a.set("--v", t.write_floats("v_inf.npy", NpyDtype::kF32, {8, kHkv, kDim}, bad));
     }},
    {"no tokens", "tokens must be in [1, 2^31), got 0",
     [&](auto& t, auto& a) {
       file(t, a, "--q", NpyDtype::kF32, {0, kHq, kDim});
     }},
    {"cuda dtype on cpu", "--cuda-dtype applies to --backend cuda",
     [](auto&, auto& a) { a.set("--cuda-dtype", "bf16"); }},
    {"splits in prefill", "--num-splits applies to decode",
     [](auto&, auto& a) { a.set("--num-splits", "4"); }},
    {"stats is out", "name the same file",
     [](auto& t, auto& a) { a.set("--stats", t.path(".") + "/./O.npy"); }},
    {"out is a directory", "is a directory",
     [](auto& t, auto& a) {
       fs::create_directories(t.path("D.npy"));
       a.set("--out", t.path("D.npy"));
     }},
    {"window without causal", "--window needs --causal",
     [](auto&, auto& a) { a.set("--window", "16"); }},
    {"kv order", "forward, reverse, sink-reverse",
     [](auto&, auto& a) { a.set("--kv-order", "backwards"); }},
#if SKIPSOFTMAX_HAVE_CUDA
    {"cuda tiles", "--backend cuda votes on 64 x 128 tiles",
     [](auto&, auto& a) {
       a.set("--backend", "cuda");
       a.set("--tile-q", "128");
     }},
#else
    {"cuda without kernels", "this build has no GPU kernels",
     [](auto&, auto& a) { a.set("--backend", "cuda"); }},
#endif
    {"backend other", "unknown --backend 'tpu'", [](auto&, auto& a) { a.set("--backend", "tpu"); }},
    {"out dtype", "unknown --out-dtype 'bf16'",
     [](auto&, auto& a) { a.set("--out-dtype", "bf16"); }},
    {"missing q", "no such file", [](auto& t, auto& a) { a.set("--q", t.path("absent.npy")); }},
    {"out dir", "does not exist",
     [](auto& t, auto& a) { a.set("--out", t.path("no/such/dir/O.npy")); }},
    {"missing --out", "--out is required", [](auto&, auto& a) { a.erase("--out"); }},
    {"unknown flag", "--bogus", [](auto&, auto& a) { a.set("--bogus", "1"); }},
    {"out is q", "is also --q: it would overwrite an input",
     [](auto& t, auto& a) { a.set("--out", t.path(".") + "/./q.npy"); }},
    {"threads", "--threads must lie in [0, 1024]",
     [](auto&, auto& a) { a.set("--threads", "20000"); }},
    {"scale overflows float",
     "--softmax-scale: softmax scale must be positive, with scale x log2(e) a nonzero finite float "
     "(about 1e-45 to 2.36e38), got 1e+308",
     [](auto&, auto& a) { a.set("--softmax-scale", "1e308"); }},
    {"scale underflows float", "a nonzero finite float (about 1e-45 to 2.36e38), got 1e-50",
     [](auto&, auto& a) { a.set("--softmax-scale", "1e-50"); }},
    {"table number overflow", "number overflow parsing '1e999' (beyond a double's range)",
     [](auto& t, auto& a) {
       std::ofstream(t.path("T.json")) << "[[128, 1e999]]";
       a.set("--scale-table", t.path("T.json"));
     }},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    Args args;
    args.set("--q", write_floats("q.npy", NpyDtype::kF32, {8, kHq, kDim}, q));
    args.set("--k", write_floats("k.npy", NpyDtype::kF32, {8, kHkv, kDim}, kv));
    args.set("--v", write_floats("v.npy", NpyDtype::kF32, {8, kHkv, kDim}, kv));
    args.set("--out", path("O.npy")).set("--stats", path("S.json"));
    ASSERT_EQ(run(args).exit_code, 0) << "the unchanged run must succeed";
    fs::remove(path("O.npy"));
    fs::remove(path("S.json"));

    c.change(*this, args);
    const RunResult r = run(args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find(c.message), std::string::npos)
        << "expected '" << c.message << "' in: " << r.output;
    EXPECT_FALSE(fs::exists(path("O.npy")));
    EXPECT_FALSE(fs::exists(path("S.json")));
  }
}

// An output that cannot be written fails before any work: a directory, or a special file (the
// output is renamed into place, which would replace a device node).
TEST_F(CliAttendTest, UnwritableOutputFailsBeforeAnyWork) {
  Args args = write_batch(make_batch({16}, {16}));
  fs::create_directory(path("O.npy"));
  const RunResult r = run(args.set("--stats", path("S.json")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--out " + path("O.npy") + ": is a directory"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(path("S.json"))) << r.output;
  if (fs::exists("/dev/null")) {
    const RunResult null = run(args.set("--out", "/dev/null"));
    EXPECT_NE(null.exit_code, 0);
    EXPECT_NE(null.output.find("/dev/null: exists and is not a regular file"), std::string::npos)
        << null.output;
    EXPECT_TRUE(fs::is_character_file("/dev/null"));
  }
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

// Values past fp16's range became infinities in an --out-dtype f16 file without a word.
TEST_F(CliAttendTest, AnFp16OutputThatCannotHoldTheValuesIsRefused) {
  Batch b = make_batch({16}, {16});
  for (float& x : b.v) x *= 1e6f;
  Args args = write_batch(b);
  const RunResult r = run(args.set("--out-dtype", "f16"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--out-dtype f16: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("output values lie beyond fp16's range"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(path("O.npy")));
  EXPECT_EQ(run(args.set("--out-dtype", "f32")).exit_code, 0);
}

// A failure while writing the output (here a file-size limit, as a full disk) left the previous
// --stats removed: it had been replaced first. Both outputs are now committed together.
TEST_F(CliAttendTest, AFailedWriteLeavesThePreviousOutputsAsTheyWere) {
  Args args = write_batch(make_batch({512}, {512}));  // an output of 512 KB
  args.set("--stats", path("S.json"));
  { std::ofstream(path("O.npy")) << "previous output"; }
  { std::ofstream(path("S.json")) << "{\"previous\": true}"; }
  const RunResult r = run(args, "ulimit -f 64; ");
  const std::string& output = r.output;
  EXPECT_EQ(r.exit_code, 1) << output;  // -1: ended by a signal (SIGXFSZ), not exited
  EXPECT_NE(output.find("O.npy: write error"), std::string::npos) << output;
  EXPECT_EQ(read_text_file(path("O.npy")), "previous output");
  EXPECT_EQ(read_text_file(path("S.json")), "{\"previous\": true}");
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

}  // namespace
}  // namespace skipsoftmax

namespace skipsoftmax {
namespace {

// A paged cache for decode: sequence b's tokens scattered over pages in reverse order, unused
// slots NaN (a read past a sequence poisons the output).
struct PagedFiles {
  Args args;
  DecodeProblem problem;
  std::vector<float> q, k_pages, v_pages;
};

class CliDecodeTest : public CliAttendTest {
 protected:
  static constexpr int kPage = 16;

  // q_len > 1: the queries are [batch, q_len, Hq, D], q_len new tokens a sequence.
  PagedFiles write_paged(const std::vector<std::int64_t>& lens, int q_len = 1) {
    PagedFiles f;
    const Batch b = make_batch(std::vector<std::int64_t>(lens.size(), q_len), lens);
    std::int64_t pages = 0;
    int max_pages = 0;
    for (std::int64_t l : lens) {
      pages += (l + kPage - 1) / kPage;
      max_pages = std::max<int>(max_pages, static_cast<int>((l + kPage - 1) / kPage));
    }
    const std::size_t row = std::size_t(kHkv) * kDim;
    f.k_pages.assign(pages * kPage * row, std::numeric_limits<float>::quiet_NaN());
    f.v_pages = f.k_pages;
    std::vector<std::int64_t> table(lens.size() * max_pages, 0);
    std::int64_t next = pages - 1;
    for (std::size_t s = 0; s < lens.size(); ++s) {
      for (std::int64_t t = 0; t < lens[s]; ++t) {
        if (t % kPage == 0) table[s * max_pages + t / kPage] = next--;
        const std::int64_t slot = table[s * max_pages + t / kPage] * kPage + t % kPage;
        const std::size_t src = (b.cu_k[s] + t) * row;
        std::copy_n(b.k.begin() + src, row, f.k_pages.begin() + slot * row);
        std::copy_n(b.v.begin() + src, row, f.v_pages.begin() + slot * row);
      }
    }
    f.q = b.q;
    const auto batch = static_cast<std::int64_t>(lens.size());
    const std::vector<std::int64_t> q_shape =
        q_len > 1 ? std::vector<std::int64_t>{batch, q_len, kHq, kDim}
                  : std::vector<std::int64_t>{batch, kHq, kDim};
    f.args.set("--q", write_floats("q.npy", NpyDtype::kF32, q_shape, f.q));
    f.args.set("--k-pages",
               write_floats("kp.npy", NpyDtype::kF32, {pages, kPage, kHkv, kDim}, f.k_pages));
    f.args.set("--v-pages",
               write_floats("vp.npy", NpyDtype::kF32, {pages, kPage, kHkv, kDim}, f.v_pages));
    write_npy_atomic(path("pt.npy"), make_npy_int(NpyDtype::kI32, {batch, max_pages}, table));
    f.args.set("--page-table", path("pt.npy"));
    f.args.set("--seq-lens", write_ints("sl.npy", NpyDtype::kI64, lens));
    f.args.set("--out", path("O.npy"));
    f.problem.q = f.q.data();
    f.problem.q_len = q_len;
    f.problem.kv = {f.k_pages.data(), f.v_pages.data(), pages, kPage, {}, max_pages, lens};
    f.problem.kv.page_table.assign(table.begin(), table.end());
    f.problem.num_heads_q = kHq;
    f.problem.num_heads_kv = kHkv;
    f.problem.head_dim = kDim;
    return f;
  }

  // The reference decode of the files at lambda 0.01, tiles of 32 keys.
  static AttentionStats reference(const PagedFiles& f, KvOrder order, int splits,
                                  std::vector<double>& out) {
    ReferenceOptions opt;
    opt.threshold = Threshold::flat(0.01);
    opt.tiles = {1, 32, order};
    opt.num_splits = splits;
    out.assign(f.q.size(), 0.0);
    return reference_decode(f.problem, opt, out.data());
  }
};

TEST_F(CliDecodeTest, PagedDecodeMatchesTheReference) {
  PagedFiles f = write_paged({700, 33, 250});
  f.args.set("--threshold", "0.01").set("--tile-k", "32").set("--num-splits", "3");
  f.args.set("--kv-order", "sink-reverse").set("--stats", path("S.json"));
  const RunResult r = run(f.args);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  std::vector<double> ref;
  const AttentionStats expected = reference(f, KvOrder::kSinkThenReverse, 3, ref);
  EXPECT_EQ(to_float_vector(read_npy(path("O.npy")), "O.npy"), narrow(ref));
  EXPECT_GT(expected.tiles_skipped, 0);
  EXPECT_EQ(expected.nan_rows, 0);  // the NaN slots past each sequence were never read
  const nlohmann::json stats = read_json_file(path("S.json"));
  EXPECT_EQ(stats["mode"], "decode");
  EXPECT_EQ(stats["num_splits"], 3);
  EXPECT_EQ(stats["page_size"], kPage);
  EXPECT_EQ(stats["tiles_total"], expected.tiles_total);
  EXPECT_EQ(stats["tiles_skipped"], expected.tiles_skipped);
  EXPECT_EQ(stats["sequences"][0]["kv_len"], 700);
}

TEST_F(CliDecodeTest, FourDimensionalQueriesAreNewTokensOfEachSequence) {
  PagedFiles f = write_paged({300, 40}, 3);
  f.args.set("--threshold", "0.01").set("--tile-k", "32").set("--num-splits", "2");
  f.args.set("--stats", path("S.json"));
  const RunResult r = run(f.args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> ref;
  const AttentionStats expected = reference(f, KvOrder::kForward, 2, ref);
  const NpyArray out = read_npy(path("O.npy"));
  EXPECT_EQ(out.shape, (std::vector<std::int64_t>{2, 3, kHq, kDim}));
  EXPECT_EQ(to_float_vector(out, "O.npy"), narrow(ref));
  const nlohmann::json stats = read_json_file(path("S.json"));
  EXPECT_EQ(stats["sequences"][1]["q_len"], 3);
  EXPECT_EQ(stats["tiles_skipped"], expected.tiles_skipped);

  fs::remove(path("O.npy"));
  PagedFiles bad = write_paged({2}, 3);  // the cache must hold the 3 new tokens
  const RunResult rb = run(bad.args);
  EXPECT_NE(rb.exit_code, 0);
  EXPECT_NE(rb.output.find("new token(s) in the cache"), std::string::npos) << rb.output;
  EXPECT_FALSE(fs::exists(path("O.npy")));
}

TEST_F(CliDecodeTest, BadDecodeInputFailsAndLeavesNoOutput) {
  struct Case {
    const char* name;
    const char* message;
    std::function<void(CliDecodeTest&, Args&)> edit;
  };
  const std::vector<Case> cases = {
    {"missing seq lens", "decode needs all of", [](auto&, auto& a) { a.erase("--seq-lens"); }},
    {"causal", "--causal and --window do not apply", [](auto&, auto& a) { a.set("--causal"); }},
    {"window", "--causal and --window do not apply",
     [](auto&, auto& a) { a.set("--window", "4"); }},
    {"tile-q", "--tile-q does not apply", [](auto&, auto& a) { a.set("--tile-q", "16"); }},
    {"splits", "--num-splits must lie in [1, 128], got 0",
     [](auto&, auto& a) { a.set("--num-splits", "0"); }},
    {"too many splits", "--num-splits must lie in [1, 128], got 129",
     [](auto&, auto& a) { a.set("--num-splits", "129"); }},
    {"page out of range", "outside [0,",
     [](auto& t, auto& a) {
       write_npy_atomic(t.path("bad_pt.npy"),
                        make_npy_int(NpyDtype::kI32, {1, 1}, std::vector<std::int64_t>{99}));
       a.set("--page-table", t.path("bad_pt.npy"));
     }},
    {"page table batch", "the page table is [batch = 1",
     [](auto& t, auto& a) {
       write_npy_atomic(t.path("pt2.npy"),
                        make_npy_int(NpyDtype::kI32, {2, 1}, std::vector<std::int64_t>{0, 0}));
       a.set("--page-table", t.path("pt2.npy"));
     }},
    {"too long", "pages, the page table row holds",
     [](auto& t, auto& a) { a.set("--seq-lens", t.write_ints("sl2.npy", NpyDtype::kI64, {40})); }},
    {"NaN in a held row", "attend takes finite inputs",
     [](auto& t, auto& a) {
       const std::size_t n = std::size_t(kPage) * kHkv * kDim;
       a.set("--k-pages", t.write_floats("kp_nan.npy", NpyDtype::kF32, {1, kPage, kHkv, kDim},
                                         std::vector<float>(n, std::nanf(""))));
     }},
    {"cuda dtype on cpu", "--cuda-dtype applies to --backend cuda",
     [](auto&, auto& a) { a.set("--cuda-dtype", "fp16"); }},
#if SKIPSOFTMAX_HAVE_CUDA
    // A build without kernels refuses --backend cuda before these checks.
    {"cuda tile-k", "--backend cuda decodes with tiles of 64 keys",
     [](auto&, auto& a) { a.set("--backend", "cuda").set("--tile-k", "128"); }},
    {"cuda order", "--backend cuda decodes in forward order",
     [](auto&, auto& a) { a.set("--backend", "cuda").set("--kv-order", "reverse"); }},
    // The kernels' own limits are named before the GPU is looked for (these tests' head dim
    // is 32).
    {"cuda head dim", "decode: head_dim 32 is not supported (64, 128 or 256)",
     [](auto&, auto& a) { a.set("--backend", "cuda"); }},
#endif
  };
  for (const Case& c : cases) {
    PagedFiles f = write_paged({10});
    f.args.set("--stats", path("S.json"));
    c.edit(*this, f.args);
    const RunResult r = run(f.args);
    EXPECT_NE(r.exit_code, 0) << c.name;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.name << ": " << r.output;
    EXPECT_FALSE(fs::exists(path("O.npy"))) << c.name;
    EXPECT_FALSE(fs::exists(path("S.json"))) << c.name;
  }
}

}  // namespace
}  // namespace skipsoftmax

// skipsoftmax attend --backend cuda against --backend cpu on the same .npy files (GPU only).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "file_io.h"
#include "gpu_harness.h"

namespace skipsoftmax::gpu {
namespace {

namespace fs = std::filesystem;

// The tool sits beside the tests folder of the build (build/skipsoftmax, build/tests/...); found
// from this executable so that a build folder can be carried to another machine.
fs::path tool_path() {
  return fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "skipsoftmax";
}

int run_tool(const std::string& args) {
  const std::string command = tool_path().string() + " attend " + args + " > /dev/null 2>&1";
  return std::system(command.c_str());
}

TEST(GpuTool, AttendCudaMatchesTheCpuReference) {
  if (!hopper_gpu_available()) GTEST_SKIP() << "no Hopper GPU on this machine";
  // A test binary carried without the tool would otherwise fail on the shell's exit status 127.
  ASSERT_TRUE(fs::exists(tool_path()))
      << "the skipsoftmax tool is not at " << tool_path() << " (beside the build's tests folder)";
  const fs::path dir =
      fs::temp_directory_path() / ("skipsoftmax_gpu_tool_" + std::to_string(getpid()));
  fs::create_directories(dir);
  // A ragged causal batch with history, real-structure inputs: fp32 files holding bf16 values, so
  // that the kernels (bf16, the default for fp32 inputs) and the reference see the same numbers.
  const HostBatch b = make_host_batch(DType::kBF16, 4, 2, 128, {700, 1500}, {1300, 1500}, 9);
  const auto write = [&](const char* name, const std::vector<float>& x, std::int64_t rows,
                         int heads) {
    std::vector<double> values(x.begin(), x.end());
    write_npy_atomic(dir / name, make_npy_float(NpyDtype::kF32, {rows, heads, b.dim}, values));
  };
  write("q.npy", b.q, b.cu_q.back(), b.hq);
  write("k.npy", b.k, b.cu_k.back(), b.hkv);
  write("v.npy", b.v, b.cu_k.back(), b.hkv);
  std::vector<std::int64_t> cu_q(b.cu_q.begin(), b.cu_q.end()), cu_k(b.cu_k.begin(), b.cu_k.end());
  write_npy_atomic(dir / "cq.npy", make_npy_int(NpyDtype::kI32, {3}, cu_q));
  write_npy_atomic(dir / "ck.npy", make_npy_int(NpyDtype::kI32, {3}, cu_k));
  const std::string common = "--q " + (dir / "q.npy").string() + " --k " +
                             (dir / "k.npy").string() + " --v " + (dir / "v.npy").string() +
                             " --cu-seqlens-q " + (dir / "cq.npy").string() + " --cu-seqlens-k " +
                             (dir / "ck.npy").string() +
                             " --causal --threshold 0.001 --kv-order sink-reverse --out-dtype f64";
  ASSERT_EQ(run_tool(common + " --backend cuda --out " + (dir / "gpu.npy").string() + " --stats " +
                     (dir / "gpu.json").string()),
            0);
  ASSERT_EQ(run_tool(common + " --backend cpu --tile-q 64 --tile-k 128 --out " +
                     (dir / "cpu.npy").string() + " --stats " + (dir / "cpu.json").string()),
            0);
  const std::vector<float> gpu = to_float_vector(read_npy(dir / "gpu.npy"), "gpu");
  const std::vector<float> cpu = to_float_vector(read_npy(dir / "cpu.npy"), "cpu");
  double num = 0, den = 0;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    num += (gpu[i] - cpu[i]) * double(gpu[i] - cpu[i]);
    den += double(cpu[i]) * cpu[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-2);  // bf16: P is rounded to bf16 before P V
  const nlohmann::json gs = read_json_file(dir / "gpu.json"), cs = read_json_file(dir / "cpu.json");
  EXPECT_EQ(gs["tile_q"], 64);
  EXPECT_EQ(gs["tiles_total"], cs["tiles_total"]);
  EXPECT_LE(std::abs(gs["tiles_skipped"].get<long long>() - cs["tiles_skipped"].get<long long>()),
            2);
  EXPECT_GT(cs["tiles_skipped"].get<long long>(), 0);
  EXPECT_TRUE(gs["mass_share"].is_null());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace skipsoftmax::gpu

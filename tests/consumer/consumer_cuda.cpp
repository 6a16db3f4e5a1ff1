// The kernels' C++ API through the installed package: argument checks and workspace sizing
// (no GPU needed), and on a Hopper GPU one paged decode call against the float64 reference.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "skipsoftmax/decode.h"
#include "skipsoftmax/reference.h"

namespace {

std::uint16_t to_bf16(float x) {  // round to nearest even
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

float from_bf16(std::uint16_t x) { return std::bit_cast<float>(std::uint32_t{x} << 16); }

// 1 x 1000 cached tokens (not a page multiple), 8 query / 2 KV heads, head dim 128, pages of 64
// at reversed slots, the slots past the sequence filled with NaN.
void decode_on_gpu() {
  using namespace skipsoftmax;
  const int hq = 8, hkv = 2, dim = 128, page = 64, seq_len = 1000, pages = 16;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<std::uint16_t> q(hq * dim), k(pages * page * hkv * dim), v(k.size());
  for (auto& x : q) x = to_bf16(normal(rng));
  for (std::size_t i = 0; i < k.size(); ++i) {
    const std::size_t row = i / (hkv * dim), slot = row / page;
    const bool used = (pages - 1 - slot) * page + row % page < static_cast<std::size_t>(seq_len);
    k[i] = used ? to_bf16(normal(rng)) : to_bf16(NAN);
    v[i] = used ? to_bf16(normal(rng)) : to_bf16(NAN);
  }
  // Token t sits at row table[t / page] * page + t % page; the reference reads the same table.
  std::vector<std::int32_t> table(pages);
  for (int i = 0; i < pages; ++i) table[i] = pages - 1 - i;
  std::vector<float> qf(q.size()), kf(k.size()), vf(v.size());
  for (std::size_t i = 0; i < q.size(); ++i) qf[i] = from_bf16(q[i]);
  for (std::size_t i = 0; i < k.size(); ++i) kf[i] = from_bf16(k[i]), vf[i] = from_bf16(v[i]);

  DecodeArguments args;
  args.head_dim = dim;
  args.kv.num_pages = pages;
  args.kv.page_size = page;
  args.kv.max_pages_per_seq = pages;
  args.batch = 1;
  args.max_seq_len = seq_len;
  args.num_heads_q = hq;
  args.num_heads_kv = hkv;
  const HostDecodeResult gpu = run_decode_host(args, q, k, v, table, {seq_len});

  DecodeProblem p;
  p.q = qf.data();
  p.kv = {.k_pages = kf.data(),
          .v_pages = vf.data(),
          .num_pages = pages,
          .page_size = page,
          .page_table = table,
          .max_pages_per_seq = pages,
          .seq_lens = {seq_len}};
  p.num_heads_q = hq;
  p.num_heads_kv = hkv;
  p.head_dim = dim;
  ReferenceOptions opt;
  opt.tiles.tile_k = decode_tile_k(dim);
  opt.num_splits = gpu.num_splits;
  std::vector<double> ref(hq * dim);
  reference_decode(p, opt, ref.data());
  double err = 0.0, norm = 0.0;
  for (int i = 0; i < hq * dim; ++i) {
    err += std::pow(from_bf16(gpu.out[i]) - ref[i], 2);
    norm += ref[i] * ref[i];
  }
  const double rel = std::sqrt(err / norm);
  std::printf("consumer_cuda: decode on the GPU, %d splits, relative L2 error %.2e\n",
              gpu.num_splits, rel);
  check(rel < 1e-2, "bf16 decode within 1e-2 of the float64 reference");
}

}  // namespace

int main() {
  using namespace skipsoftmax;
  DecodeArguments args;  // 1 x 32k, 32 / 8 heads, pages of 64 (pointers only checked, not read)
  args.q = reinterpret_cast<const void*>(std::uintptr_t{0x10000});
  args.out = reinterpret_cast<void*>(std::uintptr_t{0x20000});
  args.seq_lens = reinterpret_cast<const std::int32_t*>(std::uintptr_t{0x30000});
  args.kv = {.k_pages = reinterpret_cast<const void*>(std::uintptr_t{0x40000}),
             .v_pages = reinterpret_cast<const void*>(std::uintptr_t{0x50000}),
             .num_pages = 512,
             .page_size = 64,
             .page_table = reinterpret_cast<const std::int32_t*>(std::uintptr_t{0x60000}),
             .max_pages_per_seq = 512};
  args.batch = 1;
  args.max_seq_len = 32768;
  args.num_heads_q = 32;
  args.num_heads_kv = 8;
  check(can_implement(args).empty(), "a valid decode launch is accepted");
  check(decode_num_splits(args) > 1, "a lone 32k sequence is split");
  check(decode_workspace_size(args) > 0, "split launches need a workspace");
  DecodeArguments bad = args;
  bad.head_dim = 96;
  check(can_implement(bad).find("head_dim 96") != std::string::npos,
        "an unsupported head dim is named");

  if (hopper_gpu_available()) {
    decode_on_gpu();
  } else {
    std::printf("consumer_cuda: no Hopper GPU, the decode call is not run\n");
  }
  std::printf("consumer_cuda: %s\n", consumer_failures ? "FAILED" : "ok");
  return consumer_failures ? 1 : 0;
}

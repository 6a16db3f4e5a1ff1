// The engine's layer kernels (engine/layers.cu) against CPU computations in double:
// embeddings, RMSNorm, Gemma's post-norms, Q/K norm + RoPE + the paged-cache append (both pair
// layouts), gated activations, soft-capping and greedy sampling. Skipped without a Hopper GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "bf16.h"
#include "gpu_harness.h"
#include "ops.h"

namespace skipsoftmax::gpu {
namespace {

using engine::bits16;

#define REQUIRE_HOPPER() \
  if (!hopper_gpu_available()) GTEST_SKIP() << "no Hopper GPU on this machine"

std::vector<float> normal(std::size_t n, float stddev, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <typename T>
DeviceBuffer on_device(const std::vector<T>& host) {
  DeviceBuffer d(std::max<std::size_t>(host.size() * sizeof(T), 1));
  d.upload(host);
  return d;
}

// A bf16 result against its exact value: within bf16's rounding plus float arithmetic.
void expect_bf16_near(const std::vector<std::uint16_t>& got, const std::vector<double>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = bf16_to_float(got[i]);
    if (std::abs(g - want[i]) > 8e-3 * std::abs(want[i]) + 1e-4 && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << g << ", cpu " << want[i];
    }
  }
}

TEST(GpuLayers, EmbedScalesTheTableRows) {
  REQUIRE_HOPPER();
  const int vocab = 50, hidden = 96;
  const std::vector<std::uint16_t> table = to_bits(normal(vocab * hidden, 1.f, 1), DType::kBF16);
  const std::vector<std::int32_t> tokens = {3, 0, 49, 3};
  DeviceBuffer d_table = on_device(table), d_tokens = on_device(tokens);
  DeviceBuffer x(tokens.size() * hidden * 4);
  engine::embed_tokens(static_cast<const std::int32_t*>(d_tokens.get()), 4,
                       static_cast<const bits16*>(d_table.get()), hidden, 25.25f,
                       static_cast<float*>(x.get()), nullptr);
  const auto got = x.download<float>(tokens.size() * hidden);
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    for (int i = 0; i < hidden; ++i) {
      ASSERT_EQ(got[t * hidden + i], bf16_to_float(table[tokens[t] * hidden + i]) * 25.25f);
    }
  }
}

TEST(GpuLayers, RmsNormAndItsRowGather) {
  REQUIRE_HOPPER();
  const int rows = 7, hidden = 640;
  const float eps = 1e-6f;
  const std::vector<float> x = normal(rows * hidden, 3.f, 2), w = normal(hidden, 1.f, 3);
  const std::vector<std::int32_t> gather = {6, 0, 3};
  DeviceBuffer dx = on_device(x), dw = on_device(w), dg = on_device(gather);
  DeviceBuffer y(rows * hidden * 2);
  const auto expected = [&](const std::vector<int>& which) {
    std::vector<double> e;
    for (int r : which) {
      double ss = 0;
      for (int i = 0; i < hidden; ++i) ss += double(x[r * hidden + i]) * x[r * hidden + i];
      const double inv = 1.0 / std::sqrt(ss / hidden + eps);
      for (int i = 0; i < hidden; ++i) e.push_back(x[r * hidden + i] * inv * w[i]);
    }
    return e;
  };
  engine::rms_norm(static_cast<const float*>(dx.get()), nullptr, rows, hidden,
                   static_cast<const float*>(dw.get()), eps, static_cast<bits16*>(y.get()),
                   nullptr);
  expect_bf16_near(y.download<std::uint16_t>(rows * hidden), expected({0, 1, 2, 3, 4, 5, 6}),
                   "rms_norm");
  engine::rms_norm(static_cast<const float*>(dx.get()), static_cast<const std::int32_t*>(dg.get()),
                   3, hidden, static_cast<const float*>(dw.get()), eps,
                   static_cast<bits16*>(y.get()), nullptr);
  expect_bf16_near(y.download<std::uint16_t>(3 * hidden), expected({6, 0, 3}), "gathered");
}

TEST(GpuLayers, AddRmsNormAccumulatesTheNormalizedBranch) {
  REQUIRE_HOPPER();
  const int rows = 5, hidden = 576;
  const float eps = 1e-5f;
  const std::vector<float> x = normal(rows * hidden, 1.f, 4), y = normal(rows * hidden, 7.f, 5);
  const std::vector<float> w = normal(hidden, 0.5f, 6);
  DeviceBuffer dx = on_device(x), dy = on_device(y), dw = on_device(w);
  engine::add_rms_norm(static_cast<const float*>(dy.get()), rows, hidden,
                       static_cast<const float*>(dw.get()), eps, static_cast<float*>(dx.get()),
                       nullptr);
  const auto got = dx.download<float>(rows * hidden);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < hidden; ++i) ss += double(y[r * hidden + i]) * y[r * hidden + i];
    const double inv = 1.0 / std::sqrt(ss / hidden + eps);
    for (int i = 0; i < hidden; ++i) {
      const double want = x[r * hidden + i] + y[r * hidden + i] * inv * w[i];
      ASSERT_NEAR(got[r * hidden + i], want, 1e-5 * (1 + std::abs(want))) << r << " " << i;
    }
  }
}

struct RopeCase {
  engine::RopePairs pairs;
  int head_dim;
  bool qk_norm;
};

// Q, K, V of 5 tokens of two sequences (positions past a page boundary), 4 query and 2 KV heads.
void check_qkv_rope(const RopeCase& c) {
  const int tokens = 5, hq = 4, hkv = 2, d = c.head_dim, heads = hq + 2 * hkv;
  const int page_size = 64, max_pages = 3, num_pages = 6;
  const float base = 10000.f, eps = 1e-6f;
  const std::vector<std::int32_t> positions = {0, 1, 130, 7, 64};
  const std::vector<std::int32_t> seq_row = {0, 0, 0, 1, 1};
  const std::vector<std::int32_t> page_table = {4, 1, 2, 0, 3, 5};  // [2, max_pages]
  const std::vector<float> qkv = normal(std::size_t(tokens) * heads * d, 2.f, 7);
  const std::vector<float> q_norm = normal(d, 1.f, 8), k_norm = normal(d, 1.f, 9);

  DeviceBuffer d_qkv = on_device(qkv), d_pos = on_device(positions), d_row = on_device(seq_row);
  DeviceBuffer d_table = on_device(page_table), d_qn = on_device(q_norm), d_kn = on_device(k_norm);
  DeviceBuffer q(std::size_t(tokens) * hq * d * 2), k(std::size_t(tokens) * hkv * d * 2);
  DeviceBuffer v(std::size_t(tokens) * hkv * d * 2);
  const std::size_t cache_elems = std::size_t(num_pages) * page_size * hkv * d;
  DeviceBuffer k_pages(cache_elems * 2), v_pages(cache_elems * 2);
  const std::vector<std::uint16_t> poison(cache_elems, nan_bits(DType::kBF16));
  k_pages.upload(poison);
  v_pages.upload(poison);

  engine::QkvArgs a;
  a.qkv = static_cast<const float*>(d_qkv.get());
  a.num_tokens = tokens;
  a.heads_q = hq;
  a.heads_kv = hkv;
  a.head_dim = d;
  a.positions = static_cast<const std::int32_t*>(d_pos.get());
  a.q_norm = c.qk_norm ? static_cast<const float*>(d_qn.get()) : nullptr;
  a.k_norm = c.qk_norm ? static_cast<const float*>(d_kn.get()) : nullptr;
  a.eps = eps;
  a.pairs = c.pairs;
  a.rope_base = base;
  a.q = static_cast<bits16*>(q.get());
  a.k = static_cast<bits16*>(k.get());
  a.v = static_cast<bits16*>(v.get());
  a.k_pages = static_cast<bits16*>(k_pages.get());
  a.v_pages = static_cast<bits16*>(v_pages.get());
  a.page_table = static_cast<const std::int32_t*>(d_table.get());
  a.seq_row = static_cast<const std::int32_t*>(d_row.get());
  a.max_pages = max_pages;
  a.page_size = page_size;
  engine::qkv_rope_append(a, nullptr);
  check(cudaDeviceSynchronize(), "qkv_rope_append");

  std::vector<double> want_q, want_k, want_v;
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* in = qkv.data() + (std::size_t(t) * heads + h) * d;
      std::vector<double> x(in, in + d);
      const bool is_v = h >= hq + hkv;
      if (!is_v) {
        if (c.qk_norm) {
          const std::vector<float>& w = h < hq ? q_norm : k_norm;
          double ss = 0;
          for (double e : x) ss += e * e;
          const double inv = 1.0 / std::sqrt(ss / d + eps);
          for (int i = 0; i < d; ++i) x[i] *= inv * w[i];
        }
        std::vector<double> r(x);
        for (int i = 0; i < d / 2; ++i) {
          const int lo = c.pairs == engine::RopePairs::kAdjacent ? 2 * i : i;
          const int hi = c.pairs == engine::RopePairs::kAdjacent ? 2 * i + 1 : i + d / 2;
          const double theta = positions[t] * std::pow(double(base), -2.0 * i / d);
          r[lo] = x[lo] * std::cos(theta) - x[hi] * std::sin(theta);
          r[hi] = x[lo] * std::sin(theta) + x[hi] * std::cos(theta);
        }
        x = r;
      }
      auto& out = h < hq ? want_q : (is_v ? want_v : want_k);
      out.insert(out.end(), x.begin(), x.end());
    }
  }
  const auto got_k = k.download<std::uint16_t>(want_k.size());
  const auto got_v = v.download<std::uint16_t>(want_v.size());
  expect_bf16_near(q.download<std::uint16_t>(want_q.size()), want_q, "q");
  expect_bf16_near(got_k, want_k, "k");
  expect_bf16_near(got_v, want_v, "v");

  // The pages hold exactly the new K and V rows at their slots, and nothing else.
  const auto kp = k_pages.download<std::uint16_t>(cache_elems);
  const auto vp = v_pages.download<std::uint16_t>(cache_elems);
  std::size_t written = 0;
  for (int t = 0; t < tokens; ++t) {
    const int page = page_table[seq_row[t] * max_pages + positions[t] / page_size];
    const std::size_t slot = std::size_t(page) * page_size + positions[t] % page_size;
    for (std::size_t i = 0; i < std::size_t(hkv) * d; ++i) {
      ASSERT_EQ(kp[slot * hkv * d + i], got_k[t * hkv * d + i]) << "token " << t;
      ASSERT_EQ(vp[slot * hkv * d + i], got_v[t * hkv * d + i]) << "token " << t;
    }
    written += std::size_t(hkv) * d;
  }
  std::size_t untouched = 0;
  for (std::size_t i = 0; i < cache_elems; ++i) untouched += kp[i] == nan_bits(DType::kBF16);
  EXPECT_EQ(untouched, cache_elems - written);
}

TEST(GpuLayers, QkvRopeAppendAdjacentPairsLlama) {
  REQUIRE_HOPPER();
  check_qkv_rope({engine::RopePairs::kAdjacent, 64, false});
}

TEST(GpuLayers, QkvRopeAppendHalvesWithQkNormsGemma) {
  REQUIRE_HOPPER();
  check_qkv_rope({engine::RopePairs::kHalves, 256, true});
  check_qkv_rope({engine::RopePairs::kHalves, 128, false});
}

TEST(GpuLayers, GatedActivations) {
  REQUIRE_HOPPER();
  const int tokens = 3, ffn = 1536;
  const std::vector<float> gu = normal(std::size_t(tokens) * 2 * ffn, 2.f, 10);
  DeviceBuffer d_gu = on_device(gu), h(std::size_t(tokens) * ffn * 2);
  for (auto act : {engine::Activation::kSilu, engine::Activation::kGeluTanh}) {
    engine::gated_activation(static_cast<const float*>(d_gu.get()), tokens, ffn, act,
                             static_cast<bits16*>(h.get()), nullptr);
    std::vector<double> want;
    for (int t = 0; t < tokens; ++t) {
      for (int i = 0; i < ffn; ++i) {
        const double g = gu[std::size_t(t) * 2 * ffn + i],
                     u = gu[std::size_t(t) * 2 * ffn + ffn + i];
        const double a =
            act == engine::Activation::kSilu
                ? g / (1 + std::exp(-g))
                : 0.5 * g *
                      (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (g + 0.044715 * g * g * g)));
        want.push_back(a * u);
      }
    }
    expect_bf16_near(h.download<std::uint16_t>(want.size()), want,
                     act == engine::Activation::kSilu ? "silu" : "gelu_tanh");
  }
}

TEST(GpuLayers, SoftCap) {
  REQUIRE_HOPPER();
  const std::vector<float> x = normal(1000, 40.f, 11);
  DeviceBuffer d = on_device(x);
  engine::soft_cap(static_cast<float*>(d.get()), 1000, 30.f, nullptr);
  const auto got = d.download<float>(1000);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(got[i], 30.0 * std::tanh(x[i] / 30.0), 1e-5);
  }
}

TEST(GpuLayers, ArgmaxTakesTheFirstMaximum) {
  REQUIRE_HOPPER();
  const int vocab = 262144, rows = 4;
  std::vector<float> logits = normal(std::size_t(rows) * vocab, 3.f, 12);
  logits[1 * std::size_t(vocab) + 70000] = 100.f;  // ties: the first wins
  logits[1 * std::size_t(vocab) + 200000] = 100.f;
  logits[2 * std::size_t(vocab) + vocab - 1] = 50.f;                          // the last index
  for (int i = 0; i < vocab; ++i) logits[3 * std::size_t(vocab) + i] = -1.f;  // all equal
  DeviceBuffer d = on_device(logits), out(rows * 4);
  engine::argmax_rows(static_cast<const float*>(d.get()), rows, vocab,
                      static_cast<std::int32_t*>(out.get()), nullptr);
  const auto got = out.download<std::int32_t>(rows);
  const auto first_max = logits.begin();
  EXPECT_EQ(got[0], std::max_element(first_max, first_max + vocab) - first_max);
  EXPECT_EQ(got[1], 70000);
  EXPECT_EQ(got[2], vocab - 1);
  EXPECT_EQ(got[3], 0);
}

}  // namespace
}  // namespace skipsoftmax::gpu

#include "synthetic.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

namespace skipsoftmax {
namespace {

// Box-Muller over the raw 64-bit engine: std::normal_distribution is not the same sequence on
// every standard library, and tests compare against values made here.
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : engine_(seed) {}
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * std::numbers::pi * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 engine_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace

std::vector<float> make_gaussian(std::size_t n, std::uint64_t seed) {
  Normal normal(seed);
  std::vector<float> out(n);
  for (float& x : out) x = static_cast<float>(normal());
  return out;
}

SyntheticQkv make_structured_qkv(const SyntheticSpec& spec) {
  const int dim = spec.head_dim;
  // Dimension 0 carries the sink; pairs (1,2), (3,4), ... up to a quarter of the head carry
  // rotary phases of slow frequencies, so q_i . k_j peaks at i == j and decays with |i - j|.
  const int pairs = std::max(1, dim / 8);
  const double root_dim = std::sqrt(static_cast<double>(dim));
  // q and k each carry the square root of a score; the sqrt(dim) undoes the softmax scale.
  const double sink_amp = std::sqrt(spec.sink * root_dim);
  const double band_amp = std::sqrt(spec.local * root_dim / pairs);
  // The far field lives on the dimensions left free by the sink and the band, so that the three
  // parts of a score are independent and the far field's spread is exactly `noise`.
  const int first_noise_dim = std::min(dim, 1 + 2 * pairs);
  const int noise_dims = std::max(1, dim - first_noise_dim);
  const double noise_std = std::sqrt(spec.noise * root_dim / std::sqrt(double(noise_dims)));
  Normal normal(spec.seed);
  SyntheticQkv out;
  out.q.resize(static_cast<std::size_t>(spec.tokens) * spec.num_heads_q * dim);
  out.k.resize(static_cast<std::size_t>(spec.tokens) * spec.num_heads_kv * dim);
  out.v.resize(static_cast<std::size_t>(spec.tokens) * spec.num_heads_kv * dim);

  const auto fill = [&](float* row, std::int64_t pos, double sink_value) {
    for (int d = 0; d < dim; ++d) {
      row[d] = d < first_noise_dim ? 0.0f : static_cast<float>(noise_std * normal());
    }
    row[0] = static_cast<float>(sink_value);
    for (int f = 0; f < pairs && 2 + 2 * f < first_noise_dim; ++f) {
      // Wavelengths from 64 to ~4000 positions: a band a few tiles wide.
      const double freq = 2.0 * std::numbers::pi / (64.0 * std::pow(64.0, f / double(pairs)));
      row[1 + 2 * f] = static_cast<float>(band_amp * std::cos(freq * double(pos)));
      row[2 + 2 * f] = static_cast<float>(band_amp * std::sin(freq * double(pos)));
    }
  };
  for (std::int64_t t = 0; t < spec.tokens; ++t) {
    for (int h = 0; h < spec.num_heads_q; ++h) {
      fill(&out.q[(t * spec.num_heads_q + h) * dim], t, sink_amp);
    }
    for (int h = 0; h < spec.num_heads_kv; ++h) {
      fill(&out.k[(t * spec.num_heads_kv + h) * dim], t, t == 0 ? sink_amp : 0.0);
      float* v = &out.v[(t * spec.num_heads_kv + h) * dim];
      for (int d = 0; d < dim; ++d) v[d] = static_cast<float>(normal());
    }
  }
  return out;
}

}  // namespace skipsoftmax

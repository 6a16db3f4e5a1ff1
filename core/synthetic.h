// Inputs with the structure of real attention, for the demo, tests and benchmarks until Q/K
// captured from a real model are available: an attention sink at position 0, a local band around
// the diagonal (rotary-like phases), and a noisy far field. Random Gaussian tokens have almost no
// skippable tiles; these have many, as real text does.
#pragma once

#include <cstdint>
#include <vector>

namespace skipsoftmax {

struct SyntheticSpec {
  std::int64_t tokens = 0;  // rows of q, k and v
  int num_heads_q = 0;
  int num_heads_kv = 0;
  int head_dim = 0;
  // In units of the scaled score q.k / sqrt(head_dim):
  double sink = 12.0;   // score of every query against key 0
  double local = 8.0;   // score of a query against its own position (the band decays from there)
  double noise = 0.75;  // standard deviation of the far-field scores
  std::uint64_t seed = 0;
};

struct SyntheticQkv {
  std::vector<float> q;  // [tokens, num_heads_q, head_dim]
  std::vector<float> k;  // [tokens, num_heads_kv, head_dim]
  std::vector<float> v;  // [tokens, num_heads_kv, head_dim]
};

// Deterministic for a given spec. Positions restart at 0 every `tokens`; callers that build a
// ragged batch concatenate one call per sequence.
SyntheticQkv make_structured_qkv(const SyntheticSpec& spec);

// i.i.d. standard normal values, deterministic for a seed.
std::vector<float> make_gaussian(std::size_t n, std::uint64_t seed);

}  // namespace skipsoftmax

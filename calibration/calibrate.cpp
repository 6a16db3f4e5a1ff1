#include "calibrate.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "file_io.h"
#include "sha256.h"
#include "skipsoftmax/paged_kv.h"
#include "tokenizer.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kCacheFormat = "skipsoftmax calibration statistics v1";

// What the statistics of one prompt and phase depend on: the cache key.
std::string cache_key_text(const CalibrationSettings& s, const ModelConfig& m,
                           const LayerPlan& layers, const CaptureSource& source,
                           const StatsBackend& backend, Phase phase,
                           std::span<const std::int32_t> tokens) {
  std::ostringstream k;
  k << kCacheFormat << "\nsource " << source.identity() << "\nbackend " << backend.name
    << "\nphase " << to_string(phase) << "\nheads " << m.heads_q << '/' << m.heads_kv << " dim "
    << m.head_dim << " scale " << std::setprecision(17) << m.attention_scale << "\nlayers";
  for (int l : layers.pooled) k << ' ' << l;
  if (phase == Phase::kPrefill) {
    k << "\ntiles " << s.prefill_tiles.tile_q << 'x' << s.prefill_tiles.tile_k << ' '
      << to_string(s.prefill_tiles.order);
  } else {
    k << "\ntile_k " << s.decode_tile_k << " splits " << s.decode_splits << " steps "
      << s.decode_steps;
  }
  Sha256 h;
  h.update(tokens.data(), tokens.size_bytes());
  k << "\ntokens " << tokens.size() << ' ' << h.hex_digest() << '\n';
  return k.str();
}

fs::path cache_file(const fs::path& dir, const std::string& key_text) {
  return dir / (sha256_hex(key_text) + ".json");
}

// Per pooled layer, or nullopt when absent, stale or unreadable (then recomputed).
std::optional<std::vector<CriticalHistogram>> load_cached(const fs::path& file,
                                                          const std::string& key_text,
                                                          const LayerPlan& layers,
                                                          const ProgressFn& progress) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  try {
    const nlohmann::json j = read_json_file(file);
    if (j.at("key").get<std::string>() != key_text) return std::nullopt;
    std::vector<CriticalHistogram> out;
    const nlohmann::json& entries = j.at("layers");
    if (entries.size() != layers.pooled.size()) return std::nullopt;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].at("layer").get<int>() != layers.pooled[i]) return std::nullopt;
      out.push_back(CriticalHistogram::from_json(entries[i].at("histogram"), file.string()));
    }
    return out;
  } catch (const std::exception& e) {
    progress("ignoring unreadable cache entry " + file.string() + ": " + e.what());
    return std::nullopt;
  }
}

void save_cached(const fs::path& file, const std::string& key_text, const LayerPlan& layers,
                 const std::vector<CriticalHistogram>& hists) {
  nlohmann::json entries = nlohmann::json::array();
  for (std::size_t i = 0; i < hists.size(); ++i) {
    entries.push_back({{"layer", layers.pooled[i]}, {"histogram", hists[i].to_json()}});
  }
  fs::create_directories(file.parent_path());
  write_json_file(file, nlohmann::json{{"key", key_text}, {"layers", entries}});
}

CriticalHistogram pooled(const TileStats& stats) {
  CriticalHistogram h;
  for (const CriticalHistogram& s : sequence_histograms(stats)) h.merge(s);
  return h;
}

PerPhase<StatsOptions> stats_options(const PromptPass& s) {
  PerPhase<StatsOptions> o;
  o.prefill.tiles = s.prefill_tiles;
  o.prefill.num_threads = s.num_threads;
  o.decode.tiles.tile_k = s.decode_tile_k;
  o.decode.num_splits = s.decode_splits;
  o.decode.num_threads = s.num_threads;
  return o;
}

// One phase's statistics over one layer's capture of an n-token prompt: its causal prefill, or
// its last decode_steps tokens as decode steps (capture_decode_steps).
TileStats capture_tile_stats(Phase phase, const LayerCapture& c, const ModelConfig& m,
                             std::int64_t n, int decode_steps, const StatsBackend& backend,
                             const StatsOptions& options) {
  if (phase == Phase::kPrefill) return backend.prefill(capture_prefill_problem(c, m, n), options);
  const DecodeSteps d = capture_decode_steps(c, m, n, decode_steps);
  return backend.decode(d.problem, options);
}

}  // namespace

void ProgressMeter::report(const std::string& where, bool force) {
  const auto now = Clock::now();
  if (!force && now - last_ < std::chrono::seconds(2)) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  std::string line = where;
  if (total_ > 0.0) {
    const double frac = std::min(1.0, done_ / total_);
    line += "; " + percent_text(frac, 0) + " of the work, " + format_duration(elapsed) + " elapsed";
    if (frac > 0.0 && frac < 1.0) {
      line += ", ETA " + format_duration(elapsed * (1.0 - frac) / frac);
    }
  }
  fn_(line);
}

std::int64_t sample_length(const PromptPass& s, std::int64_t length) {
  return length + (s.phases.decode ? s.decode_steps - 1 : 0);
}

std::vector<Phase> voted_phases(const PromptPass& s) {
  std::vector<Phase> phases;
  for (Phase p : kPhases) {
    if (s.phases[p]) phases.push_back(p);
  }
  if (phases.empty()) throw std::invalid_argument("no phase to vote on");
  return phases;
}

double prompt_work(std::int64_t n, const LayerPlan& layers) {
  return static_cast<double>(n) * static_cast<double>(n) *
         static_cast<double>(layers.pooled.size());
}

void prompt_tile_stats(const PromptPass& s, const ModelConfig& model, CaptureSource& source,
                       const StatsBackend& backend, const LayerPlan& layers,
                       std::span<const std::int32_t> tokens, std::span<const Phase> phases,
                       ProgressMeter& meter, const std::string& where,
                       const std::function<void(std::size_t, TileStats&&)>& sink) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  const PerPhase<StatsOptions> options = stats_options(s);
  const double per_layer = prompt_work(n, layers) / static_cast<double>(layers.pooled.size());
  std::size_t done = 0;
  source.capture(tokens, layers.pooled, [&](LayerCapture&& c) {
    for (std::size_t i = 0; i < phases.size(); ++i) {
      sink(i,
           capture_tile_stats(phases[i], c, model, n, s.decode_steps, backend, options[phases[i]]));
    }
    ++done;
    meter.advance(per_layer);
    meter.report(
        where + ": layer " + std::to_string(done) + "/" + std::to_string(layers.pooled.size()),
        done == layers.pooled.size());
  });
}

TextTokenizer model_tokenizer(const gguf::File& file) {
  std::shared_ptr<const Tokenizer> tok = load_tokenizer(file);
  TextTokenizer t;
  t.encode = [tok](std::string_view text) { return tok->encode(text); };
  t.bos = tok->add_bos() ? tok->bos() : -1;  // as the model was trained: SmolLM2 has none
  return t;
}

StatsBackend cpu_stats_backend() {
  return {"cpu-f64",
          [](const PrefillProblem& p, const StatsOptions& o) { return prefill_tile_stats(p, o); },
          [](const DecodeProblem& p, const StatsOptions& o) { return decode_tile_stats(p, o); }};
}

LayerPlan layer_plan(const ModelConfig& config) {
  LayerPlan plan;
  for (int l = 0; l < config.layers; ++l)
    (config.is_local(l) ? plan.local : plan.pooled).push_back(l);
  return plan;
}

PrefillProblem capture_prefill_problem(const LayerCapture& c, const ModelConfig& m,
                                       std::int64_t n) {
  PrefillProblem p;
  p.q = c.q.data();
  p.k = c.k.data();
  p.v = c.v.empty() ? nullptr : c.v.data();
  p.num_heads_q = m.heads_q;
  p.num_heads_kv = m.heads_kv;
  p.head_dim = m.head_dim;
  p.cu_seqlens_q = {0, n};
  p.cu_seqlens_k = {0, n};
  p.causal = true;
  p.softmax_scale = m.attention_scale;
  return p;
}

DecodeSteps capture_decode_steps(const LayerCapture& c, const ModelConfig& m, std::int64_t n,
                                 int steps) {
  if (steps < 1 || steps > n) {
    throw std::invalid_argument(std::to_string(steps) + " decode steps in a prompt of " +
                                std::to_string(n) + " tokens");
  }
  DecodeSteps d;
  const std::size_t row = static_cast<std::size_t>(m.heads_q) * m.head_dim;
  d.q.assign(c.q.end() - static_cast<std::ptrdiff_t>(steps * row), c.q.end());
  DecodeProblem& p = d.problem;
  p.q = d.q.data();
  p.num_heads_q = m.heads_q;
  p.num_heads_kv = m.heads_kv;
  p.head_dim = m.head_dim;
  p.softmax_scale = m.attention_scale;
  // The capture's keys are contiguous tokens: pages in order, the same ones for every step.
  PagedKvCache& kv = p.kv;
  kv.k_pages = c.k.data();
  kv.v_pages = c.v.empty() ? nullptr : c.v.data();
  kv.page_size = kMinPageSize;
  kv.num_pages = (n + kv.page_size - 1) / kv.page_size;
  kv.max_pages_per_seq = static_cast<int>(kv.num_pages);
  for (int s = 0; s < steps; ++s) {
    for (std::int64_t i = 0; i < kv.num_pages; ++i) {
      kv.page_table.push_back(static_cast<std::int32_t>(i));
    }
    kv.seq_lens.push_back(n - steps + 1 + s);
  }
  return d;
}

std::string percent_text(double fraction, int decimals) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(decimals) << fraction * 100.0 << '%';
  return out.str();
}

std::string format_duration(double seconds) {
  const auto total = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (total >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", total / 60, total % 60);
  }
  return buf;
}

PromptFn ruler_prompts(RulerCorpus& corpus, std::uint64_t seed) {
  return [&corpus, seed](std::int64_t tokens, int index) {
    return corpus.make_sample(tokens, seed, index).tokens;
  };
}

PromptFn captured_prompt_set(std::vector<std::vector<std::int32_t>> prompts) {
  return [prompts = std::move(prompts)](std::int64_t tokens, int index) {
    int seen = 0;
    std::map<std::size_t, int> lengths;
    for (const std::vector<std::int32_t>& p : prompts) {
      ++lengths[p.size()];
      if (static_cast<std::int64_t>(p.size()) == tokens && seen++ == index) return p;
    }
    std::string held;
    for (const auto& [length, count] : lengths) {
      held += (held.empty() ? "" : ", ") + std::to_string(count) + " x " + std::to_string(length);
    }
    throw std::runtime_error("the captures hold " + std::to_string(seen) + " prompt(s) of " +
                             std::to_string(tokens) + " tokens, calibration needs " +
                             std::to_string(index + 1) + " (they hold " +
                             (held.empty() ? std::string("none") : held) +
                             " tokens): capture prompts of every length it asks for");
  };
}

CalibrationResult run_calibration(const CalibrationSettings& s, const ModelConfig& model,
                                  const PromptFn& prompts, CaptureSource& source,
                                  const StatsBackend& backend, const ProgressFn& progress) {
  CalibrationResult result;
  result.layers = layer_plan(model);
  const LayerPlan& layers = result.layers;
  if (layers.pooled.empty()) {
    throw std::runtime_error("every layer of the model is a sliding-window layer: nothing skips");
  }
  const std::vector<Phase> phases = voted_phases(s);
  result.phases.resize(phases.size());
  for (PhaseResult& r : result.phases) {
    for (std::int64_t bin : s.bins) r.pools.push_back({bin, {}});
  }

  double total = 0.0;
  for (std::int64_t bin : s.bins) total += prompt_work(sample_length(s, bin), layers) * s.samples;
  ProgressMeter meter(progress, total);

  for (std::size_t bi = 0; bi < s.bins.size(); ++bi) {
    const std::int64_t bin = s.bins[bi];
    const std::int64_t n = sample_length(s, bin);
    for (int i = 0; i < s.samples; ++i) {
      const std::vector<std::int32_t> tokens = prompts(n, i);
      const std::string where = "bin " + std::to_string(bin) + " (" + std::to_string(bi + 1) + "/" +
                                std::to_string(s.bins.size()) + "), prompt " +
                                std::to_string(i + 1) + "/" + std::to_string(s.samples);
      // Per phase: the cached statistics, or the file to store fresh ones in.
      std::vector<std::vector<CriticalHistogram>> per_layer(phases.size());
      std::vector<std::string> keys(phases.size());
      std::vector<std::size_t> missing;  // indices in phases
      std::vector<Phase> to_compute;
      for (std::size_t pi = 0; pi < phases.size(); ++pi) {
        if (s.cache_dir) {
          keys[pi] = cache_key_text(s, model, layers, source, backend, phases[pi], tokens);
          if (auto cached =
                  load_cached(cache_file(*s.cache_dir, keys[pi]), keys[pi], layers, progress)) {
            per_layer[pi] = std::move(*cached);
            continue;
          }
        }
        missing.push_back(pi);
        to_compute.push_back(phases[pi]);
      }
      ++result.prompts;
      if (missing.empty()) {
        ++result.prompts_from_cache;
        meter.drop(prompt_work(n, layers));
        meter.report(where + ": statistics from the cache", true);
      } else {
        prompt_tile_stats(s, model, source, backend, layers, tokens, to_compute, meter, where,
                          [&](std::size_t k, TileStats&& stats) {
                            per_layer[missing[k]].push_back(pooled(stats));
                          });
        if (s.cache_dir) {
          for (std::size_t pi : missing) {
            save_cached(cache_file(*s.cache_dir, keys[pi]), keys[pi], layers, per_layer[pi]);
          }
        }
      }
      for (std::size_t pi = 0; pi < phases.size(); ++pi) {
        RequestPool request{bin, {}};
        for (const CriticalHistogram& h : per_layer[pi]) request.hist.merge(h);
        result.phases[pi].pools[bi].hist.merge(request.hist);
        result.phases[pi].requests.push_back(std::move(request));
      }
    }
  }

  for (std::size_t pi = 0; pi < phases.size(); ++pi) {
    PhaseResult& r = result.phases[pi];
    r.fit = fit_phase(phases[pi], r.pools, s.target);
    r.advice = advise_shape(r.requests, r.fit.deployed().table(), s.mass_ratio);
  }
  return result;
}

nlohmann::ordered_json calibration_updates(const CalibrationSettings& s,
                                           const CalibrationResult& result) {
  nlohmann::ordered_json updates = nlohmann::ordered_json::object();
  PerPhase<std::optional<modelopt::Curve>> curves;
  PerPhase<std::optional<double>> targets;
  for (const PhaseResult& r : result.phases) {
    nlohmann::ordered_json u = skip_key_updates(r.fit, r.advice);
    u[shape_advice_key(r.fit.phase)]["calibrated_max_seqlen"] = s.max_seqlen;
    updates.update(u);
    if (const std::optional<modelopt::Fit> f = modelopt_fit(r.fit)) {
      curves[r.fit.phase] = f->curve;
      // A target only where the tables deploy: a phase deployed dense stays dense for the
      // block's readers too (TensorRT-LLM runs a phase without a target dense).
      if (!r.fit.deployed().table().empty()) targets[r.fit.phase] = r.fit.deployed_target;
    }
  }
  // The same calibration in ModelOpt's form, for TensorRT-LLM and vLLM: one S per target at every
  // length (the tables' rows pooled), where the engine reads the per-length tables.
  if (curves.prefill || curves.decode) {
    updates[std::string(modelopt::kBlockKey)] =
        modelopt::block_json(curves, targets, SKIPSOFTMAX_VERSION);
  }
  return updates;
}

std::string calibration_summary(const CalibrationSettings& s, const CalibrationResult& result) {
  std::ostringstream out;
  out << "calibrated " << result.prompts << " prompts (" << result.prompts_from_cache
      << " from the cache) on " << result.layers.pooled.size() << " global layers";
  if (!result.layers.local.empty()) {
    out << "; " << result.layers.local.size()
        << " sliding-window layers never skip and are not pooled:";
    for (int l : result.layers.local) out << ' ' << l;
  }
  out << "\n\n"
      << std::left << std::setw(9) << "phase" << std::setw(9) << "bin" << std::setw(14) << "S"
      << std::setw(11) << "sparsity"
      << "mass share\n";
  for (const PhaseResult& r : result.phases) {
    const TierFit& tier = r.fit.deployed();
    for (const BinFit& b : tier.bins) {
      out << std::setw(9) << to_string(r.fit.phase) << std::setw(9) << b.bin;
      if (b.scale) {
        std::ostringstream scale;
        scale << std::setprecision(6) << *b.scale;
        out << std::setw(14) << scale.str() << std::setw(11) << percent_text(b.sparsity)
            << percent_text(b.mass_share, 3) << '\n';
      } else {
        out << "unreachable: at most " << percent_text(b.sparsity) << " of the tiles can skip\n";
      }
    }
  }
  for (const PhaseResult& r : result.phases) {
    const char* phase = to_string(r.fit.phase);
    out << '\n' << phase << " tiers:";
    for (const TierFit& t : r.fit.tiers) {
      const std::size_t reached = t.bins.size() - t.unreachable_bins().size();
      out << ' ' << format_percent(t.target) << " (" << reached << '/' << t.bins.size() << " bins)"
          << (&t == &r.fit.deployed() ? " deployed" : "") << ';';
    }
    out << '\n';
    for (const TierFit& t : r.fit.tiers) {
      const std::vector<std::int64_t> lost = t.unreachable_bins();
      if (lost.empty()) continue;
      out << "warning: " << phase << " tier " << format_percent(t.target)
          << " is unreachable at bin" << (lost.size() > 1 ? "s" : "");
      for (std::int64_t b : lost) out << ' ' << b;
      out << (lost.size() == t.bins.size()
                  ? ": the tier is left out"
                  : ": those rows are left out, the row below (or dense) applies there")
          << '\n';
    }
    if (r.fit.deployed().table().empty()) {
      out << "warning: " << phase << " deploys dense: its target "
          << format_percent(r.fit.deployed_target) << " is reached at no bin\n";
    }
    const ShapeAdvice& a = r.advice;
    out << phase << " shape advice: " << a.verdict() << " (sparsity " << percent_text(a.sparsity)
        << ", skipped mass share " << percent_text(a.mass_share, 3) << " at the tail of "
        << a.requests << " requests, ratio ";
    if (std::isfinite(a.mass_ratio)) {
      out << std::setprecision(3) << a.mass_ratio;
    } else {
      out << "undefined";
    }
    out << (a.on ? " < " : " >= ") << a.mass_ratio_limit << ")\n";
    if (!a.on) out << "warning: " << phase << " skipping is advised OFF: " << a.reason << '\n';
    if (const std::optional<modelopt::Fit> f = modelopt_fit(r.fit)) {
      out << phase << " in " << modelopt::kBlockKey << ": S = a * exp(b * t), a "
          << std::setprecision(6) << f->curve.a << ", b " << f->curve.b << " (R^2 "
          << std::setprecision(3) << f->r_squared << " in log S over " << f->points
          << " table rows; one S for every length)\n";
    } else {
      out << phase << " is left out of " << modelopt::kBlockKey
          << ": fewer than two tiers reach a bin, so no curve over the target\n";
    }
  }
  out << "\nnote: the tables cover KV lengths up to " << s.max_seqlen
      << "; beyond it the last row's S applies unvalidated (calibration does not "
         "extrapolate): recalibrate with a larger --max-seqlen for longer contexts\n";
  return out.str();
}

}  // namespace skipsoftmax

#include "calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "parallel.h"
#include "tile_scores.h"

namespace skipsoftmax {
namespace {

// A row's numbers on one visited tile: its maximum and its exponential sum relative to it.
struct RowTile {
  double max = kNegInf;
  double sum = 0.0;
};

// Scratch of one thread: a rows x tile_k score block and the transposed key tile.
struct Scratch {
  Scratch(int rows, int tile_k, int head_dim)
      : kt(static_cast<std::size_t>(head_dim) * tile_k),
        s(static_cast<std::size_t>(rows) * tile_k),
        rowmax(rows) {}
  std::vector<double> kt;  // [head_dim][tile_k]
  std::vector<double> s;   // [rows][tile_k]
  std::vector<double> rowmax;
};

// Walks `count` tiles from `first` in `order` for `rows` rows: the critical log-lambda of each
// visited tile into log_crit[pos], and each (tile, row)'s maximum and exponential sum into
// per_row[(tile_index_base + pos) * rows + r] for the mass pass that follows.
template <typename QRow, typename LoadK, typename Visible>
void walk_tiles(int rows, int head_dim, int tile_k, double scale, std::int64_t first,
                std::int64_t count, KvOrder order, const QRow& q, const LoadK& load,
                const Visible& visible, Scratch& sc, double* log_crit, RowTile* per_row,
                const std::vector<double>* m_seed = nullptr) {
  std::vector<double> m_run = m_seed ? *m_seed : std::vector<double>(rows, kNegInf);
  for (std::int64_t pos = 0; pos < count; ++pos) {
    const std::int64_t t = first + kv_tile_at(order, pos, count);
    const int cols = load(t, sc);
    score_tile(rows, cols, head_dim, tile_k, scale, t, q, sc.kt.data(), visible, sc.s.data(),
               sc.rowmax.data());
    double crit = kNegInf;  // a tile no row sees votes skip at any lambda > 0
    RowTile* tile_rows = per_row + pos * rows;
    for (int r = 0; r < rows; ++r) {
      const double mx = sc.rowmax[r];
      if (mx == kNegInf) continue;
      crit = nan_max(crit, mx - nan_max(m_run[r], mx));
      m_run[r] = nan_max(m_run[r], mx);
      const double* s = sc.s.data() + static_cast<std::ptrdiff_t>(r) * tile_k;
      double sum = 0.0;
      for (int j = 0; j < cols; ++j) sum += std::exp(s[j] - mx);
      tile_rows[r] = {mx, sum};
    }
    log_crit[pos] = crit;
  }
}

// Row totals over all the tiles of a work unit, then each tile's share summed over rows. Returns
// the number of rows with a finite maximum.
std::int64_t tile_masses(int rows, std::int64_t tiles, const RowTile* per_row, double* mass) {
  std::vector<double> row_max(rows, kNegInf), row_total(rows, 0.0);
  for (std::int64_t t = 0; t < tiles; ++t) {
    for (int r = 0; r < rows; ++r) row_max[r] = nan_max(row_max[r], per_row[t * rows + r].max);
  }
  for (std::int64_t t = 0; t < tiles; ++t) {
    for (int r = 0; r < rows; ++r) {
      const RowTile& rt = per_row[t * rows + r];
      if (rt.max != kNegInf) row_total[r] += rt.sum * std::exp(rt.max - row_max[r]);
    }
  }
  std::int64_t finite = 0;
  for (int r = 0; r < rows; ++r) finite += std::isfinite(row_max[r]) && std::isfinite(row_total[r]);
  for (std::int64_t t = 0; t < tiles; ++t) {
    double m = 0.0;
    for (int r = 0; r < rows; ++r) {
      const RowTile& rt = per_row[t * rows + r];
      if (rt.max == kNegInf || !std::isfinite(row_max[r]) || !std::isfinite(row_total[r])) {
        continue;
      }
      m += rt.sum * std::exp(rt.max - row_max[r]) / row_total[r];
    }
    mass[t] = m;
  }
  return finite;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

void validate_stats_options(const StatsOptions& opt) {
  check(opt.tiles.tile_q > 0 && opt.tiles.tile_k > 0, "tile_q and tile_k must be positive");
  check(opt.num_splits > 0, "num_splits must be positive");
}

}  // namespace

namespace {

// Zeroed per-tile arrays for the items, which end at the total tile count.
TileStats layout_of(std::vector<StatsItem> items, KvOrder order, int tile_k, std::size_t batch) {
  TileStats st;
  st.order = order;
  st.tile_k = tile_k;
  st.items = std::move(items);
  const std::int64_t n = st.items.empty() ? 0 : st.items.back().offset + st.items.back().tile_count;
  st.log_crit.assign(static_cast<std::size_t>(n), 0.0);
  st.mass.assign(static_cast<std::size_t>(n), 0.0);
  st.kv_len.assign(batch, 0);
  st.rows.assign(batch, 0);
  return st;
}

}  // namespace

TileStats prefill_stats_layout(const PrefillProblem& p, const TileShape& tiles) {
  std::vector<StatsItem> items;
  std::int64_t offset = 0;
  for (std::size_t b = 0; b + 1 < p.cu_seqlens_q.size(); ++b) {
    const std::int64_t lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const std::int64_t lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    for (int h = 0; h < p.num_heads_q; ++h) {
      for (std::int64_t q0 = 0, qt = 0; q0 < lq; q0 += tiles.tile_q, ++qt) {
        const std::int64_t q1 = std::min<std::int64_t>(q0 + tiles.tile_q, lq);
        const TileRange r = prefill_kv_tile_range(q0, q1, lq, lk, p.causal, p.window, tiles.tile_k);
        const std::int64_t count = std::max<std::int64_t>(0, r.end - r.begin);
        items.push_back({static_cast<std::int64_t>(b), h, qt, q0, q1, r.begin, count, offset});
        offset += count;
      }
    }
  }
  const std::size_t batch = p.cu_seqlens_q.size() - 1;
  TileStats st = layout_of(std::move(items), tiles.order, tiles.tile_k, batch);
  for (std::size_t b = 0; b < batch; ++b) st.kv_len[b] = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
  return st;
}

TileStats decode_stats_layout(const DecodeProblem& p, int tile_k, int num_splits) {
  std::vector<StatsItem> items;
  std::int64_t offset = 0;
  for (std::size_t b = 0; b < p.kv.seq_lens.size(); ++b) {
    const std::int64_t n_tiles = (p.kv.seq_lens[b] + tile_k - 1) / tile_k;
    for (int h = 0; h < p.num_heads_kv; ++h) {
      for (int s = 0; s < num_splits; ++s) {
        const TileRange r = split_tile_range(n_tiles, num_splits, s);
        items.push_back(
            {static_cast<std::int64_t>(b), h, s, 0, 1, r.begin, r.end - r.begin, offset});
        offset += r.end - r.begin;
      }
    }
  }
  TileStats st = layout_of(std::move(items), KvOrder::kForward, tile_k, p.kv.seq_lens.size());
  st.kv_len = p.kv.seq_lens;
  return st;
}

TileStats prefill_tile_stats(const PrefillProblem& problem, const StatsOptions& opt) {
  PrefillProblem p = problem;
  if (!p.v) p.v = p.k;  // never read here; validate() asks for it
  validate(p);
  validate_stats_options(opt);
  const int hq = p.num_heads_q, hkv = p.num_heads_kv, dim = p.head_dim;
  const int tq = opt.tiles.tile_q, tk = opt.tiles.tile_k, group = hq / hkv;
  const double scale = softmax_scale_or_default(p.softmax_scale, dim);
  TileStats st = prefill_stats_layout(p, opt.tiles);

  // The longest items first, as the reference hands them out.
  std::vector<std::size_t> order(st.items.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return st.items[a].tile_count > st.items[b].tile_count;
  });
  const int threads = resolve_threads(opt.num_threads, static_cast<std::int64_t>(order.size()));
  std::vector<Scratch> scratch(threads, Scratch(tq, tk, dim));
  std::vector<std::int64_t> finite_rows(st.items.size(), 0);

  parallel_for(static_cast<std::int64_t>(order.size()), threads, [&](std::int64_t i, int tid) {
    const StatsItem& it = st.items[order[i]];
    Scratch& sc = scratch[tid];
    const std::int64_t q_off = p.cu_seqlens_q[it.seq], k_off = p.cu_seqlens_k[it.seq];
    const std::int64_t lq = p.cu_seqlens_q[it.seq + 1] - q_off;
    const std::int64_t lk = p.cu_seqlens_k[it.seq + 1] - k_off;
    const std::int64_t causal_shift = lk - lq;  // bottom-right alignment
    const int rows = static_cast<int>(it.q_end - it.q_begin);
    const int kvh = it.head / group;

    const std::vector<double> qrows = gather_rows(p.q + ((q_off + it.q_begin) * hq + it.head) * dim,
                                                  std::ptrdiff_t{hq} * dim, rows, dim);
    const auto qrow = [&](int r) { return qrows.data() + static_cast<std::ptrdiff_t>(r) * dim; };
    const auto load = [&](std::int64_t t, Scratch& s) {
      const std::int64_t k0 = t * tk;
      const int cols = static_cast<int>(std::min<std::int64_t>(tk, lk - k0));
      for (int j = 0; j < cols; ++j) {
        const float* src = p.k + ((k_off + k0 + j) * hkv + kvh) * dim;
        for (int d = 0; d < dim; ++d) s.kt[static_cast<std::size_t>(d) * tk + j] = src[d];
      }
      return cols;
    };
    const auto visible = [&](int r, std::int64_t t, int j) {
      const std::int64_t key = t * tk + j, pos = causal_shift + it.q_begin + r;
      return (!p.causal || key <= pos) && (p.window == 0 || key > pos - p.window);
    };
    std::vector<RowTile> per_row(static_cast<std::size_t>(it.tile_count) * rows);
    walk_tiles(rows, dim, tk, scale, it.tile_begin, it.tile_count, opt.tiles.order, qrow, load,
               visible, sc, st.log_crit.data() + it.offset, per_row.data());
    finite_rows[order[i]] =
        tile_masses(rows, it.tile_count, per_row.data(), st.mass.data() + it.offset);
  });
  for (std::size_t i = 0; i < st.items.size(); ++i) st.rows[st.items[i].seq] += finite_rows[i];
  return st;
}

TileStats decode_tile_stats(const DecodeProblem& problem, const StatsOptions& opt) {
  DecodeProblem p = problem;
  if (!p.kv.v_pages) p.kv.v_pages = p.kv.k_pages;  // never read here
  validate(p);
  if (p.q_len != 1) {
    const std::string q_len = std::to_string(p.q_len);
    throw std::invalid_argument("decode tile statistics take one new token a sequence, q_len " +
                                q_len);
  }
  validate_stats_options(opt);
  const int hq = p.num_heads_q, hkv = p.num_heads_kv, dim = p.head_dim;
  const int group = hq / hkv, tk = opt.tiles.tile_k, splits = opt.num_splits;
  const PagedKvCache& kv = p.kv;
  const double scale = softmax_scale_or_default(p.softmax_scale, dim);
  const std::size_t batch = kv.seq_lens.size();
  TileStats st = decode_stats_layout(p, tk, splits);

  // One work unit per (sequence, KV head): its splits' items are consecutive, so their tiles form
  // one contiguous range whose rows share a mass denominator.
  const std::int64_t units = static_cast<std::int64_t>(batch) * hkv;
  const int threads = resolve_threads(opt.num_threads, units);
  std::vector<Scratch> scratch(threads, Scratch(group, tk, dim));
  std::vector<std::int64_t> finite_rows(static_cast<std::size_t>(units), 0);

  parallel_for(units, threads, [&](std::int64_t u, int tid) {
    const std::int64_t b = u / hkv;
    const int kvh = static_cast<int>(u % hkv);
    Scratch& sc = scratch[tid];
    const std::int64_t len = kv.seq_lens[b];
    const std::int32_t* pages = kv.page_table.data() + b * kv.max_pages_per_seq;

    const std::vector<double> qrows =
        gather_rows(p.q + (b * hq + kvh * group) * dim, dim, group, dim);
    const auto qrow = [&](int r) { return qrows.data() + static_cast<std::ptrdiff_t>(r) * dim; };
    const auto load = [&](std::int64_t t, Scratch& s) {  // K only: the statistics need no V
      return load_paged_tile(kv.k_pages, nullptr, pages, kv.page_size, hkv, kvh, dim, tk, t, len,
                             s.kt.data(), nullptr);
    };
    const auto visible = [](int, std::int64_t, int) { return true; };

    const StatsItem* first = &st.items[static_cast<std::size_t>(u) * splits];
    const std::int64_t tiles = (len + tk - 1) / tk;
    std::vector<RowTile> per_row(static_cast<std::size_t>(tiles) * group);
    // Voting splits after the first start from tile 0's row maxima (the sink), as the decode
    // kernel and reference_decode do; every lambda > 0 votes, so the seed holds for the curve.
    std::vector<double> sink;
    for (int s = 0; s < splits; ++s) {
      const StatsItem& it = first[s];
      const std::int64_t local = it.offset - first->offset;
      const bool seeded = it.tile_begin > 0 && it.tile_count > 0;
      if (seeded && sink.empty()) {
        const int cols = load(0, sc);
        score_tile(group, cols, dim, tk, scale, 0, qrow, sc.kt.data(), visible, sc.s.data(),
                   sc.rowmax.data());
        sink.assign(sc.rowmax.begin(), sc.rowmax.begin() + group);
      }
      walk_tiles(group, dim, tk, scale, it.tile_begin, it.tile_count, KvOrder::kForward, qrow, load,
                 visible, sc, st.log_crit.data() + it.offset, per_row.data() + local * group,
                 seeded ? &sink : nullptr);
    }
    finite_rows[u] = tile_masses(group, tiles, per_row.data(), st.mass.data() + first->offset);
  });
  for (std::int64_t u = 0; u < units; ++u) st.rows[u / hkv] += finite_rows[u];
  return st;
}

// ---- CriticalHistogram ----

void CriticalHistogram::ensure_buckets() {
  if (counts_.empty()) {
    counts_.assign(kBuckets, 0);
    masses_.assign(kBuckets, 0.0);
  }
}

void CriticalHistogram::add_tile(double log_crit, double mass, std::int64_t kv_len) {
  ++tiles_;
  min_kv_len_ = min_kv_len_ == 0 ? kv_len : std::min(min_kv_len_, kv_len);
  if (!(log_crit < 0.0)) return;  // raises a row maximum, or NaN: no S < L skips it
  ensure_buckets();
  const double u = log_crit + std::log(static_cast<double>(kv_len));
  const double x = std::floor((u - kLogMin) * kPerNat);
  const int i = x < 0.0 ? 0 : x >= kBuckets ? kBuckets - 1 : static_cast<int>(x);
  ++counts_[i];
  masses_[i] += mass;
}

void CriticalHistogram::merge(const CriticalHistogram& o) {
  if (!o.counts_.empty()) {
    ensure_buckets();
    for (int i = 0; i < kBuckets; ++i) {
      counts_[i] += o.counts_[i];
      masses_[i] += o.masses_[i];
    }
  }
  tiles_ += o.tiles_;
  rows_ += o.rows_;
  if (o.min_kv_len_ > 0) {
    min_kv_len_ = min_kv_len_ == 0 ? o.min_kv_len_ : std::min(min_kv_len_, o.min_kv_len_);
  }
}

double CriticalHistogram::cumulative(double log_scale, bool mass) const {
  if (counts_.empty() || std::isnan(log_scale)) return 0.0;
  const double x = (log_scale - kLogMin) * kPerNat;
  if (x <= 0.0) return 0.0;
  const int full = x >= kBuckets ? kBuckets : static_cast<int>(x);
  double acc = 0.0;
  for (int i = 0; i < full; ++i) acc += mass ? masses_[i] : static_cast<double>(counts_[i]);
  if (full < kBuckets) {
    const double part = x - full;
    acc += part * (mass ? masses_[full] : static_cast<double>(counts_[full]));
  }
  return acc;
}

double CriticalHistogram::sparsity_at(double scale) const {
  if (tiles_ == 0 || !(scale > 0.0)) return 0.0;
  return cumulative(std::log(scale), false) / static_cast<double>(tiles_);
}

double CriticalHistogram::mass_share_at(double scale) const {
  if (rows_ == 0 || !(scale > 0.0)) return 0.0;
  return cumulative(std::log(scale), true) / static_cast<double>(rows_);
}

double CriticalHistogram::max_sparsity() const {
  return min_kv_len_ > 0 ? sparsity_at(static_cast<double>(min_kv_len_)) : 0.0;
}

std::optional<double> CriticalHistogram::scale_for_sparsity(double target) const {
  if (tiles_ == 0 || counts_.empty()) return std::nullopt;
  const double need = target * static_cast<double>(tiles_);
  const double cap_log = std::log(static_cast<double>(min_kv_len_));
  double acc = 0.0;
  for (int i = 0; i < kBuckets; ++i) {
    const double next = acc + static_cast<double>(counts_[i]);
    if (counts_[i] > 0 && next >= need) {
      const double frac = std::clamp((need - acc) / static_cast<double>(counts_[i]), 0.0, 1.0);
      const double u = kLogMin + (i + frac) / kPerNat;
      // The guard runs a sequence dense when S >= L: a scale at or past the cap skips nothing.
      if (u >= cap_log) return std::nullopt;
      return std::exp(u);
    }
    acc = next;
  }
  return std::nullopt;
}

nlohmann::json CriticalHistogram::to_json() const {
  nlohmann::json buckets = nlohmann::json::array();
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] != 0) buckets.push_back({i, counts_[i], masses_[i]});
  }
  return {{"tiles", tiles_}, {"rows", rows_}, {"min_kv_len", min_kv_len_}, {"buckets", buckets}};
}

CriticalHistogram CriticalHistogram::from_json(const nlohmann::json& j,
                                               const std::string& context) {
  const auto bad = [&](const std::string& what) {
    return std::invalid_argument(context + ": " + what);
  };
  if (!j.is_object()) throw bad("a histogram is an object");
  CriticalHistogram h;
  try {
    h.tiles_ = j.at("tiles").get<std::int64_t>();
    h.rows_ = j.at("rows").get<std::int64_t>();
    h.min_kv_len_ = j.at("min_kv_len").get<std::int64_t>();
    std::int64_t in_buckets = 0;
    for (const auto& b : j.at("buckets")) {
      const auto i = b.at(0).get<std::int64_t>();
      if (i < 0 || i >= kBuckets) throw bad("bucket index " + std::to_string(i) + " out of range");
      h.ensure_buckets();
      h.counts_[i] = b.at(1).get<std::int64_t>();
      h.masses_[i] = b.at(2).get<double>();
      in_buckets += h.counts_[i];
    }
    if (h.tiles_ < in_buckets || h.rows_ < 0) throw bad("inconsistent tile or row counts");
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("malformed histogram: ") + e.what());
  }
  return h;
}

std::vector<CriticalHistogram> sequence_histograms(const TileStats& st) {
  std::vector<CriticalHistogram> h(st.kv_len.size());
  for (const StatsItem& it : st.items) {
    for (std::int64_t pos = 0; pos < it.tile_count; ++pos) {
      const std::size_t t = static_cast<std::size_t>(it.offset + pos);
      h[it.seq].add_tile(st.log_crit[t], st.mass[t], st.kv_len[it.seq]);
    }
  }
  for (std::size_t b = 0; b < h.size(); ++b) h[b].add_rows(st.rows[b]);
  return h;
}

}  // namespace skipsoftmax

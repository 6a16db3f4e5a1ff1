#include "skipsoftmax/reference.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel.h"
#include "tile_scores.h"

namespace skipsoftmax {
namespace {

// One row's online-softmax state over the tiles it keeps, plus the running sum of the tiles it
// skips (kept apart, relative to its own maximum) for the mass statistic.
struct RowState {
  double m = kNegInf;  // running maximum over kept tiles
  double l = 0.0;      // sum of exp(x - m) over kept tiles
  double skip_m = kNegInf;
  double skip_l = 0.0;
};

// Per work item (query tile x head, or GQA group x split) results, reduced in a fixed order.
struct ItemStats {
  std::int64_t tiles_total = 0;
  std::int64_t tiles_skipped = 0;
  double share_sum = 0.0;  // sum over finite rows of the per-row mass share
  double share_max = 0.0;
  std::int64_t finite_rows = 0;
  std::int64_t nan_rows = 0;
  std::vector<TileRecord> trace;  // filled only when the caller asked for a trace
};

// Scratch space of one thread, sized for a rows x tile_k score block and head_dim.
struct Scratch {
  Scratch(int rows, int tile_k, int head_dim)
      : kt(static_cast<std::size_t>(head_dim) * tile_k),
        vt(static_cast<std::size_t>(tile_k) * head_dim),
        s(static_cast<std::size_t>(rows) * tile_k),
        rowmax(rows) {}
  std::vector<double> kt;      // [head_dim][tile_k]: K tile transposed, widened
  std::vector<double> vt;      // [tile_k][head_dim]: V tile, widened
  std::vector<double> s;       // [rows][tile_k]: scores of the tile (-inf where masked)
  std::vector<double> rowmax;  // [rows]
};

// o[d] = o[d] * corr + sum_j p[j] * vt[j][d], summed in order of j.
__attribute__((target_clones("avx2", "default"))) void accumulate_pv(double* o, double corr,
                                                                     const double* p,
                                                                     const double* vt, int rows,
                                                                     int head_dim) {
  for (int d = 0; d < head_dim; ++d) o[d] *= corr;
  for (int j = 0; j < rows; ++j) {
    const double pj = p[j];
    const double* vrow = vt + static_cast<std::ptrdiff_t>(j) * head_dim;
    for (int d = 0; d < head_dim; ++d) o[d] += pj * vrow[d];
  }
}

// The tile loop shared by prefill and decode. A caller describes a tile's rows and keys through
// two functors; everything about the vote and the online softmax lives here once.
//   rows          number of voting rows (query rows of a tile, or heads of a GQA group)
//   q(r)          -> const double* [head_dim] of row r (pre-widened)
//   load(t, ...)  fills scratch.kt / scratch.vt for tile t and returns its key count
//   visible(r, t, j) -> whether row r sees key j of tile t
//   record        nullptr, or the trace record to stamp with kv_tile, visit and skipped
template <bool kSkip, typename QRow, typename LoadTile, typename Visible>
void run_tiles(int rows, int head_dim, int tile_k, double scale, double log_lambda,
               bool collect_mass, std::int64_t first, std::int64_t count, KvOrder order,
               const QRow& q, const LoadTile& load, const Visible& visible, Scratch& sc,
               std::vector<RowState>& st, double* o, ItemStats& stats, const TileRecord* record) {
  for (std::int64_t pos = 0; pos < count; ++pos) {
    const std::int64_t t = first + kv_tile_at(order, pos, count);
    if (record) {
      stats.trace.push_back(*record);
      stats.trace.back().kv_tile = t;
      stats.trace.back().visit = pos;
    }
    const int cols = load(t, sc);
    score_tile(rows, cols, head_dim, tile_k, scale, t, q, sc.kt.data(), visible, sc.s.data(),
               sc.rowmax.data());
    ++stats.tiles_total;

    if constexpr (kSkip) {
      // The vote: every row must have rowmax - max(m_run, rowmax) < ln(lambda). A row with no
      // visible key here votes skip; a NaN row never does (the comparison is false).
      bool skip = log_lambda > kNegInf;
      for (int r = 0; r < rows && skip; ++r) {
        const double mx = sc.rowmax[r];
        if (mx == kNegInf) continue;
        skip = mx - nan_max(st[r].m, mx) < log_lambda;
      }
      if (skip) {
        ++stats.tiles_skipped;
        if (record) stats.trace.back().skipped = true;
        if (collect_mass) {
          for (int r = 0; r < rows; ++r) {
            const double mx = sc.rowmax[r];
            if (mx == kNegInf) continue;
            const double* s = sc.s.data() + static_cast<std::ptrdiff_t>(r) * tile_k;
            RowState& rs = st[r];
            const double m_new = std::max(rs.skip_m, mx);
            double sum = 0.0;
            for (int j = 0; j < cols; ++j) sum += std::exp(s[j] - m_new);
            rs.skip_l = rs.skip_l * std::exp(rs.skip_m - m_new) + sum;
            rs.skip_m = m_new;
          }
        }
        continue;
      }
    }

    for (int r = 0; r < rows; ++r) {
      const double mx = sc.rowmax[r];
      if (mx == kNegInf) continue;  // nothing visible for this row in this tile
      RowState& rs = st[r];
      double* s = sc.s.data() + static_cast<std::ptrdiff_t>(r) * tile_k;
      const double m_new = nan_max(rs.m, mx);
      const double corr = rs.m == kNegInf ? 0.0 : std::exp(rs.m - m_new);
      double sum = 0.0;
      for (int j = 0; j < cols; ++j) {
        s[j] = std::exp(s[j] - m_new);  // exp(-inf) = 0 for masked keys
        sum += s[j];
      }
      rs.l = rs.l * corr + sum;
      rs.m = m_new;
      accumulate_pv(o + static_cast<std::ptrdiff_t>(r) * head_dim, corr, s, sc.vt.data(), cols,
                    head_dim);
    }
  }
}

// Per-row mass share of the skipped tiles against all visited tiles, relative to the row's true
// maximum: the kept maximum, since a skipped tile's maximum lies below the running one.
void add_row_mass(const RowState& rs, const double* o, int head_dim, ItemStats& stats) {
  bool nan = std::isnan(rs.m) || std::isnan(rs.l);
  for (int d = 0; d < head_dim && !nan; ++d) nan = std::isnan(o[d]);
  if (nan) {
    ++stats.nan_rows;
    return;
  }
  if (rs.m == kNegInf) return;
  const double skipped = rs.skip_m == kNegInf ? 0.0 : rs.skip_l * std::exp(rs.skip_m - rs.m);
  const double share = skipped / (rs.l + skipped);
  stats.share_sum += share;
  stats.share_max = std::max(stats.share_max, share);
  ++stats.finite_rows;
}

double log_lambda_of(double lambda) { return lambda > 0.0 ? std::log(lambda) : kNegInf; }

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

void validate_heads(int hq, int hkv, int head_dim) {
  check(hq > 0 && hkv > 0, "head counts must be positive (Hq=" + std::to_string(hq) +
                               ", Hkv=" + std::to_string(hkv) + ")");
  check(hq % hkv == 0, "Hq % Hkv != 0 (Hq=" + std::to_string(hq) + ", Hkv=" + std::to_string(hkv) +
                           "): GQA needs a whole number of query heads per KV head");
  check(head_dim > 0, "head_dim must be positive");
}

void validate_options(const ReferenceOptions& opt, std::size_t batch) {
  check(opt.tiles.tile_q > 0 && opt.tiles.tile_k > 0, "tile_q and tile_k must be positive");
  check(opt.num_splits > 0, "num_splits must be positive");
  if (!opt.lambdas.empty()) {
    check(opt.lambdas.size() == batch, "lambdas holds " + std::to_string(opt.lambdas.size()) +
                                           " values for " + std::to_string(batch) + " sequences");
    check(opt.threshold.kind() == Threshold::Kind::kDense,
          "per-sequence lambdas replace the threshold: give one or the other");
  }
}

// The lambda sequence b of KV length kv_len runs with.
double lambda_of(const ReferenceOptions& opt, std::size_t b, std::int64_t kv_len) {
  return opt.lambdas.empty() ? opt.threshold.lambda_for(kv_len)
                             : sequence_lambda(opt.lambdas[b], kv_len);
}

// Whether no sequence of the problem can skip: the dense loop serves them all.
bool never_skips(const ReferenceOptions& opt) {
  if (opt.lambdas.empty()) return opt.threshold.never_skips();
  return std::none_of(opt.lambdas.begin(), opt.lambdas.end(),
                      [](float x) { return sequence_lambda(x, 1) > 0.0; });
}

double row_lse(const RowState& rs) { return rs.m + std::log(rs.l); }

void validate_cu_seqlens(const std::vector<std::int64_t>& cu, const char* name) {
  check(cu.size() >= 2, std::string(name) + " needs at least 2 entries (batch + 1)");
  check(cu.front() == 0, std::string(name) + " must start at 0");
  for (std::size_t i = 1; i < cu.size(); ++i) {
    check(cu[i] >= cu[i - 1],
          std::string(name) + " must be non-decreasing (entry " + std::to_string(i) + ")");
  }
}

AttentionStats reduce_stats(std::vector<SequenceStats> seqs, std::vector<ItemStats>& items,
                            const std::vector<std::int64_t>& item_seq,
                            std::vector<TileRecord>* trace) {
  if (trace) {
    trace->clear();
    for (ItemStats& it : items) trace->insert(trace->end(), it.trace.begin(), it.trace.end());
    std::stable_sort(trace->begin(), trace->end(), [](const TileRecord& a, const TileRecord& b) {
      if (a.seq != b.seq) return a.seq < b.seq;
      if (a.head != b.head) return a.head < b.head;
      if (a.q_tile != b.q_tile) return a.q_tile < b.q_tile;
      return a.visit < b.visit;
    });
  }
  std::vector<ItemStats> per_seq(seqs.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    ItemStats& a = per_seq[item_seq[i]];
    const ItemStats& b = items[i];
    a.tiles_total += b.tiles_total;
    a.tiles_skipped += b.tiles_skipped;
    a.share_sum += b.share_sum;
    a.share_max = std::max(a.share_max, b.share_max);
    a.finite_rows += b.finite_rows;
    a.nan_rows += b.nan_rows;
  }
  AttentionStats out;
  double share_sum = 0.0;
  std::int64_t finite_rows = 0;
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    SequenceStats& s = seqs[b];
    const ItemStats& a = per_seq[b];
    s.tiles_total = a.tiles_total;
    s.tiles_skipped = a.tiles_skipped;
    s.mass_share = a.finite_rows ? a.share_sum / static_cast<double>(a.finite_rows) : 0.0;
    s.mass_share_max = a.share_max;
    s.nan_rows = a.nan_rows;
    out.tiles_total += s.tiles_total;
    out.tiles_skipped += s.tiles_skipped;
    out.nan_rows += s.nan_rows;
    share_sum += a.share_sum;
    finite_rows += a.finite_rows;
  }
  out.mass_share = finite_rows ? share_sum / static_cast<double>(finite_rows) : 0.0;
  out.sequences = std::move(seqs);
  return out;
}

}  // namespace

void validate(const PrefillProblem& p) {
  validate_heads(p.num_heads_q, p.num_heads_kv, p.head_dim);
  check(p.q && p.k && p.v, "q, k and v must be given");
  validate_cu_seqlens(p.cu_seqlens_q, "cu_seqlens_q");
  validate_cu_seqlens(p.cu_seqlens_k, "cu_seqlens_k");
  check(p.cu_seqlens_q.size() == p.cu_seqlens_k.size(),
        "cu_seqlens_q and cu_seqlens_k describe different batch sizes (" +
            std::to_string(p.cu_seqlens_q.size() - 1) + " vs " +
            std::to_string(p.cu_seqlens_k.size() - 1) + ")");
  for (std::size_t b = 0; b + 1 < p.cu_seqlens_q.size(); ++b) {
    const std::int64_t lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const std::int64_t lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    const std::string seq = "sequence " + std::to_string(b) + " (q_len " + std::to_string(lq) +
                            ", kv_len " + std::to_string(lk) + ")";
    check(lq == 0 || lk > 0, seq + ": queries with no keys");
    check(!p.causal || lk >= lq, seq + ": causal attention needs kv_len >= q_len");
  }
  if (p.softmax_scale) {
    check(std::isfinite(*p.softmax_scale) && *p.softmax_scale > 0.0,
          "softmax scale must be finite and > 0");
  }
  check(p.window >= 0, "sliding window must be >= 0 (0: none), got " + std::to_string(p.window));
  check(p.window == 0 || p.causal, "a sliding window needs causal attention");
}

void validate(const DecodeProblem& p) {
  validate_heads(p.num_heads_q, p.num_heads_kv, p.head_dim);
  const PagedKvCache& kv = p.kv;
  check(p.q && kv.k_pages && kv.v_pages, "q, k_pages and v_pages must be given");
  check(p.q_len >= 1, "q_len must be >= 1, got " + std::to_string(p.q_len));
  check(kv.page_size > 0, "page_size must be positive");
  check(kv.max_pages_per_seq > 0, "max_pages_per_seq must be positive");
  const std::size_t batch = kv.seq_lens.size();
  check(batch > 0, "decode needs at least one sequence");
  check(kv.page_table.size() == batch * static_cast<std::size_t>(kv.max_pages_per_seq),
        "page_table has " + std::to_string(kv.page_table.size()) + " entries, expected batch x " +
            "max_pages_per_seq = " + std::to_string(batch * kv.max_pages_per_seq));
  for (std::size_t b = 0; b < batch; ++b) {
    const std::int64_t len = kv.seq_lens[b];
    const std::string seq =
        "sequence " + std::to_string(b) + " (seq_len " + std::to_string(len) + ")";
    check(len >= p.q_len,
          seq + ": decode needs its " + std::to_string(p.q_len) + " new token(s) in the cache");
    const std::int64_t pages = (len + kv.page_size - 1) / kv.page_size;
    check(pages <= kv.max_pages_per_seq, seq + ": needs " + std::to_string(pages) +
                                             " pages, the page table row holds " +
                                             std::to_string(kv.max_pages_per_seq));
    for (std::int64_t i = 0; i < pages; ++i) {
      const std::int32_t page = kv.page_table[b * kv.max_pages_per_seq + i];
      check(page >= 0 && page < kv.num_pages,
            seq + ": page table entry " + std::to_string(i) + " = " + std::to_string(page) +
                " is outside [0, " + std::to_string(kv.num_pages) + ")");
    }
  }
  check(p.window >= 0, "sliding window must be >= 0 (0: none), got " + std::to_string(p.window));
  if (p.softmax_scale) {
    check(std::isfinite(*p.softmax_scale) && *p.softmax_scale > 0.0,
          "softmax scale must be finite and > 0");
  }
}

namespace {

template <bool kSkip>
AttentionStats prefill_impl(const PrefillProblem& p, const ReferenceOptions& opt, double* out) {
  const int hq = p.num_heads_q, hkv = p.num_heads_kv, dim = p.head_dim;
  const int tq = opt.tiles.tile_q, tk = opt.tiles.tile_k;
  const int group = hq / hkv;
  const double scale = softmax_scale_or_default(p.softmax_scale, dim);
  const std::int64_t batch = static_cast<std::int64_t>(p.cu_seqlens_q.size()) - 1;

  std::vector<SequenceStats> seqs(batch);
  struct Item {
    std::int64_t seq, q_begin, q_end;
    int head;
  };
  std::vector<Item> items;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const std::int64_t lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    seqs[b].q_len = lq;
    seqs[b].kv_len = lk;
    seqs[b].lambda = lambda_of(opt, b, lk);
    for (std::int64_t q0 = 0; q0 < lq; q0 += tq) {
      for (int h = 0; h < hq; ++h) items.push_back({b, q0, std::min(q0 + tq, lq), h});
    }
  }
  // Causal query tiles near the end of a sequence see the most keys: hand them out first.
  std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    const auto work = [&](const Item& it) {
      const TileRange r = prefill_kv_tile_range(it.q_begin, it.q_end, seqs[it.seq].q_len,
                                                seqs[it.seq].kv_len, p.causal, p.window, tk);
      return r.end - r.begin;
    };
    return work(a) > work(b);
  });

  std::vector<ItemStats> item_stats(items.size());
  std::vector<std::int64_t> item_seq(items.size());
  const int threads = resolve_threads(opt.num_threads, static_cast<std::int64_t>(items.size()));
  std::vector<Scratch> scratch(threads, Scratch(tq, tk, dim));

  parallel_for(static_cast<std::int64_t>(items.size()), threads, [&](std::int64_t i, int tid) {
    const Item& it = items[i];
    item_seq[i] = it.seq;
    Scratch& sc = scratch[tid];
    const SequenceStats& sq = seqs[it.seq];
    const std::int64_t q_off = p.cu_seqlens_q[it.seq], k_off = p.cu_seqlens_k[it.seq];
    const std::int64_t causal_shift = sq.kv_len - sq.q_len;  // bottom-right alignment
    const int rows = static_cast<int>(it.q_end - it.q_begin);
    const int kvh = it.head / group;

    const std::vector<double> qrows = gather_rows(p.q + ((q_off + it.q_begin) * hq + it.head) * dim,
                                                  std::ptrdiff_t{hq} * dim, rows, dim);
    const auto qrow = [&](int r) { return qrows.data() + static_cast<std::ptrdiff_t>(r) * dim; };
    const auto load = [&](std::int64_t t, Scratch& s) {
      const std::int64_t k0 = t * tk;
      const int cols = static_cast<int>(std::min<std::int64_t>(tk, sq.kv_len - k0));
      for (int j = 0; j < cols; ++j) {
        const std::int64_t base = ((k_off + k0 + j) * hkv + kvh) * dim;
        for (int d = 0; d < dim; ++d) {
          s.kt[static_cast<std::size_t>(d) * tk + j] = p.k[base + d];
          s.vt[static_cast<std::size_t>(j) * dim + d] = p.v[base + d];
        }
      }
      return cols;
    };
    const auto visible = [&](int r, std::int64_t t, int j) {
      const std::int64_t key = t * tk + j, pos = causal_shift + it.q_begin + r;
      return (!p.causal || key <= pos) && (p.window == 0 || key > pos - p.window);
    };

    std::vector<RowState> st(rows);
    std::vector<double> o(static_cast<std::size_t>(rows) * dim, 0.0);
    const TileRange range =
        prefill_kv_tile_range(it.q_begin, it.q_end, sq.q_len, sq.kv_len, p.causal, p.window, tk);
    ItemStats& stats = item_stats[i];
    const TileRecord record{it.seq, it.head, it.q_begin / tq, 0, 0, false};
    run_tiles<kSkip>(rows, dim, tk, scale, log_lambda_of(sq.lambda), opt.collect_mass, range.begin,
                     range.end - range.begin, opt.tiles.order, qrow, load, visible, sc, st,
                     o.data(), stats, opt.trace ? &record : nullptr);

    for (int r = 0; r < rows; ++r) {
      double* orow = o.data() + static_cast<std::ptrdiff_t>(r) * dim;
      double* dst = out + ((q_off + it.q_begin + r) * hq + it.head) * dim;
      for (int d = 0; d < dim; ++d) dst[d] = orow[d] / st[r].l;
      if (opt.lse) opt.lse[(q_off + it.q_begin + r) * hq + it.head] = row_lse(st[r]);
      add_row_mass(st[r], dst, dim, stats);
    }
  });
  return reduce_stats(std::move(seqs), item_stats, item_seq, opt.trace);
}

// One split of one (sequence, KV head): its own online softmax over its tile range.
struct SplitResult {
  std::vector<RowState> st;  // [group]
  std::vector<double> o;     // [group][head_dim], unnormalized
};

template <bool kSkip>
AttentionStats decode_impl(const DecodeProblem& p, const ReferenceOptions& opt, double* out) {
  const int hq = p.num_heads_q, hkv = p.num_heads_kv, dim = p.head_dim;
  const int group = hq / hkv, tk = opt.tiles.tile_k, splits = opt.num_splits;
  const int lq = p.q_len, rows = lq * group;  // row r: token r / group, head r % group
  const PagedKvCache& kv = p.kv;
  const double scale = softmax_scale_or_default(p.softmax_scale, dim);
  const std::int64_t batch = static_cast<std::int64_t>(kv.seq_lens.size());

  std::vector<SequenceStats> seqs(batch);
  for (std::int64_t b = 0; b < batch; ++b) {
    seqs[b].q_len = lq;
    seqs[b].kv_len = kv.seq_lens[b];
    seqs[b].lambda = lambda_of(opt, b, kv.seq_lens[b]);
  }
  const std::int64_t n_items = batch * hkv;
  std::vector<ItemStats> item_stats(n_items);
  std::vector<std::int64_t> item_seq(n_items);
  const int threads = resolve_threads(opt.num_threads, n_items);
  std::vector<Scratch> scratch(threads, Scratch(rows, tk, dim));

  parallel_for(n_items, threads, [&](std::int64_t i, int tid) {
    const std::int64_t b = i / hkv;
    const int kvh = static_cast<int>(i % hkv);
    item_seq[i] = b;
    Scratch& sc = scratch[tid];
    const std::int64_t len = kv.seq_lens[b];
    const std::int32_t* pages = kv.page_table.data() + b * kv.max_pages_per_seq;

    std::vector<double> qrows;
    for (int token_index = 0; token_index < lq; ++token_index) {
      const std::vector<double> token =
          gather_rows(p.q + ((b * lq + token_index) * hq + kvh * group) * dim, dim, group, dim);
      qrows.insert(qrows.end(), token.begin(), token.end());
    }
    const auto qrow = [&](int r) { return qrows.data() + static_cast<std::ptrdiff_t>(r) * dim; };
    const auto load = [&](std::int64_t t, Scratch& s) {
      return load_paged_tile(kv.k_pages, kv.v_pages, pages, kv.page_size, hkv, kvh, dim, tk, t, len,
                             s.kt.data(), s.vt.data());
    };
    // Row r's token sits at len - lq + r / group and sees the keys up to it, after the window's
    // left edge; the splits cut the tiles from the one holding the first token's first key.
    const auto last_key = [&](int r) { return len - lq + r / group; };
    const auto first_key_of = [&](int r) {
      return p.window > 0 ? std::max<std::int64_t>(0, last_key(r) - p.window + 1) : 0;
    };
    const std::int64_t first_key = first_key_of(0);
    const auto visible = [&](int r, std::int64_t t, int j) {
      const std::int64_t key = t * tk + j;
      return key <= last_key(r) && key >= first_key_of(r);
    };

    const std::int64_t first_tile = first_key / tk;
    const std::int64_t n_tiles = (len + tk - 1) / tk - first_tile;
    const double log_lambda = log_lambda_of(seqs[b].lambda);
    ItemStats& stats = item_stats[i];
    std::vector<SplitResult> parts(splits);
    for (int s = 0; s < splits; ++s) {
      TileRange range = split_tile_range(n_tiles, splits, s);
      range.begin += first_tile;
      range.end += first_tile;
      parts[s].st.assign(rows, RowState{});
      parts[s].o.assign(static_cast<std::size_t>(rows) * dim, 0.0);
      // A voting split after the first starts from the sink: tile 0's row maxima seed its
      // running maximum (as the decode kernel does; tile 0 adds nothing to this split's sums).
      if (kSkip && range.begin > 0 && range.end > range.begin && log_lambda > kNegInf) {
        const int cols = load(0, sc);
        score_tile(rows, cols, dim, tk, scale, 0, qrow, sc.kt.data(), visible, sc.s.data(),
                   sc.rowmax.data());
        for (int r = 0; r < rows; ++r) parts[s].st[r].m = sc.rowmax[r];
      }
      const TileRecord record{b, kvh, s, 0, 0, false};
      run_tiles<kSkip>(rows, dim, tk, scale, log_lambda, opt.collect_mass, range.begin,
                       range.end - range.begin, opt.tiles.order, qrow, load, visible, sc,
                       parts[s].st, parts[s].o.data(), stats, opt.trace ? &record : nullptr);
    }

    // Combine the splits by their log-sum-exp, as the GPU's combine kernel does.
    for (int r = 0; r < rows; ++r) {
      double m = kNegInf;
      for (const SplitResult& part : parts) m = nan_max(m, part.st[r].m);
      RowState total;
      total.m = m;
      std::vector<double> acc(dim, 0.0);
      for (const SplitResult& part : parts) {
        const RowState& rs = part.st[r];
        if (rs.m != kNegInf) {
          const double w = std::exp(rs.m - m);
          total.l += w * rs.l;
          for (int d = 0; d < dim; ++d) acc[d] += w * part.o[static_cast<std::size_t>(r) * dim + d];
        }
        if (rs.skip_m != kNegInf) {
          const double m_new = std::max(total.skip_m, rs.skip_m);
          total.skip_l = total.skip_l * std::exp(total.skip_m - m_new) +
                         rs.skip_l * std::exp(rs.skip_m - m_new);
          total.skip_m = m_new;
        }
      }
      const std::int64_t out_row = (b * lq + r / group) * hq + kvh * group + r % group;
      double* dst = out + out_row * dim;
      for (int d = 0; d < dim; ++d) dst[d] = acc[d] / total.l;
      if (opt.lse) opt.lse[out_row] = row_lse(total);
      add_row_mass(total, dst, dim, stats);
    }
  });
  return reduce_stats(std::move(seqs), item_stats, item_seq, opt.trace);
}

}  // namespace

AttentionStats reference_prefill(const PrefillProblem& p, const ReferenceOptions& opt,
                                 double* out) {
  validate(p);
  validate_options(opt, p.cu_seqlens_q.size() - 1);
  return never_skips(opt) ? prefill_impl<false>(p, opt, out) : prefill_impl<true>(p, opt, out);
}

AttentionStats reference_decode(const DecodeProblem& p, const ReferenceOptions& opt, double* out) {
  validate(p);
  validate_options(opt, p.kv.seq_lens.size());
  if (p.window > 0 && !never_skips(opt)) {
    throw std::invalid_argument(
        "decode with a sliding window runs dense (skipping is not applied to local layers)");
  }
  return never_skips(opt) ? decode_impl<false>(p, opt, out) : decode_impl<true>(p, opt, out);
}

}  // namespace skipsoftmax

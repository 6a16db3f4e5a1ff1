// The table, guard, first-skippable-length and dispatch rules of threshold.h, and the JSON form of
// tables (table_json.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "skipsoftmax/threshold.h"
#include "table_json.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

using nlohmann::json;

// Bins 1024 and 4096; S stays below the bins, so each row skips from its own first length on.
ScaleTable two_row_table() { return ScaleTable({{1024, 2048.0}, {4096, 3000.0}}); }

using test::message_of;

TEST(ScaleTable, EmptyIsDenseEverywhere) {
  const ScaleTable t;
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.lambda_for(1), 0.0);
  EXPECT_EQ(t.lambda_for(1 << 30), 0.0);
  EXPECT_EQ(t.first_skippable_length(), kNeverSkippable);
}

TEST(ScaleTable, LookupAtBinEdges) {
  const ScaleTable t = two_row_table();
  EXPECT_EQ(t.lambda_for(1023), 0.0);                     // bin - 1: below the first bin
  EXPECT_EQ(t.lambda_for(1024), 0.0);                     // bin: S = 2048 >= L, the guard
  EXPECT_EQ(t.lambda_for(2048), 0.0);                     // L = S: still guarded
  EXPECT_DOUBLE_EQ(t.lambda_for(2049), 2048.0 / 2049.0);  // S + 1
  EXPECT_DOUBLE_EQ(t.lambda_for(4095), 2048.0 / 4095.0);  // last length of row 0
  EXPECT_DOUBLE_EQ(t.lambda_for(4096), 3000.0 / 4096.0);  // second bin: row 1
  EXPECT_DOUBLE_EQ(t.lambda_for(100000), 3000.0 / 100000.0);
}

TEST(ScaleTable, SBelowBinSkipsFromTheBin) {
  const ScaleTable t({{100, 50.0}});
  EXPECT_EQ(t.lambda_for(99), 0.0);
  EXPECT_DOUBLE_EQ(t.lambda_for(100), 0.5);
  EXPECT_EQ(t.first_skippable_length(), 100);
}

TEST(ScaleTable, GuardComparesInFloatAsTheKernels) {
  // 999.99999 rounds to 1000 in float: the kernels guard L = 1000, and so does the host, and the
  // first skippable length is the next one.
  const ScaleTable t({{100, 999.99999}});
  EXPECT_EQ(t.lambda_for(1000), 0.0);
  EXPECT_GT(t.lambda_for(1001), 0.0);
  EXPECT_EQ(t.first_skippable_length(), 1001);
  // Above 2^24 float steps cover several integers; 2^30 + 64 rounds to 2^30.
  const ScaleTable big({{100, 1073741824.0}});
  EXPECT_EQ(big.lambda_for((1 << 30) + 64), 0.0);
  const std::int64_t first = big.first_skippable_length();
  EXPECT_GT(big.lambda_for(first), 0.0);
  EXPECT_EQ(big.lambda_for(first - 1), 0.0);
  EXPECT_GT(first, (std::int64_t{1} << 30) + 64);
  // A huge S is found without walking its float step integer by integer.
  EXPECT_GT(ScaleTable({{100, 1e17}}).first_skippable_length(), std::int64_t{100000000000000000});
}

TEST(ScaleTable, FirstSkippableLengthIntegralS) {
  // lambda > 0 needs L > S: L = S is guarded, S + 1 is the first.
  const ScaleTable t({{100, 150.0}});
  EXPECT_EQ(t.first_skippable_length(), 151);
  EXPECT_EQ(t.lambda_for(150), 0.0);
  EXPECT_GT(t.lambda_for(151), 0.0);
}

TEST(ScaleTable, FirstSkippableLengthFractionalS) {
  const ScaleTable t({{100, 150.5}});
  EXPECT_EQ(t.first_skippable_length(), 151);
  EXPECT_EQ(t.lambda_for(150), 0.0);
  EXPECT_DOUBLE_EQ(t.lambda_for(151), 150.5 / 151.0);
}

TEST(ScaleTable, RowWhoseSExceedsTheNextBinIsNeverSkippable) {
  // Row 0 serves [100, 200) but needs L > 500; row 1 skips from its bin.
  const ScaleTable t({{100, 500.0}, {200, 50.0}});
  EXPECT_EQ(t.first_skippable_length(), 200);
  EXPECT_EQ(t.lambda_for(199), 0.0);
  EXPECT_DOUBLE_EQ(t.lambda_for(200), 0.25);
}

TEST(ScaleTable, SEqualToNextBinMinusOneLeavesNoSkippableLengthInTheRow) {
  // Row 0 would skip from 200, which already belongs to row 1 (S = 1000): first is 1001.
  const ScaleTable t({{100, 199.0}, {200, 1000.0}});
  EXPECT_EQ(t.first_skippable_length(), 1001);
  EXPECT_EQ(t.lambda_for(199), 0.0);
  EXPECT_EQ(t.lambda_for(200), 0.0);
  EXPECT_EQ(t.lambda_for(1000), 0.0);
  EXPECT_DOUBLE_EQ(t.lambda_for(1001), 1000.0 / 1001.0);
}

TEST(ScaleTable, HugeSNeverSkips) {
  const ScaleTable t({{1, 1e300}});
  EXPECT_EQ(t.first_skippable_length(), kNeverSkippable);
  EXPECT_EQ(t.lambda_for(std::numeric_limits<std::int32_t>::max()), 0.0);
}

TEST(ScaleTable, FirstSkippableLengthAgreesWithLambdaFor) {
  const ScaleTable tables[] = {two_row_table(), ScaleTable({{100, 500.0}, {200, 50.0}}),
                               ScaleTable({{100, 199.0}, {200, 1000.0}}),
                               ScaleTable({{7, 3.25}, {9, 8.5}, {12, 30.0}})};
  for (const ScaleTable& t : tables) {
    const std::int64_t first = t.first_skippable_length();
    for (std::int64_t l = 1; l < first; ++l) EXPECT_EQ(t.lambda_for(l), 0.0) << "L=" << l;
    EXPECT_GT(t.lambda_for(first), 0.0);
  }
}

TEST(ScaleTable, RejectsBadRowsNamingTheRow) {
  using Rows = std::vector<ScaleTableRow>;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::pair<Rows, std::string> cases[] = {
      {Rows{{0, 1.0}}, "row 0 [0, 1]: seqlen_bin must be a positive integer"},
      {Rows{{-5, 1.0}}, "seqlen_bin must be a positive integer"},
      {Rows{{1, 0.0}}, "row 0 [1, 0]: S must be finite and > 0"},
      {Rows{{1, -2.0}}, "S must be finite and > 0"},
      {Rows{{1, inf}}, "S must be finite and > 0"},
      {Rows{{1, nan}}, "S must be finite and > 0"},
      {Rows{{2, 5e-324}}, "S must be finite and > 0 (at least 1e-45"},  // 0 in float
      {Rows{{10, 1.0}, {10, 2.0}},
       "row 1 [10, 2]: bins must be strictly increasing (previous bin 10)"},
      {Rows{{10, 1.0}, {5, 2.0}}, "bins must be strictly increasing"},
  };
  for (const auto& [rows, expected] : cases) {
    const std::string msg = message_of([&] { ScaleTable t(rows); });
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }
}

TEST(Threshold, DenseNeverSkips) {
  const Threshold t = Threshold::dense();
  EXPECT_EQ(t.kind(), Threshold::Kind::kDense);
  EXPECT_EQ(t.lambda_for(1 << 20), 0.0);
  EXPECT_TRUE(t.never_skips());
  EXPECT_EQ(t.describe(), "dense");
}

TEST(Threshold, EmptyTableIsDense) {
  EXPECT_EQ(Threshold::table(ScaleTable()), Threshold::dense());
}

TEST(Threshold, TableDelegatesToTheTable) {
  const Threshold t = Threshold::table(two_row_table());
  EXPECT_EQ(t.kind(), Threshold::Kind::kTable);
  EXPECT_DOUBLE_EQ(t.lambda_for(4096), 3000.0 / 4096.0);
  EXPECT_EQ(t.first_skippable_length(), 2049);
  EXPECT_FALSE(t.never_skips());
  EXPECT_EQ(t.describe(), "table of 2 rows, first skippable length 2049");
}

TEST(Threshold, FlatIsLengthIndependent) {
  const Threshold t = Threshold::flat(0.25);
  EXPECT_EQ(t.kind(), Threshold::Kind::kFlat);
  EXPECT_EQ(t.lambda_for(0), 0.0);
  EXPECT_EQ(t.lambda_for(1), 0.25);
  EXPECT_EQ(t.lambda_for(1 << 30), 0.25);
  EXPECT_EQ(t.first_skippable_length(), 1);
  EXPECT_EQ(t.describe(), "flat lambda=0.25");
}

TEST(Threshold, FlatZeroIsDense) { EXPECT_EQ(Threshold::flat(0.0), Threshold::dense()); }

TEST(Threshold, FlatRejectsLambdaOutsideUnitInterval) {
  for (double bad : {1.0, 1.5, -0.01, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(Threshold::flat(bad), std::invalid_argument) << bad;
  }
  EXPECT_NE(message_of([] { Threshold::flat(1.0); }).find("outside [0, 1)"), std::string::npos);
  EXPECT_NO_THROW(Threshold::flat(0.999));
}

// max_kv_len is the longest KV length, history included (chunked prefill as well as initial).
TEST(Dispatch, PrefillBelowAndAtFirstSkippableLength) {
  const Threshold t = Threshold::table(two_row_table());  // first skippable length 2049
  for (int batch : {1, 3}) {
    EXPECT_EQ(choose_prefill_kernel(t, 16, batch), KernelChoice::kDense) << batch;
    EXPECT_EQ(choose_prefill_kernel(t, 2048, batch), KernelChoice::kDense) << batch;
    EXPECT_EQ(choose_prefill_kernel(t, 2049, batch), KernelChoice::kSkip) << batch;
    EXPECT_EQ(choose_prefill_kernel(t, 100000, batch), KernelChoice::kSkip) << batch;
  }
  EXPECT_EQ(choose_prefill_kernel(Threshold::flat(0.1), 1, 2), KernelChoice::kSkip);
}

// [1024, 4096) skips (S = 8), [4096, 10000] is guarded (S >= L), longer sequences skip again.
Threshold table_with_a_guarded_row() {
  return Threshold::table(ScaleTable({{1024, 8.0}, {4096, 10000.0}, {16384, 64.0}}));
}

TEST(Dispatch, ABatchOfOneRunsDenseWheneverItsOwnLambdaIsZero) {
  const Threshold t = table_with_a_guarded_row();
  EXPECT_EQ(choose_prefill_kernel(t, 1000, 1), KernelChoice::kDense);
  EXPECT_EQ(choose_prefill_kernel(t, 2000, 1), KernelChoice::kSkip);
  EXPECT_EQ(choose_prefill_kernel(t, 4096, 1), KernelChoice::kDense);
  EXPECT_EQ(choose_prefill_kernel(t, 10000, 1), KernelChoice::kDense);
  EXPECT_EQ(choose_prefill_kernel(t, 20000, 1), KernelChoice::kSkip);
  EXPECT_EQ(choose_decode_kernel(t, 5000, 1), KernelChoice::kDense);
  EXPECT_EQ(choose_decode_kernel(t, 20000, 1), KernelChoice::kSkip);
  EXPECT_EQ(choose_decode_kernel(Threshold::flat(0.1), 1, 1), KernelChoice::kSkip);
  EXPECT_EQ(choose_decode_kernel(Threshold::flat(0.1), 0, 1), KernelChoice::kDense);
}

TEST(Dispatch, ALargerBatchSeesOnlyItsLongestSequence) {
  // A shorter sequence of the batch may lie in [1024, 4096), where it skips.
  const Threshold t = table_with_a_guarded_row();
  EXPECT_EQ(choose_prefill_kernel(t, 5000, 2), KernelChoice::kSkip);
  EXPECT_EQ(choose_decode_kernel(t, 5000, 2), KernelChoice::kSkip);
  EXPECT_EQ(choose_decode_kernel(t, 1000, 64), KernelChoice::kDense);
}

TEST(Dispatch, DensePolicyAlwaysRunsTheDenseKernel) {
  for (int batch : {1, 2}) {
    EXPECT_EQ(choose_prefill_kernel(Threshold::dense(), 1 << 20, batch), KernelChoice::kDense);
    const Threshold never = Threshold::table(ScaleTable({{1, 1e300}}));
    EXPECT_EQ(choose_prefill_kernel(never, 1 << 20, batch), KernelChoice::kDense);
  }
}

TEST(Dispatch, ToString) {
  EXPECT_STREQ(to_string(KernelChoice::kDense), "dense");
  EXPECT_STREQ(to_string(KernelChoice::kSkip), "skip");
}

TEST(TableJson, ParsesAndRoundTrips) {
  const json j = json::parse("[[1024, 2048], [4096, 3000.5]]");
  const ScaleTable t = scale_table_from_json(j, "ctx");
  EXPECT_EQ(t, ScaleTable({{1024, 2048.0}, {4096, 3000.5}}));
  EXPECT_EQ(scale_table_from_json(scale_table_to_json(t), "ctx"), t);
}

TEST(TableJson, EmptyArrayIsTheDenseTable) {
  EXPECT_TRUE(scale_table_from_json(json::array(), "ctx").empty());
}

TEST(TableJson, RejectsMalformedTablesNamingTheContext) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"a": 1})", "ctx: a scale table is an array of [seqlen_bin, S] rows, got object"},
      {"[[1, 2, 3]]", "ctx: row 0 [1,2,3] is not a [seqlen_bin, S] pair of numbers"},
      {"[[1]]", "is not a [seqlen_bin, S] pair"},
      {R"([["1", 2]])", "is not a [seqlen_bin, S] pair"},
      {"[5]", "is not a [seqlen_bin, S] pair"},
      {"[[1.5, 2]]", "ctx: row 0 [1.5,2]: seqlen_bin must be an integer in [1, 9e15]"},
      {"[[0, 2]]", "seqlen_bin must be an integer in [1, 9e15]"},
      {"[[1e16, 2]]", "seqlen_bin must be an integer in [1, 9e15]"},
      {"[[1, 0]]", "ctx: scale table row 0 [1, 0]: S must be finite and > 0"},
      {"[[1, -3]]", "S must be finite and > 0"},
      {"[[8, 1], [4, 1]]", "ctx: scale table row 1 [4, 1]: bins must be strictly increasing"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string msg = message_of([&] { scale_table_from_json(json::parse(text), "ctx"); });
    EXPECT_NE(msg.find(expected), std::string::npos) << text << " -> " << msg;
  }
}

class TableFile : public test::TempDirTest {
 protected:
  std::filesystem::path write(const std::string& text) {
    const std::filesystem::path p = dir_ / "t.json";
    std::ofstream(p) << text;
    return p;
  }
};

TEST_F(TableFile, ReadsTheBareArray) {
  EXPECT_EQ(read_scale_table_file(write("[[16, 4]]")), ScaleTable({{16, 4.0}}));
}

TEST_F(TableFile, ErrorsNameTheFile) {
  const std::filesystem::path missing = dir_ / "missing.json";
  EXPECT_NE(
      message_of([&] { read_scale_table_file(missing); }).find(missing.string() + ": no such file"),
      std::string::npos);
  const std::filesystem::path truncated = write("[[16, 4], [32");
  EXPECT_NE(message_of([&] {
              read_scale_table_file(truncated);
            }).find(truncated.string() + ": malformed JSON at byte"),
            std::string::npos);
  const std::filesystem::path bad = write("[[16, -4]]");
  EXPECT_NE(message_of([&] { read_scale_table_file(bad); }).find(bad.string() + ": "),
            std::string::npos);
}

}  // namespace
}  // namespace skipsoftmax

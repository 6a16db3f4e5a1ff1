// check_not_an_input: the one check every writing command makes that its output replaces none of
// the files it reads, under any spelling of the path.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "file_io.h"
#include "npy.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;

class CheckNotAnInput : public test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    fs::create_directories(dir_ / "ck" / "sub");
    std::ofstream(dir_ / "in.json") << "[]";
    std::ofstream(dir_ / "ck" / "config.json") << "{}";
    std::ofstream(dir_ / "ck" / "sub" / "deep.bin") << "x";
  }
  std::vector<ReadPath> inputs() const {
    return {{"--input-file", dir_ / "in.json"}, {"--model-dir", dir_ / "ck", true}, {"--none", ""}};
  }
};

TEST_F(CheckNotAnInput, RefusesAnInputFileUnderAnySpelling) {
  fs::create_symlink(dir_ / "in.json", dir_ / "link.json");
  for (const fs::path& out :
       {dir_ / "in.json", dir_ / "ck" / ".." / "in.json", dir_ / "link.json"}) {
    EXPECT_ERROR_HAS(check_not_an_input(out, "--out", inputs()),
                     "is also --input-file: it would overwrite an input");
  }
}

TEST_F(CheckNotAnInput, RefusesAFileOfAnInputDirectory) {
  fs::create_directories(dir_ / "elsewhere");
  fs::create_symlink(dir_ / "ck", dir_ / "elsewhere" / "ck_link");
  for (const fs::path& out : {dir_ / "ck" / "config.json", dir_ / "ck" / "sub" / "deep.bin",
                              dir_ / "elsewhere" / "ck_link" / "config.json"}) {
    EXPECT_ERROR_HAS(check_not_an_input(out, "--save-results", inputs()),
                     "is a file of --model-dir");
  }
}

TEST_F(CheckNotAnInput, AllowsNewFilesAndUnrelatedOnes) {
  EXPECT_NO_THROW(check_not_an_input(dir_ / "ck" / "results.json", "--out", inputs()));
  EXPECT_NO_THROW(check_not_an_input(dir_ / "out.json", "--out", inputs()));
  std::ofstream(dir_ / "old.json") << "{}";
  EXPECT_NO_THROW(check_not_an_input(dir_ / "old.json", "--out", inputs()));
  // A directory named like the input directory's prefix is not inside it.
  fs::create_directories(dir_ / "ck2");
  std::ofstream(dir_ / "ck2" / "config.json") << "{}";
  EXPECT_NO_THROW(check_not_an_input(dir_ / "ck2" / "config.json", "--out", inputs()));
}

TEST(JsonShape, BoundsTheNestingInLinearTime) {
  EXPECT_EQ(json_shape_problem(R"({"a": [[1, 2], {"b": "]]]][[[["}]})"), "");
  EXPECT_EQ(json_shape_problem(std::string(256, '[') + std::string(256, ']')), "");
  EXPECT_EQ(json_shape_problem(std::string(257, '[')),
            "JSON nested deeper than 256 levels at byte 256");
  // Brackets inside strings, escaped quotes included, are text.
  EXPECT_EQ(json_shape_problem("[\"\\\"" + std::string(1000, '[') + "\"]"), "");
  const std::string deep(1'000'000, '{');
  EXPECT_NE(json_shape_problem(deep).find("deeper than 256"), std::string::npos);
  EXPECT_ERROR_HAS(parse_json_text(deep, "cfg.json"), "cfg.json: JSON nested deeper than 256");
}

// A dangling link read "cannot list the directory", a loop of links "no such file".
TEST_F(CheckNotAnInput, MissingFilesSayWhy) {
  fs::create_symlink(dir_ / "gone.json", dir_ / "dangling.json");
  fs::create_symlink(dir_ / "loop_b", dir_ / "loop_a");
  fs::create_symlink(dir_ / "loop_a", dir_ / "loop_b");
  EXPECT_ERROR_HAS(read_text_file(dir_ / "none.json"), "none.json: no such file");
  EXPECT_ERROR_HAS(read_text_file(dir_ / "dangling.json"),
                   "dangling.json: a dangling link to " + (dir_ / "gone.json").string());
  EXPECT_ERROR_HAS(read_json_text(dir_ / "loop_a"), "loop_a: Too many levels of symbolic links");
  EXPECT_ERROR_HAS(read_npy(dir_ / "loop_a"), "Too many levels of symbolic links");
}

TEST(OrderedJson, ParsesAsNlohmannDoesInLinearTime) {
  const std::string text =
      R"({"z": 1, "a": [1, -2, 3.5, 18446744073709551615, true, null, "\u00e9"],)"
      R"( "m": {"y": {}, "x": []}, "z": "again", "b": {"k": [{"q": 1}, [2]]}})";
  const nlohmann::ordered_json got = parse_json_text<nlohmann::ordered_json>(text, "t");
  EXPECT_EQ(got, nlohmann::ordered_json::parse(text));  // the same values, in the same key order
  EXPECT_EQ(got.dump(), nlohmann::ordered_json::parse(text).dump());
  EXPECT_EQ(got.at("z"), "again");  // a repeated key keeps its last value, in its first place
  EXPECT_EQ(got.begin().key(), "z");

  std::string wide = "{";
  for (int i = 0; i < 200000; ++i)
    wide += (i ? ", \"" : "\"") + std::to_string(199999 - i) + "\": 0";
  wide += "}";
  const auto start = std::chrono::steady_clock::now();
  const nlohmann::ordered_json many = parse_json_text<nlohmann::ordered_json>(wide, "wide");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);  // 94 s before
  ASSERT_EQ(many.size(), 200000u);
  EXPECT_EQ(many.begin().key(), "199999");

  EXPECT_ERROR_HAS(parse_json_text<nlohmann::ordered_json>(R"({"a": )", "cfg.json"),
                   "cfg.json: malformed JSON at byte 6 (6 bytes)");
  EXPECT_ERROR_HAS(parse_json_text<nlohmann::ordered_json>(R"({"a": 1e999})", "cfg.json"),
                   "beyond a double's range");
}

TEST(JsonShape, RefusesANulByte) {
  const std::string text("{\"a\": 1}\0garbage", 16);
  EXPECT_EQ(json_shape_problem(text), "a NUL byte at byte 8 (JSON is text)");
  EXPECT_ERROR_HAS(parse_json_text(text, "in.json"), "in.json: a NUL byte at byte 8");
}

TEST_F(CheckNotAnInput, JsonFilesMustBeRegularAndBounded) {
  EXPECT_ERROR_HAS(read_json_text(dir_ / "none.json"), "none.json: no such file");
  EXPECT_ERROR_HAS(read_json_text(dir_ / "ck"), "ck: is a directory");
  fs::create_symlink("/dev/null", dir_ / "null.json");
  EXPECT_ERROR_HAS(read_json_text(dir_ / "null.json"), "null.json: is not a regular file");
  EXPECT_EQ(read_json_text(dir_ / "in.json"), "[]");
}

// A process ended by SIGTERM in the middle of writing leaves no temporary file, and still dies of
// the signal; so does one whose outputs were staged but not committed.
TEST_F(CheckNotAnInput, ASignalRemovesTheTemporaryFiles) {
  for (const bool staged : {false, true}) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      remove_temporary_files_on_signal();
      const auto interrupted = [](std::ostream& out) {
        out << "half";
        out.flush();
        std::raise(SIGTERM);
      };
      if (staged) {
        OutputSet outputs;
        outputs.add(dir_ / "a.json", [](std::ostream& out) { out << "{}"; });
        outputs.add(dir_ / "b.json", interrupted);
      } else {
        write_file_atomic(dir_ / "out.json", interrupted);
      }
      std::_Exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos)
          << entry.path() << (staged ? " (staged)" : "");
    }
    EXPECT_FALSE(fs::exists(dir_ / "a.json"));
  }
}

TEST_F(CheckNotAnInput, OutputsAreCommittedTogetherOrNotAtAll) {
  std::ofstream(dir_ / "a.json") << "old a";
  std::ofstream(dir_ / "b.json") << "old b";
  {
    OutputSet outputs;
    outputs.add(dir_ / "a.json", [](std::ostream& out) { out << "new a"; });
    EXPECT_THROW(
        outputs.add(dir_ / "b.json", [](std::ostream&) { throw std::runtime_error("disk full"); }),
        std::runtime_error);
  }
  EXPECT_EQ(read_text_file(dir_ / "a.json"), "old a");
  EXPECT_EQ(read_text_file(dir_ / "b.json"), "old b");
  {
    OutputSet outputs;
    outputs.add(dir_ / "a.json", [](std::ostream& out) { out << "new a"; });
    outputs.add_json(dir_ / "b.json", nlohmann::json{{"b", 1}});
    EXPECT_EQ(read_text_file(dir_ / "a.json"), "old a");  // nothing replaced before commit()
    outputs.commit();
  }
  EXPECT_EQ(read_text_file(dir_ / "a.json"), "new a");
  EXPECT_EQ(read_text_file(dir_ / "b.json"), "{\n  \"b\": 1\n}\n");
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

}  // namespace
}  // namespace skipsoftmax

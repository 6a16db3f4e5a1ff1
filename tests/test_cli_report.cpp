// `skipsoftmax report` run as the built tool on the committed fixtures: the page (self-contained,
// escaped, every SVG well-formed XML), the errors (nothing written on bad input), and the page in
// a real headless browser (Debian's chromium; the test skips where none is installed).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "file_io.h"
#include "test_util.h"
#include "tool_run.h"
#include "xml_check.h"

namespace skipsoftmax {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::ToolRun;

std::string fixture(const char* name) {
  return std::string(SKIPSOFTMAX_TEST_DATA) + "/price_fixture_" + name + ".json";
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

class ReportCli : public test::TempDirTest {
 protected:
  static std::string q(const fs::path& p) { return test::shell_quote(p); }

  fs::path out() const { return dir_ / "report.html"; }

  ToolRun shell(const std::string& command) const {
    return test::run_shell(command, dir_ / "stderr.txt");
  }
  ToolRun report(const std::string& args) const {
    return test::run_tool("report " + args, dir_ / "stderr.txt");
  }
  ToolRun report_of(const std::vector<std::string>& files, const std::string& extra = "") const {
    std::string args;
    for (const std::string& f : files) args += "--price-json " + q(f) + " ";
    return report(args + "--out " + q(out()) + " " + extra);
  }

  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }

  // A failing report: non-zero exit, the message on stderr, and no page.
  void expect_fails(const std::vector<std::string>& files, const std::string& message) const {
    const ToolRun r = report_of(files);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find(message), std::string::npos) << "stderr: " << r.err;
    EXPECT_FALSE(fs::exists(out()));
  }
};

TEST_F(ReportCli, WritesOneSelfContainedPageForTwoModels) {
  const ToolRun r = report_of({fixture("llama"), fixture("hybrid")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("wrote " + out().string() + " (2 models, "), std::string::npos) << r.out;
  const std::string html = read_text_file(out());
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\""));
  for (const char* text :
       {"fixture-llama-8b (synthetic)", "fixture-hybrid-9b (synthetic)", "NVIDIA H200",
        "python3 scripts/make_price_fixtures.py", "Synthetic fixture", "ruler_niah_multikey",
        "Amdahl estimate", "bound 0.97", "tier 80% S", "= tier 75%", "<span class=\"off\">OFF",
        "<span class=\"on\">ON"}) {
    EXPECT_NE(html.find(text), std::string::npos) << text;
  }
  // The fixtures' note holds markup characters: escaped, never raw.
  EXPECT_NE(html.find("synthetic numbers &lt;made up&gt; &amp; shaped"), std::string::npos);
  EXPECT_EQ(html.find("<made up>"), std::string::npos);
  // Self-contained: no script, no stylesheet or image to fetch, nothing but namespaces as URLs.
  for (const char* banned : {"<script", "<link", "<img", "src=", "url("}) {
    EXPECT_EQ(html.find(banned), std::string::npos) << banned;
  }
  EXPECT_EQ(count(html, "http"), count(html, "http://www.w3.org/") + 1);  // + the CSP meta
  // Per model: 2 x 2 speed charts, the attention share, 2 sparsity charts, the accuracy bars.
  const std::vector<std::string_view> svgs = test::svg_fragments(html);
  EXPECT_EQ(svgs.size(), 16u);
  for (std::string_view svg : svgs) EXPECT_EQ(test::xml_error(svg), "") << svg.substr(0, 200);
  // The whole page is polyglot markup: well-formed XML as well as HTML.
  EXPECT_EQ(test::xml_error(html), "");
}

TEST_F(ReportCli, EscapesTitleAndEveryTextFromJson) {
  json j = read_json_file(fixture("hybrid"));
  j["model"]["name"] = "<script>alert('x')</script>";
  j["provenance"]["command"] = "run --flag \"a&b\" </td>";
  j["tasks"][0] = "niah<1>";
  for (json& arm : j["arms"]) {
    for (json& point : arm["points"]) {
      if (!point.contains("accuracy")) continue;
      for (const char* key : {"scores", "task_ratios"}) {
        json& m = point["accuracy"][key];
        m["niah<1>"] = m["ruler_niah_single"];
        m.erase("ruler_niah_single");
      }
    }
  }
  const fs::path file = write("evil.json", j.dump());
  const ToolRun r = report_of({file.string()}, "--title '<h1>T & co</h1>'");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string html = read_text_file(out());
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("</td>\""), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("<title>&lt;h1&gt;T &amp; co&lt;/h1&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find("niah&lt;1&gt;"), std::string::npos);
  EXPECT_EQ(test::xml_error(html), "");
}

TEST_F(ReportCli, MissingFile) {
  expect_fails({fixture("llama"), (dir_ / "absent.json").string()},
               "skipsoftmax report: error: " + (dir_ / "absent.json").string() + ": no such file");
}

TEST_F(ReportCli, MalformedJson) {
  const std::string text = read_text_file(fixture("llama"));
  const fs::path cut = write("cut.json", text.substr(0, text.size() / 2));
  expect_fails({cut.string()}, cut.string() + ": malformed JSON at byte ");
}

TEST_F(ReportCli, SchemaViolationLeavesAnExistingPageAlone) {
  json j = read_json_file(fixture("llama"));
  j["arms"][1]["points"][2]["prefill"]["amdahl"] = 3.0;
  const fs::path bad = write("bad.json", j.dump());
  std::ofstream(out()) << "old page";
  const ToolRun r = report_of({fixture("hybrid"), bad.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(bad.string() +
                       ": arms[1] (50%).points[2] (length 16384).prefill.amdahl: 3 disagrees"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(read_text_file(out()), "old page");
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST_F(ReportCli, ArgumentErrors) {
  ToolRun r = report("--price-json " + q(fixture("llama")));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--out is required"), std::string::npos) << r.err;
  r = report("--out " + q(out()));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--price-json is required"), std::string::npos) << r.err;
  r = report("--price-json " + q(fixture("llama")) + " --out " + q(dir_ / "no" / "r.html"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  const fs::path not_object = write("list.json", "[1, 2]");
  expect_fails({not_object.string()}, not_object.string() + ": expected an object, got array");
  // The page would replace a price list it reads: refused, the price list kept.
  const fs::path mine = dir_ / "mine.json";
  fs::copy_file(fixture("llama"), mine);
  const std::string before = read_text_file(mine);
  r = report("--price-json " + q(mine) + " --out " + q(dir_ / "." / "mine.json"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is also a --price-json: it would overwrite an input"), std::string::npos)
      << r.err;
  EXPECT_EQ(read_text_file(mine), before);
  r = report("--price-json " + q(fixture("llama")) + " --out ''");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("an empty path is not an output file"), std::string::npos) << r.err;
}

// ---- in a real browser ------------------------------------------------------------------------

// SKIPSOFTMAX_CHROMIUM, else chromium or chromium-browser on PATH; "" when there is none.
std::string find_chromium() {
  if (const char* env = std::getenv("SKIPSOFTMAX_CHROMIUM"); env && *env) return env;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (std::size_t start = 0; start <= dirs.size();) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    for (const char* name : {"chromium", "chromium-browser"}) {
      const fs::path candidate = fs::path(dirs.substr(start, end - start)) / name;
      if (!candidate.parent_path().empty() && access(candidate.c_str(), X_OK) == 0) {
        return candidate.string();
      }
    }
    start = end + 1;
  }
  return "";
}

struct Png {
  std::uint32_t width = 0, height = 0;
  std::size_t bytes = 0;
  std::size_t distinct_bytes = 0;
};

Png read_png(const fs::path& path) {
  const std::string data = read_text_file(path);
  Png png;
  png.bytes = data.size();
  if (data.size() < 24 || data.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 ||
      data.compare(12, 4, "IHDR") != 0) {
    return png;
  }
  const auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(data[at + i]);
    return v;
  };
  png.width = be32(16);
  png.height = be32(20);
  png.distinct_bytes = std::set<char>(data.begin(), data.end()).size();
  return png;
}

class ReportBrowser : public ReportCli {
 protected:
  void SetUp() override {
    ReportCli::SetUp();
    chromium_ = find_chromium();
    if (chromium_.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh)";
  }

  // One headless chromium run on a local file, its own profile, a hard time limit.
  ToolRun chromium(const std::string& flags, const fs::path& page) const {
    return shell("timeout 60 " + q(chromium_) +
                 " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
                 "--hide-scrollbars --no-first-run --user-data-dir=" +
                 q(dir_ / "profile") + " " + flags + " " + q("file://" + page.string()));
  }

  Png screenshot(const fs::path& page, const fs::path& png) const {
    const ToolRun r = chromium("--window-size=1280,2400 --screenshot=" + q(png), page);
    EXPECT_EQ(r.code, 0) << r.err;
    return fs::exists(png) ? read_png(png) : Png{};
  }

  std::string chromium_;
};

TEST_F(ReportBrowser, RendersTheReport) {
  ASSERT_EQ(report_of({fixture("llama"), fixture("hybrid")}).code, 0);
  const Png page = screenshot(out(), dir_ / "report.png");
  EXPECT_EQ(page.width, 1280u);
  EXPECT_EQ(page.height, 2400u);
  // A blank page of the same size compresses to a few kB; text, tables and charts do not.
  const fs::path blank = write("blank.html", "<!DOCTYPE html><html><body></body></html>");
  const Png empty = screenshot(blank, dir_ / "blank.png");
  ASSERT_GT(empty.bytes, 0u);
  EXPECT_GT(page.bytes, 5 * empty.bytes) << page.bytes << " vs blank " << empty.bytes;
  EXPECT_GE(page.distinct_bytes, 200u);
}

TEST_F(ReportBrowser, ParsesAsXhtml) {
  // Chromium's XML parser on the same page: any markup error becomes a <parsererror> element.
  ASSERT_EQ(report_of({fixture("llama"), fixture("hybrid")}).code, 0);
  const fs::path xhtml = dir_ / "report.xhtml";
  fs::copy_file(out(), xhtml);
  const ToolRun r = chromium("--dump-dom", xhtml);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("parsererror"), std::string::npos) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("fixture-hybrid-9b (synthetic)"), std::string::npos);
  EXPECT_EQ(count(r.out, "<svg"), count(read_text_file(out()), "<svg"));
}

}  // namespace
}  // namespace skipsoftmax

// The file formats of the run and capture commands (model/engine_io.h): request parsing and its
// errors, the result and manifest JSON, the layer list.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "engine_io.h"
#include "file_io.h"
#include "test_util.h"

namespace skipsoftmax {
namespace {

using nlohmann::json;

TEST(RunRequests, StringsAndObjects) {
  const std::vector<RunRequest> r = parse_run_requests(
      R"(["Hello", {"prompt": "Hi", "max_new_tokens": 5, "id": "q1"},
          {"token_ids": [1, 2, 3], "id": 7}])",
      "in.json");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].prompt, "Hello");
  EXPECT_FALSE(r[0].max_new_tokens.has_value());
  EXPECT_TRUE(r[0].id.is_null());
  EXPECT_EQ(r[1].prompt, "Hi");
  EXPECT_EQ(r[1].max_new_tokens, 5);
  EXPECT_EQ(r[1].id, "q1");
  EXPECT_FALSE(r[2].prompt.has_value());
  EXPECT_EQ(r[2].token_ids, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(r[2].id, 7);
}

TEST(RunRequests, ErrorsNameTheRequestAndTheProblem) {
  const auto parse = [](const std::string& text) { parse_run_requests(text, "in.json"); };
  EXPECT_ERROR_HAS(parse(R"({"prompt": "x"})"), "in.json: expected a JSON array of requests");
  EXPECT_ERROR_HAS(parse("[]"), "in.json: no requests");
  EXPECT_ERROR_HAS(parse("[\"a\", 3]"), "in.json: request 1: expected a string or an object");
  EXPECT_ERROR_HAS(parse(R"([{"prompt": "a", "temperature": 1}])"),
                   "request 0: unknown key \"temperature\"");
  EXPECT_ERROR_HAS(parse(R"([{"prompt": "a", "token_ids": [1]}])"),
                   "request 0: give exactly one of \"prompt\" and \"token_ids\"");
  EXPECT_ERROR_HAS(parse(R"([{"id": 1}])"), "give exactly one of");
  EXPECT_ERROR_HAS(parse(R"([{"prompt": 1}])"), "prompt must be a string");
  EXPECT_ERROR_HAS(parse(R"([{"token_ids": "1 2"}])"), "token_ids must be an array");
  EXPECT_ERROR_HAS(parse(R"([{"token_ids": [1, -2]}])"), "token_ids holds -2, not a token id");
  EXPECT_ERROR_HAS(parse(R"([{"token_ids": [1.5]}])"), "token_ids holds 1.5");
  EXPECT_ERROR_HAS(parse(R"([{"prompt": "a", "max_new_tokens": 0}])"),
                   "max_new_tokens must be an integer >= 1, got 0");
  EXPECT_ERROR_HAS(parse(R"([{"prompt": "a", "max_new_tokens": "8"}])"),
                   "max_new_tokens must be an integer >= 1, got \"8\"");
  EXPECT_ERROR_HAS(parse(R"(["a", )"), "in.json: malformed JSON at byte");
}

TEST(FileErrors, FilesystemErrorsReadAsPathAndReason) {
  namespace fs = std::filesystem;
  const std::error_code not_dir = std::make_error_code(std::errc::not_a_directory);
  EXPECT_EQ(describe(fs::filesystem_error("cannot create directories", fs::path("q.npy"), not_dir)),
            "q.npy: cannot create directories: " + not_dir.message());
  const std::error_code missing = std::make_error_code(std::errc::no_such_file_or_directory);
  EXPECT_EQ(describe(fs::filesystem_error("cannot rename", fs::path("a"), fs::path("b"), missing)),
            "a and b: cannot rename: " + missing.message());
  EXPECT_EQ(describe(fs::filesystem_error("cannot make absolute path", fs::path(""), missing)),
            "'': cannot make absolute path: " + missing.message());
}

TEST(JsonText, ErrorsNameThePlaceAndTheReason) {
  // At the end of the text the byte is the text's length, with the parser's own reason.
  EXPECT_ERROR_HAS(parse_json_text("[[128, 1.0],", "t.json"),
                   "t.json: malformed JSON at byte 12 (12 bytes): syntax error while parsing "
                   "value - unexpected end of input");
  EXPECT_ERROR_HAS(parse_json_text("[[128, 1e999]]", "t.json"),
                   "t.json: number overflow parsing '1e999' (beyond a double's range)");
  EXPECT_ERROR_HAS(parse_json_text<nlohmann::ordered_json>("{\"a\": 1e400}", "c.json"),
                   "c.json: number overflow parsing '1e400'");
}

ModelConfig small_model() {
  ModelConfig c;
  c.architecture = "gemma3";
  c.layers = 6;
  c.heads_q = 4;
  c.heads_kv = 1;
  c.head_dim = 256;
  c.vocab = 100;
  c.context_length = 16;
  c.sliding_window = 512;
  c.rope_base = 1e6;
  c.rope_base_local = 1e4;
  c.local_layer = {true, true, true, true, true, false};
  c.attention_scale = 0.0625;
  return c;
}

TEST(RunRequests, TokenChecks) {
  const ModelConfig c = small_model();
  EXPECT_NO_THROW(check_request_tokens(0, {1, 99}, 14, c));
  EXPECT_ERROR_HAS(check_request_tokens(2, {}, 1, c), "request 2: the prompt has no tokens");
  EXPECT_ERROR_HAS(check_request_tokens(1, {5, 100}, 1, c),
                   "request 1: token id 100 is outside the vocabulary of 100");
  EXPECT_ERROR_HAS(check_request_tokens(0, {1, 2}, 15, c),
                   "2 prompt tokens + 15 new tokens exceed the model's context of 16");
}

TEST(RunOutput, HoldsEveryRequestAndTheTotals) {
  RunHeader h{"/e", "/c/m.gguf", "llama", "dense", "flat lambda=0.01", 0};
  RunResult a;
  a.id = "q1";
  a.prompt_tokens = 4;
  a.token_ids = {5, 6, 2};
  a.text = "hi";
  a.reached_eos = true;
  a.ttft_ms = 10.0;
  a.tpot_ms = 2.5;
  a.decode_tiles = {8, 3};
  RunResult b;
  b.prompt_tokens = 2;
  b.token_ids = {7};
  RunTotals t;
  t.wall_ms = 20.0;
  t.prefill_ms = 10.0;
  t.decode_ms = 10.0;
  t.peak_device_memory_bytes = 1000;
  t.engine_device_memory_bytes = 600;
  json j = run_output_json(h, {a, b}, t);
  EXPECT_EQ(j.at("thresholds").at("decode"), "flat lambda=0.01");
  ASSERT_EQ(j.at("requests").size(), 2u);
  const json& r = j.at("requests")[0];
  EXPECT_EQ(r.at("id"), "q1");
  EXPECT_EQ(r.at("generated_tokens"), 3);
  EXPECT_EQ(r.at("token_ids"), json::parse("[5, 6, 2]"));
  EXPECT_EQ(r.at("finish_reason"), "eos");
  EXPECT_EQ(r.at("tpot_ms"), 2.5);
  EXPECT_EQ(r.at("attention_tiles").at("decode"), json::parse(R"({"visited": 8, "skipped": 3})"));
  EXPECT_EQ(j.at("requests")[1].at("finish_reason"), "length");
  EXPECT_TRUE(j.at("requests")[1].at("tpot_ms").is_null());
  EXPECT_TRUE(j.at("requests")[1].at("id").is_null());
  const json& totals = j.at("totals");
  EXPECT_EQ(totals.at("prompt_tokens"), 6);
  EXPECT_EQ(totals.at("generated_tokens"), 4);
  EXPECT_TRUE(totals.at("attention_share").is_null());
  t.attention_ms = 5.0;
  j = run_output_json(h, {a}, t);
  EXPECT_EQ(j.at("totals").at("attention_ms"), 5.0);
  EXPECT_EQ(j.at("totals").at("attention_share"), 0.25);
}

TEST(RunOutput, InvalidUtf8IsReplacedNotFatal) {
  const json j = {{"text", std::string("ab\xE2\x82")}};  // cut inside a 3-byte character
  const std::string text = dump_json_lenient(j);
  EXPECT_NE(text.find("ab\xEF\xBF\xBD"), std::string::npos) << text;
}

TEST(LayerList, ParsesAndChecks) {
  EXPECT_EQ(parse_layer_list("0,5,10", 30), (std::vector<int>{0, 5, 10}));
  EXPECT_EQ(parse_layer_list("29", 30), (std::vector<int>{29}));
  EXPECT_ERROR_HAS(parse_layer_list("", 30), "expected comma-separated layer numbers");
  EXPECT_ERROR_HAS(parse_layer_list("1,,2", 30), "expected comma-separated");
  EXPECT_ERROR_HAS(parse_layer_list("1, 2", 30), "expected comma-separated");
  EXPECT_ERROR_HAS(parse_layer_list("a", 30), "expected comma-separated");
  EXPECT_ERROR_HAS(parse_layer_list("30", 30), "layer 30 is outside [0, 30)");
  EXPECT_ERROR_HAS(parse_layer_list("-1", 30), "layer -1 is outside");
  EXPECT_ERROR_HAS(parse_layer_list("3,4,3", 30), "layer 3 is listed twice");
}

TEST(CaptureManifest, DescribesLayersWindowsAndFiles) {
  CaptureManifest m;
  m.weights = "/c/g.gguf";
  m.text_file = "/t.txt";
  m.model = small_model();
  m.tokens = 12;
  m.bos = true;
  m.dtype = "float32";
  m.layers = {0, 5};
  const json j = capture_manifest_json(m);
  EXPECT_EQ(j.at("model").at("architecture"), "gemma3");
  EXPECT_EQ(j.at("tokens"), 12);
  EXPECT_EQ(j.at("token_ids"), "tokens.npy");
  EXPECT_EQ(j.at("heads_q"), 4);
  EXPECT_EQ(j.at("softmax_scale"), 0.0625);
  EXPECT_EQ(j.at("rope").at("pairs"), "halves (i, i + head_dim/2)");
  ASSERT_EQ(j.at("layers").size(), 2u);
  EXPECT_EQ(j.at("layers")[0].at("window"), 512);
  EXPECT_EQ(j.at("layers")[0].at("rope_base"), 1e4);
  EXPECT_EQ(j.at("layers")[0].at("q"), "layer00_q.npy");
  EXPECT_EQ(j.at("layers")[1].at("window"), 0);
  EXPECT_EQ(j.at("layers")[1].at("rope_base"), 1e6);
  EXPECT_EQ(j.at("layers")[1].at("v"), "layer05_v.npy");
  EXPECT_TRUE(j.at("logits").is_null());
  EXPECT_EQ(capture_file(12, 'k'), "layer12_k.npy");
}

}  // namespace
}  // namespace skipsoftmax

#include "engine_io.h"

#include <charconv>
#include <limits>
#include <stdexcept>

#include "file_io.h"

namespace skipsoftmax {

using nlohmann::json;

namespace {

std::invalid_argument request_error(const std::string& context, std::size_t i,
                                    const std::string& what) {
  return std::invalid_argument(context + ": request " + std::to_string(i) + ": " + what);
}

RunRequest request_from_object(const json& o, const std::string& context, std::size_t i) {
  RunRequest r;
  for (const auto& item : o.items()) {
    const std::string& key = item.key();
    if (key != "prompt" && key != "token_ids" && key != "max_new_tokens" && key != "id") {
      throw request_error(context, i,
                          "unknown key \"" + key +
                              "\" (known: prompt, token_ids, "
                              "max_new_tokens, id)");
    }
  }
  const bool has_prompt = o.contains("prompt"), has_ids = o.contains("token_ids");
  if (has_prompt == has_ids) {
    throw request_error(context, i, "give exactly one of \"prompt\" and \"token_ids\"");
  }
  if (has_prompt) {
    if (!o.at("prompt").is_string()) throw request_error(context, i, "prompt must be a string");
    r.prompt = o.at("prompt").get<std::string>();
  } else {
    const json& ids = o.at("token_ids");
    if (!ids.is_array()) throw request_error(context, i, "token_ids must be an array of ids");
    for (const json& id : ids) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
          id.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
        throw request_error(context, i, "token_ids holds " + id.dump() + ", not a token id");
      }
      r.token_ids.push_back(id.get<std::int32_t>());
    }
  }
  if (o.contains("max_new_tokens")) {
    const json& m = o.at("max_new_tokens");
    if (!m.is_number_integer() || m.get<std::int64_t>() < 1 ||
        m.get<std::int64_t>() > std::numeric_limits<int>::max()) {
      throw request_error(context, i, "max_new_tokens must be an integer >= 1, got " + m.dump());
    }
    r.max_new_tokens = m.get<int>();
  }
  if (o.contains("id")) r.id = o.at("id");
  return r;
}

json tiles_json(const TileCount& t) { return {{"visited", t.visited}, {"skipped", t.skipped}}; }

}  // namespace

std::vector<RunRequest> parse_run_requests(std::string_view text, const std::string& context) {
  const json j = parse_json_text(text, context);
  if (!j.is_array()) {
    throw std::invalid_argument(context +
                                ": expected a JSON array of requests (strings or "
                                "{\"prompt\": ...} objects), got " +
                                std::string(j.type_name()));
  }
  if (j.empty()) throw std::invalid_argument(context + ": no requests");
  std::vector<RunRequest> requests;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const json& e = j[i];
    if (e.is_string()) {
      requests.push_back(
          {.prompt = e.get<std::string>(), .token_ids = {}, .max_new_tokens = {}, .id = nullptr});
    } else if (e.is_object()) {
      requests.push_back(request_from_object(e, context, i));
    } else {
      throw request_error(context, i,
                          "expected a string or an object, got " + std::string(e.type_name()));
    }
  }
  return requests;
}

void check_request_tokens(std::size_t index, const std::vector<std::int32_t>& tokens,
                          int max_new_tokens, const ModelConfig& model) {
  const std::string where = "request " + std::to_string(index) + ": ";
  if (tokens.empty()) throw std::invalid_argument(where + "the prompt has no tokens");
  for (std::int32_t t : tokens) {
    if (t < 0 || t >= model.vocab) {
      throw std::invalid_argument(where + "token id " + std::to_string(t) +
                                  " is outside the vocabulary of " + std::to_string(model.vocab));
    }
  }
  const std::int64_t total = static_cast<std::int64_t>(tokens.size()) + max_new_tokens;
  if (total > model.context_length) {
    throw std::invalid_argument(where + std::to_string(tokens.size()) + " prompt tokens + " +
                                std::to_string(max_new_tokens) +
                                " new tokens exceed the model's context of " +
                                std::to_string(model.context_length));
  }
}

json run_output_json(const RunHeader& h, const std::vector<RunResult>& results,
                     const RunTotals& t) {
  json requests = json::array();
  std::uint64_t prompt_tokens = 0, generated_tokens = 0;
  for (const RunResult& r : results) {
    requests.push_back(
        {{"id", r.id},
         {"prompt_tokens", r.prompt_tokens},
         {"generated_tokens", r.token_ids.size()},
         {"token_ids", r.token_ids},
         {"text", r.text},
         {"finish_reason", r.reached_eos ? "eos" : "length"},
         {"ttft_ms", r.ttft_ms},
         {"tpot_ms", r.tpot_ms ? json(*r.tpot_ms) : json(nullptr)},
         {"attention_tiles",
          {{"prefill", tiles_json(r.prefill_tiles)}, {"decode", tiles_json(r.decode_tiles)}}}});
    prompt_tokens += r.prompt_tokens;
    generated_tokens += r.token_ids.size();
  }
  json totals = {{"requests", results.size()},
                 {"prompt_tokens", prompt_tokens},
                 {"generated_tokens", generated_tokens},
                 {"wall_ms", t.wall_ms},
                 {"prefill_ms", t.prefill_ms},
                 {"decode_ms", t.decode_ms},
                 {"attention_ms", nullptr},
                 {"attention_share", nullptr},
                 {"peak_device_memory_bytes", t.peak_device_memory_bytes},
                 {"engine_device_memory_bytes", t.engine_device_memory_bytes}};
  if (t.attention_ms) {
    totals["attention_ms"] = *t.attention_ms;
    const double busy = t.prefill_ms + t.decode_ms;
    totals["attention_share"] = busy > 0.0 ? *t.attention_ms / busy : 0.0;
  }
  return {{"engine_dir", h.engine_dir},
          {"weights", h.weights},
          {"architecture", h.architecture},
          {"thresholds", {{"prefill", h.prefill_threshold}, {"decode", h.decode_threshold}}},
          {"prefill_chunk", h.prefill_chunk},
          {"requests", std::move(requests)},
          {"totals", std::move(totals)}};
}

std::string dump_json_lenient(const json& value) {
  return value.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::vector<int> parse_layer_list(std::string_view text, int num_layers) {
  std::vector<int> layers;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    int layer = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), layer);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size()) {
      throw std::invalid_argument("layer list \"" + std::string(text) +
                                  "\": expected comma-separated layer numbers such as 0,5,10");
    }
    if (layer < 0 || layer >= num_layers) {
      throw std::invalid_argument("layer " + std::to_string(layer) + " is outside [0, " +
                                  std::to_string(num_layers) + ") (the model has " +
                                  std::to_string(num_layers) + " layers)");
    }
    for (int seen : layers) {
      if (seen == layer) {
        throw std::invalid_argument("layer " + std::to_string(layer) + " is listed twice");
      }
    }
    layers.push_back(layer);
    start = comma + 1;
  }
  return layers;
}

std::string capture_file(int layer, char tensor) {
  std::string name = "layer";
  if (layer < 10) name += '0';
  return name + std::to_string(layer) + "_" + tensor + ".npy";
}

json capture_manifest_json(const CaptureManifest& m) {
  const ModelConfig& c = m.model;
  json layers = json::array();
  for (int l : m.layers) {
    const bool local = c.is_local(l);
    layers.push_back({{"layer", l},
                      {"window", local ? c.sliding_window : 0},
                      {"rope_base", local ? c.rope_base_local : c.rope_base},
                      {"q", capture_file(l, 'q')},
                      {"k", capture_file(l, 'k')},
                      {"v", capture_file(l, 'v')}});
  }
  // Llama GGUF files hold Q and K rows permuted by the converter so that rotation pairs are
  // adjacent; Gemma 3 keeps Hugging Face's order and rotates the two halves of each head.
  const bool llama = c.architecture == "llama";
  return {
      {"model", {{"weights", m.weights}, {"architecture", c.architecture}, {"layers", c.layers}}},
      {"text_file", m.text_file},
      {"tokens", m.tokens},
      {"token_ids", kCaptureTokensFile},
      {"bos", m.bos},
      {"heads_q", c.heads_q},
      {"heads_kv", c.heads_kv},
      {"head_dim", c.head_dim},
      {"dtype", m.dtype},
      {"softmax_scale", c.attention_scale},
      {"layout",
       "q: [tokens, heads_q, head_dim]; k, v: [tokens, heads_kv, head_dim]; q and k after "
       "the rotary embedding (and Gemma's q/k norms), q not scaled"},
      {"rope",
       {{"pairs", llama ? "adjacent (2i, 2i+1), the GGUF row order" : "halves (i, i + head_dim/2)"},
        {"base", c.rope_base},
        {"base_local", c.rope_base_local}}},
      {"layers", std::move(layers)},
      {"logits", m.logits ? json(kCaptureLogitsFile) : json(nullptr)}};
}

}  // namespace skipsoftmax

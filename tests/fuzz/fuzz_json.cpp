// libFuzzer target: every JSON the tools read from users, on arbitrary text: checkpoint and engine
// configs, scale tables, run requests, diffusion requests. Each is parsed or refused with an
// exception; deep nesting, huge objects and NUL bytes included.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <string_view>

#include "engine_io.h"
#include "file_io.h"
#include "skipsoftmax/config.h"
#include "skipsoftmax/diffusion.h"
#include "table_json.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace skipsoftmax;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto attempt = [](auto&& parse) {
    try {
      parse();
    } catch (const std::exception&) {
    }
  };
  attempt([&] { parse_checkpoint_config(text, "fuzz"); });
  attempt([&] { parse_engine_config(text, "fuzz"); });
  attempt([&] { parse_run_requests(text, "fuzz"); });
  attempt([&] { parse_diffusion_request(text); });
  attempt([&] { scale_table_from_json(parse_json_text(text, "fuzz"), "fuzz"); });
  attempt([&] {
    const nlohmann::ordered_json ordered = parse_json_text<nlohmann::ordered_json>(text, "fuzz");
    if (ordered != nlohmann::ordered_json::parse(text)) std::terminate();  // the two parsers agree
  });
  return 0;
}

// Each subcommand of the skipsoftmax tool lives in its own tools/cmd_*.cpp and registers itself
// with a file-scope `const Registration reg{rank, &add_x};`; main() adds them in rank order (the
// order of `skipsoftmax --help`). A subcommand reports bad input by throwing std::exception; main()
// prints the message and returns a non-zero exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "skipsoftmax/tiling.h"

namespace skipsoftmax::cli {

using AddCommand = void (*)(CLI::App& app);

struct Registration {
  Registration(int rank, AddCommand add);
};

void add_registered_commands(CLI::App& app);

// --threads: 0 (every core) to kMaxThreads; more only multiplies per-thread buffers.
inline constexpr int kMaxThreads = 1024;
inline void check_threads(int threads) {
  if (threads < 0 || threads > kMaxThreads) {
    throw std::invalid_argument("--threads must lie in [0, " + std::to_string(kMaxThreads) +
                                "] (0: every core), got " + std::to_string(threads));
  }
}

// Decode splits (--num-splits, --decode-splits): 1 to kMaxDecodeSplits, the kernels' bound, which
// the CPU reference takes too.
inline void check_decode_splits(int splits, const char* flag) {
  if (splits < 1 || splits > kMaxDecodeSplits) {
    throw std::invalid_argument(std::string(flag) + " must lie in [1, " +
                                std::to_string(kMaxDecodeSplits) + "], got " +
                                std::to_string(splits));
  }
}

// Numeric checks whose messages name the rule and the value (CLI11's PositiveNumber names its
// range as 0 to the largest double, in 300 digits).
inline CLI::Validator number_check(bool (*ok)(double), const char* rule) {
  return CLI::Validator(
      [ok, rule](std::string& text) {
        char* end = nullptr;
        const double x = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "expected a number, got " + text;
        return ok(x) ? std::string() : std::string("must be ") + rule + ", got " + text;
      },
      rule);
}
inline const CLI::Validator kPositive =
    number_check([](double x) { return std::isfinite(x) && x > 0; }, "finite and > 0");
inline const CLI::Validator kNonNegative =
    number_check([](double x) { return std::isfinite(x) && x >= 0; }, "finite and >= 0");
inline const CLI::Validator kFinite =
    number_check([](double x) { return std::isfinite(x); }, "finite");

// For options that name a file or directory: an empty value (a script's unset "$DIR") is refused
// instead of meaning the current directory or nothing.
inline const CLI::Validator kNonEmptyPath{
    [](std::string& value) { return value.empty() ? std::string("an empty path") : std::string(); },
    "PATH"};

// The command line the tool was started with, for the provenance of the files it writes.
const std::string& command_line();

// A verdict that fails without an error (evaluate's gate): main() prints the message and returns
// `code`, so scripts tell a failed gate (2) from bad input (1).
class CommandFailed : public std::runtime_error {
 public:
  CommandFailed(const std::string& message, int code) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace skipsoftmax::cli

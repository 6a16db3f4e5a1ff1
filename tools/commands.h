// Each subcommand of the skipsoftmax tool lives in its own tools/cmd_*.cpp and registers itself
// with a file-scope `const Registration reg{rank, &add_x};`; main() adds them in rank order (the
// order of `skipsoftmax --help`). A subcommand reports bad input by throwing std::exception; main()
// prints the message and returns a non-zero exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <stdexcept>
#include <string>

namespace skipsoftmax::cli {

using AddCommand = void (*)(CLI::App& app);

struct Registration {
  Registration(int rank, AddCommand add);
};

void add_registered_commands(CLI::App& app);

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

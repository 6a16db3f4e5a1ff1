// Each subcommand of the skipsoftmax tool lives in its own tools/cmd_*.cpp and registers itself
// with a file-scope `const Registration reg{rank, &add_x};`; main() adds them in rank order (the
// order of `skipsoftmax --help`). A subcommand reports bad input by throwing std::exception; main()
// prints the message and returns a non-zero exit code.
#pragma once

#include <CLI/CLI.hpp>

namespace skipsoftmax::cli {

using AddCommand = void (*)(CLI::App& app);

struct Registration {
  Registration(int rank, AddCommand add);
};

void add_registered_commands(CLI::App& app);

}  // namespace skipsoftmax::cli

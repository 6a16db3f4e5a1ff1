#include <algorithm>
#include <exception>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"

namespace skipsoftmax::cli {
namespace {

std::string& invocation() {
  static std::string line;
  return line;
}

std::vector<std::pair<int, AddCommand>>& registry() {
  static std::vector<std::pair<int, AddCommand>> commands;
  return commands;
}

}  // namespace

Registration::Registration(int rank, AddCommand add) { registry().emplace_back(rank, add); }

void add_registered_commands(CLI::App& app) {
  auto commands = registry();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [rank, add] : commands) add(app);
}

const std::string& command_line() { return invocation(); }

}  // namespace skipsoftmax::cli

int main(int argc, char** argv) {
  CLI::App app{"skipsoftmax: skip-softmax attention for long contexts (BLASST) on Hopper GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "skipsoftmax " SKIPSOFTMAX_VERSION);
  skipsoftmax::cli::add_registered_commands(app);
  for (int i = 0; i < argc; ++i) {
    skipsoftmax::cli::invocation() += (i ? " " : "") + std::string(argv[i]);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const skipsoftmax::cli::CommandFailed& e) {
    const auto subs = app.get_subcommands();
    std::cerr << "skipsoftmax" << (subs.empty() ? "" : " " + subs.front()->get_name()) << ": "
              << e.what() << '\n';
    return e.code();
  } catch (const std::exception& e) {
    const auto subs = app.get_subcommands();
    std::cerr << "skipsoftmax" << (subs.empty() ? "" : " " + subs.front()->get_name())
              << ": error: " << e.what() << '\n';
    return 1;
  }
  return 0;
}

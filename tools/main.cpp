#include <algorithm>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "file_io.h"

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

namespace {

// Prints "skipsoftmax <subcommand>: error: <message>" and returns the exit code of bad input.
int report(const CLI::App& app, const std::string& message) {
  const auto subs = app.get_subcommands();
  std::cerr << "skipsoftmax" << (subs.empty() ? "" : " " + subs.front()->get_name())
            << ": error: " << message << '\n';
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"skipsoftmax: skip-softmax attention for long contexts (BLASST) on Hopper GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "skipsoftmax " SKIPSOFTMAX_VERSION);
  skipsoftmax::cli::add_registered_commands(app);
  skipsoftmax::remove_temporary_files_on_signal();
  for (int i = 0; i < argc; ++i) {
    skipsoftmax::cli::invocation() += (i ? " " : "") + std::string(argv[i]);
  }
  // CLI11 reports a misspelled subcommand as a missing one: name it, and the valid ones.
  if (argc > 1 && argv[1][0] != '-') {
    std::string valid;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known |= sub->get_name() == argv[1];
      valid += (valid.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::cerr << "skipsoftmax: unknown subcommand '" << argv[1] << "' (valid: " << valid
                << ")\nRun with --help for more information.\n";
      return 109;  // CLI11's exit code for an argument it does not know
    }
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
  } catch (const std::filesystem::filesystem_error& e) {
    return report(app, skipsoftmax::describe(e));
  } catch (const std::bad_alloc&) {
    return report(app, "out of memory: the sizes asked for need more memory than this machine has");
  } catch (const std::exception& e) {
    return report(app, e.what());
  }
  return 0;
}

// Commands run by the CPU tests: the built skipsoftmax tool (SKIPSOFTMAX_TOOL) or any shell
// command, with the exit code, stdout and stderr apart.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "file_io.h"

namespace skipsoftmax::test {

struct ToolRun {
  int code = -1;  // -1: it did not exit normally
  std::string out;
  std::string err;
};

// 'path', for a shell command line.
inline std::string shell_quote(const std::filesystem::path& p) {
  std::string quoted = "'";  // built up: GCC 12 warns falsely (-Wrestrict) on "'" + s + "'"
  quoted += p.string();
  quoted += '\'';
  return quoted;
}

// Runs `command` through the shell; its stderr passes through `err_file`.
inline ToolRun run_shell(const std::string& command, const std::filesystem::path& err_file) {
  ToolRun r;
  FILE* pipe = popen((command + " 2>" + shell_quote(err_file)).c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_text_file(err_file);
  return r;
}

// Runs `skipsoftmax <args>`.
inline ToolRun run_tool(const std::string& args, const std::filesystem::path& err_file) {
  return run_shell(shell_quote(SKIPSOFTMAX_TOOL) + " " + args, err_file);
}

}  // namespace skipsoftmax::test

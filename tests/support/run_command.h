// Runs a shell command for the tests that drive the project's programs,
// capturing its exit code and its combined output.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace lens::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// `output_file` keeps what the command printed.
inline CommandResult run_command(const std::string& command,
                                 const std::filesystem::path& output_file) {
  const int status = std::system((command + " > " + output_file.string() + " 2>&1").c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  std::ifstream in(output_file);
  r.output.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

}  // namespace lens::testing

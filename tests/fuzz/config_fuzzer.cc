// libFuzzer target: configuration from the environment. The input is a list
// of NAME=VALUE lines; any values must either resolve or throw ConfigError
// (naming a setting), never crash or throw anything else.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "lens/config.h"
#include "lens/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::map<std::string, std::string> env;
  std::string text(reinterpret_cast<const char*>(data), size);
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  lens::EnvLookup lookup = [&](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  try {
    lens::Config c = lens::resolve_config({}, lookup);
    (void)lens::trace_file_path(c);
  } catch (const lens::ConfigError& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  return 0;
}

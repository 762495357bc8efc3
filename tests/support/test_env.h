// A fake environment for configuration tests.
#pragma once

#include <map>
#include <string>

#include "lens/config.h"

namespace lens::testing {

inline EnvLookup fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace lens::testing

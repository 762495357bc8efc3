/// \file
/// Errors lens reports by exception: only configuration and start-up problems.
/// Runtime telemetry faults (a full queue, a failed export) are counted and
/// reported, never thrown into the caller's training loop.
#pragma once

#include <stdexcept>
#include <string>

namespace lens {

/// A configuration value (environment variable or programmatic option) that
/// lens cannot accept. The message names the setting, the value and what is
/// accepted.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace lens

/// \file
/// OtlpHttpOptions: where and how the OTLP/HTTP exporter sends spans
/// (OTEL_EXPORTER_OTLP_*), as configuration resolves them. Kept apart from
/// the exporter so that configuring one does not pull in the exporter.
///
/// Thread safety: a plain value.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lens {

struct OtlpHttpOptions {
  std::string endpoint;  ///< full URL, e.g. http://localhost:4318/v1/traces
  bool json = false;     ///< http/json instead of http/protobuf
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds timeout{10000};  ///< per request
  bool gzip = false;
  std::string certificate;  ///< CA bundle for https endpoints; verification is always on
  /// Mutual TLS: this client's certificate and private key (PEM files), or
  /// both empty.
  std::string client_certificate;
  std::string client_key;
  int max_attempts = 6;
  std::chrono::milliseconds initial_backoff{500};
  std::chrono::milliseconds max_backoff{8000};
  std::chrono::milliseconds retry_deadline{30000};  ///< for one batch, all attempts
  std::string spool_path;  ///< where undeliverable batches go; empty: nowhere
};

/// The endpoint as it may be shown in logs and reports: the user:password@
/// part and the query's values are replaced by "***", so credentials put in
/// the URL do not leak.
std::string redacted_url(std::string_view url);

}  // namespace lens

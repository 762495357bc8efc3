// The OTLP/HTTP transport's process-wide set-up. Internal header of the otlp
// part; send_otlp_request itself is public (otlp_http_exporter.h).
#pragma once

namespace lens {

// Initialises libcurl once per process. curl_global_init is not thread-safe,
// so exporters call this from their constructor, on the thread that builds
// them, before any export thread runs.
void init_otlp_http_transport();

}  // namespace lens

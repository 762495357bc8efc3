// The OTLP/HTTP retry rules, apart from the transport: which responses are
// worth another attempt, how long to wait before it (exponential backoff
// with jitter, or the server's Retry-After), and a wait that shutdown can
// cut short. Internal header of the otlp part.
//
// Thread safety: pure functions, except interruptible_sleep, which only
// reads `stop`.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string_view>

namespace lens::detail {

// 429, 502, 503 and 504, as the OTLP/HTTP specification lists them.
bool retryable_status(long status);

// The delay of a "Retry-After: <seconds>" header line (name case-insensitive,
// capped at a day); nullopt for any other line, and for the HTTP-date form,
// which falls back to our own backoff.
std::optional<std::chrono::seconds> retry_after(std::string_view header_line);

// The wait before attempt `attempt + 1`: initial * 2^(attempt-1), capped at
// `max`, times `spread` (the jitter, drawn by the caller from [0.5, 1.5)).
std::chrono::milliseconds backoff_delay(std::chrono::milliseconds initial,
                                        std::chrono::milliseconds max, int attempt, double spread);

// Sleeps up to `d`, in slices, returning early once *stop is true (stop may
// be null).
void interruptible_sleep(std::chrono::milliseconds d, const std::atomic<bool>* stop);

}  // namespace lens::detail

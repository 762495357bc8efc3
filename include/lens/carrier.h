/// \file
/// The carrier frame: one step's trace context, as broadcast between ranks.
///
/// The frame has a fixed size so that ONE broadcast per step carries it (no
/// separate length broadcast). All integers are little-endian.
///
///   offset size  field
///   0      4     magic "LNS1" (0x4c 0x4e 0x53 0x31)
///   4      2     version (2)
///   6      2     frame size in bytes (256)
///   8      4     flags: bit 0 = a context is present (else "no context")
///   12     1     W3C trace flags (bit 0: sampled: the source's one sampling
///                decision for the step)
///   13     1     reserved, must be 0
///   14     2     tracestate length in bytes (0..192)
///   16     16    trace id
///   32     8     span id (the id the source's step span has)
///   40     8     step number
///   48     4     checksum: the 64-bit words of bytes 0 .. 64+L rounded up
///                to 8 (L = tracestate length; this field read as 0), each
///                read little-endian and mixed as h = (h ^ w) * 0x9e3779b97f4a7c15,
///                h ^= h >> 29, from h = 0x6c656e732d667232; the low 32 bits
///                of h ^ (h >> 32)
///   52     12    reserved, must be 0: a decoder of version 2 rejects any
///                other value, so a new field here means a new version
///   64     192   tracestate (W3C serialised), then zero padding (checked)
///
/// Decoding checks every length and field. Anything malformed yields "no
/// context" with the reason; it never reads past the buffer. A tracestate
/// longer than 192 bytes is shortened on encoding by dropping list members
/// from the right, as W3C Trace Context allows.
///
/// Version 1 differed only in the checksum (byte-wise FNV-1a, ~0.1 us per
/// frame); ranks agree on the frame version at start-up
/// (startup_agreement.h), so a job mixing builds fails there, not with lost
/// links.
///
/// Why 256 bytes: Open MPI's shared-memory broadcast of up to 256 bytes takes
/// ~5 us among 4 ranks here and 320 bytes ~12.6 us (bench/README.md); one
/// fixed frame must stay under such thresholds to cost no more than the
/// original's length-plus-payload pair.
///
/// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "lens/span_context.h"

namespace lens {

/// What the step protocol broadcasts: the source rank's step span context
/// (already holding the span id the step span will have) and the step number.
struct StepCarrier {
  SpanContext context;
  std::uint64_t step = 0;

  friend bool operator==(const StepCarrier&, const StepCarrier&) = default;
};

inline constexpr std::size_t kCarrierFrameBytes = 256;
inline constexpr std::size_t kCarrierMaxTracestateBytes = 192;
inline constexpr std::uint16_t kCarrierFrameVersion = 2;

using CarrierFrame = std::array<std::uint8_t, kCarrierFrameBytes>;

/// Encodes a carrier, or a "no context" frame for nullopt or an invalid context.
CarrierFrame encode_carrier(const std::optional<StepCarrier>& carrier);

enum class FrameStatus {
  kOk,         ///< a context was decoded
  kNoContext,  ///< a well-formed frame that says "no context"
  kWrongSize,  ///< buffer is not exactly kCarrierFrameBytes
  kBadMagic,
  kBadVersion,
  kBadSizeField,
  kBadChecksum,
  kBadTracestateLength,
  kInvalidIds,  ///< all-zero trace or span id
  kReservedNotZero,
};

std::string_view frame_status_name(FrameStatus status);

struct DecodedCarrier {
  FrameStatus status = FrameStatus::kNoContext;
  std::optional<StepCarrier> carrier;  ///< set only when status == kOk
};

DecodedCarrier decode_carrier(std::span<const std::uint8_t> frame);

}  // namespace lens

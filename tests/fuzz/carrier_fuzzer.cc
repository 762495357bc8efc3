// libFuzzer target: the carrier frame decoder. Any bytes must decode without
// crashing or reading out of bounds; a frame that decodes must re-encode to a
// frame that decodes to the same carrier.
#include <cstdint>
#include <cstdlib>

#include "lens/carrier.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  lens::DecodedCarrier d = lens::decode_carrier(std::span<const std::uint8_t>(data, size));
  if (d.status == lens::FrameStatus::kOk) {
    if (!d.carrier) std::abort();
    lens::CarrierFrame again = lens::encode_carrier(d.carrier);
    lens::DecodedCarrier d2 = lens::decode_carrier(again);
    if (d2.status != lens::FrameStatus::kOk || !(*d2.carrier == *d.carrier)) std::abort();
  } else if (d.carrier) {
    std::abort();
  }
  return 0;
}

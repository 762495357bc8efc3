// libFuzzer target: the step check's comparison of the records other ranks
// sent (step_check.h). Any bytes must either be refused with StepCheckError
// or give one record per 48 bytes, each of which re-encodes to a record that
// decodes to itself.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "lens/step_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<lens::StepCheckRecord> records;
  try {
    records = lens::compare_step_checks(0, std::span<const std::uint8_t>(data, size));
  } catch (const lens::StepCheckError&) {
    return 0;
  }
  if (records.size() * lens::kStepCheckRecordBytes != size) std::abort();
  for (const auto& r : records) {
    const auto again = lens::encode_step_check(r);
    const auto back = lens::compare_step_checks(0, again);
    if (back.size() != 1 || !(back[0] == r)) std::abort();
  }
  return 0;
}

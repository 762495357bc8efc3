// The run reader's request parser over nlohmann::json's DOM, kept as the
// reference the On-Demand parser is tested against (same rows, same
// resource fields, an error where it errs).
#pragma once

#include <string>

#include "run_reader.h"

namespace lens::analysis {

void parse_request_reference(RankFile& file, const std::string& line);

}  // namespace lens::analysis

// gzip compression of a request body (Content-Encoding: gzip). Internal
// header of the otlp part; zlib is linked here and nowhere else.
//
// Thread safety: a pure function.
#pragma once

#include <string>

namespace lens::detail {

// Compresses `in` into `out` (gzip framing). False when zlib fails.
bool gzip_compress(const std::string& in, std::string& out);

}  // namespace lens::detail

// Whole-line appends to an OTLP JSON lines file, shared by the file exporter
// and the OTLP/HTTP exporter's spool. Internal header of the otlp part.
//
// A reader of these files must never meet a torn line in the middle of a
// file: a line that could be written only in part is cut off again (the
// file is truncated back to where it began), and a file whose last line was
// torn earlier (a killed process, a requeued job appending to the same
// file) gets a newline before the first new line, so the torn bytes stay a
// line of their own at worst.
//
// Thread safety: one writer per descriptor at a time.
#pragma once

#include <filesystem>
#include <string_view>

namespace lens::detail {

// Opens `path` for appending (created 0644), then ends a torn last line with
// a newline. Returns the descriptor, or -1 with errno set.
int open_json_lines_file(const std::filesystem::path& path);

// Appends `line` (which ends in '\n') with as few write(2) calls as the
// kernel allows. Returns 0, or the errno of the failed write after cutting a
// partial line off again (where the descriptor can seek).
int append_json_line(int fd, std::string_view line);

}  // namespace lens::detail

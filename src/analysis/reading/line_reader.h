// LineReader: reads a file a line at a time without ever holding more than
// one line, and refuses a line longer than its limit, so a file with a
// multi-gigabyte line (or none at all) cannot fill memory. Its own buffer
// stays at 64 KiB whatever the lines' length: a long line is gathered in
// the caller's string (a run's readers, one per rank file, are all open at
// once; a buffer grown to each file's longest line was a few MB a rank).
//
// Thread safety: one reader per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace lens::analysis {

// The longest line a lens reader accepts: 64 MiB. A line is one export
// batch; lens writes batches of at most OTEL_BSP_MAX_EXPORT_BATCH_SIZE spans
// (512 by default, well under a megabyte).
inline constexpr std::size_t kMaxLineBytes = std::size_t{64} << 20;

class LineReader {
 public:
  enum class Status {
    kLine,          // a whole line, its newline removed
    kUnterminated,  // the file's last bytes, with no newline after them
    kTooLong,       // a line longer than the limit (the reader stops there)
    kEnd,           // nothing more
  };

  LineReader(std::ifstream& in, std::size_t max_bytes = kMaxLineBytes);
  // The next line into `line`, whose capacity then leaves at least `room`
  // bytes after it (a parser that reads past the end may read it in place).
  Status next(std::string& line, std::size_t room = 0);
  std::uintmax_t bytes_read() const { return bytes_; }

 private:
  bool fill();

  std::ifstream& in_;
  std::size_t max_bytes_;
  std::vector<char> buffer_;
  std::size_t begin_ = 0, end_ = 0;
  std::uintmax_t bytes_ = 0;
  bool eof_ = false;
};

}  // namespace lens::analysis

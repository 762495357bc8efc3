// LineReader: reads a file a line at a time without ever holding more than
// one line, and refuses a line longer than its limit, so a file with a
// multi-gigabyte line (or none at all) cannot fill memory. Its own buffer
// stays at 64 KiB whatever the lines' length: a line that fits in it is
// handed out where it lies (no copy; at refill, the part of a line left in
// the buffer moves to its start), a longer one is gathered in the caller's
// string (a run's readers, one per rank file, are all open at once; a
// buffer grown to each file's longest line was a few MB a rank).
//
// Thread safety: one reader per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
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

  // `room`: how many readable bytes every line handed out has after its
  // end (their values unspecified), for a parser that reads past the end
  // (simdjson's padding).
  explicit LineReader(std::ifstream& in, std::size_t max_bytes = kMaxLineBytes,
                      std::size_t room = 0);
  // The next line (its newline removed) as `line`: a view of the reader's
  // buffer, or of `gather` when the line is longer than the buffer. Valid
  // until the next call. With kTooLong and kEnd, `line` is empty.
  Status next(std::string_view& line, std::string& gather);
  // The same, the line copied into `line`.
  Status next(std::string& line);
  std::uintmax_t bytes_read() const { return bytes_; }

 private:
  // Moves the bytes not yet handed out to the buffer's start and reads
  // after them; false when the file has nothing more.
  bool fill();

  std::ifstream& in_;
  std::size_t max_bytes_;
  std::size_t room_;
  std::vector<char> buffer_;  // kBufferBytes, then room_ bytes that are never filled
  std::size_t begin_ = 0, end_ = 0;
  std::uintmax_t bytes_ = 0;
  bool eof_ = false;
};

}  // namespace lens::analysis

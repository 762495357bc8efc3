#include "line_reader.h"

#include <algorithm>
#include <cstring>

namespace lens::analysis {

LineReader::LineReader(std::ifstream& in, std::size_t max_bytes)
    : in_(in), max_bytes_(max_bytes), buffer_(1 << 16) {}

bool LineReader::fill() {
  if (eof_) return false;
  begin_ = 0;
  in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  end_ = static_cast<std::size_t>(in_.gcount());
  if (end_ == 0) eof_ = true;
  return end_ > 0;
}

namespace {

// Appends n bytes at `from` to `line`, keeping `room` bytes of capacity
// after them; a line's capacity at least doubles when it grows.
void append(std::string& line, const char* from, std::size_t n, std::size_t room) {
  const std::size_t needed = line.size() + n + room;
  if (line.capacity() < needed) line.reserve(std::max(needed, 2 * line.capacity()));
  line.append(from, n);
}

}  // namespace

LineReader::Status LineReader::next(std::string& line, std::size_t room) {
  line.clear();
  for (;;) {
    const std::size_t available = end_ - begin_;
    const char* from = buffer_.data() + begin_;
    const char* at = static_cast<const char*>(std::memchr(from, '\n', available));
    if (at != nullptr) {
      const auto n = static_cast<std::size_t>(at - from);
      if (line.size() + n > max_bytes_) return Status::kTooLong;
      append(line, from, n, room);
      bytes_ += line.size() + 1;
      begin_ += n + 1;
      return Status::kLine;
    }
    // No newline in the buffer: what it holds is the line's so far; the
    // buffer is refilled (a long line grows `line`, never the buffer).
    if (line.size() + available > max_bytes_) return Status::kTooLong;
    append(line, from, available, room);
    begin_ = end_;
    if (!fill()) {
      if (line.empty()) return Status::kEnd;
      bytes_ += line.size();
      return Status::kUnterminated;
    }
  }
}

}  // namespace lens::analysis

#include "line_reader.h"

#include <algorithm>
#include <cstring>

namespace lens::analysis {

namespace {

constexpr std::size_t kBufferBytes = std::size_t{1} << 16;

// Appends n bytes at `from` to `line`, keeping `room` bytes of capacity
// after them; a line's capacity at least doubles when it grows.
void append(std::string& line, const char* from, std::size_t n, std::size_t room) {
  const std::size_t needed = line.size() + n + room;
  if (line.capacity() < needed) line.reserve(std::max(needed, 2 * line.capacity()));
  line.append(from, n);
}

}  // namespace

LineReader::LineReader(std::ifstream& in, std::size_t max_bytes, std::size_t room)
    : in_(in), max_bytes_(max_bytes), room_(room), buffer_(kBufferBytes + room) {}

bool LineReader::fill() {
  if (eof_) return false;
  if (begin_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  in_.read(buffer_.data() + end_, static_cast<std::streamsize>(kBufferBytes - end_));
  const auto got = static_cast<std::size_t>(in_.gcount());
  end_ += got;
  if (got == 0) eof_ = true;
  return got > 0;
}

LineReader::Status LineReader::next(std::string_view& line, std::string& gather) {
  line = {};
  gather.clear();
  bool gathering = false;  // the line's first part went to `gather`
  for (;;) {
    const std::size_t available = end_ - begin_;
    const char* from = buffer_.data() + begin_;
    const char* at = static_cast<const char*>(std::memchr(from, '\n', available));
    if (at != nullptr) {
      const auto n = static_cast<std::size_t>(at - from);
      if (gather.size() + n > max_bytes_) return Status::kTooLong;
      if (gathering) {
        append(gather, from, n, room_);
        line = gather;
      } else {
        line = {from, n};
      }
      bytes_ += line.size() + 1;
      begin_ += n + 1;
      return Status::kLine;
    }
    // No newline in what the buffer holds: it is the line's so far.
    if (gather.size() + available > max_bytes_) return Status::kTooLong;
    if (gathering || available == kBufferBytes) {
      // Longer than the buffer: gathered, and the buffer refilled whole.
      append(gather, from, available, room_);
      gathering = true;
      begin_ = end_ = 0;
    }
    if (!fill()) {
      if (gathering) {
        line = gather;
      } else {
        line = {buffer_.data() + begin_, end_ - begin_};
        begin_ = end_;
      }
      if (line.empty()) return Status::kEnd;
      bytes_ += line.size();
      return Status::kUnterminated;
    }
  }
}

LineReader::Status LineReader::next(std::string& line) {
  std::string_view view;
  const Status status = next(view, line);
  if (view.data() != line.data()) line.assign(view);
  return status;
}

}  // namespace lens::analysis

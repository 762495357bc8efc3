#include "line_reader.h"

#include <algorithm>
#include <cstring>

namespace lens::analysis {

LineReader::LineReader(std::ifstream& in, std::size_t max_bytes)
    : in_(in), max_bytes_(max_bytes), buffer_(1 << 16) {}

bool LineReader::fill() {
  if (eof_) return false;
  if (begin_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  in_.read(buffer_.data() + end_, static_cast<std::streamsize>(buffer_.size() - end_));
  const auto n = static_cast<std::size_t>(in_.gcount());
  end_ += n;
  if (n == 0) eof_ = true;
  return n > 0;
}

LineReader::Status LineReader::next(std::string& line, std::size_t room) {
  line.clear();
  std::size_t scanned = begin_;
  for (;;) {
    const char* at =
        static_cast<const char*>(std::memchr(buffer_.data() + scanned, '\n', end_ - scanned));
    if (at != nullptr) {
      const auto stop = static_cast<std::size_t>(at - buffer_.data());
      if (stop - begin_ > max_bytes_) return Status::kTooLong;
      line.reserve(stop - begin_ + room);
      line.assign(buffer_.data() + begin_, stop - begin_);
      bytes_ += line.size() + 1;
      begin_ = stop + 1;
      return Status::kLine;
    }
    if (end_ - begin_ > max_bytes_) return Status::kTooLong;
    scanned = end_ - begin_;  // offsets move to the front in fill()
    if (end_ == buffer_.size() && begin_ == 0)
      buffer_.resize(std::min(buffer_.size() * 2, max_bytes_ + 2));
    if (!fill()) {
      if (end_ == begin_) return Status::kEnd;
      line.reserve(end_ - begin_ + room);
      line.assign(buffer_.data() + begin_, end_ - begin_);
      bytes_ += line.size();
      begin_ = end_;
      return Status::kUnterminated;
    }
  }
}

}  // namespace lens::analysis

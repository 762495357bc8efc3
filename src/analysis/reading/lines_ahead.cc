#include "lines_ahead.h"

#include <utility>

namespace lens::analysis {

LinesAhead::LinesAhead(std::vector<std::unique_ptr<RankFileReader>> readers, int workers) {
  lanes_.resize(readers.size());
  for (std::size_t i = 0; i < readers.size(); ++i) {
    lanes_[i].reader = std::move(readers[i]);
    lanes_[i].line = lanes_[i].reader->line_number();
    lanes_[i].bytes = lanes_[i].reader->bytes_read();
    lanes_[i].done = lanes_[i].reader->done();
    if (workers > 0) lanes_[i].current = lanes_[i].reader->file().without_spans();
  }
  if (lanes_.empty() || workers <= 0) return;
  budget_ = kBytesAheadPerWorker * static_cast<std::uintmax_t>(workers);
  try {
    workers_.reserve(static_cast<std::size_t>(workers));
    for (int w = 0; w < workers; ++w) workers_.emplace_back([this] { work(); });
  } catch (...) {
    // Fewer threads than asked (none to be had): the read goes on with
    // those that started, or with none, each line then parsed when taken.
  }
}

LinesAhead::~LinesAhead() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (auto& t : workers_) t.join();
}

LinesAhead::Parsed LinesAhead::parse_next(Lane& lane) {
  Parsed p;
  RankFileReader& reader = *lane.reader;
  const std::uintmax_t before = reader.bytes_read();
  try {
    p.got = reader.next_line();
  } catch (...) {
    p.error = std::current_exception();
  }
  try {
    RankFile& f = reader.file();
    p.file = f.without_spans();
    p.file.spans = std::move(f.spans);
    f.spans.clear();
  } catch (...) {  // memory ran out copying the resource fields
    if (!p.error) p.error = std::current_exception();
  }
  p.line = reader.line_number();
  p.bytes = reader.bytes_read();
  p.length = p.bytes - before;
  p.done = reader.done();
  return p;
}

LinesAhead::Lane* LinesAhead::pick() {
  if (ahead_bytes_ >= budget_) return nullptr;
  for (std::size_t k = 0; k < lanes_.size(); ++k) {
    const std::size_t i = (next_ + k) % lanes_.size();
    Lane& lane = lanes_[i];
    if (!lane.busy && !lane.finished && lane.ready.size() < kLinesAhead) {
      next_ = i + 1;
      return &lane;
    }
  }
  return nullptr;
}

void LinesAhead::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    Lane* lane = pick();
    if (lane == nullptr) {
      changed_.wait(lock);
      continue;
    }
    lane->busy = true;
    lock.unlock();
    Parsed p = parse_next(*lane);
    lock.lock();
    lane->busy = false;
    lane->finished = !p.got || p.error != nullptr;
    const std::uintmax_t length = p.length;
    try {
      lane->ready.push_back(std::move(p));
      ahead_bytes_ += length;
    } catch (...) {
      // No memory to queue the line: it is lost, so the read cannot go
      // on; the taker gets the error at its next line, of any file.
      failed_ = std::current_exception();
      stop_ = true;
    }
    changed_.notify_all();
  }
}

bool LinesAhead::next_line(std::size_t i) {
  Lane& lane = lanes_[i];
  if (workers_.empty()) return lane.reader->next_line();
  Parsed p;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (failed_) std::rethrow_exception(failed_);
      if (!lane.ready.empty()) {
        p = std::move(lane.ready.front());
        lane.ready.pop_front();
        ahead_bytes_ -= p.length;
        changed_.notify_all();  // room for more
        break;
      }
      if (lane.finished) return false;  // its last line was taken
      if (!lane.busy) {
        // Nobody has started it: parsed here rather than waited for.
        lane.busy = true;
        lock.unlock();
        p = parse_next(lane);
        lock.lock();
        lane.busy = false;
        lane.finished = !p.got || p.error != nullptr;
        changed_.notify_all();
        break;
      }
      changed_.wait(lock);
    }
  }
  lane.current = std::move(p.file);
  lane.line = p.line;
  lane.bytes = p.bytes;
  lane.done = p.done;
  if (p.error) std::rethrow_exception(p.error);
  return p.got;
}

bool LinesAhead::done(std::size_t i) const {
  return workers_.empty() ? lanes_[i].reader->done() : lanes_[i].done;
}

RankFile& LinesAhead::file(std::size_t i) {
  return workers_.empty() ? lanes_[i].reader->file() : lanes_[i].current;
}

std::size_t LinesAhead::line_number(std::size_t i) const {
  return workers_.empty() ? lanes_[i].reader->line_number() : lanes_[i].line;
}

std::uintmax_t LinesAhead::bytes_read(std::size_t i) const {
  return workers_.empty() ? lanes_[i].reader->bytes_read() : lanes_[i].bytes;
}

}  // namespace lens::analysis

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
    if (workers > 0) {
      const RankFile& f = lanes_[i].reader->file();
      lanes_[i].current = f.without_spans();
      lanes_[i].resource_parsed = f.resource_seen;
      lanes_[i].warnings_parsed = f.warnings.size();
    }
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
  room_.notify_all();
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
    // Most lines carry the resource the line before carried, which the
    // reader does not apply again: their fields are the taker's already,
    // and are not copied (the path and texts, allocated here and freed on
    // the taker's thread).
    const RankFile::ResourceSeen& seen = f.resource_seen;
    p.fields = !(seen.applied && lane.resource_parsed.applied &&
                 seen.rank == lane.resource_parsed.rank &&
                 seen.flat == lane.resource_parsed.flat &&
                 f.warnings.size() == lane.warnings_parsed);
    if (p.fields) {
      p.file = f.without_spans();
      lane.resource_parsed = seen;
      lane.warnings_parsed = f.warnings.size();
    }
    p.file.lines = f.lines;
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
      ++idle_workers_;
      room_.wait(lock);
      --idle_workers_;
      continue;
    }
    parse_ahead(*lane, lock);
  }
}

void LinesAhead::parse_ahead(Lane& lane, std::unique_lock<std::mutex>& lock) {
  lane.busy = true;
  lock.unlock();
  Parsed p = parse_next(lane);
  lock.lock();
  lane.busy = false;
  lane.finished = !p.got || p.error != nullptr;
  const std::uintmax_t length = p.length;
  try {
    lane.ready.push_back(std::move(p));
    ahead_bytes_ += length;
  } catch (...) {
    // No memory to queue the line: it is lost, so the read cannot go on;
    // the taker gets the error at its next line, of any file.
    failed_ = std::current_exception();
    stop_ = true;
  }
  if (taker_waiting_) parsed_.notify_one();
}

bool LinesAhead::next_line(std::size_t i) {
  Lane& lane = lanes_[i];
  if (workers_.empty()) return lane.reader->next_line();
  Parsed p;
  bool wake_worker = false;  // woken after the lock is let go
  {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (failed_) std::rethrow_exception(failed_);
      if (!lane.ready.empty()) {
        p = std::move(lane.ready.front());
        lane.ready.pop_front();
        ahead_bytes_ -= p.length;
        // A worker waiting for room is woken once there is room for a few
        // lines, not for each line taken.
        wake_worker = idle_workers_ > 0 && (lane.ready.size() <= kLinesAhead / 2 ||
                                            ahead_bytes_ <= budget_ / 2);
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
        wake_worker = idle_workers_ > 0;
        break;
      }
      // Its line is being parsed: another file's next line is parsed
      // here meanwhile, rather than waited idle.
      if (Lane* other = pick()) {
        parse_ahead(*other, lock);
        continue;
      }
      taker_waiting_ = true;
      parsed_.wait(lock);
      taker_waiting_ = false;
    }
  }
  if (wake_worker) room_.notify_one();
  if (p.fields) {
    lane.current = std::move(p.file);
  } else {
    lane.current.spans = std::move(p.file.spans);
    lane.current.lines = p.file.lines;
  }
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

// LinesAhead: a run's files read a line at a time in whatever order the
// caller asks for them, their lines parsed ahead on worker threads.
//
// Each file's lines are parsed in the file's order, by one thread at a
// time, and handed over in that order: what the caller sees of a file (its
// rows, its resource fields after each line, the line number, the bytes
// read, an error at the line where it is) is what a RankFileReader gives
// read on the caller's thread, whichever thread parsed it. A file's
// ReadError is raised when the caller takes that line, not before.
//
// What is held ahead is bounded: at most kLinesAhead parsed lines a file,
// and no new line started while the lines waiting add up to more than
// kBytesAheadPerWorker of input per worker. A line the caller asks for that
// nobody has started is parsed on the caller's thread, so the caller never
// waits on a bound; while the line it asks for is being parsed, the caller
// parses another file's next line rather than wait idle.
//
// Thread safety: one caller thread; the workers are the object's own and
// are stopped by its destructor (a line being parsed is finished first).
// Fewer threads than asked (the system has none to give) only read slower.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "run_reader.h"

namespace lens::analysis {

class LinesAhead {
 public:
  static constexpr std::size_t kLinesAhead = 8;
  static constexpr std::uintmax_t kBytesAheadPerWorker = std::uintmax_t{4} << 20;

  // Takes the readers, positioned where they start (start_at); `workers`
  // threads parse ahead, none with 0 (each line is then read when taken,
  // exactly as the reader alone does).
  LinesAhead(std::vector<std::unique_ptr<RankFileReader>> readers, int workers);
  ~LinesAhead();
  LinesAhead(const LinesAhead&) = delete;
  LinesAhead& operator=(const LinesAhead&) = delete;

  std::size_t size() const { return lanes_.size(); }
  // RankFileReader's calls, for file i.
  bool next_line(std::size_t i);
  bool done(std::size_t i) const;
  RankFile& file(std::size_t i);
  std::size_t line_number(std::size_t i) const;
  std::uintmax_t bytes_read(std::size_t i) const;

 private:
  // One line's outcome, as the reader left it.
  struct Parsed {
    // The line's rows and the file's line count; the other fields after the
    // line only when the line changed them (fields).
    RankFile file;
    bool fields = true;
    std::size_t line = 0;
    std::uintmax_t bytes = 0;   // read by then
    std::uintmax_t length = 0;  // this line's bytes
    bool got = false;           // what next_line returned
    bool done = false;
    std::exception_ptr error;
  };
  struct Lane {
    std::unique_ptr<RankFileReader> reader;  // used by one thread at a time (busy)
    // With the reader: the resource and the warnings count as of the last
    // line parsed, to tell whether a line changed the file's fields.
    RankFile::ResourceSeen resource_parsed;
    std::size_t warnings_parsed = 0;
    // What the caller sees: the line taken last.
    RankFile current;
    std::size_t line = 0;
    std::uintmax_t bytes = 0;
    bool done = false;
    // Under mutex_:
    std::deque<Parsed> ready;
    bool busy = false;      // a thread is parsing its next line
    bool finished = false;  // its last line has been parsed (or failed)
  };

  static Parsed parse_next(Lane& lane);
  void work();
  // Under `lock` (of mutex_): the lane's next line parsed, unlocked
  // meanwhile, and queued.
  void parse_ahead(Lane& lane, std::unique_lock<std::mutex>& lock);
  Lane* pick();  // under mutex_: a lane a worker may parse ahead, or null

  std::vector<Lane> lanes_;
  std::mutex mutex_;
  std::condition_variable room_;    // workers wait here for room to parse ahead
  std::condition_variable parsed_;  // the taker waits here for a line being parsed
  int idle_workers_ = 0;            // workers waiting on room_
  bool taker_waiting_ = false;      // the taker waits on parsed_
  std::uintmax_t ahead_bytes_ = 0;  // input bytes of the lines waiting
  std::uintmax_t budget_ = 0;
  std::size_t next_ = 0;  // where pick() looks first
  bool stop_ = false;
  std::exception_ptr failed_;  // a worker could not queue a line it parsed
  std::vector<std::thread> workers_;
};

}  // namespace lens::analysis

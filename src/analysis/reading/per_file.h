// per_file: one reading of each of a run's files, on up to `threads`
// threads at once, the results in the files' order.
//
// What a caller gets is what reading the files one after the other gives:
// the results in file order, and when readings fail, the error of the
// first failing file in that order (the others still finish; none is cut
// short by another's error).
//
// Thread safety: `read` is called concurrently for different files; it
// must share nothing unguarded between calls.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <thread>
#include <vector>

namespace lens::analysis {

template <typename Read>
auto per_file(const std::vector<std::filesystem::path>& files, int threads, Read&& read)
    -> std::vector<decltype(read(files.front()))> {
  using Result = decltype(read(files.front()));
  std::vector<Result> results(files.size());
  std::vector<std::exception_ptr> errors(files.size());
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i = next++; i < files.size(); i = next++) {
      try {
        results[i] = read(files[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const std::size_t helpers =
      std::min<std::size_t>(files.size(), static_cast<std::size_t>(std::max(threads, 1))) - 1;
  std::vector<std::thread> pool;
  try {
    for (std::size_t t = 0; t < helpers && files.size() > 1; ++t) pool.emplace_back(work);
  } catch (...) {
    // No thread to be had: the files left are read on this one.
  }
  work();
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

}  // namespace lens::analysis

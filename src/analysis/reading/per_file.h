// per_file: one reading of each of a run's files, on up to `threads`
// threads at once, the results in the files' order (in_order: any
// numbered work so).
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

// work(0) .. work(count - 1) on up to `threads` threads at once (the
// caller's among them), the results in index order; when some fail, the
// error of the lowest index (the others still finish).
template <typename Work>
auto in_order(std::size_t count, int threads, Work&& work) -> std::vector<decltype(work(0))> {
  using Result = decltype(work(0));
  std::vector<Result> results(count);
  std::vector<std::exception_ptr> errors(count);
  std::atomic<std::size_t> next{0};
  const auto take = [&] {
    for (std::size_t i = next++; i < count; i = next++) {
      try {
        results[i] = work(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const std::size_t helpers =
      count == 0 ? 0 : std::min<std::size_t>(count, static_cast<std::size_t>(std::max(threads, 1))) - 1;
  std::vector<std::thread> pool;
  try {
    for (std::size_t t = 0; t < helpers; ++t) pool.emplace_back(take);
  } catch (...) {
    // No thread to be had: the work left is done on this one.
  }
  take();
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

template <typename Read>
auto per_file(const std::vector<std::filesystem::path>& files, int threads, Read&& read)
    -> std::vector<decltype(read(files.front()))> {
  return in_order(files.size(), threads, [&](std::size_t i) { return read(files[i]); });
}

}  // namespace lens::analysis

// lens-json-floor: the ceiling the run reader's parser allows, for
// bench/read_bench.py: every line of the given files read in 1 MiB blocks
// and parsed by simdjson (its DOM, as the reader parses), nothing built
// from it. Prints the bytes, lines and seconds.
//
//   lens-json-floor [--no-parse] FILE...
//
// --no-parse only splits the lines (the floor of reading and finding them).
#include <simdjson.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  bool parse = true;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-parse") == 0)
      parse = false;
    else
      files.emplace_back(argv[i]);
  }
  simdjson::dom::parser parser;
  const auto start = std::chrono::steady_clock::now();
  std::size_t bytes = 0, lines = 0, failed = 0;
  std::vector<char> block(1 << 20);
  std::string line;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::string carry;
    for (;;) {
      in.read(block.data(), static_cast<std::streamsize>(block.size()));
      const std::size_t got = static_cast<std::size_t>(in.gcount());
      if (got == 0) break;
      bytes += got;
      std::size_t from = 0;
      for (;;) {
        const void* nl = std::memchr(block.data() + from, '\n', got - from);
        if (nl == nullptr) {
          carry.append(block.data() + from, got - from);
          break;
        }
        const std::size_t end = static_cast<const char*>(nl) - block.data();
        carry.append(block.data() + from, end - from);
        from = end + 1;
        ++lines;
        if (parse) {
          line.reserve(carry.size() + simdjson::SIMDJSON_PADDING);
          line.assign(carry);
          simdjson::dom::element doc;
          if (parser.parse(line.data(), line.size(), false).get(doc)) ++failed;
        }
        carry.clear();
      }
    }
  }
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu bytes %zu lines %zu failed %.6f s\n", bytes, lines, failed, s);
  return failed == 0 ? 0 : 1;
}

// SharedMap: copies share one map until one is written; a write never shows
// in another copy, whichever copy writes and however the copies were made;
// copies read and dropped on other threads while the first is written (run
// under ThreadSanitizer by the tsan preset).
#include "shared_map.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace lens::analysis {
namespace {

TEST(SharedMap, AnEmptyMapFindsNothingAndIsWrittenLikeAMap) {
  SharedMap<std::string> m;
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.find("k"), m.end());
  EXPECT_EQ(m.count("k"), 0u);
  EXPECT_THROW(m.at("k"), std::out_of_range);
  m["k"] = "v";
  EXPECT_EQ(m.at("k"), "v");
  EXPECT_EQ(m.size(), 1u);
  const SharedMap<std::string> copy_of_empty = SharedMap<std::string>();
  EXPECT_EQ(copy_of_empty.begin(), copy_of_empty.end());
}

TEST(SharedMap, AWriteShowsInTheWrittenCopyOnly) {
  SharedMap<std::string> a{{"host.name", "node-a"}, {"dl.rank", "3"}};
  SharedMap<std::string> b = a;  // copy constructed
  SharedMap<std::string> c;
  c = b;                          // copy assigned, from a copy
  EXPECT_EQ(&a.map(), &b.map());  // shared, not copied
  EXPECT_EQ(&b.map(), &c.map());

  b["dl.rank"] = "4";  // the copy written
  EXPECT_EQ(a.at("dl.rank"), "3");
  EXPECT_EQ(b.at("dl.rank"), "4");
  EXPECT_EQ(c.at("dl.rank"), "3");

  a["host.name"] = "node-b";  // the source written
  EXPECT_EQ(a.at("host.name"), "node-b");
  EXPECT_EQ(b.at("host.name"), "node-a");
  EXPECT_EQ(c.at("host.name"), "node-a");

  c.own().erase("host.name");  // the last sharer written
  EXPECT_EQ(c.count("host.name"), 0u);
  EXPECT_EQ(b.count("host.name"), 1u);

  SharedMap<std::string> moved = std::move(b);  // a move keeps the map and its sharing
  EXPECT_EQ(moved.at("dl.rank"), "4");
  SharedMap<std::string> d = moved;
  moved["dl.rank"] = "5";
  EXPECT_EQ(d.at("dl.rank"), "4");
  EXPECT_TRUE(a == a);
  EXPECT_FALSE(a == d);
}

TEST(SharedMap, AMapNeverCopiedIsWrittenInPlace) {
  SharedMap<char> m{{"k", 's'}};
  const auto* before = &m.map();
  m["j"] = 'i';
  m["k"] = 'd';
  EXPECT_EQ(&m.map(), before);
  SharedMap<char> copy = m;
  m["k"] = 'b';  // copied on this write, then its own again
  const auto* own = &m.map();
  m["l"] = 's';
  EXPECT_EQ(&m.map(), own);
  EXPECT_NE(own, &copy.map());
  EXPECT_EQ(copy.at("k"), 'd');
}

TEST(SharedMap, CopiesReadOnOtherThreadsWhileTheFirstIsWritten) {
  SharedMap<std::string> file{{"dl.rank", "0"}, {"process.pid", "100"}};
  for (int round = 0; round < 200; ++round) {
    std::vector<SharedMap<std::string>> windows(4, file);
    std::vector<std::thread> readers;
    std::vector<int> seen(windows.size(), 0);
    for (std::size_t i = 0; i < windows.size(); ++i)
      readers.emplace_back([&, i] {
        SharedMap<std::string> again = windows[i];  // copied and dropped here
        for (const auto& [key, text] : again) seen[i] += static_cast<int>(key.size() + text.size());
      });
    file["process.pid"] = std::to_string(200 + round);  // the reader's next resource
    for (auto& t : readers) t.join();
    const int expected = static_cast<int>(std::string("dl.rank").size() + 1 +
                                          std::string("process.pid").size() +
                                          (round == 0 ? 3 : std::to_string(199 + round).size()));
    for (int n : seen) EXPECT_EQ(n, expected);
  }
}

}  // namespace
}  // namespace lens::analysis

#include "lens/ids.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <set>
#include <vector>

namespace lens {
namespace {

TEST(Ids, HexRoundTrip) {
  auto t = TraceId::from_hex("0123456789abcdef0123456789abcdef");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->to_hex(), "0123456789abcdef0123456789abcdef");
  auto s = SpanId::from_hex("0123456789abcdef");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->to_word(), 0x0123456789abcdefULL);
  EXPECT_EQ(SpanId::from_word(0x0123456789abcdefULL), *s);
  EXPECT_FALSE(TraceId::from_hex("0123456789ABCDEF0123456789abcdef"));
  EXPECT_FALSE(SpanId::from_hex("0123456789abcde"));
  EXPECT_FALSE(TraceId().valid());
  EXPECT_FALSE(SpanId().valid());
}

TEST(Ids, GeneratedIdsAreValidAndDistinct) {
  std::set<TraceId> traces;
  std::set<SpanId> spans;
  for (int i = 0; i < 10000; ++i) {
    auto t = IdGenerator::new_trace_id();
    auto s = IdGenerator::new_span_id();
    EXPECT_TRUE(t.valid());
    EXPECT_TRUE(s.valid());
    traces.insert(t);
    spans.insert(s);
  }
  EXPECT_EQ(traces.size(), 10000u);
  EXPECT_EQ(spans.size(), 10000u);
}

// Ids a forked child generates, read back through a pipe.
std::vector<SpanId> ids_from_child(int count, bool seed_application_rngs) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (seed_application_rngs) {
      std::srand(42);
      std::mt19937 rng(42);
      (void)rng();
    }
    for (int i = 0; i < count; ++i) {
      std::uint64_t w = IdGenerator::new_span_id().to_word();
      if (write(fds[1], &w, sizeof w) != sizeof w) _exit(1);
    }
    _exit(0);
  }
  close(fds[1]);
  std::vector<SpanId> ids;
  std::uint64_t w;
  while (read(fds[0], &w, sizeof w) == sizeof w) ids.push_back(SpanId::from_word(w));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return ids;
}

TEST(Ids, ForkedChildDoesNotRepeatParentSequence) {
  (void)IdGenerator::new_span_id();  // the parent's generator exists before the fork
  auto child = ids_from_child(1000, false);
  ASSERT_EQ(child.size(), 1000u);
  std::set<SpanId> all(child.begin(), child.end());
  for (int i = 0; i < 1000; ++i) all.insert(IdGenerator::new_span_id());
  EXPECT_EQ(all.size(), 2000u);
}

TEST(Ids, TwoChildrenSeedingTheirRngsIdenticallyStillDiffer) {
  // Data-parallel ranks seed their RNGs identically; their ids must differ.
  auto a = ids_from_child(500, true);
  auto b = ids_from_child(500, true);
  ASSERT_EQ(a.size(), 500u);
  ASSERT_EQ(b.size(), 500u);
  std::set<SpanId> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 1000u);
}

TEST(Ids, ApplicationSeedingDoesNotAffectIds) {
  std::srand(7);
  std::mt19937 rng(7);
  auto first = IdGenerator::new_trace_id();
  std::srand(7);
  rng.seed(7);
  auto second = IdGenerator::new_trace_id();
  EXPECT_NE(first, second);
}

}  // namespace
}  // namespace lens

// The handshake that lets another thread read an open span's record while
// its owner may be changing it (src/core/open_span_access.h).
#include "open_span_access.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "live_span.h"

namespace lens::detail {
namespace {

using namespace std::chrono_literals;

// A core's open list with the given spans on it, as register_open links them.
struct OpenList {
  LiveSpan head;
  explicit OpenList(std::initializer_list<LiveSpan*> spans) {
    head.prev = head.next = &head;
    for (LiveSpan* s : spans) {
      s->next = &head;
      s->prev = head.prev;
      head.prev->next = s;
      head.prev = s;
    }
  }
};

TEST(OpenSpanAccess, SpansNobodyIsChangingAreReadableAndThawedAfterwards) {
  enable_asymmetric_fence();
  LiveSpan a, b;
  OpenList list({&a, &b});
  {
    const FrozenOpenSpans frozen(list.head, 1s);
    ASSERT_EQ(frozen.spans().size(), 2u);
    EXPECT_EQ(frozen.spans()[0].span, &a);  // oldest first
    EXPECT_EQ(frozen.spans()[1].span, &b);
    EXPECT_TRUE(frozen.spans()[0].readable);
    EXPECT_TRUE(frozen.spans()[1].readable);
    EXPECT_TRUE(a.frozen.load());
  }
  EXPECT_FALSE(a.frozen.load());
  EXPECT_FALSE(b.frozen.load());
}

TEST(OpenSpanAccess, AnOwnerStuckInAChangeLeavesItsSpanUnreadableAfterThePatience) {
  enable_asymmetric_fence();
  LiveSpan stuck, idle;
  OpenList list({&stuck, &idle});
  std::atomic<bool> inside{false}, leave{false};
  std::thread owner([&] {
    OwnerChange change(&stuck);
    inside = true;
    while (!leave) std::this_thread::sleep_for(1ms);
  });
  while (!inside) std::this_thread::sleep_for(1ms);
  const auto start = std::chrono::steady_clock::now();
  {
    const FrozenOpenSpans frozen(list.head, 50ms);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
    EXPECT_FALSE(frozen.spans()[0].readable);
    EXPECT_TRUE(frozen.spans()[1].readable);
  }
  leave = true;
  owner.join();
  const FrozenOpenSpans again(list.head, 1s);
  EXPECT_TRUE(again.spans()[0].readable);
}

TEST(OpenSpanAccess, AnOwnerWaitsWhileItsSpanIsFrozenAndSeesWhatWasWritten) {
  enable_asymmetric_fence();
  LiveSpan span;
  OpenList list({&span});
  std::atomic<bool> started{false}, changed{false};
  std::size_t events_seen = 0;
  std::thread owner;
  {
    const FrozenOpenSpans frozen(list.head, 1s);
    ASSERT_TRUE(frozen.spans()[0].readable);
    owner = std::thread([&] {
      started = true;
      OwnerChange change(&span);
      events_seen = span.events.size();
      changed = true;
    });
    while (!started) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(changed.load()) << "the owner changed a frozen record";
    span.events.emplace_back().name = "written while frozen";
  }
  owner.join();
  EXPECT_TRUE(changed.load());
  EXPECT_EQ(events_seen, 1u);
}

}  // namespace
}  // namespace lens::detail

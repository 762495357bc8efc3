// watch_termination: a signal becomes a flush (kExit: the process then ends
// as the signal would; kContinue: it goes on and reads termination_signal),
// the application's own handler still runs, and a second signal ends the
// process at once. Each case runs in a forked child, whose signals and
// exit status are its own.
#include "lens/termination.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "lens/telemetry.h"
#include "test_env.h"

namespace lens {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Runs `body` in a child; returns its wait status.
template <typename F>
int in_child(F body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

std::unique_ptr<Telemetry> file_telemetry(const fs::path& dir) {
  TelemetryOptions o;
  o.enabled = true;
  o.span_groups = "all";
  o.run_id = "termination";
  o.rank = 0;
  o.world_size = 1;
  o.trace_dir = dir.string();
  o.exporter = "file";
  return Telemetry::create(o, testing::fake_env({}));
}

std::string file_text(const fs::path& dir) {
  std::string all;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().string().ends_with(".otlp.jsonl")) {
      std::ifstream in(e.path());
      all.append(std::istreambuf_iterator<char>(in), {});
    }
  return all;
}

class TerminationWatch : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef __SANITIZE_THREAD__
    // ThreadSanitizer cannot follow a fork of a process that has had
    // threads; the main build runs these.
    GTEST_SKIP() << "forks a child: not under ThreadSanitizer";
#endif
    dir_ = fs::temp_directory_path() /
           ("lens-watch-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(TerminationWatch, SigtermFlushesWhatIsOpenThenEndsAsTheSignalWould) {
  const int status = in_child([&] {
    auto t = file_telemetry(dir_);
    TerminationOptions w;
    w.telemetry = t.get();
    watch_termination(w);
    Tracer tracer = t->tracer();
    tracer.start_span(SpanGroup::kJob, "done").end();
    Span open = tracer.start_span(SpanGroup::kJob, "megatron.job");
    ::kill(::getpid(), SIGTERM);
    std::this_thread::sleep_for(10s);  // the watch ends the process first
    ::_exit(3);
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);  // exit status 143, as a shell says it
  const std::string text = file_text(dir_);
  EXPECT_NE(text.find("\"done\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"megatron.job\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"lens.stopped_by\",\"value\":{\"stringValue\":\"SIGTERM\"}"),
            std::string::npos)
      << text;
}

TEST_F(TerminationWatch, ContinueLeavesTheStopToTheApplication) {
  const int status = in_child([&] {
    auto t = file_telemetry(dir_);
    TerminationOptions w;
    w.then = OnTermination::kContinue;
    w.telemetry = t.get();
    watch_termination(w);
    Tracer tracer = t->tracer();
    int steps = 0;
    for (; steps < 1000 && termination_signal() == 0; ++steps) {
      tracer.start_span(SpanGroup::kStep, "megatron.train_step").end();
      if (steps == 3) ::kill(::getpid(), SIGINT);
      std::this_thread::sleep_for(5ms);
    }
    const int signo = termination_signal();
    unwatch_termination();
    t->shutdown();
    ::_exit(signo == SIGINT && steps >= 4 && steps < 1000 ? 130 : 1);
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 130);
}

volatile sig_atomic_t g_app_handler_ran = 0;
void app_handler(int) { g_app_handler_ran = 1; }

TEST_F(TerminationWatch, TheApplicationsHandlerStillRunsAndDecides) {
  const int status = in_child([&] {
    ::signal(SIGTERM, app_handler);
    auto t = file_telemetry(dir_);
    TerminationOptions w;
    w.telemetry = t.get();
    watch_termination(w);  // kExit, but the application has a handler: it decides
    ::kill(::getpid(), SIGTERM);
    for (int i = 0; i < 200 && !g_app_handler_ran; ++i) std::this_thread::sleep_for(5ms);
    std::this_thread::sleep_for(100ms);  // the watch flushes, and does not end the process
    unwatch_termination();
    ::_exit(g_app_handler_ran ? 7 : 1);
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST_F(TerminationWatch, ASecondSignalEndsAtOnce) {
  const int status = in_child([&] {
    TerminationOptions w;
    w.then = OnTermination::kContinue;
    watch_termination(w);
    ::kill(::getpid(), SIGTERM);
    for (int i = 0; i < 200 && termination_signal() == 0; ++i) std::this_thread::sleep_for(5ms);
    ::kill(::getpid(), SIGTERM);  // the second: the default action, now
    std::this_thread::sleep_for(5s);
    ::_exit(1);
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST_F(TerminationWatch, OnlyOneWatchAndNothingUnlessAsked) {
  struct sigaction before {};
  ::sigaction(SIGTERM, nullptr, &before);
  EXPECT_EQ(before.sa_handler, SIG_DFL);  // lens installs nothing by itself
  EXPECT_TRUE(watch_termination());
  EXPECT_FALSE(watch_termination());
  unwatch_termination();
  struct sigaction after {};
  ::sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, SIG_DFL);
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGINT), "SIGINT");
  EXPECT_EQ(signal_name(64), "signal 64");
}

}  // namespace
}  // namespace lens

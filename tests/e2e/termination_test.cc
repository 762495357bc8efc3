// Preemption and Ctrl-C lose nothing: SIGTERM and SIGINT to lens-train's
// launcher at a random point of a 4-rank run, SIGKILL to the launcher, and
// SIGTERM to one rank of a torchrun-style launch. Each time: no rank
// outlives the stop, every trace file ends with a whole line, every step a
// rank started has its spans, `lens check` passes on what completed, and
// the exit status and the one-line reasons are as documented.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "run_command.h"
#include "trace_files.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A process started with its output in a file, in a process group of its
// own (as a shell's job is), so that a signal reaches only what it is sent
// to.
struct Process {
  pid_t pid = -1;
  fs::path output;

  static Process start(const std::vector<std::string>& args, const fs::path& output,
                       const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
    for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    Process p;
    p.output = output;
    if (posix_spawn(&p.pid, argv[0], &files, &attr, argv.data(), envp.data()) != 0) p.pid = -1;
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attr);
    return p;
  }
  // The exit status as a shell says it (128 + signal when killed), or -1 if
  // it is still running after `limit`.
  int wait(std::chrono::milliseconds limit) const {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid)
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }
  std::string text() const {
    std::ifstream in(output);
    return {std::istreambuf_iterator<char>(in), {}};
  }
};

// The pids of processes whose command line mentions `marker`.
std::vector<pid_t> processes_mentioning(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream in(e.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), {});
    if (cmdline.find(marker) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

// Waits until no process mentions `marker`; false if some still do after
// `limit`.
bool all_gone(const std::string& marker, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (processes_mentioning(marker).empty()) return true;
    std::this_thread::sleep_for(50ms);
  }
  for (pid_t p : processes_mentioning(marker)) kill(p, SIGKILL);
  return false;
}

class Termination : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lens-term-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    traces_ = dir_ / "traces";
  }
  void TearDown() override {
    all_gone(traces_.string(), 1ms);
    fs::remove_all(dir_);
  }

  std::vector<std::string> trainer_args(int pp) const {
    return {LENS_TRAIN_BIN,
            "--pp",
            std::to_string(pp),
            "--microbatches",
            "4",
            "--steps",
            "100000",
            "--layers",
            "4",
            "--hidden",
            "16",
            "--microbatch-size",
            "4",
            "--timeout-s",
            "60",
            "--otel-enabled=true",
            "--otel-span-groups",
            "all",
            "--trace-dir",
            traces_.string()};
  }
  std::map<std::string, std::string> quick_export() const {
    return {{"OTEL_BSP_SCHEDULE_DELAY", "200"}};
  }
  // Some steps are done: the trace files have step spans.
  bool under_way(std::chrono::milliseconds limit) const {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (fs::exists(traces_))
        for (const auto& e : fs::recursive_directory_iterator(traces_))
          if (e.path().filename() == "rank-0.otlp.jsonl" && fs::file_size(e.path()) > 20000)
            return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  fs::path run_dir() const {
    for (const auto& e : fs::directory_iterator(traces_))
      if (e.is_directory()) return e.path();
    return {};
  }

  // Every file ends with a whole line, and every step a rank started has
  // its step span there.
  void expect_whole_files(int ranks) const {
    const fs::path run = run_dir();
    ASSERT_FALSE(run.empty());
    for (int r = 0; r < ranks; ++r) {
      const fs::path file = run / ("rank-" + std::to_string(r) + ".otlp.jsonl");
      ASSERT_TRUE(fs::exists(file)) << file;
      std::ifstream in(file, std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      ASSERT_FALSE(text.empty()) << file;
      EXPECT_EQ(text.back(), '\n') << file << " ends in the middle of a line";
      std::set<std::int64_t> steps;
      for (const auto& span : lens::testing::read_run(file))
        if (span.name == "megatron.train_step") steps.insert(span.int_attr("dl.step"));
      ASSERT_FALSE(steps.empty()) << file;
      // Steps 0..n, none missing: each step started has its span.
      EXPECT_EQ(*steps.rbegin() + 1, static_cast<std::int64_t>(steps.size())) << file;
    }
  }
  lens::testing::CommandResult check() const {
    return lens::testing::run_command(std::string(LENS_BIN) + " check " + run_dir().string(),
                                      dir_ / "check.txt");
  }

  fs::path dir_, traces_;
};

// Stops after a random 0.2 to 1.5 s more of training.
std::chrono::milliseconds random_delay() {
  std::random_device seed;
  return std::chrono::milliseconds(std::uniform_int_distribution<int>(200, 1500)(seed));
}

void expect_stopped_cleanly(const std::string& out, int signo, int ranks) {
  const std::string name = signo == SIGINT ? "SIGINT" : "SIGTERM";
  EXPECT_NE(out.find("lens-train: " + name + ": stopping the ranks"), std::string::npos) << out;
  for (int r = 0; r < ranks; ++r)
    EXPECT_TRUE(std::regex_search(
        out, std::regex("lens-train: rank " + std::to_string(r) + ": stopped by " + name +
                        " (after step \\d+|before its first step) \\(\\d+ steps done\\)")))
        << "rank " << r << "\n"
        << out;
  const std::string code = std::to_string(128 + signo);
  EXPECT_NE(out.find("lens-train: stopped by " + name + "; rank exit statuses 0: " + code),
            std::string::npos)
      << out;
}

TEST_F(Termination, SigtermToTheLauncherStopsEveryRankAfterItsStep) {
  for (int signo : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(signo == SIGTERM ? "SIGTERM" : "SIGINT");
    fs::remove_all(traces_);
    Process launcher = Process::start(trainer_args(4), dir_ / "out.txt", quick_export());
    ASSERT_GT(launcher.pid, 0);
    ASSERT_TRUE(under_way(60s)) << launcher.text();
    std::this_thread::sleep_for(random_delay());
    const auto sent = std::chrono::steady_clock::now();
    kill(launcher.pid, signo);
    const int status = launcher.wait(40s);
    const auto took = std::chrono::steady_clock::now() - sent;
    ASSERT_EQ(status, 128 + signo) << launcher.text();
    // The documented bound: a step, then a shutdown within
    // OTEL_BSP_EXPORT_TIMEOUT; on loopback files, a few seconds.
    EXPECT_LT(took, 15s);
    EXPECT_TRUE(all_gone(traces_.string(), 2s)) << "a rank outlived its launcher";
    expect_stopped_cleanly(launcher.text(), signo, 4);
    expect_whole_files(4);
    const auto c = check();
    EXPECT_EQ(c.exit_code, 0) << c.output;
  }
}

TEST_F(Termination, NoRankOutlivesAKilledLauncher) {
  // This process adopts the orphaned ranks (as a job's init or a
  // scheduler's step daemon would), so their exit statuses can be read.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  Process launcher = Process::start(trainer_args(4), dir_ / "out.txt", quick_export());
  ASSERT_GT(launcher.pid, 0);
  ASSERT_TRUE(under_way(60s)) << launcher.text();
  std::this_thread::sleep_for(random_delay());
  ASSERT_FALSE(processes_mentioning(traces_.string()).size() < 5u);  // the launcher and 4 ranks
  kill(launcher.pid, SIGKILL);
  EXPECT_EQ(launcher.wait(5s), 128 + SIGKILL);
  // The ranks get SIGTERM from the kernel (PR_SET_PDEATHSIG) and stop as
  // they would on their own signal: a step and a flush, then 143.
  const auto until = std::chrono::steady_clock::now() + 15s;
  std::vector<int> statuses;
  while (statuses.size() < 4 && std::chrono::steady_clock::now() < until) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0)
      statuses.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    else
      std::this_thread::sleep_for(20ms);
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  EXPECT_EQ(statuses, std::vector<int>(4, 143));
  EXPECT_TRUE(all_gone(traces_.string(), 1s)) << "ranks outlived their killed launcher";
  expect_whole_files(4);
  const std::string out = launcher.text();
  for (int r = 0; r < 4; ++r)
    EXPECT_TRUE(std::regex_search(
        out, std::regex("lens-train: rank " + std::to_string(r) + ": stopped by SIGTERM")))
        << out;
  // A rank whose peers stopped first is stopping too: no failure record.
  EXPECT_EQ(out.find(" was in: "), std::string::npos) << out;
  const auto c = check();
  EXPECT_EQ(c.exit_code, 0) << c.output;
}

TEST_F(Termination, SigtermToOneRankOfATorchrunStyleLaunch) {
  // Two ranks started as torchrun starts them (rank 0 serves the store).
  std::vector<Process> ranks;
  const std::string port = std::to_string(20000 + getpid() % 20000);
  for (int r = 0; r < 2; ++r) {
    auto args = trainer_args(2);
    ranks.push_back(Process::start(args, dir_ / ("rank-" + std::to_string(r) + ".txt"),
                                   {{"RANK", std::to_string(r)},
                                    {"WORLD_SIZE", "2"},
                                    {"MASTER_ADDR", "127.0.0.1"},
                                    {"MASTER_PORT", port},
                                    {"OTEL_BSP_SCHEDULE_DELAY", "200"}}));
    ASSERT_GT(ranks.back().pid, 0);
  }
  ASSERT_TRUE(under_way(60s)) << ranks[0].text() << ranks[1].text();
  std::this_thread::sleep_for(random_delay());
  kill(ranks[1].pid, SIGTERM);
  // The signalled rank finishes its step, flushes, says so, exits 143.
  EXPECT_EQ(ranks[1].wait(20s), 143) << ranks[1].text();
  EXPECT_TRUE(std::regex_search(
      ranks[1].text(), std::regex(R"(lens-train: rank 1: stopped by SIGTERM after step \d+)")))
      << ranks[1].text();
  // The other finds its peer gone at its next transfer: an error naming it.
  EXPECT_EQ(ranks[0].wait(20s), 1) << ranks[0].text();
  EXPECT_NE(ranks[0].text().find("lens-train: rank 0 (stage 0): error:"), std::string::npos)
      << ranks[0].text();
  expect_whole_files(2);
  // What completed checks; only the step rank 0 was in when its peer left
  // can fail (rank 1 never opened it).
  const auto c = check();
  std::smatch m;
  std::set<std::string> failing_steps;
  const std::regex fail(R"(FAIL step (\d+))");
  for (auto it = std::sregex_iterator(c.output.begin(), c.output.end(), fail);
       it != std::sregex_iterator(); ++it)
    failing_steps.insert((*it)[1]);
  EXPECT_LE(failing_steps.size(), 1u) << c.output;
  EXPECT_EQ(c.output.find("FAIL rank"), std::string::npos) << c.output;
}

}  // namespace

// The start-up agreement (startup_agreement.h): ranks are threads over an
// in-process group, each resolving its own environment.
#include "lens/startup_agreement.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <thread>

#include "lens/error.h"
#include "lens/in_process_communicator.h"
#include "lens/memory_exporter.h"
#include "test_env.h"

namespace lens {
namespace {

// Runs create_distributed_telemetry on `ranks` threads with per-rank env.
std::vector<std::string> startup(int ranks,
                                 std::function<std::map<std::string, std::string>(int)> env_of,
                                 std::vector<std::string>* run_ids = nullptr) {
  InProcessGroup group(ranks);
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  if (run_ids) run_ids->assign(static_cast<std::size_t>(ranks), "");
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      TelemetryOptions opts;
      opts.exporter_instance = std::make_shared<InMemoryExporter>();
      try {
        auto t = create_distributed_telemetry(*comm, ranks, opts, testing::fake_env(env_of(r)));
        if (t && run_ids) (*run_ids)[static_cast<std::size_t>(r)] = t->config().run_id;
      } catch (const ConfigError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(StartupAgreement, RanksTakeRankZeroRunId) {
  std::vector<std::string> run_ids;
  auto errors = startup(
      4,
      [](int) {
        return std::map<std::string, std::string>{{"MEGATRON_OTEL_ENABLED", "1"}};
      },
      &run_ids);
  for (const auto& e : errors) EXPECT_EQ(e, "");
  for (const auto& id : run_ids) EXPECT_EQ(id, run_ids[0]);
  EXPECT_FALSE(run_ids[0].empty());
}

TEST(StartupAgreement, MismatchedSpanGroupsFailEveryRankNamingTheSetting) {
  auto errors = startup(4, [](int r) {
    return std::map<std::string, std::string>{
        {"MEGATRON_OTEL_ENABLED", "1"}, {"MEGATRON_OTEL_SPAN_GROUPS", r == 2 ? "all" : "default"}};
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("MEGATRON_OTEL_SPAN_GROUPS differs"), std::string::npos) << e;
    EXPECT_NE(e.find("rank(s) 2"), std::string::npos) << e;
  }
}

TEST(StartupAgreement, MismatchedEnabledFailsEveryRankIncludingDisabledOnes) {
  auto errors = startup(3, [](int r) {
    return std::map<std::string, std::string>{{"MEGATRON_OTEL_ENABLED", r == 1 ? "0" : "1"}};
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("MEGATRON_OTEL_ENABLED differs"), std::string::npos) << e;
}

TEST(StartupAgreement, OneRankWithBadConfigurationFailsAllWithoutWaiting) {
  auto errors = startup(4, [](int r) {
    return std::map<std::string, std::string>{
        {"MEGATRON_OTEL_ENABLED", "1"},
        {"MEGATRON_OTEL_SPAN_GROUPS", r == 3 ? "bogus" : "default"}};
  });
  EXPECT_NE(errors[3].find("unknown span group 'bogus'"), std::string::npos) << errors[3];
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("rank(s) 3 could not read"),
              std::string::npos)
        << errors[static_cast<std::size_t>(r)];
}

TEST(StartupAgreement, MismatchedPipelineSizeFailsEveryRankNamingTheRanks) {
  InProcessGroup group(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      TelemetryOptions opts;
      opts.exporter_instance = std::make_shared<InMemoryExporter>();
      try {
        create_distributed_telemetry(*comm, r == 1 ? 2 : 3, opts,
                                     testing::fake_env({{"MEGATRON_OTEL_ENABLED", "1"}}));
      } catch (const ConfigError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    EXPECT_NE(e.find("differs"), std::string::npos) << e;
    EXPECT_NE(e.find("rank(s) 1"), std::string::npos) << e;
  }
}

TEST(StartupAgreement, RanksTakeRankZeroRunKey) {
  InProcessGroup group(3);
  std::vector<std::uint64_t> keys(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      const Config config = resolve_config({}, testing::fake_env({{"MEGATRON_OTEL_ENABLED", "1"}}));
      keys[static_cast<std::size_t>(r)] = agree_on_startup(*comm, config, 3).run_key;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(keys[1], keys[0]);
  EXPECT_EQ(keys[2], keys[0]);
}

}  // namespace
}  // namespace lens

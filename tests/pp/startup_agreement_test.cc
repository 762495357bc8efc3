// The start-up agreement (startup_agreement.h): ranks are threads over an
// in-process group, each resolving its own environment.
#include "lens/startup_agreement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "lens/carrier.h"
#include "lens/error.h"
#include "lens/in_process_communicator.h"
#include "lens/memory_exporter.h"
#include "lens/settings.h"
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

TEST(StartupAgreement, StepBudgetAndPrefetchMustMatch) {
  for (const char* setting : {"LENS_STEP_BUDGET", "LENS_STEP_PREFETCH"}) {
    auto errors = startup(3, [&](int r) {
      return std::map<std::string, std::string>{{"MEGATRON_OTEL_ENABLED", "1"},
                                                {setting, r == 2 ? "1" : "0"}};
    });
    for (const auto& e : errors) {
      EXPECT_NE(e.find(std::string(setting) + " differs"), std::string::npos) << e;
      EXPECT_NE(e.find("rank(s) 2"), std::string::npos) << e;
    }
  }
}

TEST(StartupAgreement, StepContextModeCheckIntervalAndSamplerMustMatch) {
  const std::vector<std::tuple<std::string, std::string, std::string, std::string>> cases = {
      {"LENS_STEP_CONTEXT", "broadcast", "derived", "rank 0 has broadcast, rank(s) 2 have derived"},
      {"LENS_STEP_VERIFY_STEPS", "100", "10", "rank 0 has 100, rank(s) 2 have 10"},
      {"OTEL_TRACES_SAMPLER", "parentbased_always_on", "traceidratio",
       "OTEL_TRACES_SAMPLER differs"},
      {"OTEL_TRACES_SAMPLER_ARG", "0.5", "0.25", "rank 0 has 0.500000, rank(s) 2 have 0.250000"},
  };
  for (const auto& [setting, mine, other, says] : cases) {
    auto errors = startup(3, [&](int r) {
      std::map<std::string, std::string> env{{"MEGATRON_OTEL_ENABLED", "1"},
                                             {setting, r == 2 ? other : mine}};
      if (setting == "OTEL_TRACES_SAMPLER_ARG") env["OTEL_TRACES_SAMPLER"] = "traceidratio";
      return env;
    });
    for (const auto& e : errors) {
      EXPECT_NE(e.find(setting + " differs"), std::string::npos) << e;
      EXPECT_NE(e.find(says), std::string::npos) << e;
    }
  }
  auto agreed = startup(2, [](int) {
    return std::map<std::string, std::string>{{"MEGATRON_OTEL_ENABLED", "1"},
                                              {"LENS_STEP_CONTEXT", "derived"}};
  });
  for (const auto& e : agreed) EXPECT_EQ(e, "");
}

TEST(StartupAgreement, TailSelectionAndItsChoiceMustMatch) {
  const std::vector<std::tuple<std::string, std::string, std::string, std::string>> cases = {
      {"LENS_TAIL_SELECTION", "1", "0", "rank 0 has 1, rank(s) 2 have 0"},
      {"LENS_TAIL_KEEP", "1", "3", "rank 0 has 1, rank(s) 2 have 3"},
      {"LENS_TAIL_BASELINE", "0", "5", "rank 0 has 0, rank(s) 2 have 5"},
  };
  for (const auto& [setting, mine, other, says] : cases) {
    auto errors = startup(3, [&](int r) {
      std::map<std::string, std::string> env{{"MEGATRON_OTEL_ENABLED", "1"},
                                             {setting, r == 2 ? other : mine}};
      if (setting != "LENS_TAIL_SELECTION") env["LENS_TAIL_SELECTION"] = "1";
      return env;
    });
    for (const auto& e : errors) {
      EXPECT_NE(e.find(setting + " differs"), std::string::npos) << e;
      EXPECT_NE(e.find(says), std::string::npos) << e;
    }
  }
  // The hold's bounds are each rank's own; with tail selection off, its
  // choice's settings are not compared.
  auto agreed = startup(2, [](int r) {
    return std::map<std::string, std::string>{{"MEGATRON_OTEL_ENABLED", "1"},
                                              {"LENS_TAIL_KEEP", r == 0 ? "1" : "2"},
                                              {"LENS_TAIL_HOLD_STEPS", r == 0 ? "16" : "32"}};
  });
  for (const auto& e : agreed) EXPECT_EQ(e, "");
}

TEST(StartupAgreement, CarrierFrameVersionMustMatch) {
  const Config config = resolve_config({}, testing::fake_env({{"MEGATRON_OTEL_ENABLED", "1"}}));
  std::vector<std::uint8_t> records;
  for (int r = 0; r < 3; ++r) {
    std::vector<std::uint8_t> one = startup_record(&config, 3);
    if (r == 1) one[18] = static_cast<std::uint8_t>(kCarrierFrameVersion + 1);  // a newer build
    records.insert(records.end(), one.begin(), one.end());
  }
  try {
    compare_startup_records(0, records);
    ADD_FAILURE() << "mixed frame versions agreed";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("lens carrier frame version differs across ranks: rank 0 "
                                   "has " +
                                   std::to_string(kCarrierFrameVersion) + ", rank(s) 1 have " +
                                   std::to_string(kCarrierFrameVersion + 1)),
        std::string::npos)
        << e.what();
  }
}

TEST(StartupAgreement, ARunIdTooLongOnOneRankFailsEveryRankAfterTheExchange) {
  // Without the exchange the other ranks would wait in the all-gather until
  // the timeout: the test's 60 s timeout would then show as a slow failure.
  InProcessGroup group(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      TelemetryOptions opts;
      opts.collective_timeout = std::chrono::seconds(60);
      if (r == 1) opts.run_id = std::string(120, 'x');
      const Config config =
          resolve_config(opts, testing::fake_env({{"MEGATRON_OTEL_ENABLED", "1"}}));
      const auto start = std::chrono::steady_clock::now();
      try {
        agree_on_startup(*comm, config, 3);
      } catch (const ConfigError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << "rank " << r;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(errors[1].find("is 120 bytes; accepted: at most 96 bytes"), std::string::npos)
      << errors[1];
  for (int r : {0, 2})
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("rank(s) 1 could not read"),
              std::string::npos)
        << errors[static_cast<std::size_t>(r)];
}

TEST(StartupAgreement, OneRankWhoseTraceDirectoryCannotBeWrittenFailsEveryRankAtStartUp) {
  const std::filesystem::path base =
      std::filesystem::temp_directory_path() / ("lens-startup-" + std::to_string(::getpid()));
  std::filesystem::create_directories(base);
  std::ofstream(base / "a-file") << "not a directory";
  InProcessGroup group(4);
  std::vector<std::string> errors(4);
  std::vector<bool> created(4, false);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      TelemetryOptions opts;
      opts.exporter = "file";
      // Rank 2's trace directory would be inside a regular file: even root
      // cannot create it.
      opts.trace_dir = (r == 2 ? base / "a-file" / "traces" : base / "traces").string();
      try {
        auto t = create_distributed_telemetry(*comm, 4, opts,
                                              testing::fake_env({{"MEGATRON_OTEL_ENABLED", "1"}}));
        created[static_cast<std::size_t>(r)] = t != nullptr;
      } catch (const ConfigError& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(base);
  EXPECT_NE(errors[2].find("cannot be created"), std::string::npos) << errors[2];
  for (int r : {0, 1, 3}) {
    EXPECT_FALSE(created[static_cast<std::size_t>(r)]);
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("rank(s) 2 could not start their telemetry"),
              std::string::npos)
        << errors[static_cast<std::size_t>(r)];
  }
}

TEST(StartupAgreement, ZeroCollectiveTimeoutIsRefused) {
  TelemetryOptions opts;
  opts.collective_timeout = std::chrono::milliseconds(0);
  try {
    resolve_config(opts, testing::fake_env({}));
    ADD_FAILURE() << "a 0 ms timeout was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("collective_timeout=0 ms is not valid"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(resolve_config({}, testing::fake_env({{"LENS_COLLECTIVE_TIMEOUT_MS", "0"}})),
               ConfigError);
}

// The record's layout is the wire format between versions: each field at
// the place startup_agreement.cc's layout comment gives, little-endian.
TEST(StartupAgreement, TheRecordHoldsEachSettingAtItsDocumentedPlace) {
  Config c;
  c.enabled = true;
  c.span_groups = SpanGroupSet::parse("per_step,microbatch", "test");
  c.trace_scope = TraceScope::kPipeline;
  c.run_key = 0x0102030405060708ULL;
  c.step_budget_per_minute = 0x01020304;
  c.step_prefetch = true;
  c.clock_sync = true;
  c.clock_sync_exchanges = 7;
  c.step_context = StepContextMode::kDerived;
  c.clock_sync_steps = 0x0A0B0C0D;
  c.clock_sync_seconds = 0x11121314;
  c.step_verify_steps = 0x21222324;
  c.sampler.kind = Sampler::Kind::kTraceIdRatio;
  c.sampler.parent_based = true;
  c.sampler.ratio = 0.25;
  c.tail_selection = true;
  c.tail_keep = 3;
  c.tail_baseline_percent = 10;
  c.run_id = "run-7";
  const std::vector<std::uint8_t> r = startup_record(&c, 0x0304);
  ASSERT_EQ(r.size(), kStartupRecordBytes);
  const auto le = [&](std::size_t at, std::size_t bytes) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes; ++i) v |= std::uint64_t{r[at + i]} << (8 * i);
    return v;
  };
  EXPECT_EQ(std::string(r.begin(), r.begin() + 4), "LNSA");
  EXPECT_EQ(le(4, 2), kStepProtocolVersion);
  EXPECT_EQ(r[6], 1);  // enabled
  EXPECT_EQ(r[7], 0);  // no configuration error
  EXPECT_EQ(le(8, 4), 0x0304u);
  EXPECT_EQ(le(12, 4), c.span_groups.bits());
  EXPECT_EQ(r[16], 5);  // the run id's length
  EXPECT_EQ(r[17], static_cast<std::uint8_t>(TraceScope::kPipeline));
  EXPECT_EQ(le(18, 2), kCarrierFrameVersion);
  EXPECT_EQ(le(20, 8), 0x0102030405060708ULL);
  EXPECT_EQ(le(28, 4), 0x01020304u);
  EXPECT_EQ(r[32], 1);
  EXPECT_EQ(r[33], 1);
  EXPECT_EQ(r[34], 7);
  EXPECT_EQ(r[35], static_cast<std::uint8_t>(StepContextMode::kDerived));
  EXPECT_EQ(le(36, 4), 0x0A0B0C0Du);
  EXPECT_EQ(le(40, 4), 0x11121314u);
  EXPECT_EQ(le(44, 4), 0x21222324u);
  EXPECT_EQ(r[48], static_cast<std::uint8_t>(Sampler::Kind::kTraceIdRatio));
  EXPECT_EQ(r[49], 1);
  EXPECT_EQ(le(52, 8), 0x3FD0000000000000ULL);  // 0.25
  EXPECT_EQ(r[60], 1);
  EXPECT_EQ(r[61], 3);
  EXPECT_EQ(r[62], 10);
  EXPECT_EQ(std::string(r.begin() + 64, r.begin() + 69), "run-7");
  EXPECT_EQ(r[69], 0);
  // A rank whose configuration does not resolve: marked, and refused by
  // every rank that compares it.
  const std::vector<std::uint8_t> broken = startup_record(nullptr, 4);
  EXPECT_EQ(broken[7], 1);
  std::vector<std::uint8_t> both = r;
  both.insert(both.end(), broken.begin(), broken.end());
  try {
    compare_startup_records(0, both);
    FAIL() << "a broken rank's record was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 could not read their lens configuration"),
              std::string::npos)
        << e.what();
  }
}

// The agreement compares every job-wide row of the settings table, and a
// mismatch in any of them names the row's first variable.
TEST(StartupAgreement, EveryJobWideRowOfTheSettingsTableIsComparedByItsVariable) {
  std::set<std::string_view> job_wide;
  for (const SettingRow& row : setting_rows())
    if (row.job_wide) job_wide.insert(row.option);
  const auto agreed = agreed_options();
  EXPECT_EQ(std::set<std::string_view>(agreed.begin(), agreed.end()), job_wide);
  EXPECT_GE(job_wide.size(), 15u);

  for (const SettingRow& row : setting_rows()) {
    if (!row.job_wide) continue;
    std::string a, b;
    switch (row.kind) {
      case SettingKind::kFlag:
        a = "1", b = "0";
        break;
      case SettingKind::kCount:
        a = std::to_string(row.lo), b = std::to_string(row.lo + 1);
        break;
      case SettingKind::kChoice:
        a = std::string(row.accepted.substr(0, row.accepted.find(", ")));
        b = std::string(row.accepted.substr(row.accepted.find(", ") + 2));
        b = b.substr(0, b.find(", "));
        break;
      case SettingKind::kText:  // span groups
        a = "all", b = "default";
        break;
      default:  // the sampler
        a = "always_on", b = "always_off";
    }
    const std::string variable(row.variables[0]);
    const auto record = [&](const std::string& value) {
      std::map<std::string, std::string> env = {{"MEGATRON_OTEL_ENABLED", "1"},
                                                {"LENS_TAIL_SELECTION", "1"}};
      env[variable] = value;
      const Config c = resolve_config({}, testing::fake_env(env));
      return startup_record(&c, 2);
    };
    std::vector<std::uint8_t> both = record(a);
    const auto other = record(b);
    both.insert(both.end(), other.begin(), other.end());
    std::string error;
    try {
      compare_startup_records(0, both);
    } catch (const ConfigError& e) {
      error = e.what();
    }
    EXPECT_NE(error.find(variable + " differs across ranks"), std::string::npos)
        << row.option << " (" << a << " against " << b << "): " << error;
  }
}

TEST(TelemetryInstance, EveryTelemetryHasANumberOfItsOwnEvenAtTheSameAddress) {
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 8; ++i) {
    TelemetryOptions opts;
    opts.enabled = true;
    opts.exporter_instance = std::make_shared<InMemoryExporter>();
    auto t = Telemetry::create(opts, testing::fake_env({}));
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(seen.insert(t->instance()).second);
  }
}

}  // namespace
}  // namespace lens

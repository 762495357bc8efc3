#include "lens/startup_agreement.h"

#include <bit>
#include <cstring>
#include <optional>
#include <vector>

#include "byte_order.h"
#include "lens/carrier.h"
#include "lens/error.h"
#include "rank_list.h"

namespace lens {
namespace {

using detail::rank_list;

// One rank's settings as exchanged, fixed size, little-endian:
//   0  4  magic "LNSA"          17  1  trace scope
//   4  2  protocol version      18  2  carrier frame version
//   6  1  enabled               20  8  run key
//   7  1  configuration error   28  4  step budget per minute
//   8  4  PP size               32  1  step prefetch
//  12  4  span groups           33  1  clock sync on
//  16  1  run id length         34  1  clock sync exchanges
//                               35  1  step context mode
//                               36  4  clock sync every N steps
//                               40  4  clock sync every T seconds
//                               44  4  step check every N steps
//                               48  1  sampler kind
//                               49  1  sampler parent-based
//                               50  2  0
//                               52  8  sampler ratio (IEEE double)
//                               60  1  tail selection
//                               61  1  tail keep
//                               62  1  tail baseline percent
//                               63  1  0
//                               64 96  run id
constexpr std::size_t kRecordBytes = kStartupRecordBytes;
constexpr std::size_t kMaxRunIdBytes = 96;
constexpr std::size_t kRunIdAt = 64;
static_assert(kRunIdAt + kMaxRunIdBytes == kRecordBytes);
constexpr std::uint8_t kMagic[4] = {'L', 'N', 'S', 'A'};

struct Settings {
  std::uint16_t protocol = kStepProtocolVersion;
  std::uint8_t config_error = 0;  // this rank's configuration did not resolve
  std::uint8_t enabled = 0;
  std::uint32_t pp_size = 0;
  std::uint32_t span_groups = 0;
  std::uint8_t trace_scope = 0;
  std::uint16_t frame_version = kCarrierFrameVersion;
  std::uint64_t run_key = 0;
  std::uint32_t step_budget = 0;
  std::uint8_t step_prefetch = 0;
  std::uint8_t clock_sync = 0;
  std::uint8_t clock_sync_exchanges = 0;
  std::uint32_t clock_sync_steps = 0;
  std::uint32_t clock_sync_seconds = 0;
  std::uint8_t step_context = 0;
  std::uint32_t step_verify_steps = 0;
  std::uint8_t sampler_kind = 0;
  std::uint8_t sampler_parent_based = 0;
  std::uint64_t sampler_ratio_bits = 0;
  std::uint8_t tail_selection = 0;
  std::uint8_t tail_keep = 0;
  std::uint8_t tail_baseline = 0;
  std::string run_id;
};

std::array<std::uint8_t, kRecordBytes> encode(const Settings& s) {
  std::array<std::uint8_t, kRecordBytes> r{};
  std::memcpy(r.data(), kMagic, 4);
  detail::put_le16(r.data() + 4, s.protocol);
  r[6] = s.enabled;
  r[7] = s.config_error;
  detail::put_le32(r.data() + 8, s.pp_size);
  detail::put_le32(r.data() + 12, s.span_groups);
  r[16] = static_cast<std::uint8_t>(s.run_id.size());
  r[17] = s.trace_scope;
  detail::put_le16(r.data() + 18, s.frame_version);
  detail::put_le64(r.data() + 20, s.run_key);
  detail::put_le32(r.data() + 28, s.step_budget);
  r[32] = s.step_prefetch;
  r[33] = s.clock_sync;
  r[34] = s.clock_sync_exchanges;
  detail::put_le32(r.data() + 36, s.clock_sync_steps);
  detail::put_le32(r.data() + 40, s.clock_sync_seconds);
  r[35] = s.step_context;
  detail::put_le32(r.data() + 44, s.step_verify_steps);
  r[48] = s.sampler_kind;
  r[49] = s.sampler_parent_based;
  detail::put_le64(r.data() + 52, s.sampler_ratio_bits);
  r[60] = s.tail_selection;
  r[61] = s.tail_keep;
  r[62] = s.tail_baseline;
  std::memcpy(r.data() + kRunIdAt, s.run_id.data(), s.run_id.size());
  return r;
}

// Decodes another rank's record; a record that is not ours is reported as a
// protocol mismatch (version 0).
Settings decode(const std::uint8_t* r) {
  Settings s;
  if (std::memcmp(r, kMagic, 4) != 0) {
    s.protocol = 0;
    return s;
  }
  s.protocol = detail::get_le16(r + 4);
  s.enabled = r[6];
  s.config_error = r[7];
  s.pp_size = detail::get_le32(r + 8);
  s.span_groups = detail::get_le32(r + 12);
  s.trace_scope = r[17];
  s.frame_version = detail::get_le16(r + 18);
  s.run_key = detail::get_le64(r + 20);
  s.step_budget = detail::get_le32(r + 28);
  s.step_prefetch = r[32];
  s.clock_sync = r[33];
  s.clock_sync_exchanges = r[34];
  s.clock_sync_steps = detail::get_le32(r + 36);
  s.clock_sync_seconds = detail::get_le32(r + 40);
  s.step_context = r[35];
  s.step_verify_steps = detail::get_le32(r + 44);
  s.sampler_kind = r[48];
  s.sampler_parent_based = r[49];
  s.sampler_ratio_bits = detail::get_le64(r + 52);
  s.tail_selection = r[60];
  s.tail_keep = r[61];
  s.tail_baseline = r[62];
  const std::size_t n = std::min<std::size_t>(r[16], kMaxRunIdBytes);
  s.run_id.assign(reinterpret_cast<const char*>(r + kRunIdAt), n);
  return s;
}

}  // namespace

namespace {

std::vector<Settings> exchange(Communicator& comm, const Settings& mine,
                               std::chrono::milliseconds timeout) {
  const auto record = encode(mine);
  std::vector<std::uint8_t> all(kRecordBytes * static_cast<std::size_t>(comm.size()));
  comm.all_gather(record, all, timeout);
  std::vector<Settings> ranks;
  for (int r = 0; r < comm.size(); ++r)
    ranks.push_back(decode(all.data() + static_cast<std::size_t>(r) * kRecordBytes));
  return ranks;
}

Settings settings_of(const Config& config, int pipeline_parallel_size) {
  if (config.run_id.size() > kMaxRunIdBytes) {
    throw ConfigError("run id '" + config.run_id + "' is " + std::to_string(config.run_id.size()) +
                      " bytes; accepted: at most " + std::to_string(kMaxRunIdBytes) + " bytes");
  }
  Settings mine;
  mine.enabled = config.enabled ? 1 : 0;
  mine.pp_size = static_cast<std::uint32_t>(pipeline_parallel_size);
  mine.span_groups = config.span_groups.bits();
  mine.trace_scope = static_cast<std::uint8_t>(config.trace_scope);
  mine.run_key = config.run_key;
  mine.step_budget = config.step_budget_per_minute;
  mine.step_prefetch = config.step_prefetch ? 1 : 0;
  mine.clock_sync = config.clock_sync ? 1 : 0;
  mine.clock_sync_exchanges = static_cast<std::uint8_t>(config.clock_sync_exchanges);
  mine.clock_sync_steps = config.clock_sync_steps;
  mine.clock_sync_seconds = config.clock_sync_seconds;
  mine.step_context = static_cast<std::uint8_t>(config.step_context);
  mine.step_verify_steps = config.step_verify_steps;
  // The sampler decides every step in `derived` mode and every replica's
  // step in `pipeline` scope: each rank must decide alike.
  mine.sampler_kind = static_cast<std::uint8_t>(config.sampler.kind);
  mine.sampler_parent_based = config.sampler.parent_based ? 1 : 0;
  mine.sampler_ratio_bits = std::bit_cast<std::uint64_t>(config.sampler.ratio);
  // Tail selection: every rank chooses the same steps from the same figures.
  mine.tail_selection = config.tail_selection ? 1 : 0;
  mine.tail_keep = config.tail_selection ? static_cast<std::uint8_t>(config.tail_keep) : 0;
  mine.tail_baseline =
      config.tail_selection ? static_cast<std::uint8_t>(config.tail_baseline_percent) : 0;
  mine.run_id = config.run_id;
  return mine;
}

StartupAgreement compare(int my_rank, const std::vector<Settings>& ranks) {
  const int size = static_cast<int>(ranks.size());
  std::vector<int> broken;
  for (int r = 0; r < size; ++r)
    if (ranks[static_cast<std::size_t>(r)].config_error) broken.push_back(r);
  if (!broken.empty()) {
    throw ConfigError("lens start-up check failed on rank " + std::to_string(my_rank) +
                      ": rank(s) " + rank_list(broken) +
                      " could not read their lens configuration (their log names the setting)");
  }
  auto check = [&](const char* setting, auto value_of, auto show) {
    std::vector<int> differing;
    for (int r = 1; r < size; ++r)
      if (value_of(ranks[static_cast<std::size_t>(r)]) != value_of(ranks[0]))
        differing.push_back(r);
    if (differing.empty()) return;
    const Settings& other = ranks[static_cast<std::size_t>(differing[0])];
    throw ConfigError("lens start-up check failed on rank " + std::to_string(my_rank) + ": " +
                      setting + " differs across ranks: rank 0 has " + show(ranks[0]) +
                      ", rank(s) " + rank_list(differing) + " have " + show(other) + " (rank " +
                      std::to_string(differing[0]) + "); accepted: the same value on every rank");
  };
  check(
      "lens step protocol version", [](const Settings& s) { return s.protocol; },
      [](const Settings& s) { return std::to_string(s.protocol); });
  check(
      "lens carrier frame version", [](const Settings& s) { return s.frame_version; },
      [](const Settings& s) { return std::to_string(s.frame_version); });
  check(
      "MEGATRON_OTEL_ENABLED", [](const Settings& s) { return s.enabled; },
      [](const Settings& s) { return std::string(s.enabled ? "1" : "0"); });
  check(
      "pipeline-parallel size", [](const Settings& s) { return s.pp_size; },
      [](const Settings& s) { return std::to_string(s.pp_size); });
  check(
      "MEGATRON_OTEL_SPAN_GROUPS", [](const Settings& s) { return s.span_groups; },
      [](const Settings& s) { return "'" + SpanGroupSet(s.span_groups).to_string() + "'"; });
  check(
      "LENS_TRACE_SCOPE", [](const Settings& s) { return s.trace_scope; },
      [](const Settings& s) {
        return std::string(trace_scope_name(static_cast<TraceScope>(s.trace_scope & 1)));
      });
  check(
      "LENS_STEP_BUDGET", [](const Settings& s) { return s.step_budget; },
      [](const Settings& s) { return std::to_string(s.step_budget); });
  check(
      "LENS_STEP_PREFETCH", [](const Settings& s) { return s.step_prefetch; },
      [](const Settings& s) { return std::string(s.step_prefetch ? "1" : "0"); });
  check(
      "LENS_CLOCK_SYNC", [](const Settings& s) { return s.clock_sync; },
      [](const Settings& s) { return std::string(s.clock_sync ? "1" : "0"); });
  check(
      "LENS_CLOCK_SYNC_EXCHANGES", [](const Settings& s) { return s.clock_sync_exchanges; },
      [](const Settings& s) { return std::to_string(s.clock_sync_exchanges); });
  check(
      "LENS_CLOCK_SYNC_STEPS", [](const Settings& s) { return s.clock_sync_steps; },
      [](const Settings& s) { return std::to_string(s.clock_sync_steps); });
  check(
      "LENS_CLOCK_SYNC_SECONDS", [](const Settings& s) { return s.clock_sync_seconds; },
      [](const Settings& s) { return std::to_string(s.clock_sync_seconds); });
  check(
      "LENS_STEP_CONTEXT", [](const Settings& s) { return s.step_context; },
      [](const Settings& s) {
        return std::string(
            step_context_mode_name(static_cast<StepContextMode>(s.step_context & 1)));
      });
  check(
      "LENS_TAIL_SELECTION", [](const Settings& s) { return s.tail_selection; },
      [](const Settings& s) { return std::string(s.tail_selection ? "1" : "0"); });
  check(
      "LENS_TAIL_KEEP", [](const Settings& s) { return s.tail_keep; },
      [](const Settings& s) { return std::to_string(s.tail_keep); });
  check(
      "LENS_TAIL_BASELINE", [](const Settings& s) { return s.tail_baseline; },
      [](const Settings& s) { return std::to_string(s.tail_baseline); });
  check(
      "LENS_STEP_VERIFY_STEPS", [](const Settings& s) { return s.step_verify_steps; },
      [](const Settings& s) { return std::to_string(s.step_verify_steps); });
  check(
      "OTEL_TRACES_SAMPLER",
      [](const Settings& s) { return s.sampler_kind * 2 + s.sampler_parent_based; },
      [](const Settings& s) {
        Sampler sampler;
        sampler.kind = static_cast<Sampler::Kind>(s.sampler_kind % 3);
        sampler.parent_based = s.sampler_parent_based != 0;
        sampler.ratio = std::bit_cast<double>(s.sampler_ratio_bits);
        return "'" + sampler.describe() + "'";
      });
  check(
      "OTEL_TRACES_SAMPLER_ARG", [](const Settings& s) { return s.sampler_ratio_bits; },
      [](const Settings& s) {
        return std::to_string(std::bit_cast<double>(s.sampler_ratio_bits));
      });
  return {ranks[0].run_id, ranks[0].run_key};
}

}  // namespace

StartupAgreement agree_on_startup(Communicator& comm, const Config& config,
                                  int pipeline_parallel_size) {
  // A setting this rank cannot send still goes out as an error record, and
  // is thrown only after the exchange: the other ranks fail with it instead
  // of waiting for it.
  Settings mine;
  std::optional<ConfigError> error;
  try {
    mine = settings_of(config, pipeline_parallel_size);
  } catch (const ConfigError& e) {
    error = e;
    mine.config_error = 1;
  }
  if (comm.size() <= 1) {
    if (error) throw *error;
    return {config.run_id, config.run_key};
  }
  auto ranks = exchange(comm, mine, config.collective_timeout);
  if (error) throw *error;
  return compare(comm.rank(), ranks);
}

void agree_on_telemetry_start(Communicator& comm, const std::exception* failure,
                              std::chrono::milliseconds timeout) {
  const std::uint8_t mine = failure ? 1 : 0;
  std::vector<std::uint8_t> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const std::uint8_t>(&mine, 1), all, timeout);
  if (failure) throw ConfigError(failure->what());
  compare_telemetry_start(comm.rank(), all);
}

void compare_telemetry_start(int my_rank, std::span<const std::uint8_t> statuses) {
  std::vector<int> failed;
  for (std::size_t r = 0; r < statuses.size(); ++r)
    if (statuses[r] != 0) failed.push_back(static_cast<int>(r));
  if (failed.empty()) return;
  throw ConfigError("lens start-up failed on rank " + std::to_string(my_rank) + ": rank(s) " +
                    rank_list(failed) +
                    " could not start their telemetry (their log says why, e.g. a trace "
                    "directory they cannot write); every rank stops before the first step");
}

std::vector<std::uint8_t> startup_record(const Config* config, int pipeline_parallel_size) {
  Settings mine;
  if (config == nullptr)
    mine.config_error = 1;
  else
    mine = settings_of(*config, pipeline_parallel_size);
  const auto record = encode(mine);
  return {record.begin(), record.end()};
}

StartupAgreement compare_startup_records(int my_rank, std::span<const std::uint8_t> records) {
  if (records.empty() || records.size() % kRecordBytes != 0) {
    throw ConfigError("lens start-up check failed on rank " + std::to_string(my_rank) + ": " +
                      std::to_string(records.size()) + " bytes of start-up records; accepted: " +
                      "a whole number of " + std::to_string(kRecordBytes) + "-byte records");
  }
  std::vector<Settings> ranks;
  for (std::size_t at = 0; at < records.size(); at += kRecordBytes)
    ranks.push_back(decode(records.data() + at));
  return compare(my_rank, ranks);
}

std::unique_ptr<Telemetry> create_distributed_telemetry(Communicator& comm,
                                                        int pipeline_parallel_size,
                                                        TelemetryOptions options,
                                                        const EnvLookup& env) {
  if (!options.rank) options.rank = comm.rank();
  if (!options.world_size) options.world_size = comm.size();
  // A rank whose configuration does not resolve still takes part in the
  // exchange (flagging its error), so the other ranks fail with it instead of
  // waiting for it until the timeout.
  Config config;
  std::optional<ConfigError> error;
  Settings mine;
  try {
    config = resolve_config(options, env);
    mine = settings_of(config, pipeline_parallel_size);
  } catch (const ConfigError& e) {
    error = e;
    mine = Settings();
    mine.config_error = 1;
  }
  StartupAgreement agreed{config.run_id, config.run_key};
  if (comm.size() > 1) {
    auto ranks =
        exchange(comm, mine, error ? Config().collective_timeout : config.collective_timeout);
    if (error) throw *error;
    agreed = compare(comm.rank(), ranks);
  } else if (error) {
    throw *error;
  }
  // `enabled` is agreed, so every rank returns here alike.
  if (!config.enabled) return nullptr;
  // The telemetry (and its exporter: the trace file, the endpoint settings)
  // is created before the first step, and every rank learns whether every
  // other rank's started: one rank that cannot write its trace directory
  // fails the job here, not the other ranks' first broadcast later.
  std::unique_ptr<Telemetry> telemetry;
  std::optional<std::string> failure;
  options.run_id = agreed.run_id;
  options.run_key = agreed.run_key;
  try {
    telemetry = Telemetry::create(options, env);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (comm.size() > 1) {
    const ConfigError own(failure.value_or(""));
    agree_on_telemetry_start(comm, failure ? &own : nullptr, config.collective_timeout);
  } else if (failure) {
    throw ConfigError(*failure);
  }
  return telemetry;
}

}  // namespace lens

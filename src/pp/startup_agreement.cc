#include "lens/startup_agreement.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "lens/carrier.h"
#include "lens/error.h"
#include "lens/settings.h"
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

// Every field but the run id: an unsigned integer at a fixed place.
enum Field : std::size_t {
  kProtocol, kEnabled, kConfigError, kPpSize, kSpanGroups, kRunIdLength, kTraceScope,
  kFrameVersion, kRunKey, kStepBudget, kStepPrefetch, kClockSync, kClockSyncExchanges,
  kStepContext, kClockSyncSteps, kClockSyncSeconds, kStepVerifySteps, kSamplerKind,
  kSamplerParentBased, kSamplerRatioBits, kTailSelection, kTailKeep, kTailBaseline, kFieldCount
};
struct Place {
  std::size_t at, bytes;
};
constexpr Place kPlaces[kFieldCount] = {
    {4, 2},  {6, 1},  {7, 1},  {8, 4},  {12, 4}, {16, 1}, {17, 1}, {18, 2},
    {20, 8}, {28, 4}, {32, 1}, {33, 1}, {34, 1}, {35, 1}, {36, 4}, {40, 4},
    {44, 4}, {48, 1}, {49, 1}, {52, 8}, {60, 1}, {61, 1}, {62, 1}};

// One rank's settings: the fields as read from its record (so cut to their
// width), and its run id.
struct Settings {
  std::array<std::uint64_t, kFieldCount> v{};
  std::string run_id;
  Settings() {
    v[kProtocol] = kStepProtocolVersion;
    v[kFrameVersion] = kCarrierFrameVersion;
  }
};

template <Field f>
std::string number(const Settings& s) {
  return std::to_string(s.v[f]);
}
template <Field f>
std::string flag(const Settings& s) {
  return s.v[f] ? "1" : "0";
}
std::string span_groups(const Settings& s) {
  return "'" + SpanGroupSet(static_cast<std::uint32_t>(s.v[kSpanGroups])).to_string() + "'";
}
std::string trace_scope(const Settings& s) {
  return std::string(trace_scope_name(static_cast<TraceScope>(s.v[kTraceScope] & 1)));
}
std::string step_context(const Settings& s) {
  return std::string(step_context_mode_name(static_cast<StepContextMode>(s.v[kStepContext] & 1)));
}
std::string sampler(const Settings& s) {
  Sampler sampler;
  sampler.kind = static_cast<Sampler::Kind>(s.v[kSamplerKind] % 3);
  sampler.parent_based = s.v[kSamplerParentBased] != 0;
  sampler.ratio = std::bit_cast<double>(s.v[kSamplerRatioBits]);
  return "'" + sampler.describe() + "'";
}
std::string sampler_ratio(const Settings& s) {
  return std::to_string(std::bit_cast<double>(s.v[kSamplerRatioBits]));
}
std::uint64_t sampler_key(const Settings& s) {
  return s.v[kSamplerKind] * 2 + s.v[kSamplerParentBased];
}

// The settings every rank must agree on, in the order they are compared.
// Each is a row of the settings table (lens/settings.h) by its option, which
// gives the name a mismatch names (its first variable) and this rank's value
// (its number()), unless the row here says otherwise: `name` for what is not
// a table row (the versions, the PP size, set apart), `of` for a value that
// is not the row's number alone. `show` is how a value reads (null: carried,
// not compared); `key`, where it is not the field alone, what must match.
// Adding a job-wide setting is a row marked job-wide in the settings table,
// a row here and a place in the record (kPlaces, the layout above, and
// kStepProtocolVersion when the record changes).
struct Agreed {
  Field field;
  std::string_view option = {};
  std::string_view name = {};
  std::string (*show)(const Settings&) = nullptr;
  std::uint64_t (*key)(const Settings&) = nullptr;
  std::uint64_t (*of)(const Config&) = nullptr;
};
const Agreed kAgreed[] = {
    {.field = kProtocol, .name = "lens step protocol version", .show = number<kProtocol>},
    {.field = kFrameVersion, .name = "lens carrier frame version", .show = number<kFrameVersion>},
    {.field = kEnabled, .option = "enabled", .show = flag<kEnabled>},
    {.field = kPpSize, .name = "pipeline-parallel size", .show = number<kPpSize>},
    {.field = kSpanGroups, .option = "span_groups", .show = span_groups},
    {.field = kTraceScope, .option = "trace_scope", .show = trace_scope},
    {.field = kStepBudget, .option = "step_budget_per_minute", .show = number<kStepBudget>},
    {.field = kStepPrefetch, .option = "step_prefetch", .show = flag<kStepPrefetch>},
    {.field = kClockSync, .option = "clock_sync", .show = flag<kClockSync>},
    {.field = kClockSyncExchanges, .option = "clock_sync_exchanges",
     .show = number<kClockSyncExchanges>},
    {.field = kClockSyncSteps, .option = "clock_sync_steps", .show = number<kClockSyncSteps>},
    {.field = kClockSyncSeconds, .option = "clock_sync_seconds", .show = number<kClockSyncSeconds>},
    {.field = kStepContext, .option = "step_context", .show = step_context},
    // Tail selection: every rank chooses the same steps from the same
    // figures; keep and baseline matter only when it is on.
    {.field = kTailSelection, .option = "tail_selection", .show = flag<kTailSelection>},
    {.field = kTailKeep,
     .option = "tail_keep",
     .show = number<kTailKeep>,
     .of = [](const Config& c) -> std::uint64_t { return c.tail_selection ? c.tail_keep : 0; }},
    {.field = kTailBaseline,
     .option = "tail_baseline_percent",
     .show = number<kTailBaseline>,
     .of = [](const Config& c) -> std::uint64_t {
       return c.tail_selection ? c.tail_baseline_percent : 0;
     }},
    {.field = kStepVerifySteps, .option = "step_verify_steps", .show = number<kStepVerifySteps>},
    // The sampler decides every step in `derived` mode and every replica's
    // step in `pipeline` scope: each rank must decide alike.
    {.field = kSamplerKind,
     .option = "sampler",
     .show = sampler,
     .key = sampler_key,
     .of = [](const Config& c) -> std::uint64_t {
       return static_cast<std::uint64_t>(c.sampler.kind);
     }},
    {.field = kSamplerParentBased,
     .option = "sampler",
     .of = [](const Config& c) -> std::uint64_t { return c.sampler.parent_based; }},
    {.field = kSamplerRatioBits,
     .option = "sampler",
     .name = "OTEL_TRACES_SAMPLER_ARG",
     .show = sampler_ratio,
     .of = [](const Config& c) { return std::bit_cast<std::uint64_t>(c.sampler.ratio); }},
    // The run key: rank 0's is taken, not compared.
    {.field = kRunKey, .of = [](const Config& c) -> std::uint64_t { return c.run_key; }},
};

// The settings table's row of an agreed setting (null: not a row).
const SettingRow* row_of(const Agreed& a) {
  if (a.option.empty()) return nullptr;
  const SettingRow* row = find_setting(a.option);
  if (row == nullptr || !row->job_wide || (a.of == nullptr && row->number == nullptr))
    throw std::logic_error("lens: the start-up agreement names '" + std::string(a.option) +
                           "', which is not a job-wide row of the settings table");
  return row;
}

std::string name_of(const Agreed& a) {
  const SettingRow* row = row_of(a);
  return std::string(a.name.empty() && row ? row->variables[0] : a.name);
}

std::optional<std::uint64_t> value_of(const Agreed& a, const Config& c) {
  if (a.of) return a.of(c);
  if (const SettingRow* row = row_of(a)) return row->number(c);
  return std::nullopt;
}

void put(std::uint8_t* at, std::size_t bytes, std::uint64_t value) {
  for (std::size_t i = 0; i < bytes; ++i) at[i] = static_cast<std::uint8_t>(value >> (8 * i));
}
std::uint64_t get(const std::uint8_t* at, std::size_t bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < bytes; ++i) value |= std::uint64_t{at[i]} << (8 * i);
  return value;
}

std::array<std::uint8_t, kRecordBytes> encode(const Settings& s) {
  std::array<std::uint8_t, kRecordBytes> r{};
  std::memcpy(r.data(), kMagic, 4);
  for (std::size_t f = 0; f < kFieldCount; ++f)
    put(r.data() + kPlaces[f].at, kPlaces[f].bytes, f == kRunIdLength ? s.run_id.size() : s.v[f]);
  std::memcpy(r.data() + kRunIdAt, s.run_id.data(), s.run_id.size());
  return r;
}

// Decodes another rank's record; a record that is not ours is reported as a
// protocol mismatch (version 0).
Settings decode(const std::uint8_t* r) {
  Settings s;
  if (std::memcmp(r, kMagic, 4) != 0) {
    s.v[kProtocol] = 0;
    return s;
  }
  for (std::size_t f = 0; f < kFieldCount; ++f)
    s.v[f] = get(r + kPlaces[f].at, kPlaces[f].bytes);
  const std::size_t n = std::min<std::size_t>(s.v[kRunIdLength], kMaxRunIdBytes);
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
  for (const Agreed& a : kAgreed)
    if (const auto value = value_of(a, config)) mine.v[a.field] = *value;
  mine.v[kPpSize] = static_cast<std::uint32_t>(pipeline_parallel_size);
  mine.run_id = config.run_id;
  return mine;
}

StartupAgreement compare(int my_rank, const std::vector<Settings>& ranks) {
  const int size = static_cast<int>(ranks.size());
  std::vector<int> broken;
  for (int r = 0; r < size; ++r)
    if (ranks[static_cast<std::size_t>(r)].v[kConfigError]) broken.push_back(r);
  if (!broken.empty()) {
    throw ConfigError("lens start-up check failed on rank " + std::to_string(my_rank) +
                      ": rank(s) " + rank_list(broken) +
                      " could not read their lens configuration (their log names the setting)");
  }
  for (const Agreed& a : kAgreed) {
    if (a.show == nullptr) continue;
    const auto compared = [&](const Settings& s) { return a.key ? a.key(s) : s.v[a.field]; };
    std::vector<int> differing;
    for (int r = 1; r < size; ++r)
      if (compared(ranks[static_cast<std::size_t>(r)]) != compared(ranks[0]))
        differing.push_back(r);
    if (differing.empty()) continue;
    const Settings& other = ranks[static_cast<std::size_t>(differing[0])];
    throw ConfigError("lens start-up check failed on rank " + std::to_string(my_rank) + ": " +
                      name_of(a) + " differs across ranks: rank 0 has " + a.show(ranks[0]) +
                      ", rank(s) " + rank_list(differing) + " have " + a.show(other) + " (rank " +
                      std::to_string(differing[0]) + "); accepted: the same value on every rank");
  }
  return {ranks[0].run_id, ranks[0].v[kRunKey]};
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
    mine.v[kConfigError] = 1;
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

std::vector<std::string_view> agreed_options() {
  std::vector<std::string_view> out;
  for (const Agreed& a : kAgreed)
    if (row_of(a) != nullptr && std::find(out.begin(), out.end(), a.option) == out.end())
      out.push_back(a.option);
  return out;
}

std::vector<std::uint8_t> startup_record(const Config* config, int pipeline_parallel_size) {
  Settings mine;
  if (config == nullptr)
    mine.v[kConfigError] = 1;
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
    mine.v[kConfigError] = 1;
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

/// \file
/// The start-up agreement check, and creating telemetry for a distributed job.
///
/// Settings that decide whether a rank takes part in the step protocol's
/// collectives must be the same on every rank, or the job deadlocks at the
/// first step. agree_on_startup() is one all-gather over the communicator, run
/// by EVERY rank (enabled or not) once at start-up: ranks compare whether
/// telemetry is enabled, the pipeline-parallel size, the span groups, the
/// trace scope, the step budget and prefetch, the clock sync settings, the
/// step context mode and check interval, the sampler and the protocol and
/// frame versions, and take rank 0's run id and run key. A mismatch throws
/// ConfigError on every rank alike, naming the setting and which ranks differ, instead of a hang
/// later.
///
/// Thread safety: collective; call from one thread per rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lens/communicator.h"
#include "lens/config.h"
#include "lens/telemetry.h"

namespace lens {

/// 2: the start-up record carries the carrier frame version, the step
/// budget and the step prefetch. 3: and the clock sync settings. 4: and the
/// step context mode, the step check interval and the sampler.
inline constexpr std::uint16_t kStepProtocolVersion = 4;
inline constexpr std::size_t kStartupRecordBytes = 160;

struct StartupAgreement {
  std::string run_id;         ///< rank 0's
  std::uint64_t run_key = 0;  ///< rank 0's random run key (Config::run_key)
};

/// Throws ConfigError on a mismatch, CommError if the all-gather fails.
StartupAgreement agree_on_startup(Communicator& comm, const Config& config,
                                  int pipeline_parallel_size);

/// The fixed-size record agree_on_startup exchanges for one rank
/// (kStartupRecordBytes): its settings, or, for a null config, the mark of a
/// rank whose configuration did not resolve (the others then fail with it).
/// For engines driven outside lens: the Python package all-gathers these
/// bytes over torch.distributed and compares them with
/// compare_startup_records, so the rules live here only. Throws ConfigError
/// on a run id too long for the record.
std::vector<std::uint8_t> startup_record(const Config* config, int pipeline_parallel_size);

/// The options of the settings table's rows the agreement compares: every
/// job-wide row's, each once (a test holds the two to each other).
std::vector<std::string_view> agreed_options();

/// Compares every rank's record (concatenated in rank order) as
/// agree_on_startup does and returns rank 0's run id and key; throws
/// ConfigError on a mismatch, a rank that could not read its configuration,
/// or records that are not whole.
StartupAgreement compare_startup_records(int my_rank, std::span<const std::uint8_t> records);

/// After each rank tried to create its telemetry: one all-gather of a byte
/// per rank, so that a rank whose telemetry did not start (`failure`, e.g.
/// its trace directory cannot be written) fails every rank alike, before the
/// first step's broadcast would wait for it. Throws ConfigError on every
/// rank when any failed (`failure`'s message on the rank it happened on).
void agree_on_telemetry_start(Communicator& comm, const std::exception* failure,
                              std::chrono::milliseconds timeout);

/// The comparison agree_on_telemetry_start makes, for engines driven outside
/// lens (the Python package): one byte per rank, 0 started, 1 failed.
void compare_telemetry_start(int my_rank, std::span<const std::uint8_t> statuses);

/// Resolves the configuration, runs agree_on_startup (when comm has more than
/// one rank), creates the telemetry with the agreed run id and this rank's
/// rank and world size, and runs agree_on_telemetry_start. Returns nullptr
/// when telemetry is disabled, after taking part in both checks.
std::unique_ptr<Telemetry> create_distributed_telemetry(
    Communicator& comm, int pipeline_parallel_size, TelemetryOptions options = {},
    const EnvLookup& env = process_environment());

}  // namespace lens

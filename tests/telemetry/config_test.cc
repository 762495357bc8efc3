#include "lens/config.h"

#include <gtest/gtest.h>

#include "lens/error.h"
#include "test_env.h"

namespace lens {
namespace {

using testing::fake_env;

std::string config_error(const TelemetryOptions& options, std::map<std::string, std::string> env) {
  try {
    resolve_config(options, fake_env(std::move(env)));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, OffUnlessEnabled) {
  EXPECT_FALSE(resolve_config({}, fake_env({})).enabled);
  EXPECT_TRUE(resolve_config({}, fake_env({{"MEGATRON_OTEL_ENABLED", "1"}})).enabled);
  EXPECT_TRUE(resolve_config({}, fake_env({{"MEGATRON_OTEL_ENABLED", "TRUE"}})).enabled);
  EXPECT_FALSE(resolve_config({}, fake_env({{"MEGATRON_OTEL_ENABLED", "0"}})).enabled);
  EXPECT_FALSE(resolve_config({}, fake_env({{"MEGATRON_OTEL_ENABLED", ""}})).enabled);
}

TEST(Config, NemoLensPrefixIsTheFallback) {
  EXPECT_TRUE(resolve_config({}, fake_env({{"NEMO_LENS_ENABLED", "yes"}})).enabled);
  EXPECT_FALSE(
      resolve_config({}, fake_env({{"MEGATRON_OTEL_ENABLED", "0"}, {"NEMO_LENS_ENABLED", "1"}}))
          .enabled);
  auto c = resolve_config(
      {}, fake_env({{"NEMO_LENS_SPAN_GROUPS", "all"}, {"NEMO_LENS_RUN_ID", "nemo-run"}}));
  EXPECT_EQ(c.span_groups, SpanGroupSet::all());
  EXPECT_EQ(c.run_id, "nemo-run");
}

TEST(Config, SdkDisabledWins) {
  EXPECT_FALSE(
      resolve_config({}, fake_env({{"MEGATRON_OTEL_ENABLED", "1"}, {"OTEL_SDK_DISABLED", "true"}}))
          .enabled);
  TelemetryOptions opts;
  opts.enabled = true;
  EXPECT_FALSE(resolve_config(opts, fake_env({{"OTEL_SDK_DISABLED", "TRUE"}})).enabled);
  EXPECT_TRUE(resolve_config(opts, fake_env({{"OTEL_SDK_DISABLED", "false"}})).enabled);
}

TEST(Config, ProgrammaticOptionsOverrideEnvironment) {
  TelemetryOptions opts;
  opts.enabled = false;
  opts.span_groups = "per_step";
  opts.run_id = "from-code";
  opts.service_name = "svc-code";
  opts.max_queue_size = 64;
  opts.max_export_batch_size = 8;
  opts.rank = 3;
  opts.world_size = 4;
  auto c = resolve_config(opts, fake_env({{"MEGATRON_OTEL_ENABLED", "1"},
                                          {"MEGATRON_OTEL_SPAN_GROUPS", "all"},
                                          {"MEGATRON_OTEL_RUN_ID", "from-env"},
                                          {"OTEL_SERVICE_NAME", "svc-env"},
                                          {"OTEL_BSP_MAX_QUEUE_SIZE", "4096"},
                                          {"RANK", "1"},
                                          {"WORLD_SIZE", "2"}}));
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.span_groups, SpanGroupSet::per_step_preset());
  EXPECT_EQ(c.run_id, "from-code");
  EXPECT_EQ(c.service_name, "svc-code");
  EXPECT_EQ(c.batch.max_queue_size, 64u);
  EXPECT_EQ(c.batch.max_export_batch_size, 8u);
  EXPECT_EQ(*c.rank, 3);
  EXPECT_EQ(*c.world_size, 4);
}

TEST(Config, Defaults) {
  auto c = resolve_config({}, fake_env({}));
  EXPECT_EQ(c.span_groups, SpanGroupSet::default_preset());
  EXPECT_EQ(c.exporter, "file");
  EXPECT_EQ(c.service_name, "megatron-lm");
  EXPECT_TRUE(c.run_id_generated);
  EXPECT_FALSE(c.run_id.empty());
  EXPECT_EQ(c.batch.max_queue_size, 2048u);
  EXPECT_EQ(c.batch.max_export_batch_size, 512u);
  EXPECT_EQ(c.batch.schedule_delay.count(), 5000);
  EXPECT_EQ(c.batch.export_timeout.count(), 30000);
  EXPECT_EQ(c.span_limits.attribute_count, 128u);
  EXPECT_EQ(c.span_limits.event_count, 128u);
  EXPECT_EQ(c.span_limits.link_count, 128u);
  EXPECT_EQ(c.trace_dir, "lens-traces");
  EXPECT_FALSE(c.rank);
  EXPECT_EQ(c.step_context, StepContextMode::kBroadcast);
  EXPECT_EQ(c.step_verify_steps, 100u);
}

TEST(Config, StepContextFromEnvironmentAndOptions) {
  auto c = resolve_config(
      {}, fake_env({{"LENS_STEP_CONTEXT", "Derived"}, {"LENS_STEP_VERIFY_STEPS", "0"}}));
  EXPECT_EQ(c.step_context, StepContextMode::kDerived);
  EXPECT_EQ(c.step_verify_steps, 0u);
  TelemetryOptions o;
  o.step_context = StepContextMode::kBroadcast;
  o.step_verify_steps = 7;
  c = resolve_config(o, fake_env({{"LENS_STEP_CONTEXT", "derived"}}));
  EXPECT_EQ(c.step_context, StepContextMode::kBroadcast);
  EXPECT_EQ(c.step_verify_steps, 7u);
  o.step_verify_steps = 100000001;
  EXPECT_THROW(resolve_config(o, fake_env({})), ConfigError);
}

TEST(Config, ServiceNamePrecedence) {
  EXPECT_EQ(resolve_config({}, fake_env({{"OTEL_RESOURCE_ATTRIBUTES", "service.name=from-ra"}}))
                .service_name,
            "from-ra");
  EXPECT_EQ(resolve_config({}, fake_env({{"OTEL_RESOURCE_ATTRIBUTES", "service.name=from-ra"},
                                         {"OTEL_SERVICE_NAME", "from-sn"}}))
                .service_name,
            "from-sn");
}

TEST(Config, ResourceAttributesArePercentDecoded) {
  auto c = resolve_config(
      {}, fake_env({{"OTEL_RESOURCE_ATTRIBUTES", "team=ml%20infra, cluster = eos,empty="}}));
  ASSERT_EQ(c.resource_attributes.size(), 3u);
  EXPECT_EQ(c.resource_attributes[0].key, "team");
  EXPECT_EQ(std::get<std::string>(c.resource_attributes[0].value), "ml infra");
  EXPECT_EQ(std::get<std::string>(c.resource_attributes[1].value), "eos");
  EXPECT_EQ(std::get<std::string>(c.resource_attributes[2].value), "");
}

TEST(Config, RunIdPrecedence) {
  EXPECT_EQ(resolve_config({}, fake_env({{"SLURM_JOB_ID", "1234"}})).run_id, "1234");
  EXPECT_EQ(
      resolve_config({}, fake_env({{"SLURM_JOB_ID", "1234"}, {"MEGATRON_OTEL_RUN_ID", "mine"}}))
          .run_id,
      "mine");
}

TEST(Config, TraceFileDefaultsAndPlaceholders) {
  auto c = resolve_config({}, fake_env({{"RANK", "2"},
                                        {"WORLD_SIZE", "4"},
                                        {"MEGATRON_OTEL_RUN_ID", "r1"},
                                        {"LENS_TRACE_DIR", "/tmp/t"}}));
  EXPECT_EQ(trace_file_path(c), "/tmp/t/r1/rank-2.otlp.jsonl");
  c = resolve_config({}, fake_env({{"OMPI_COMM_WORLD_RANK", "1"},
                                   {"OMPI_COMM_WORLD_SIZE", "2"},
                                   {"MEGATRON_OTEL_RUN_ID", "r2"},
                                   {"LENS_TRACE_FILE", "{run_id}-{rank}.jsonl"}}));
  EXPECT_EQ(trace_file_path(c), "lens-traces/r2/r2-1.jsonl");
}

struct BadValue {
  const char* variable;
  const char* value;
  const char* expected_in_message;
};

class BadValues : public ::testing::TestWithParam<BadValue> {};

TEST_P(BadValues, FailWithMessageNamingVariableValueAndAccepted) {
  const auto& b = GetParam();
  std::string msg = config_error({}, {{b.variable, b.value}});
  ASSERT_FALSE(msg.empty()) << b.variable << "=" << b.value << " was accepted";
  EXPECT_NE(msg.find(b.variable), std::string::npos) << msg;
  EXPECT_NE(msg.find(b.value), std::string::npos) << msg;
  EXPECT_NE(msg.find("accepted"), std::string::npos) << msg;
  EXPECT_NE(msg.find(b.expected_in_message), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadValues,
    ::testing::Values(BadValue{"MEGATRON_OTEL_ENABLED", "maybe", "true"},
                      BadValue{"OTEL_SDK_DISABLED", "perhaps", "false"},
                      BadValue{"MEGATRON_OTEL_SPAN_GROUPS", "default,bogus", "communication"},
                      BadValue{"NEMO_LENS_SPAN_GROUPS", "stepz", "per_step"},
                      BadValue{"MEGATRON_OTEL_EXPORTER", "jaeger", "file"},
                      BadValue{"OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318", "http://"},
                      BadValue{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "http/protobuf"},
                      BadValue{"OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "integer"},
                      BadValue{"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "gzip"},
                      BadValue{"OTEL_EXPORTER_OTLP_CERTIFICATE", "/no/such/ca.pem", "readable"},
                      BadValue{"OTEL_BSP_MAX_QUEUE_SIZE", "lots", "integer"},
                      BadValue{"OTEL_BSP_MAX_QUEUE_SIZE", "0", "integer from 1"},
                      BadValue{"OTEL_BSP_SCHEDULE_DELAY", "-5", "integer"},
                      BadValue{"OTEL_BSP_EXPORT_TIMEOUT", "10s", "integer"},
                      BadValue{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "12x", "integer"},
                      BadValue{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "1e3", "integer"},
                      BadValue{"OTEL_SPAN_EVENT_COUNT_LIMIT", "many", "integer"},
                      BadValue{"OTEL_SPAN_LINK_COUNT_LIMIT", "99999999999999999999", "integer"},
                      BadValue{"OTEL_RESOURCE_ATTRIBUTES", "a=1,broken", "'broken'"},
                      BadValue{"OTEL_RESOURCE_ATTRIBUTES", "=value", "empty key"},
                      BadValue{"OTEL_RESOURCE_ATTRIBUTES", "a=%zz", "percent"},
                      BadValue{"RANK", "two", "integer"},
                      BadValue{"WORLD_SIZE", "0", "integer from 1"},
                      BadValue{"LENS_TRACE_FILE", "../escape.jsonl", "no '/'"},
                      BadValue{"LENS_STEP_CONTEXT", "gossip", "broadcast, derived"},
                      BadValue{"LENS_STEP_VERIFY_STEPS", "-1", "integer"},
                      BadValue{"LENS_STEP_VERIFY_STEPS", "100000001", "integer"},
                      BadValue{"LENS_DEVICE_MAX_PENDING", "0", "integer from 1"},
                      BadValue{"LENS_DEVICE_MAX_PENDING", "many", "integer"},
                      BadValue{"LENS_DEVICE_MAX_PENDING", "8193", "integer"},
                      BadValue{"LENS_DEVICE_ANCHOR_MS", "50", "integer from 100"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(Config, DeviceSettingsFromOptionsOverTheEnvironmentAndBounded) {
  TelemetryOptions options;
  options.enabled = true;
  Config c = resolve_config(
      options, fake_env({{"LENS_DEVICE_MAX_PENDING", "64"}, {"LENS_DEVICE_ANCHOR_MS", "1000"}}));
  EXPECT_EQ(c.device_max_pending, 64u);
  EXPECT_EQ(c.device_anchor_ms, 1000u);
  options.device_max_pending = 8;
  c = resolve_config(options, fake_env({{"LENS_DEVICE_MAX_PENDING", "64"}}));
  EXPECT_EQ(c.device_max_pending, 8u);
  EXPECT_EQ(c.device_anchor_ms, 5000u) << "the default";
  options.device_max_pending = 0;
  EXPECT_THROW(resolve_config(options, fake_env({})), ConfigError);
}

TEST(Config, RunIdMustBeSafeAsDirectoryName) {
  std::string msg = config_error({}, {{"MEGATRON_OTEL_RUN_ID", "../etc"}});
  EXPECT_NE(msg.find("run id '../etc'"), std::string::npos) << msg;
}

TEST(Config, BatchLargerThanQueueIsAnError) {
  std::string msg = config_error(
      {}, {{"OTEL_BSP_MAX_QUEUE_SIZE", "10"}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "20"}});
  EXPECT_NE(msg.find("OTEL_BSP_MAX_EXPORT_BATCH_SIZE=20"), std::string::npos) << msg;
}

TEST(Config, RankMustBeBelowWorldSize) {
  std::string msg = config_error({}, {{"RANK", "4"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(msg.find("rank 4"), std::string::npos) << msg;
}

TEST(Config, LimitsFromEnvironment) {
  auto c = resolve_config({}, fake_env({{"OTEL_ATTRIBUTE_COUNT_LIMIT", "5"},
                                        {"OTEL_SPAN_EVENT_COUNT_LIMIT", "6"},
                                        {"OTEL_SPAN_LINK_COUNT_LIMIT", "7"},
                                        {"OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "8"}}));
  EXPECT_EQ(c.span_limits.attribute_count, 5u);
  EXPECT_EQ(c.span_limits.attribute_per_event_count, 5u);
  EXPECT_EQ(c.span_limits.event_count, 6u);
  EXPECT_EQ(c.span_limits.link_count, 7u);
  EXPECT_EQ(c.span_limits.attribute_per_link_count, 8u);
}

TEST(Config, OtlpEndpointSelectsTheOtlpExporter) {
  auto c = resolve_config({}, fake_env({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318/"}}));
  EXPECT_EQ(c.exporter, "otlp");
  EXPECT_EQ(c.otlp.endpoint, "http://x:4318/v1/traces");
  EXPECT_FALSE(c.otlp.json);
  EXPECT_FALSE(c.otlp.gzip);
  EXPECT_EQ(c.otlp.timeout.count(), 10000);
  c = resolve_config(
      {}, fake_env({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318"},
                    {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://y/custom"},
                    {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
                    {"OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"},
                    {"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"},
                    {"OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc, x-team = ml"}}));
  EXPECT_EQ(c.otlp.endpoint, "https://y/custom");
  EXPECT_TRUE(c.otlp.json);
  EXPECT_TRUE(c.otlp.gzip);
  EXPECT_EQ(c.otlp.timeout.count(), 2500);
  ASSERT_EQ(c.otlp.headers.size(), 2u);
  EXPECT_EQ(c.otlp.headers[0],
            (std::pair<std::string, std::string>{"authorization", "Bearer abc"}));
  EXPECT_EQ(c.otlp.headers[1], (std::pair<std::string, std::string>{"x-team", "ml"}));
  // An explicit exporter wins over the endpoint.
  c = resolve_config({}, fake_env({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:4318"},
                                   {"MEGATRON_OTEL_EXPORTER", "file"}}));
  EXPECT_EQ(c.exporter, "file");
  c = resolve_config({}, fake_env({{"MEGATRON_OTEL_EXPORTER", "otlp"}}));
  EXPECT_EQ(c.otlp.endpoint, "http://localhost:4318/v1/traces");
}

TEST(Config, MalformedHeadersNeverEchoTheirValues) {
  std::string msg =
      config_error({}, {{"OTEL_EXPORTER_OTLP_HEADERS", "authorization=secret-token,broken"}});
  EXPECT_NE(msg.find("OTEL_EXPORTER_OTLP_HEADERS: member 2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("secret-token"), std::string::npos) << msg;
  msg = config_error({}, {{"OTEL_EXPORTER_OTLP_HEADERS", "x=a%0d%0aInjected: 1"}});
  EXPECT_NE(msg.find("line break"), std::string::npos) << msg;
  // A header name must be an HTTP token; the name is shown, the value never.
  for (const char* bad : {"bad key=secret-value", "x:y=secret-value", "caf\xc3\xa9=secret-value"}) {
    msg = config_error({}, {{"OTEL_EXPORTER_OTLP_HEADERS", bad}});
    EXPECT_NE(msg.find("is not an HTTP token"), std::string::npos) << bad << ": " << msg;
    EXPECT_EQ(msg.find("secret-value"), std::string::npos) << msg;
  }
  EXPECT_EQ(config_error({}, {{"OTEL_EXPORTER_OTLP_HEADERS", "X-Api_Key.v2~=ok"}}), "");
}

TEST(Config, EndpointsAreShownWithTheirCredentialsRedacted) {
  const std::string msg =
      config_error({}, {{"OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://user:hunter2@host/?token=abc"}});
  EXPECT_NE(msg.find("OTEL_EXPORTER_OTLP_ENDPOINT='ftp://***@host/?token=***'"), std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("hunter2"), std::string::npos) << msg;
}

TEST(RedactedUrl, HidesUserInfoAndQueryValuesOnly) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://localhost:4318/v1/traces", "http://localhost:4318/v1/traces"},
      {"https://user:token@collector:4318/v1/traces", "https://***@collector:4318/v1/traces"},
      {"https://token@collector/v1/traces?api-key=s3cr3t&region=eu",
       "https://***@collector/v1/traces?api-key=***&region=***"},
      {"http://host/p?flag", "http://host/p?flag"},
      {"http://host/p?k=v#frag", "http://host/p?k=***#frag"},
      {"http://host/a@b", "http://host/a@b"},  // an @ in the path is not user info
  };
  for (const auto& [url, shown] : cases) EXPECT_EQ(redacted_url(url), shown) << url;
}

}  // namespace
}  // namespace lens

namespace lens {
namespace {

TEST(ConfigSampler, DefaultIsParentBasedAlwaysOn) {
  auto c = resolve_config({}, testing::fake_env({}));
  EXPECT_TRUE(c.sampler.parent_based);
  EXPECT_EQ(c.sampler.kind, Sampler::Kind::kAlwaysOn);
}

TEST(ConfigSampler, ParsesKindsAndRatio) {
  auto c = resolve_config({}, testing::fake_env({{"OTEL_TRACES_SAMPLER", "traceidratio"},
                                                 {"OTEL_TRACES_SAMPLER_ARG", "0.25"}}));
  EXPECT_FALSE(c.sampler.parent_based);
  EXPECT_EQ(c.sampler.kind, Sampler::Kind::kTraceIdRatio);
  EXPECT_DOUBLE_EQ(c.sampler.ratio, 0.25);
  c = resolve_config({}, testing::fake_env({{"OTEL_TRACES_SAMPLER", "ParentBased_Always_Off"}}));
  EXPECT_TRUE(c.sampler.parent_based);
  EXPECT_EQ(c.sampler.kind, Sampler::Kind::kAlwaysOff);
}

TEST(ConfigSampler, BadValuesNameTheVariable) {
  std::string msg = config_error({}, {{"OTEL_TRACES_SAMPLER", "sometimes"}});
  EXPECT_NE(msg.find("OTEL_TRACES_SAMPLER='sometimes'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("parentbased_traceidratio"), std::string::npos) << msg;
  msg = config_error({},
                     {{"OTEL_TRACES_SAMPLER", "traceidratio"}, {"OTEL_TRACES_SAMPLER_ARG", "1.5"}});
  EXPECT_NE(msg.find("OTEL_TRACES_SAMPLER_ARG='1.5'"), std::string::npos) << msg;
  msg = config_error(
      {}, {{"OTEL_TRACES_SAMPLER", "traceidratio"}, {"OTEL_TRACES_SAMPLER_ARG", "half"}});
  EXPECT_NE(msg.find("a number from 0 to 1"), std::string::npos) << msg;
  msg = config_error({}, {{"LENS_COLLECTIVE_TIMEOUT_MS", "0"}});
  EXPECT_NE(msg.find("LENS_COLLECTIVE_TIMEOUT_MS"), std::string::npos) << msg;
}

// Tail selection: off by default; on, the hold's bounds from the settings;
// values out of range refused naming the setting.
TEST(Config, TailSelectionSettings) {
  const Config off = resolve_config({}, fake_env({{"MEGATRON_OTEL_ENABLED", "1"}}));
  EXPECT_FALSE(off.tail_selection);
  EXPECT_EQ(off.batch.hold.max_steps, 0u);
  const Config on = resolve_config({}, fake_env({{"MEGATRON_OTEL_ENABLED", "1"},
                                                 {"LENS_TAIL_SELECTION", "1"},
                                                 {"LENS_TAIL_KEEP", "3"},
                                                 {"LENS_TAIL_BASELINE", "5"},
                                                 {"LENS_TAIL_HOLD_STEPS", "32"},
                                                 {"LENS_TAIL_HOLD_MB", "8"}}));
  EXPECT_TRUE(on.tail_selection);
  EXPECT_EQ(on.tail_keep, 3u);
  EXPECT_EQ(on.tail_baseline_percent, 5u);
  EXPECT_EQ(on.batch.hold.max_steps, 32u);
  EXPECT_EQ(on.batch.hold.max_bytes, 8u << 20);
  const Config defaults =
      resolve_config({}, fake_env({{"MEGATRON_OTEL_ENABLED", "1"}, {"LENS_TAIL_SELECTION", "1"}}));
  EXPECT_EQ(defaults.batch.hold.max_steps, 64u);
  EXPECT_EQ(defaults.batch.hold.max_bytes, 256u << 20);
  EXPECT_EQ(defaults.tail_keep, 1u);
  for (const auto& [setting, value] :
       std::vector<std::pair<std::string, std::string>>{{"LENS_TAIL_SELECTION", "maybe"},
                                                        {"LENS_TAIL_KEEP", "0"},
                                                        {"LENS_TAIL_KEEP", "256"},
                                                        {"LENS_TAIL_BASELINE", "101"},
                                                        {"LENS_TAIL_HOLD_STEPS", "0"},
                                                        {"LENS_TAIL_HOLD_STEPS", "5000"},
                                                        {"LENS_TAIL_HOLD_MB", "0"}}) {
    const std::string e = config_error({}, {{"MEGATRON_OTEL_ENABLED", "1"}, {setting, value}});
    EXPECT_NE(e.find(setting), std::string::npos) << setting << "=" << value << ": " << e;
  }
  TelemetryOptions o;
  o.tail_keep = 300;
  EXPECT_NE(config_error(o, {}).find("tail_keep=300"), std::string::npos);
}

// Metrics by OTLP: off unless asked, the metrics settings over the shared
// ones, the endpoint's path /v1/metrics, and a table of refused values.
TEST(MetricsExportConfig, FromTheEnvironment) {
  const MetricsExportConfig off = resolve_metrics_export(fake_env({}));
  EXPECT_FALSE(off.otlp);
  EXPECT_EQ(off.options.endpoint, "http://localhost:4318/v1/metrics");
  EXPECT_EQ(off.interval, std::chrono::milliseconds(60000));
  EXPECT_FALSE(resolve_metrics_export(fake_env({{"OTEL_METRICS_EXPORTER", "none"}})).otlp);

  const MetricsExportConfig m = resolve_metrics_export(fake_env({
      {"OTEL_METRICS_EXPORTER", "OTLP"},
      {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"},
      {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"},
      {"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json"},
      {"OTEL_EXPORTER_OTLP_HEADERS", "a=1"},
      {"OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "gzip"},
      {"OTEL_METRIC_EXPORT_INTERVAL", "15000"},
      {"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "Cumulative"},
  }));
  EXPECT_TRUE(m.otlp);
  EXPECT_EQ(m.options.endpoint, "http://collector:4318/v1/metrics");
  EXPECT_TRUE(m.options.json) << "the metrics setting wins";
  EXPECT_TRUE(m.options.gzip);
  ASSERT_EQ(m.options.headers.size(), 1u);
  EXPECT_EQ(m.options.headers[0].first, "a");
  EXPECT_EQ(m.interval, std::chrono::milliseconds(15000));
  EXPECT_EQ(resolve_metrics_export(
                fake_env({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"},
                          {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "https://m.example/ingest"}}))
                .options.endpoint,
            "https://m.example/ingest");
  // The traces' own settings do not reach the metrics.
  EXPECT_EQ(resolve_metrics_export(
                fake_env({{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/v1/traces"}}))
                .options.endpoint,
            "http://localhost:4318/v1/metrics");

  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> refused = {
      {{{"OTEL_METRICS_EXPORTER", "prometheus"}}, "OTEL_METRICS_EXPORTER"},
      {{{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "collector:4318"}},
       "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"},
      {{{"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"}}, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"},
      {{{"OTEL_METRIC_EXPORT_INTERVAL", "0"}}, "OTEL_METRIC_EXPORT_INTERVAL"},
      {{{"OTEL_METRIC_EXPORT_INTERVAL", "soon"}}, "OTEL_METRIC_EXPORT_INTERVAL"},
      {{{"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta"}},
       "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"},
  };
  for (const auto& [env, named] : refused) {
    std::string error;
    try {
      resolve_metrics_export(fake_env(env));
    } catch (const ConfigError& e) {
      error = e.what();
    }
    EXPECT_NE(error.find(named), std::string::npos) << named << ": " << error;
  }
}

}  // namespace
}  // namespace lens

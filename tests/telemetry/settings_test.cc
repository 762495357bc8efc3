// The settings table: every row's option and variables reach the same
// place, its bounds and names hold on both paths, the README names every
// variable, and code gives only what the table lists.
#include "lens/settings.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "lens/error.h"
#include "test_env.h"

namespace lens {
namespace {

using testing::fake_env;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// A value of a scalar row as a variable gives it and as code gives it.
struct Sample {
  std::string text;
  SettingValue value;
};

std::vector<Sample> samples(const SettingRow& row) {
  switch (row.kind) {
    case SettingKind::kFlag:
      return {{"true", true}, {"0", false}};
    case SettingKind::kCount:
      return {{std::to_string(row.lo), std::int64_t{row.lo}},
              {std::to_string(row.hi), std::int64_t{row.hi}}};
    case SettingKind::kMillis:
      return {{std::to_string(row.hi), static_cast<double>(row.hi) / 1000},
              {"2500", 2.5}};
    case SettingKind::kChoice: {
      std::vector<Sample> out;
      std::string_view rest = row.accepted;
      while (!rest.empty()) {
        const auto comma = rest.find(", ");
        const std::string name(rest.substr(0, comma));
        out.push_back({name, name});
        rest = comma == std::string_view::npos ? "" : rest.substr(comma + 2);
      }
      return out;
    }
    default:
      return {};
  }
}

// Each scalar row: a value in its first variable and the same value given in
// code resolve to the same shown value, which is that value; code's value
// wins over the variable's.
TEST(SettingsTable, AVariableAndCodeReachTheSamePlace) {
  int checked = 0;
  for (const SettingRow& row : setting_rows()) {
    const auto values = samples(row);
    if (values.empty()) continue;
    ASSERT_GE(values.size(), 2u) << row.option;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const Sample& s = values[i];
      const Sample& other = values[(i + 1) % values.size()];
      // The queue and batch sizes each hold the other's bounds at any value
      // of the row's own.
      const auto env = [&](std::optional<std::string> value) {
        std::map<std::string, std::string> vars = {{"OTEL_BSP_MAX_QUEUE_SIZE", "16777216"},
                                                   {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1"}};
        vars.erase(std::string(row.variables[0]));
        if (value) vars[std::string(row.variables[0])] = *value;
        return fake_env(vars);
      };
      const Config from_env = resolve_config({}, env(s.text));
      TelemetryOptions given;
      give_option(given, row.option, s.value);
      const Config from_code = resolve_config(given, env(std::nullopt));
      const Config code_wins = resolve_config(given, env(other.text));
      EXPECT_EQ(row.shown(row, from_env), s.value) << row.option << " from " << s.text;
      EXPECT_EQ(row.shown(row, from_code), s.value) << row.option;
      EXPECT_EQ(row.shown(row, code_wins), s.value) << row.option;
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);
}

// Out of bounds or not of the kind: the variable's error names the variable,
// code's names the option.
TEST(SettingsTable, BoundsAndNamesHoldOnBothPaths) {
  for (const SettingRow& row : setting_rows()) {
    std::vector<std::pair<std::string, SettingValue>> refused;
    switch (row.kind) {
      case SettingKind::kFlag:
        refused = {{"maybe", std::string("yes")}};
        break;
      case SettingKind::kCount:
        refused = {{std::to_string(row.hi + 1), std::int64_t{row.hi + 1}},
                   {"many", std::string("many")}};
        if (row.lo > 0) refused.push_back({std::to_string(row.lo - 1), std::int64_t{row.lo - 1}});
        break;
      case SettingKind::kMillis:
        refused = {{std::to_string(row.hi + 1), static_cast<double>(row.hi + 1000) / 1000},
                   {"soon", std::string("soon")}};
        break;
      case SettingKind::kChoice:
        refused = {{"neither", std::string("neither")}};
        break;
      default:
        continue;
    }
    for (const auto& [text, value] : refused) {
      const std::string variable(row.variables[0]);
      const std::string from_env =
          error_of([&] { resolve_config({}, fake_env({{variable, text}})); });
      EXPECT_NE(from_env.find(variable + "='" + text + "'"), std::string::npos)
          << row.option << ": " << from_env;
      EXPECT_NE(from_env.find("accepted"), std::string::npos) << from_env;
      const std::string from_code = error_of([&] {
        TelemetryOptions o;
        give_option(o, row.option, value);
      });
      EXPECT_EQ(from_code.rfind(std::string(row.option) + "=", 0), 0u)
          << row.option << ": " << from_code;
    }
  }
  // A C++ option out of bounds is refused when resolved, naming the option.
  TelemetryOptions o;
  o.tail_keep = 300;
  EXPECT_NE(error_of([&] { resolve_config(o, fake_env({})); }).find("tail_keep=300"),
            std::string::npos);
  o = {};
  o.collective_timeout = std::chrono::milliseconds(0);
  EXPECT_NE(error_of([&] { resolve_config(o, fake_env({})); }).find("collective_timeout=0 ms"),
            std::string::npos);
}

TEST(SettingsTable, CodeGivesOnlyWhatTheTableLists) {
  TelemetryOptions o;
  const std::string e = error_of([&] { give_option(o, "tail_kept", std::int64_t{2}); });
  EXPECT_NE(e.find("'tail_kept' is not a setting"), std::string::npos) << e;
  EXPECT_NE(e.find("tail_keep"), std::string::npos) << e;
  // A variable-only row is not given in code.
  EXPECT_NE(error_of([&] { give_option(o, "spool_dir", std::string("/tmp")); }), "");
  give_option(o, "span_groups", std::string("all"));
  give_option(o, "export_filter", std::string("dp=0"));
  const Config c = resolve_config(o, fake_env({}));
  EXPECT_EQ(c.span_groups, SpanGroupSet::all());
  EXPECT_EQ(c.export_filter.to_string(), "dp=0");
}

TEST(SettingsTable, EveryRowIsNamedOnceAndEveryVariableOnce) {
  std::set<std::string_view> options, variables;
  for (const SettingRow& row : setting_rows()) {
    EXPECT_TRUE(options.insert(row.option).second) << row.option;
    EXPECT_FALSE(row.variable_names().empty()) << row.option;
    for (std::string_view v : row.variable_names())
      EXPECT_TRUE(variables.insert(v).second) << v;
    EXPECT_EQ(find_setting(row.option), &row);
    if (row.job_wide && row.kind != SettingKind::kComposite) {
      EXPECT_NE(row.number, nullptr) << row.option;
    }
  }
}

// The README's configuration table names every variable of the settings
// table.
TEST(SettingsTable, TheReadmeNamesEveryVariable) {
  std::ifstream in(LENS_README);
  ASSERT_TRUE(in) << LENS_README;
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  const auto table = readme.find("## Configuration");
  ASSERT_NE(table, std::string::npos);
  for (const SettingRow& row : setting_rows())
    for (std::string_view v : row.variable_names())
      EXPECT_NE(readme.find("`" + std::string(v) + "`", table), std::string::npos)
          << v << " (" << row.option << ") is not in the README's configuration table";
}

}  // namespace
}  // namespace lens

#include "lens/span_groups.h"

#include <gtest/gtest.h>

#include "lens/error.h"

namespace lens {
namespace {

TEST(SpanGroups, PresetsMatchMegatron) {
  EXPECT_EQ(SpanGroupSet::default_preset().to_string(), "job,checkpoint,evaluate,inference");
  EXPECT_EQ(SpanGroupSet::per_step_preset().to_string(),
            "job,checkpoint,evaluate,inference,model_init,load_checkpoint,step,"
            "forward_backward,optimizer,communication,data_loading");
  EXPECT_EQ(SpanGroupSet::all().to_string(),
            "job,checkpoint,evaluate,inference,model_init,load_checkpoint,step,"
            "forward_backward,optimizer,communication,data_loading,microbatch,layer,"
            "activation_offload");
  EXPECT_FALSE(SpanGroupSet::default_preset().contains(SpanGroup::kCommunication));
  EXPECT_TRUE(SpanGroupSet::per_step_preset().contains(SpanGroup::kCommunication));
  EXPECT_FALSE(SpanGroupSet::per_step_preset().contains(SpanGroup::kMicrobatch));
}

TEST(SpanGroups, ParsesPresetsAndNamesCaseInsensitively) {
  EXPECT_EQ(SpanGroupSet::parse("default"), SpanGroupSet::default_preset());
  EXPECT_EQ(SpanGroupSet::parse("PER_STEP"), SpanGroupSet::per_step_preset());
  EXPECT_EQ(SpanGroupSet::parse("All"), SpanGroupSet::all());
  auto s = SpanGroupSet::parse(" Default , Microbatch,LAYER ");
  EXPECT_TRUE(s.contains(SpanGroup::kJob));
  EXPECT_TRUE(s.contains(SpanGroup::kMicrobatch));
  EXPECT_TRUE(s.contains(SpanGroup::kLayer));
  EXPECT_FALSE(s.contains(SpanGroup::kStep));
  EXPECT_EQ(SpanGroupSet::parse("step").to_string(), "step");
}

TEST(SpanGroups, UnknownNameListsValidOnes) {
  try {
    SpanGroupSet::parse("default,comunication", "MEGATRON_OTEL_SPAN_GROUPS");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("MEGATRON_OTEL_SPAN_GROUPS"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'comunication'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("communication"), std::string::npos) << msg;
    EXPECT_NE(msg.find("per_step"), std::string::npos) << msg;
    EXPECT_NE(msg.find("activation_offload"), std::string::npos) << msg;
  }
}

TEST(SpanGroups, EmptyItemIsAnError) {
  EXPECT_THROW(SpanGroupSet::parse("default,,step"), ConfigError);
  EXPECT_THROW(SpanGroupSet::parse("step,"), ConfigError);
}

TEST(SpanGroups, ShortestSpecParsesBack) {
  EXPECT_EQ(SpanGroupSet::parse("per_step,microbatch").to_spec(), "per_step,microbatch");
  EXPECT_EQ(SpanGroupSet::parse("all").to_spec(), "all");
  EXPECT_EQ(SpanGroupSet::parse("layer,default").to_spec(), "default,layer");
  EXPECT_EQ(SpanGroupSet::parse("step,optimizer").to_spec(), "step,optimizer");
  EXPECT_EQ(SpanGroupSet::none().to_spec(), "none");
  for (const char* spec : {"per_step,microbatch", "default,layer", "step"})
    EXPECT_EQ(SpanGroupSet::parse(SpanGroupSet::parse(spec).to_spec()), SpanGroupSet::parse(spec));
}

TEST(SpanGroups, NamesRoundTrip) {
  for (int i = 0; i < kSpanGroupCount; ++i) {
    auto g = static_cast<SpanGroup>(i);
    auto parsed = SpanGroupSet::parse(span_group_name(g));
    EXPECT_TRUE(parsed.contains(g));
    EXPECT_EQ(parsed.to_string(), span_group_name(g));
  }
}

}  // namespace
}  // namespace lens

// The resource (resource.h): the attributes that describe a process, and
// OTEL_RESOURCE_ATTRIBUTES parsing.
#include "lens/resource.h"

#include <gtest/gtest.h>

#include "lens/error.h"

namespace lens {
namespace {

TEST(Resource, SetReplacesAnEntryWithTheSameKey) {
  Resource r;
  r.set("dl.rank", std::int64_t{1});
  r.set("service.name", std::string("megatron-lm"));
  r.set("dl.rank", std::int64_t{3});
  ASSERT_EQ(r.attributes.size(), 2u);
  ASSERT_NE(r.find("dl.rank"), nullptr);
  EXPECT_EQ(std::get<std::int64_t>(*r.find("dl.rank")), 3);
  EXPECT_EQ(r.find_string("service.name"), "megatron-lm");
  EXPECT_EQ(r.find("absent"), nullptr);
  EXPECT_EQ(r.find_string("absent"), "");
  EXPECT_EQ(r.find_string("dl.rank"), "");  // not a string
}

TEST(Resource, ParsesPercentEncodedMembers) {
  const Attributes a = parse_resource_attributes("k8s.pod=a%2Cb, team = ml%20infra ,x=");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].key, "k8s.pod");
  EXPECT_EQ(std::get<std::string>(a[0].value), "a,b");
  EXPECT_EQ(a[1].key, "team");
  EXPECT_EQ(std::get<std::string>(a[1].value), "ml infra");
  EXPECT_EQ(std::get<std::string>(a[2].value), "");
}

TEST(Resource, BadMembersNameTheSetting) {
  for (const char* bad : {"novalue", "=v", "k=%zz", "k=%4"}) {
    try {
      parse_resource_attributes(bad, "MY_SETTING");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("MY_SETTING"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lens

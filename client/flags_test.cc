#include "client/flags.h"

#include "gtest/gtest.h"

namespace mxval {
namespace {

TEST(Flags, ParsesAllKindsAndForms) {
  std::string s = "def";
  int64_t i = 1;
  double d = 0.5;
  bool b = false;
  FlagSet f("verb", "summary");
  f.String("name", &s, "a string");
  f.Int("count", &i, "an int");
  f.Double("ratio", &d, "a double");
  f.Bool("fast", &b, "a bool");
  ASSERT_TRUE(f.Parse({"--name", "x", "--count=7", "--ratio", "1e-3", "--fast"}).ok());
  EXPECT_EQ(s, "x");
  EXPECT_EQ(i, 7);
  EXPECT_EQ(d, 1e-3);
  EXPECT_TRUE(b);
  EXPECT_TRUE(f.WasSet("count"));
  EXPECT_NE(f.Usage().find("--count N"), std::string::npos);
  EXPECT_NE(f.Usage().find("(default 1)"), std::string::npos);
}

TEST(Flags, ErrorsNameTheFlag) {
  std::string s;
  int64_t i = 0;
  bool b = false;
  FlagSet f("verb", "summary");
  f.String("input", &s, "required", true);
  f.Int("m", &i, "int");
  f.Bool("x", &b, "bool");
  struct Case { std::vector<std::string> args; const char* needle; } cases[] = {
      {{"--input", "a", "--bogus", "1"}, "--bogus"},
      {{"--input", "a", "--m", "abc"}, "--m"},
      {{"--input", "a", "--m"}, "--m needs a value"},
      {{"--m", "3"}, "--input"},
      {{"--input", "a", "stray"}, "stray"},
      {{"--input", "a", "--x=maybe"}, "--x"},
      {{"--input="}, "--input"},
  };
  for (const Case& c : cases) {
    FlagSet g = f;
    absl::Status st = g.Parse(c.args);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(c.needle), std::string::npos) << st;
  }
  FlagSet h = f;
  ASSERT_TRUE(h.Parse({"--help"}).ok());
  EXPECT_TRUE(h.help_requested());
}

}  // namespace
}  // namespace mxval

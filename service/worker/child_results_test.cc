#include "service/worker/child_results.h"

#include <sstream>

#include "gtest/gtest.h"

namespace mxval::worker {
namespace {

v1::TaskResult Result(const std::string& id, double median_us) {
  v1::TaskResult r;
  r.set_task_id(id);
  r.mutable_baseline()->mutable_accuracy()->set_verdict(v1::VERDICT_PASS);
  r.mutable_candidate()->mutable_timing()->set_median_us(median_us);
  return r;
}

TEST(ChildResults, CheckpointThenWholeResultReadBackInOrder) {
  std::ostringstream out;
  ASSERT_TRUE(WriteChildResultsHeader(out));
  v1::TaskResult checkpoint = Result("t1", 3.5);
  checkpoint.mutable_roofline()->set_note(kRooflineInterruptedNote);
  v1::TaskResult whole = Result("t1", 3.5);
  whole.mutable_roofline()->set_copy_gbps(4200);
  ASSERT_TRUE(WriteChildResult(checkpoint, out));
  ASSERT_TRUE(WriteChildResult(whole, out));
  const std::vector<v1::TaskResult> got = ParseChildResults(out.str());
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].roofline().note(), kRooflineInterruptedNote);
  EXPECT_EQ(got[0].roofline().copy_gbps(), 0);  // not merged with the next one
  EXPECT_EQ(got[1].roofline().copy_gbps(), 4200);
  EXPECT_TRUE(got[1].roofline().note().empty());
  EXPECT_EQ(got[1].candidate().timing().median_us(), 3.5);
}

// A child killed while writing its second message: the first one stands,
// the torn one is never read as a (wrong) message, at any cut.
TEST(ChildResults, TornTailIsDropped) {
  std::ostringstream out;
  ASSERT_TRUE(WriteChildResultsHeader(out));
  ASSERT_TRUE(WriteChildResult(Result("t1", 1.0), out));
  const size_t first = out.str().size();
  ASSERT_TRUE(WriteChildResult(Result("t1", 2.0), out));
  const std::string all = out.str();
  for (size_t cut = first; cut < all.size(); ++cut) {
    const std::vector<v1::TaskResult> got = ParseChildResults(all.substr(0, cut));
    ASSERT_EQ(got.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(got[0].candidate().timing().median_us(), 1.0);
  }
  EXPECT_EQ(ParseChildResults(all).size(), 2u);
}

TEST(ChildResults, NothingOrGarbageGivesNoResult) {
  const std::string h = kChildResultsHeader;
  EXPECT_TRUE(ParseChildResults("").empty());
  EXPECT_TRUE(ParseChildResults(h).empty());
  EXPECT_TRUE(ParseChildResults(h + std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11)).empty());
  // A length that runs past the end.
  EXPECT_TRUE(ParseChildResults(h + std::string("\x40garbage", 8)).empty());
}

// A bare TaskResult (what an older mxval child wrote) can parse as a wrong
// delimited message; without the header nothing is read from it.
TEST(ChildResults, OutputWithoutTheHeaderIsNotRead) {
  const std::string bare = Result("job-1-t0", 2.0).SerializeAsString();
  EXPECT_TRUE(ParseChildResults(bare).empty());
  std::ostringstream delimited;
  ASSERT_TRUE(WriteChildResult(Result("t1", 1.0), delimited));
  EXPECT_TRUE(ParseChildResults(delimited.str()).empty());
}

}  // namespace
}  // namespace mxval::worker

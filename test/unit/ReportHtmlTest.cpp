// Unit tests for the HTML report's sample of search candidates: at most its capacity, evenly
// spread (every stride-th candidate in search order), and the same for the same sequence.
#include "placec/backends/Report.h"

#include "gtest/gtest.h"
#include <vector>

using namespace placec;

namespace {

/// Candidates told apart by their micro-batch: 0, 1, 2, ...
std::vector<int64_t> sampleOf(size_t capacity, int64_t count, uint64_t *stride = nullptr) {
  report::CandidateSample sample(capacity);
  for (int64_t i = 0; i < count; ++i) {
    search::Candidate candidate;
    candidate.microBatch = i;
    sample.add(candidate);
  }
  if (stride)
    *stride = sample.getStride();
  std::vector<int64_t> kept;
  for (const search::Candidate &candidate : sample.getCandidates())
    kept.push_back(candidate.microBatch);
  return kept;
}

TEST(CandidateSampleTest, KeepsEverythingUpToItsCapacity) {
  uint64_t stride = 0;
  EXPECT_EQ(sampleOf(4, 4, &stride), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(stride, 1u);
}

TEST(CandidateSampleTest, HalvesWhenFull) {
  // By hand, capacity 4: 0-4 kept, the fifth overflows: keep 0 2 4, stride 2; 6 and 8 kept (odd
  // ones skipped), 8 overflows: keep 0 4 8, stride 4; 9 skipped.
  uint64_t stride = 0;
  EXPECT_EQ(sampleOf(4, 10, &stride), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(stride, 4u);
}

TEST(CandidateSampleTest, StaysWithinCapacityOnEveryMultipleOfTheStride) {
  for (int64_t count : {1, 399, 400, 401, 1000, 123457}) {
    uint64_t stride = 0;
    std::vector<int64_t> kept = sampleOf(400, count, &stride);
    ASSERT_LE(kept.size(), 400u) << count;
    // Every multiple of the stride below the count, in order.
    ASSERT_EQ(kept.size(), static_cast<size_t>((count + stride - 1) / stride)) << count;
    for (size_t i = 0; i < kept.size(); ++i)
      EXPECT_EQ(kept[i], static_cast<int64_t>(i * stride)) << count;
  }
}

} // namespace

// Unit test of placert's GPT trainer on one rank (MPI as a singleton): a compute call whose
// planned collectives the computation does not perform fails with "plan mismatch", naming the
// unit and the collective, instead of moving other bytes than the plan says.
#include "placert/placert.h"

#include <gtest/gtest.h>
#include <memory>

namespace {

TEST(GptTrainer, LeftOverPlannedCollectiveIsAPlanMismatch) {
  int argc = 1;
  char name[] = "placert-unittests";
  char *args[] = {name, nullptr};
  char **argv = args;
  placert::Options options;
  options.quiet = true;
  std::unique_ptr<placert::Runtime> runtime;
  placert::Status status = placert::Runtime::create(
      &argc, &argv, {{"dp", placert::AxisKind::Batch, 1}}, options, runtime);
  ASSERT_TRUE(status.isOk()) << status.getMessage();

  // layers 1, hidden 8, heads 2, seq 4, vocab 16, ffn 32, tied.
  placert::GptShape shape{"g", 1, 8, 2, 4, 16, 32, true};
  placert::TrainingSpec spec;
  spec.globalBatch = 1;
  spec.microBatch = 1;
  placert::GptTrainer trainer(*runtime, shape, spec, placert::StatePlacement(),
                              placert::Recompute::None, false);
  // embed: 16·8 + 4·8 = 160; a layer 12·64 + 13·8 = 872; the head's final norm 16.
  trainer.addUnit({"embed", -1, 0, 160});
  trainer.addUnit({"layer.0", 0, 0, 872});
  trainer.addUnit({"head", 1, 0, 16});
  status = trainer.setup();
  ASSERT_TRUE(status.isOk()) << status.getMessage();

  EXPECT_TRUE(trainer.forward(0, 0, {}).isOk());
  // One device runs no tensor-parallel collective: a planned one is left over.
  status =
      trainer.forward(1, 0, {{placert::Collective::AllReduce, {"dp"}, 32, placert::DType::FP32}});
  EXPECT_EQ(status.getCode(), placert::StatusCode::InvalidArgument);
  EXPECT_NE(status.getMessage().find("plan mismatch in the forward of layer.0"), std::string::npos)
      << status.getMessage();
  EXPECT_NE(status.getMessage().find("1 more collective(s) (next: all-reduce of 32 elements)"),
            std::string::npos)
      << status.getMessage();
}

} // namespace

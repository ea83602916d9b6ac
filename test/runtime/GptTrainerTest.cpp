// Unit tests of placert's GPT trainer on one rank (MPI as a singleton): a compute call whose
// planned collectives the computation does not perform fails with "plan mismatch", naming the
// unit and the collective, instead of moving other bytes than the plan says; a grouped-query
// layer holds the parameters of its smaller qkv projection, and kv heads that do not divide the
// heads, context parallelism over axes the mesh does not have, and experts folding tensor axes
// the mesh does not have (or a model without experts), are refused at setup.
#include "placert/placert.h"

#include <cstdlib>
#include <filesystem>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <system_error>

namespace {

/// Open MPI keeps a singleton's session files under one directory per user and host in /tmp,
/// which it creates when a job starts and removes when the last one ends; under ctest -j another
/// test process can create or remove it at the same moment ("unable to create the desired
/// directory ... File exists", then MPI_Init fails). Each process here gets a directory of its
/// own, removed at exit after the runtime (registered before it, so run after it).
void useOwnMpiSessionDirectory() {
  if (std::getenv("OMPI_MCA_orte_tmpdir_base"))
    return;
  std::error_code error;
  std::filesystem::path temporary = std::filesystem::temp_directory_path(error);
  if (error)
    return; // Open MPI's default directory then, as before.
  static std::string directory = (temporary / "placert-unittests-mpi-XXXXXX").string();
  if (!mkdtemp(directory.data()))
    return; // Open MPI's default directory then, as before.
  setenv("OMPI_MCA_orte_tmpdir_base", directory.c_str(), 1);
  setenv("PRTE_MCA_prte_tmpdir_base", directory.c_str(), 1);
  std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
  });
}

/// The process's one runtime (MPI is initialized once per process), on a mesh of one device.
placert::Runtime &getRuntime() {
  static std::unique_ptr<placert::Runtime> runtime = [] {
    useOwnMpiSessionDirectory();
    int argc = 1;
    static char name[] = "placert-unittests";
    static char *args[] = {name, nullptr};
    char **argv = args;
    placert::Options options;
    options.quiet = true;
    std::unique_ptr<placert::Runtime> result;
    placert::Status status = placert::Runtime::create(
        &argc, &argv, {{"dp", placert::AxisKind::Batch, 1}}, options, result);
    EXPECT_TRUE(status.isOk()) << status.getMessage();
    return result;
  }();
  return *runtime;
}

TEST(GptTrainer, LeftOverPlannedCollectiveIsAPlanMismatch) {
  // layers 1, hidden 8, heads 2, seq 4, vocab 16, ffn 32, tied.
  placert::GptShape shape{"g", 1, 8, 2, 4, 16, 32, true};
  placert::TrainingSpec spec;
  spec.globalBatch = 1;
  spec.microBatch = 1;
  placert::GptTrainer trainer(getRuntime(), shape, spec, placert::StatePlacement(),
                              placert::Recompute::None, false);
  // embed: 16·8 + 4·8 = 160; a layer 12·64 + 13·8 = 872; the head's final norm 16.
  trainer.addUnit({"embed", -1, 0, 160});
  trainer.addUnit({"layer.0", 0, 0, 872});
  trainer.addUnit({"head", 1, 0, 16});
  placert::Status status = trainer.setup();
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

TEST(GptTrainer, GroupedQueryLayerHoldsItsSmallerQkvProjection) {
  // The layer of the test above with one key/value head for its 2 query heads (multi-query): the
  // qkv projection has (2 + 2·1)·4 = 16 rows instead of 24, so 8 rows of 8 weights and a bias
  // fewer: 872 − 72 = 800 parameters.
  placert::GptShape shape{"g", 1, 8, 2, 4, 16, 32, true};
  shape.kvHeads = 1;
  placert::TrainingSpec spec;
  spec.globalBatch = 1;
  spec.microBatch = 1;
  placert::GptTrainer trainer(getRuntime(), shape, spec, placert::StatePlacement(),
                              placert::Recompute::Selective, false);
  trainer.addUnit({"embed", -1, 0, 160});
  trainer.addUnit({"layer.0", 0, 0, 800});
  trainer.addUnit({"head", 1, 0, 16});
  placert::Status status = trainer.setup();
  ASSERT_TRUE(status.isOk()) << status.getMessage();
  // A forward, the selective recomputation of the attention and a backward of every unit.
  for (int unit = 0; unit < 3; ++unit)
    ASSERT_TRUE(trainer.forward(unit, 0, {}).isOk()) << unit;
  for (int unit = 2; unit >= 0; --unit) {
    if (unit == 1) {
      ASSERT_TRUE(trainer.recompute(unit, 0, {}).isOk());
    }
    status = trainer.backward(unit, 0, {});
    ASSERT_TRUE(status.isOk()) << unit << ": " << status.getMessage();
  }

  // The multi-head count is the plan of another model.
  placert::GptTrainer other(getRuntime(), shape, spec, placert::StatePlacement(),
                            placert::Recompute::None, false);
  other.addUnit({"embed", -1, 0, 160});
  other.addUnit({"layer.0", 0, 0, 872});
  other.addUnit({"head", 1, 0, 16});
  status = other.setup();
  EXPECT_EQ(status.getCode(), placert::StatusCode::InvalidArgument);
  EXPECT_NE(status.getMessage().find("the plan says 872 parameters per device but the "
                                     "tensor-parallel split gives 800"),
            std::string::npos)
      << status.getMessage();
}

TEST(GptTrainer, KvHeadsThatDoNotDivideTheHeadsAreRefused) {
  placert::GptShape shape{"g", 1, 8, 2, 4, 16, 32, true};
  shape.kvHeads = 3;
  placert::TrainingSpec spec;
  spec.globalBatch = 1;
  spec.microBatch = 1;
  placert::GptTrainer trainer(getRuntime(), shape, spec, placert::StatePlacement(),
                              placert::Recompute::None, false);
  trainer.addUnit({"embed", -1, 0, 160});
  trainer.addUnit({"layer.0", 0, 0, 872});
  trainer.addUnit({"head", 1, 0, 16});
  placert::Status status = trainer.setup();
  EXPECT_EQ(status.getCode(), placert::StatusCode::InvalidArgument);
  EXPECT_NE(status.getMessage().find("kv_heads 3 does not divide heads 2"), std::string::npos)
      << status.getMessage();
}

TEST(GptTrainer, ContextParallelismMustBeTheMeshsSequenceAxes) {
  // The one-device mesh has no sequence axis: a program that says 2 context ranks over 'cp' was
  // generated for another mesh.
  placert::GptShape shape{"g", 1, 8, 2, 4, 16, 32, true};
  placert::TrainingSpec spec;
  spec.globalBatch = 1;
  spec.microBatch = 1;
  placert::GptTrainer trainer(getRuntime(), shape, spec, placert::StatePlacement(),
                              placert::Recompute::None, false,
                              {{"cp"}, 2, placert::ContextMethod::Ring});
  trainer.addUnit({"embed", -1, 0, 160});
  trainer.addUnit({"layer.0", 0, 0, 872});
  trainer.addUnit({"head", 1, 0, 16});
  placert::Status status = trainer.setup();
  EXPECT_EQ(status.getCode(), placert::StatusCode::InvalidArgument);
  EXPECT_NE(status.getMessage().find("the program's context parallelism over 'cp' (2 ranks) does "
                                     "not match the mesh, which has no sequence axis"),
            std::string::npos)
      << status.getMessage();
}

TEST(GptTrainer, FoldedExpertsNeedExpertsAndBothAxes) {
  // Experts folding the tensor axes (`expert_tensor = fold`) on the one-device mesh: refused
  // without a mixture of experts, and with one, without an expert and a tensor axis.
  placert::GptShape dense{"g", 1, 8, 2, 4, 16, 32, true};
  placert::TrainingSpec spec;
  spec.globalBatch = 1;
  spec.microBatch = 1;
  placert::ExpertParallelism fold;
  fold.foldTensor = true;
  {
    placert::GptTrainer trainer(getRuntime(), dense, spec, placert::StatePlacement(),
                                placert::Recompute::None, false, {}, fold);
    trainer.addUnit({"embed", -1, 0, 160});
    trainer.addUnit({"layer.0", 0, 0, 872});
    trainer.addUnit({"head", 1, 0, 16});
    placert::Status status = trainer.setup();
    EXPECT_EQ(status.getCode(), placert::StatusCode::InvalidArgument);
    EXPECT_NE(status.getMessage().find("experts folding the tensor axes for a model without "
                                       "experts"),
              std::string::npos)
        << status.getMessage();
  }
  placert::GptShape moe = dense;
  moe.moe.experts = 4;
  moe.moe.topK = 2;
  moe.moe.expertFfn = 8;
  placert::GptTrainer trainer(getRuntime(), moe, spec, placert::StatePlacement(),
                              placert::Recompute::None, false, {}, fold);
  trainer.addUnit({"embed", -1, 0, 160});
  trainer.addUnit({"layer.0", 0, 0, 256});
  trainer.addUnit({"layer.0.experts", 0, 0, 768, true});
  trainer.addUnit({"head", 1, 0, 16});
  placert::Status status = trainer.setup();
  EXPECT_EQ(status.getCode(), placert::StatusCode::InvalidArgument);
  EXPECT_NE(status.getMessage().find("experts folding the tensor axes need an expert axis and a "
                                     "tensor axis (expert degree 1, tensor degree 1)"),
            std::string::npos)
      << status.getMessage();
}

} // namespace

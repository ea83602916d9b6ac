// The verifier: the composition rules of the language (docs/rules.md) checked on every run.
#include "placec/passes/Passes.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace placec {

namespace {

/// Formats a mesh as written: `[pp = 4, dp = 16, tp = 8]`.
std::string formatMesh(const ir::Mesh &mesh) {
  std::string text = "[";
  for (size_t i = 0; i < mesh.axes.size(); ++i)
    text += (i ? ", " : "") + mesh.axes[i].name + " = " + std::to_string(mesh.axes[i].size);
  return text + "]";
}

class VerifyPass : public Pass {
public:
  explicit VerifyPass(VerifyOptions options) : options(options) {}
  StringRef getName() const override { return "verify"; }
  bool run(ir::Program &program, DiagnosticEngine &diags) override;

private:
  /// `mesh-size`: the mesh's product equals the cluster's device count.
  bool checkMeshSize(const ir::Run &run, DiagnosticEngine &diags);
  /// `divisibility`: tensor degree divides the split dimensions, layers divide among stages,
  /// micro-batches are at least one and the global-batch equation holds.
  bool checkDivisibility(const ir::Run &run, DiagnosticEngine &diags);

  /// The location of a run's field, or of the run's name when the field was not written.
  static SMLoc fieldLoc(const ir::Run &run, StringRef key) {
    SMLoc loc = run.fieldLocs.lookup(key);
    return loc.isValid() ? loc : run.loc;
  }

  VerifyOptions options;
};

bool VerifyPass::run(ir::Program &program, DiagnosticEngine &diags) {
  bool ok = true;
  for (const std::unique_ptr<ir::Run> &run : program.runs) {
    // Later rules assume the mesh fits the cluster.
    if (!checkMeshSize(*run, diags)) {
      ok = false;
      continue;
    }
    ok &= checkDivisibility(*run, diags);
  }
  return ok;
}

bool VerifyPass::checkMeshSize(const ir::Run &run, DiagnosticEngine &diags) {
  const ir::Mesh &mesh = run.strategy->mesh;
  const ir::Cluster &cluster = *run.cluster;
  int64_t meshDevices = mesh.getNumDevices();
  if (meshDevices == cluster.getNumDevices())
    return true;
  diags.error(fieldLoc(run, "strategy"),
              Twine("mesh ") + formatMesh(mesh) + " of strategy '" + run.strategy->name +
                  "' has " + Twine(meshDevices) + " devices, but cluster '" + cluster.name +
                  "' has " + Twine(cluster.getNumDevices()) + " (" + Twine(cluster.nodes) +
                  " nodes × " + Twine(cluster.devicesPerNode) + ")",
              "mesh-size");
  diags.note(run.strategy->loc, Twine("strategy '") + run.strategy->name + "' is declared here");
  diags.note(cluster.loc, Twine("cluster '") + cluster.name + "' is declared here");
  return false;
}

bool VerifyPass::checkDivisibility(const ir::Run &run, DiagnosticEngine &diags) {
  const ir::Strategy &strategy = *run.strategy;
  const ir::Mesh &mesh = strategy.mesh;
  const ir::Model &model = *run.model;
  bool ok = true;
  SMLoc strategyLoc = fieldLoc(run, "strategy");

  int64_t tensorDegree = mesh.getDegree(ir::AxisKind::Tensor);
  if (tensorDegree > 1) {
    auto requireDivides = [&](StringRef what, int64_t value) {
      if (value % tensorDegree == 0)
        return;
      diags.error(strategyLoc,
                  Twine("tensor-parallel degree ") + Twine(tensorDegree) + " does not divide " +
                      what + " (" + Twine(value) + ") of model '" + model.name + "'",
                  "divisibility");
      diags.note(model.loc, Twine("model '") + model.name + "' is declared here");
      ok = false;
    };
    if (model.kind == ir::ModelKind::Transformer) {
      requireDivides("the heads", model.transformer.heads);
      requireDivides("the hidden size", model.transformer.hidden);
      requireDivides("the ffn size", model.transformer.ffn);
    } else if (model.kind == ir::ModelKind::Mlp) {
      requireDivides("the width", model.mlp.width);
    }
  }

  int64_t stages = mesh.getDegree(ir::AxisKind::Layers);
  int64_t layers = model.getNumLayers();
  if (strategy.pipeline && layers > 0) {
    int64_t chunks = strategy.pipeline->chunks;
    if (layers % (stages * chunks) != 0) {
      diags.error(strategyLoc,
                  Twine("the ") + Twine(layers) + " layers of model '" + model.name +
                      "' do not divide evenly among " + Twine(stages) + " pipeline stages" +
                      (chunks > 1 ? Twine(" × ") + Twine(chunks) + " chunks" : Twine("")),
                  "divisibility");
      diags.note(model.loc, Twine("model '") + model.name + "' is declared here");
      ok = false;
    }
  }

  int64_t batchDegree = mesh.getDegree(ir::AxisKind::Batch);
  int64_t perMicrobatch = run.microBatch * batchDegree;
  if (strategy.pipeline && strategy.pipeline->microbatches) {
    int64_t microbatches = *strategy.pipeline->microbatches;
    if (run.globalBatch != perMicrobatch * microbatches) {
      diags.error(fieldLoc(run, "global_batch"),
                  Twine("global_batch (") + Twine(run.globalBatch) +
                      ") must equal micro_batch × batch degree × micro-batches = " +
                      Twine(run.microBatch) + " × " + Twine(batchDegree) + " × " +
                      Twine(microbatches) + " = " + Twine(perMicrobatch * microbatches),
                  "divisibility");
      diags.note(strategy.pipeline->loc, "the pipeline's micro-batch count is set here");
      ok = false;
    }
  } else if (run.globalBatch % perMicrobatch != 0 || run.globalBatch < perMicrobatch) {
    diags.error(fieldLoc(run, "global_batch"),
                Twine("global_batch (") + Twine(run.globalBatch) +
                    ") must be a multiple of micro_batch × batch degree = " +
                    Twine(run.microBatch) + " × " + Twine(batchDegree) + " = " +
                    Twine(perMicrobatch) + ", so that every step has a whole number (at least "
                                           "one) of micro-batches",
                "divisibility");
    ok = false;
  }
  return ok;
}

} // namespace

std::unique_ptr<Pass> createVerifyPass(VerifyOptions options) {
  return std::make_unique<VerifyPass>(options);
}

} // namespace placec

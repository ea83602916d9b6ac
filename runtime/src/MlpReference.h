// Deterministic data and initial values of the mlp (a hash of the seed, a name and an index, so
// that any mesh computes the same numbers), and the single-device reference that `--check`
// compares a distributed run with.
#ifndef PLACERT_SRC_MLPREFERENCE_H
#define PLACERT_SRC_MLPREFERENCE_H

#include "placert/placert.h"

namespace placert {

/// Element `index` of tensor `name`: uniform in ±1/√fanIn.
float initialValue(uint64_t seed, const std::string &name, int64_t index, int64_t fanIn);
/// Feature `feature` of global sample `sample`: an input, or a target; uniform in ±1.
float sampleValue(uint64_t seed, int64_t sample, bool target, int64_t feature);

struct ReferenceConfig {
  int64_t layers, width, input, output, globalBatch;
  OptimizerKind optimizer;
  double learningRate;
  uint64_t seed;
  /// Mixed precision: forward and backward use the fp32 master params rounded to `paramType`;
  /// the summed gradient is rounded to `gradType` before the optimizer updates the master.
  DType paramType, gradType;
};

struct CheckResult {
  double paramsError = 0; ///< ‖p − p_ref‖ / ‖p_ref‖ over every parameter.
  double lossError = 0;   ///< max over steps of |l − l_ref| / |l_ref|.
  bool passed = true;
};

/// Trains the plain mlp on one device for `steps` steps over the whole global batch and compares
/// the parameters (layer by layer, weight then bias, row-major; the working params, i.e. the
/// master rounded to the param dtype) and the losses, which are those of steps `firstStep`,
/// `firstStep` + 1, ... (a run resumed from a checkpoint).
CheckResult checkAgainstReference(const ReferenceConfig &config, int steps,
                                  const std::vector<float> &params,
                                  const std::vector<double> &losses, double tolerance,
                                  int firstStep = 0);

/// Compares the run's parameters and per-step losses with the reference's: ‖p − p_ref‖ / ‖p_ref‖
/// and the largest relative loss difference, both within `tolerance`. `losses` are those of steps
/// `firstStep`, `firstStep` + 1, ... (a run resumed from a checkpoint).
CheckResult compareWithReference(const std::vector<float> &params,
                                 const std::vector<float> &reference,
                                 const std::vector<double> &losses,
                                 const std::vector<double> &referenceLosses, double tolerance,
                                 int firstStep = 0);

} // namespace placert

#endif // PLACERT_SRC_MLPREFERENCE_H

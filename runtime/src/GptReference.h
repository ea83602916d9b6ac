// The single-device GPT that `--check` compares a distributed transformer run with: the same units
// (GptModel) with tensor and context degree 1, no sequence parallelism and no recomputation, on
// the whole global batch at once.
#ifndef PLACERT_SRC_GPTREFERENCE_H
#define PLACERT_SRC_GPTREFERENCE_H

#include "MlpReference.h"
#include "placert/placert.h"

namespace placert {

/// Trains the model for `steps` steps on one device and compares the parameters (embed, layers,
/// head; each tensor whole and row-major, as docs/ir.md lists them) and the losses.
CheckResult checkGptAgainstReference(const GptShape &shape, const TrainingSpec &spec, uint64_t seed,
                                     int steps, const std::vector<float> &params,
                                     const std::vector<double> &losses, double tolerance,
                                     int firstStep = 0);

} // namespace placert

#endif // PLACERT_SRC_GPTREFERENCE_H

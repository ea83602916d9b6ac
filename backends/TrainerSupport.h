// What placert's two trainers (the CPU runtime's and the CUDA backend's) share in refusing a run:
// the transformer features that neither implements. Each emitter adds its own refusals.
#ifndef PLACEC_BACKENDS_TRAINERSUPPORT_H
#define PLACEC_BACKENDS_TRAINERSUPPORT_H

#include "placec/ir/IR.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/SMLoc.h"

namespace placec::codegen {

/// Receives one refused part of a run: where it is written, what it is, and why the trainer
/// cannot train it.
using RefuseFn =
    llvm::function_ref<void(llvm::SMLoc loc, const llvm::Twine &part, const llvm::Twine &why)>;

/// Where the run writes `field`, or the run itself when the field is not written.
llvm::SMLoc getFieldLoc(const ir::Run &run, llvm::StringRef field);

/// Calls `refuse` for each feature of the run's transformer, and each run field, that neither of
/// placert's trainers implements: a head width other than hidden/heads, QK-norm, attention sinks,
/// latent attention, post-norm layers, multi-token prediction, a sliding window shorter than the
/// sequence, unpadded attention and training metrics. `trainer` names the trainer in the reasons
/// ("the CPU trainer", "the GPU trainer").
void forEachCommonUnsupported(const ir::Run &run, llvm::StringRef trainer, RefuseFn refuse);

} // namespace placec::codegen

#endif // PLACEC_BACKENDS_TRAINERSUPPORT_H

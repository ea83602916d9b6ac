// The C++ backend: a run's StepPlan as a main.cpp that calls only placert's public API, and a
// CMakeLists.txt that builds it against an installed or built placert (docs/runtime.md).
#ifndef PLACEC_BACKENDS_CPPEMITTER_H
#define PLACEC_BACKENDS_CPPEMITTER_H

#include "placec/passes/StepPlan.h"

#include "llvm/ADT/StringRef.h"

#include <string>

namespace llvm {
class Error;
template <class T> class Expected;
} // namespace llvm

namespace placec::codegen {

enum class Target { Cpu };

/// The generated program's main.cpp. Fails for plans the runtime cannot execute yet (a model that
/// is not an mlp, interleaved pipelines, recomputation, params on the host), naming what.
llvm::Expected<std::string> emitMainCpp(const plan::StepPlan &plan, llvm::StringRef sourceName,
                                        Target target = Target::Cpu);
/// The generated program's CMakeLists.txt.
std::string emitCMakeLists(const plan::StepPlan &plan, llvm::StringRef sourceName);
/// Writes both into `directory` (created when missing).
llvm::Error emitCppProject(const plan::StepPlan &plan, llvm::StringRef sourceName,
                           llvm::StringRef directory, Target target = Target::Cpu);

} // namespace placec::codegen

#endif // PLACEC_BACKENDS_CPPEMITTER_H

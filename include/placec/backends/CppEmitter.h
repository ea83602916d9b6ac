// The C++ backend: a run's StepPlan as a main.cpp that calls only placert's public API, and a
// CMakeLists.txt that builds it against an installed or built placert (docs/runtime.md).
#ifndef PLACEC_BACKENDS_CPPEMITTER_H
#define PLACEC_BACKENDS_CPPEMITTER_H

#include "placec/ir/Diagnostics.h"
#include "placec/passes/StepPlan.h"

#include "llvm/ADT/StringRef.h"

#include <string>

namespace llvm {
class Error;
template <class T> class Expected;
} // namespace llvm

namespace placec::codegen {

enum class Target { Cpu };

/// Reports, at its source location, each part of the run the CPU runtime cannot train (an abstract
/// model, a vocabulary or token count the tensor degree does not divide, tied embeddings across
/// pipeline stages, an mlp with recomputation, activations on the host).
/// Returns true when there is none.
bool checkCpuSupported(const ir::Run &run, DiagnosticEngine &diags);
/// The generated program's main.cpp. Fails for plans the runtime cannot execute, naming what.
llvm::Expected<std::string> emitMainCpp(const plan::StepPlan &plan, llvm::StringRef sourceName,
                                        Target target = Target::Cpu);
/// The lines of a generated CMakeLists.txt that find placert's CMake package `package` (placert,
/// placert_cuda) and print where it was found. `hint` (when not empty) is searched after
/// -D<package>_DIR and CMAKE_PREFIX_PATH, before the system prefixes: the package that belongs to
/// the placec that writes the file.
std::string emitFindPackage(llvm::StringRef package, llvm::StringRef hint);
/// The generated program's CMakeLists.txt; `placertHint` as `hint` above.
std::string emitCMakeLists(const plan::StepPlan &plan, llvm::StringRef sourceName,
                           llvm::StringRef placertHint = "");
/// Writes both into `directory` (created when missing).
llvm::Error emitCppProject(const plan::StepPlan &plan, llvm::StringRef sourceName,
                           llvm::StringRef directory, llvm::StringRef placertHint = "",
                           Target target = Target::Cpu);

} // namespace placec::codegen

#endif // PLACEC_BACKENDS_CPPEMITTER_H

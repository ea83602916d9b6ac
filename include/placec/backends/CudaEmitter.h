// The CUDA backend (`placec compile --target=cuda`): a run of a GPT-2-layout transformer as a
// main.cpp over placert's GPU trainer (placert/cuda.h) and a CMakeLists.txt that finds
// placert_cuda. Parts of a run the GPU trainer cannot execute are refused with a diagnostic at
// the source location that asks for them (docs/gpu.md).
#ifndef PLACEC_BACKENDS_CUDAEMITTER_H
#define PLACEC_BACKENDS_CUDAEMITTER_H

#include "placec/ir/Diagnostics.h"
#include "placec/ir/IR.h"

#include "llvm/ADT/StringRef.h"

#include <string>

namespace placec::codegen {

/// Reports (rule `cuda`) every part of `run` the GPU trainer cannot run; true when there is none.
bool checkCudaSupported(const ir::Run &run, DiagnosticEngine &diags);
/// The generated main.cpp (call only after checkCudaSupported succeeded). `predictedPeakBytes` is
/// the report's per-device peak, printed next to the measured one (0: none).
std::string emitCudaMain(const ir::Run &run, llvm::StringRef sourceName, double predictedPeakBytes);
/// The generated CMakeLists.txt; `placertHint` is searched for placert_cuda's CMake package before
/// the system prefixes (empty: none; see emitFindPackage in CppEmitter.h).
std::string emitCudaCMakeLists(const ir::Run &run, llvm::StringRef sourceName,
                               llvm::StringRef placertHint = "");
/// Checks, then writes both files into `directory`. False after a diagnostic or when a file
/// cannot be written (`error` says why).
bool emitCudaProject(const ir::Run &run, llvm::StringRef sourceName, llvm::StringRef directory,
                     llvm::StringRef placertHint, DiagnosticEngine &diags, std::string &error);

} // namespace placec::codegen

#endif // PLACEC_BACKENDS_CUDAEMITTER_H

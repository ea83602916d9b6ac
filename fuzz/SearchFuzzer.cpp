// libFuzzer entry point for `placec search`: parses arbitrary bytes as a .place file and, when they
// build, searches the first run's strategies as the command does (the table, or the JSON for an
// input of odd length, each plan of the top built as a run and asked of every bridge, the best
// plan's Place text), where
// the problem is small enough to search within the fuzzer's time limit (kMaxDevices devices,
// kMaxExactDevices for the models searched exactly, kMaxLayers layers, a global batch of
// kMaxBatch sequences at most; larger inputs are the analysis fuzzer's). The fast path of dense
// transformers, the exact path of mixtures of experts and of alternating attention, and the
// printing of what they find must give a result or an error on any input, never a crash, a hang or
// undefined behavior. Reads and writes no files.
#include "PlaceInput.h"
#include "placec/backends/Export.h"
#include "placec/frontend/Frontend.h"
#include "placec/ir/Diagnostics.h"
#include "placec/ir/IR.h"
#include "placec/passes/Search.h"

#include "llvm/Support/raw_ostream.h"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace {

constexpr int64_t kMaxDevices = 16;
/// The exact path verifies, lowers and analyses every candidate.
constexpr int64_t kMaxExactDevices = 8;
constexpr int64_t kMaxLayers = 24;
constexpr int64_t kMaxBatch = 256;

/// Whether `run` is small enough to search quickly under the sanitizers.
bool isSmall(const placec::ir::Run &run) {
  if (!run.model || !run.cluster)
    return true; // the search refuses it with an error, at once
  int64_t devices = run.cluster->getNumDevices();
  int64_t maxDevices = placec::search::searchesExactly(*run.model) ? kMaxExactDevices : kMaxDevices;
  return devices >= 1 && devices <= maxDevices && run.model->getNumLayers() <= kMaxLayers &&
         run.globalBatch <= kMaxBatch;
}

void runSearch(llvm::StringRef input) {
  placec::fuzz::PlaceInput parsed;
  if (!parsed.parse(input))
    return;
  std::unique_ptr<placec::ir::Program> program = placec::buildProgram(parsed.files, parsed.diags);
  if (!program || parsed.diags.hasErrors() || program->runs.empty())
    return;
  const placec::ir::Run &run = *program->runs.front();
  if (!isSmall(run))
    return;
  placec::search::SearchCommandOptions options;
  options.runName = run.name;
  options.topK = 3;
  options.threads = 1;
  options.bridges = placec::bridge::getBridgeVerdicts;
  options.json = input.size() % 2 == 1;
  llvm::raw_null_ostream null;
  placec::search::runSearchCommand(*program, options, null, null);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  runSearch(llvm::StringRef(reinterpret_cast<const char *>(data), size));
  return 0;
}

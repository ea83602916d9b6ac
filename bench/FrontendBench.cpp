// Google Benchmark timings of the front end on large generated programs (bench/gen_place.py):
// loadProgram from a file, loadProgram plus the verifier, and parseBuffer alone on text in memory.
#include "placec/frontend/Frontend.h"
#include "placec/ir/Diagnostics.h"
#include "placec/ir/IR.h"
#include "placec/passes/Passes.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <benchmark/benchmark.h>
#include <cstdlib>
#include <memory>
#include <string>

namespace {

/// Where the generated inputs are: PLACEC_BENCH_INPUTS when set, else the build tree.
std::string getInputPath(const char *name) {
  const char *dir = std::getenv("PLACEC_BENCH_INPUTS");
  return std::string(dir ? dir : PLACEC_BENCH_INPUT_DIR) + "/" + name;
}

/// Reads an input once, or stops the benchmark with the reason.
std::unique_ptr<llvm::MemoryBuffer> readInput(benchmark::State &state, const std::string &path) {
  auto bufferOrError = llvm::MemoryBuffer::getFile(path);
  if (!bufferOrError) {
    state.SkipWithError(("cannot read " + path + ": " + bufferOrError.getError().message() +
                         " (generate it with bench/gen_place.py)")
                            .c_str());
    return nullptr;
  }
  return std::move(*bufferOrError);
}

/// The first error of a failed run, so that a skipped benchmark says why.
std::string describeFailure(const placec::DiagnosticEngine &diags) {
  for (const placec::Diagnostic &diag : diags.getDiagnostics())
    if (diag.severity == placec::Severity::Error)
      return "front end failed: " + diag.getFullMessage();
  return "front end failed without a diagnostic";
}

/// parseProgram + buildProgram on a file: reading, parsing the prelude and the file, and Sema.
void BM_LoadProgram(benchmark::State &state, const char *name) {
  std::string path = getInputPath(name);
  std::unique_ptr<llvm::MemoryBuffer> input = readInput(state, path);
  if (!input)
    return;
  for (auto _ : state) {
    llvm::SourceMgr sourceMgr;
    placec::DiagnosticEngine diags(sourceMgr);
    diags.setQuiet(true);
    std::unique_ptr<placec::ir::Program> program = placec::loadProgram(path, diags);
    if (!program) {
      state.SkipWithError(describeFailure(diags).c_str());
      break;
    }
    benchmark::DoNotOptimize(program.get());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(input->getBufferSize()));
}

/// What `placec check` does: loadProgram, then the verifier on every run.
void BM_Check(benchmark::State &state, const char *name) {
  std::string path = getInputPath(name);
  std::unique_ptr<llvm::MemoryBuffer> input = readInput(state, path);
  if (!input)
    return;
  for (auto _ : state) {
    llvm::SourceMgr sourceMgr;
    placec::DiagnosticEngine diags(sourceMgr);
    diags.setQuiet(true);
    std::unique_ptr<placec::ir::Program> program = placec::loadProgram(path, diags);
    if (!program || !placec::createVerifyPass()->run(*program, diags)) {
      state.SkipWithError(describeFailure(diags).c_str());
      break;
    }
    benchmark::DoNotOptimize(program.get());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(input->getBufferSize()));
}

/// parseBuffer alone on text already in memory: ANTLR's lexer and parser and the AST builder.
void BM_ParseBuffer(benchmark::State &state, const char *name) {
  std::string path = getInputPath(name);
  std::unique_ptr<llvm::MemoryBuffer> input = readInput(state, path);
  if (!input)
    return;
  for (auto _ : state) {
    llvm::SourceMgr sourceMgr;
    placec::DiagnosticEngine diags(sourceMgr);
    diags.setQuiet(true);
    unsigned bufferId = sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBuffer(input->getMemBufferRef(), /*RequiresNullTerminator=*/true),
        llvm::SMLoc());
    std::unique_ptr<placec::ast::File> file = placec::parseBuffer(bufferId, diags);
    if (!file) {
      state.SkipWithError(describeFailure(diags).c_str());
      break;
    }
    benchmark::DoNotOptimize(file.get());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(input->getBufferSize()));
}

BENCHMARK_CAPTURE(BM_LoadProgram, big, "big.place")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadProgram, runs, "runs.place")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Check, big, "big.place")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Check, runs, "runs.place")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ParseBuffer, big, "big.place")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ParseBuffer, runs, "runs.place")->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();

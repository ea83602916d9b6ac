// placec: the driver. Parses the command line, runs the front end and the pass pipeline, and
// prints what was asked for: nothing (check), the syntax tree, the IR or the step plan (--emit),
// a report of each run (report), or the difference between two runs (diff).
#include "Revision.h"
#include "placec/Config.h"
#include "placec/backends/Checkpoint.h"
#include "placec/backends/CppEmitter.h"
#include "placec/backends/CudaEmitter.h"
#include "placec/backends/Export.h"
#include "placec/backends/Report.h"
#include "placec/frontend/Formatter.h"
#include "placec/frontend/Frontend.h"
#include "placec/passes/Analysis.h"
#include "placec/passes/Passes.h"
#include "placec/passes/Search.h"
#include "placec/passes/StepPlan.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <optional>
#include <string>

using namespace llvm;
using namespace placec;

namespace {

cl::OptionCategory placecCategory("placec options");

enum class EmitKind { None, Ast, Ir, Plan };

cl::list<std::string> inputFiles(cl::Positional, cl::desc("<input .place files>"),
                                 cl::cat(placecCategory));

cl::opt<EmitKind>
    emitKind("emit", cl::desc("What to print (check), in pipeline order:"),
             cl::init(EmitKind::None),
             cl::values(clEnumValN(EmitKind::Ast, "ast", "the syntax tree of each input file"),
                        clEnumValN(EmitKind::Ir, "ir", "the IR after verification (docs/ir.md)"),
                        clEnumValN(EmitKind::Plan, "plan",
                                   "the step plan of each run after verification (docs/plan.md)")),
             cl::cat(placecCategory));

cl::opt<report::Format> outputFormat(
    "format", cl::desc("Output format of report and diff:"), cl::init(report::Format::Text),
    cl::values(clEnumValN(report::Format::Text, "text", "aligned tables (the default)"),
               clEnumValN(report::Format::Json, "json", "one JSON document (docs/report-json.md)"),
               clEnumValN(report::Format::Markdown, "md", "GitHub Markdown tables"),
               clEnumValN(report::Format::Markdown, "markdown", "the same as md"),
               clEnumValN(report::Format::Html, "html",
                          "one self-contained HTML page with charts (docs/report-html.md)")),
    cl::cat(placecCategory));

cl::list<std::string> runNames("run",
                               cl::desc("Only this run (repeatable; report, diff, --emit=plan)"),
                               cl::value_desc("name"), cl::cat(placecCategory));

cl::opt<bool> explain("explain",
                      cl::desc("report: show the formula behind every memory, communication "
                               "and time figure, with the numbers put in"),
                      cl::init(false), cl::cat(placecCategory));

cl::opt<std::string> outputFile("o", cl::desc("Write output to <file> (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(placecCategory));

cl::opt<bool> verifyDiagnostics(
    "verify-diagnostics",
    cl::desc("Check the diagnostics against `// expected-error@+N {{text}}` comments "
             "(also expected-warning, expected-note) instead of printing them"),
    cl::init(false), cl::cat(placecCategory));

cl::opt<bool> splitInputFile("split-input-file",
                             cl::desc("Compile each chunk of the input between `// -----` lines "
                                      "on its own"),
                             cl::init(false), cl::cat(placecCategory));

cl::opt<bool> printAfterAll("print-after-all", cl::desc("Print the IR after each pass (stderr)"),
                            cl::init(false), cl::cat(placecCategory));

cl::opt<bool> warningsAsErrors("Werror", cl::desc("Treat warnings as errors"), cl::init(false),
                               cl::cat(placecCategory));

cl::opt<unsigned> errorLimit("error-limit",
                             cl::desc("Stop after this many errors (0: no limit; default 50)"),
                             cl::init(50), cl::cat(placecCategory));

cl::opt<int64_t> searchDevices("devices",
                               cl::desc("search: the device count (default: the cluster's)"),
                               cl::init(0), cl::cat(placecCategory));
cl::opt<std::string> searchBudget("memory-budget",
                                  cl::desc("search: bytes per device, or a quantity such as "
                                           "'70 GB' (default: device_memory)"),
                                  cl::init(""), cl::cat(placecCategory));
cl::opt<std::string>
    compileTarget("target",
                  cl::desc("compile: what the generated program runs on (cpu, cuda), or the "
                           "framework whose configuration it writes (deepspeed, megatron, "
                           "torchtitan); search: only plans that framework's bridge exports, "
                           "with its async_tp, sp_inputs and activation modes by default"),
                  cl::init("cpu"), cl::cat(placecCategory));
cl::opt<unsigned> searchTop("top", cl::desc("search: how many plans to list (default 5)"),
                            cl::init(5), cl::cat(placecCategory));
cl::opt<unsigned> searchThreads("threads",
                                cl::desc("search: the threads that evaluate the space (default 0: "
                                         "one per hardware thread; the result does not depend "
                                         "on it)"),
                                cl::init(0), cl::cat(placecCategory));
cl::opt<std::string> searchPrecision(
    "precision",
    cl::desc("search: the precisions to explore, a comma-separated list of bf16, fp16, fp32, "
             "fp8 and fp4 (default: the run's own); fp8 adds mixed(fp8) and, with gathered "
             "params, mixed(fp8, gather = fp8); fp4 adds mixed(fp4) (NVFP4, on Blackwell); the "
             "run's grads = fp32 stays with each mixed one"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> searchSchedules(
    "schedules",
    cl::desc("search: the pipeline schedules to explore, a comma-separated list of 1f1b, gpipe, "
             "interleaved, zero_bubble, zbv and dualpipev (default: all but gpipe; 1f1b and "
             "interleaved for mixtures of experts, which take 1f1b, gpipe and interleaved)"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> searchActivations(
    "activations",
    cl::desc("search: the activation modes to explore, a comma-separated list of keep, "
             "selective, full, op and attention (default: keep, selective and full, and op where "
             "the run uses recompute(op); keep, attention and full for --target=megatron over "
             "fused attention)"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> searchAsyncTp(
    "async-tp",
    cl::desc("search: the async_tp settings to explore where tp > 1, a comma-separated list of "
             "false, true, forward and wgrad (default: false and true; false for mixtures of "
             "experts)"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> searchEpOverlap(
    "ep-overlap",
    cl::desc("search: the ep_overlap settings to explore for a mixture of experts where they "
             "apply (an expert axis, no pipeline or an interleaved one, no full recomputation), "
             "a comma-separated list "
             "of false and true (default: false)"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> searchExpertTensor(
    "expert-tensor",
    cl::desc("search: the expert_tensor settings to explore for a mixture of experts where fold "
             "applies (an expert and a tensor axis whose devices together divide the experts), "
             "a comma-separated list of split and fold (default: split)"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> searchDispatcher(
    "dispatcher",
    cl::desc("search: the dispatchers to explore over expert axes of more than one device, a "
             "comma-separated list of alltoall, deepep and hybridep (default: the run's)"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> searchExpertContext(
    "expert-context",
    cl::desc("search: the expert_context settings to explore for a mixture of experts where fold "
             "applies (an expert and a context axis whose devices, with the tensor axis where "
             "that is folded too, divide the experts), a comma-separated list of split and fold "
             "(default: split)"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> searchContext(
    "context",
    cl::desc("search: the context-parallel methods to explore over context axes, a "
             "comma-separated list of none, ring, all_gather and all_to_all, each where its "
             "divisibility holds (default: all three; none: no context axis)"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> searchSpInputs(
    "sp-inputs",
    cl::desc("search: what the column-parallel products of every sequence-parallel candidate keep "
             "of their input, regather (Megatron-LM, the default) or keep (PyTorch)"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> searchDpOverlap(
    "dp-overlap",
    cl::desc("search: when every candidate's step runs its data-parallel collectives, grads (the "
             "gradient reductions beside the last backward, the default: PyTorch, Megatron-LM's "
             "--overlap-grad-reduce), all (and the updated parameters' all-gathers beside the "
             "next forward: --overlap-param-gather) or none (both exposed)"),
    cl::init(""), cl::cat(placecCategory));
cl::opt<bool> searchMaxParams("max-params",
                              cl::desc("search: the largest model of the run's shape that each "
                                       "strategy family (dp, zero1-3, +tp) fits"),
                              cl::init(false), cl::cat(placecCategory));

// Bridges (docs/bridges.md) and the formatter (docs/format.md).
cl::opt<std::string> importModel("model", cl::desc("import: the run's model (declared in --from)"),
                                 cl::value_desc("name"), cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> importCluster("cluster",
                                   cl::desc("import: the run's cluster (declared in --from)"),
                                   cl::value_desc("name"), cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> importFrom("from",
                                cl::desc("import: the .place file that declares the model and "
                                         "cluster"),
                                cl::value_desc("file"), cl::init(""), cl::cat(placecCategory));
cl::opt<std::string> importMegatronFlags("megatron",
                                         cl::desc("import: Megatron-LM flags, or a file of them"),
                                         cl::value_desc("flags"), cl::init(""),
                                         cl::cat(placecCategory));
cl::opt<int64_t> importSeq("seq",
                           cl::desc("import: the sequence length of a model declared from a "
                                    "Hugging Face config (default: max_position_embeddings)"),
                           cl::value_desc("tokens"), cl::init(0), cl::cat(placecCategory));
cl::opt<double> fidelityMaxMeanError(
    "max-mean-error",
    cl::desc("fidelity: fail when the mean step-time error exceeds this (percent)"), cl::init(0),
    cl::cat(placecCategory));
cl::opt<double>
    fidelityMaxError("max-error",
                     cl::desc("fidelity: fail when a step-time error exceeds this (percent)"),
                     cl::init(0), cl::cat(placecCategory));
cl::opt<double> fidelityMaxMemoryError(
    "max-memory-error", cl::desc("fidelity: fail when a peak-memory error exceeds this (percent)"),
    cl::init(0), cl::cat(placecCategory));
cl::opt<bool> fidelityFit(
    "fit",
    cl::desc("fidelity: time the rows over a grid of the cost model's two fitted constants and "
             "print the error at each, the best point and the code's"),
    cl::init(false), cl::cat(placecCategory));
cl::opt<std::string> placertDir(
    "placert-dir",
    cl::desc("compile: where the generated CMakeLists.txt looks for placert first (default: the "
             "placert of this placec's build or installation; 'none': only the usual prefixes)"),
    cl::value_desc("dir"), cl::init(""), cl::cat(placecCategory));
cl::opt<bool> formatInPlace("i", cl::desc("format: rewrite the file in place"), cl::init(false),
                            cl::cat(placecCategory));

constexpr const char *kOverview = R"(placec: the compiler for placement semantics

A .place file declares models, clusters, strategies (a device mesh and where each training state
- params, grads, optimizer, activations - lives on it) and runs that tie them together. placec
checks that every run's strategy is correct and fits in memory, and reports what each device
stores, what each collective moves and how long a training step takes.

USAGE: placec [command] [options] <input.place>...

COMMANDS:
  check     Parse and verify every input; print nothing on success (the default). Memory over
            device_memory or host_memory is an error [capacity].
  report    Lower each run to its step plan and report, per device: memory by state (params,
            grads, optimizer, activations, transient, peak) on the device and the host against
            capacity; communication per axis, collective, state and phase (count, message
            bytes, bytes sent, link, time); time (compute, exposed communication, pipeline
            bubble, step, MFU, tokens/s). Several runs are shown side by side. Capacity is a
            warning here, so that strategies that do not fit can still be compared.
  diff      Compare two runs: memory per state, communication per axis and collective, and
            time, with signed deltas and ratios (b against a). Name the runs either way:
              placec diff FILE --run A --run B
              placec diff A.place:runA B.place:runB
  compile   Emit a run as a C++ program that trains it over placert (MPI on CPUs):
            placec compile FILE --run NAME -o DIR [--target=cpu] (docs/running.md).
            --target=cuda emits a GPT trainer for CUDA GPUs instead (docs/gpu.md).
            --target=deepspeed|megatron|torchtitan writes that framework's configuration
            instead (-o FILE, default stdout; docs/bridges.md).
  import    Write a Hugging Face config.json as a .place model declaration, or a DeepSpeed
            config, torchtitan job or Megatron-LM flags as a .place strategy and run:
            placec import config.json [--seq N] [-o F]
            placec import ds_config.json --model M --cluster C --from models.place [-o F]
            placec import job.toml --cluster C --from models.place [--model M] [-o F]
            placec import --megatron "FLAGS" (or a file of flags) --cluster C --from F
  format    Print a .place file in canonical layout, comments kept; -i rewrites it
            (docs/format.md).
  inspect   Print a checkpoint of a compiled program (docs/checkpoints.md) as tables and verify
            the CRC-32 of every shard: placec inspect DIR (exit code 1 on a bad one).
  fidelity  Compare the predictions with what runs measured (`measured_step`, `measured_memory`):
            placec fidelity FILE|DIR... [--max-mean-error 5] [--max-error 10]
            [--max-memory-error 10] [--format=json]; exit code 1 outside the limits
            (docs/fidelity.md). --fit times the rows over a grid of the cost model's two
            fitted constants instead: placec fidelity --fit bench/fidelity/calibration.
  devices   List the device presets a cluster can name (`device = h100_sxm;`): datasheet
            figures, the GEMM efficiency the cost model takes for each, and the sources:
            placec devices [--format=json] [-o F].
  search    Find the fastest correct placement that fits for one run's model, batch and cluster:
            placec search FILE --run NAME [--devices N] [--memory-budget 70GB] [--top K]
            [--precision bf16,fp8] [--schedules 1f1b,zbv] [--activations keep,op]
            [--async-tp false,wgrad] [--ep-overlap false,true] [--sp-inputs keep] [--threads N]
            [--format=json|md|html] [-o best.place]
            [--max-params]
            (docs/search.md).

EXAMPLES:
  placec check model.place                      verify; file:line:col errors and exit code 1
  placec report examples/gpt2-xl.place          tables for every run, side by side
  placec report model.place --run big --explain the formula behind every figure
  placec report model.place --format=json -o r.json   machine-readable (docs/report-json.md)
  placec report model.place --format=md         GitHub Markdown tables
  placec report model.place --format=html -o r.html   one page with charts (docs/report-html.md)
  placec diff model.place --run dp --run zero3  what changes from dp to zero3
  placec --emit=plan model.place --run zero3    the step plan: gathers, computes, reductions
  placec --emit=ir model.place                  the verified IR: tensors, meshes, placements
  placec --emit=ast model.place                 the syntax tree
  placec --verify-diagnostics bad.place         check expected-error comments (for tests)

Exit code: 0 on success, 1 on any error (including an unknown --run name, or an option that the
command does not read).
Documentation: docs/language.md (the language), docs/rules.md (the checks), docs/ir.md (the IR),
docs/plan.md (the step plan), docs/report-json.md (the JSON report).
)";

/// The known commands. A first argument that is none of them is an input file.
enum class Command {
  Check,
  Report,
  Diff,
  Search,
  Compile,
  Import,
  Format,
  Inspect,
  Fidelity,
  Devices
};

/// Splits `// -----` chunks, keeping line numbers: each chunk is preceded by as many newlines as
/// the lines before it in the original file.
std::vector<std::unique_ptr<MemoryBuffer>> splitBuffer(const MemoryBuffer &buffer) {
  std::vector<std::unique_ptr<MemoryBuffer>> chunks;
  StringRef text = buffer.getBuffer();
  size_t chunkStart = 0;
  unsigned linesBefore = 0, line = 0;
  size_t pos = 0;
  auto flush = [&](size_t end) {
    std::string chunk(linesBefore, '\n');
    chunk += text.slice(chunkStart, end).str();
    chunks.push_back(MemoryBuffer::getMemBufferCopy(chunk, buffer.getBufferIdentifier()));
  };
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    StringRef lineText = text.slice(pos, end == StringRef::npos ? text.size() : end);
    ++line;
    if (lineText.trim().starts_with("// -----")) {
      flush(pos);
      chunkStart = end == StringRef::npos ? text.size() : end + 1;
      linesBefore = line;
    }
    if (end == StringRef::npos)
      break;
    pos = end + 1;
  }
  flush(text.size());
  return chunks;
}

/// One program compiled through the verifier, kept alive with its sources and diagnostics.
struct Compilation {
  SourceMgr sourceMgr;
  DiagnosticEngine diags{sourceMgr};
  std::unique_ptr<ir::Program> program;
  /// True when the front end and the verifier reported no error.
  bool ok = false;
};

/// Parses, builds and verifies one program (a file, or a chunk given as `preloaded`). With
/// `ast`, prints the main file's syntax tree there.
std::unique_ptr<Compilation> compile(std::unique_ptr<MemoryBuffer> preloaded, StringRef path,
                                     VerifyOptions verifyOptions, raw_ostream *ast) {
  auto compilation = std::make_unique<Compilation>();
  DiagnosticEngine &diags = compilation->diags;
  diags.setWarningsAsErrors(warningsAsErrors);
  diags.setErrorLimit(verifyDiagnostics ? 0 : errorLimit);
  if (verifyDiagnostics)
    diags.enableVerifyMode();

  std::vector<std::unique_ptr<ast::File>> files =
      preloaded ? parseProgram(std::move(preloaded), diags) : parseProgram(path, diags);
  if (!files.empty()) {
    if (ast)
      printAst(*files.back(), *ast);
    compilation->program = buildProgram(files, diags);
  }
  if (compilation->program) {
    PassManager passes;
    passes.addPass(createVerifyPass(verifyOptions));
    if (printAfterAll)
      passes.setPrintAfterAll(&errs());
    passes.run(*compilation->program, diags);
  }
  compilation->ok = compilation->program && !diags.hasErrors();
  return compilation;
}

/// The runs named by `names` (every run when empty), or an error naming the unknown run.
Expected<std::vector<const ir::Run *>> selectRuns(const ir::Program &program,
                                                  ArrayRef<std::string> names, StringRef path) {
  std::vector<const ir::Run *> runs;
  if (names.empty()) {
    for (const std::unique_ptr<ir::Run> &run : program.runs)
      runs.push_back(run.get());
    if (runs.empty())
      return createStringError(inconvertibleErrorCode(), "'%s' declares no run",
                               path.str().c_str());
    return runs;
  }
  for (const std::string &name : names) {
    const ir::Run *run = program.findRun(name);
    if (!run) {
      std::vector<std::string> known;
      for (const std::unique_ptr<ir::Run> &candidate : program.runs)
        known.push_back(candidate->name);
      return createStringError(inconvertibleErrorCode(), "no run named '%s' in '%s' (%s)",
                               name.c_str(), path.str().c_str(),
                               known.empty() ? "it declares no run"
                                             : ("its runs: " + llvm::join(known, ", ")).c_str());
    }
    if (!llvm::is_contained(runs, run))
      runs.push_back(run);
  }
  return runs;
}

void printError(const Twine &message) { errs() << "placec: error: " << message << "\n"; }

/// `placec inspect DIR`: the checkpoint's manifest as tables, then every shard's checksum.
int runInspect() {
  if (inputFiles.size() != 1) {
    printError("inspect takes one checkpoint directory: placec inspect DIR");
    return 1;
  }
  Expected<checkpoint::Manifest> manifest = checkpoint::readManifest(inputFiles[0]);
  if (!manifest) {
    printError(toString(manifest.takeError()));
    return 1;
  }
  checkpoint::printManifest(*manifest, outs());
  int64_t shards = 0, bytes = 0;
  if (Error error = checkpoint::verifyChecksums(*manifest, shards, bytes)) {
    outs().flush();
    printError(toString(std::move(error)));
    return 1;
  }
  outs() << "\nchecksums: " << shards << " shards, " << bytes << " bytes: ok\n";
  return 0;
}

/// `placec check` (and --emit): compiles one program and prints what was asked.
bool checkOne(std::unique_ptr<MemoryBuffer> preloaded, StringRef path, raw_ostream &out) {
  std::unique_ptr<Compilation> compilation = compile(std::move(preloaded), path, VerifyOptions{},
                                                     emitKind == EmitKind::Ast ? &out : nullptr);
  if (verifyDiagnostics)
    return compilation->diags.verify();
  if (!compilation->ok)
    return false;
  if (emitKind == EmitKind::Ir)
    ir::printProgram(*compilation->program, out);
  if (emitKind == EmitKind::Plan) {
    Expected<std::vector<const ir::Run *>> runs = selectRuns(*compilation->program, runNames, path);
    if (!runs) {
      printError(toString(runs.takeError()));
      return false;
    }
    for (const ir::Run *run : *runs)
      plan::printPlan(*plan::lowerRun(*run), out);
  }
  return true;
}

/// Capacity is reported, not fatal, in report and diff.
VerifyOptions reportVerifyOptions() {
  VerifyOptions options;
  options.capacityIsError = false;
  return options;
}

/// The input files of a command that takes one and got none or several, for its usage error: a
/// stray word after a flag that takes no value reads as a second file, and the error names it.
std::string describeInputFiles() {
  if (inputFiles.empty())
    return "none was given";
  return fmt::format("{} were given: {}", inputFiles.size(), llvm::join(inputFiles, ", "));
}

/// `placec report FILE`.
bool runReport(raw_ostream &out) {
  if (inputFiles.size() != 1) {
    printError("report takes one input file, but " + describeInputFiles() +
               "; run 'placec --help' for usage");
    return false;
  }
  StringRef path = inputFiles.front();
  std::unique_ptr<Compilation> compilation = compile(nullptr, path, reportVerifyOptions(), nullptr);
  if (!compilation->ok)
    return false;
  Expected<std::vector<const ir::Run *>> runs = selectRuns(*compilation->program, runNames, path);
  if (!runs) {
    printError(toString(runs.takeError()));
    return false;
  }
  std::vector<report::RunReport> reports;
  for (const ir::Run *run : *runs)
    reports.push_back(report::analyzeRun(*run));
  std::vector<report::ReportDiagnostic> diagnostics =
      report::collectDiagnostics(compilation->diags);
  report::attachDiagnostics(reports, diagnostics, compilation->diags);
  report::ReportOptions options;
  options.format = outputFormat;
  options.explain = explain;
  options.inputName = path.str();
  report::printReport(reports, diagnostics, options, out);
  return true;
}

/// `placec diff`: two runs named by `--run` in one file, or as `FILE:RUN` each.
bool runDiff(raw_ostream &out) {
  std::vector<std::pair<std::string, std::string>> sides; // (file, run)
  if (inputFiles.size() == 1 && runNames.size() == 2) {
    sides = {{inputFiles[0], runNames[0]}, {inputFiles[0], runNames[1]}};
  } else if (inputFiles.size() == 2 && runNames.size() == 2) {
    sides = {{inputFiles[0], runNames[0]}, {inputFiles[1], runNames[1]}};
  } else if (inputFiles.size() == 2 && runNames.empty()) {
    for (const std::string &spec : inputFiles) {
      size_t colon = spec.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
        printError("diff: '" + spec +
                   "' names no run; write FILE:RUN, or give one file and "
                   "--run A --run B");
        return false;
      }
      sides.emplace_back(spec.substr(0, colon), spec.substr(colon + 1));
    }
  } else {
    printError("diff compares two runs: 'placec diff FILE --run A --run B' or 'placec diff "
               "A.place:runA B.place:runB'");
    return false;
  }

  // Each file is compiled once.
  std::map<std::string, std::unique_ptr<Compilation>> compilations;
  for (const auto &[file, run] : sides) {
    std::unique_ptr<Compilation> &compilation = compilations[file];
    if (!compilation) {
      compilation = compile(nullptr, file, reportVerifyOptions(), nullptr);
      if (!compilation->ok)
        return false;
    }
  }
  std::vector<report::RunReport> reports;
  for (const auto &[file, name] : sides) {
    Expected<std::vector<const ir::Run *>> runs =
        selectRuns(*compilations[file]->program, {name}, file);
    if (!runs) {
      printError(toString(runs.takeError()));
      return false;
    }
    reports.push_back(report::analyzeRun(*runs->front()));
  }
  report::printDiff({&reports[0], sides[0].first}, {&reports[1], sides[1].first}, outputFormat,
                    out);
  return true;
}

/// `placec search FILE --run NAME`: the output goes to stdout, `-o` names the .place file the
/// best plan is written to.
int runSearch() {
  // Each misuse named with what was given (a stray word after a flag reads as a second file).
  if (inputFiles.size() != 1) {
    printError("search takes one input file, but " + describeInputFiles());
    return 1;
  }
  if (runNames.size() > 1) {
    printError("search takes at most one --run, but " + Twine(runNames.size()) +
               " were given: " + llvm::join(runNames, ", "));
    return 1;
  }
  if ((outputFormat == report::Format::Html || outputFormat == report::Format::Markdown) &&
      searchMaxParams) {
    printError("search --max-params writes --format=text or json, not md or html");
    return 1;
  }
  // The run's own strategy is not searched from, so it is not verified: only the front end.
  SourceMgr sourceMgr;
  DiagnosticEngine diags(sourceMgr);
  diags.setErrorLimit(errorLimit);
  // Counts given on the command line are 1 or more (not given: the cluster's devices, 5 plans).
  if (searchDevices.getNumOccurrences() &&
      (searchDevices <= 0 || searchDevices > ir::kMaxDevices)) {
    printError(fmt::format("--devices: expected a device count from 1 to {} (the most a cluster "
                           "may have), got {}",
                           ir::kMaxDevices, static_cast<int64_t>(searchDevices)));
    return 1;
  }
  if (searchTop.getNumOccurrences() && searchTop == 0) {
    printError("--top: expected 1 or more plans, got 0");
    return 1;
  }
  // A setting given empty is an error, not the default.
  for (const cl::opt<std::string> *setting :
       {&searchBudget, &searchPrecision, &searchSchedules, &searchActivations, &searchAsyncTp,
        &searchEpOverlap, &searchContext, &searchSpInputs, &searchDpOverlap, &compileTarget})
    if (setting->getNumOccurrences() && setting->getValue().empty()) {
      printError(fmt::format("--{}: expected a value, got nothing", setting->ArgStr.str()));
      return 1;
    }
  std::unique_ptr<ir::Program> program = loadProgram(inputFiles[0], diags);
  if (!program || diags.hasErrors())
    return 1;
  search::SearchCommandOptions options;
  options.runName = runNames.empty() ? "" : runNames[0];
  options.devices = searchDevices;
  options.memoryBudget = searchBudget;
  options.precisions = searchPrecision;
  options.schedules = searchSchedules;
  options.activations = searchActivations;
  options.asyncTp = searchAsyncTp;
  options.epOverlap = searchEpOverlap;
  options.expertTensor = searchExpertTensor;
  options.dispatcher = searchDispatcher;
  options.expertContext = searchExpertContext;
  options.context = searchContext;
  options.spInputs = searchSpInputs;
  options.dpOverlap = searchDpOverlap;
  options.topK = searchTop;
  options.threads = searchThreads;
  options.json = outputFormat == report::Format::Json;
  options.markdown = outputFormat == report::Format::Markdown;
  options.maxParams = searchMaxParams;
  options.outputFile = outputFile == "-" ? std::string() : outputFile.getValue();
  options.progress = true;
  if (compileTarget.getNumOccurrences()) {
    if (!bridge::parseTarget(compileTarget)) {
      printError("--target '" + compileTarget +
                 "' is not a framework whose bridge the search can ask: write megatron, "
                 "torchtitan or deepspeed");
      return 1;
    }
    options.target = compileTarget;
  }
  options.bridges = bridge::getBridgeVerdicts;
  report::CandidateSample sample;
  if (outputFormat == report::Format::Html) {
    options.onAccepted = [&](const search::Candidate &candidate) { sample.add(candidate); };
    options.print = [&](const ir::Run &run, const search::SearchResult &result, StringRef placeText,
                        raw_ostream &os) {
      report::printSearchHtml(run, result, sample, inputFiles[0], placeText, os);
    };
  }
  return search::runSearchCommand(*program, options, outs(), errs());
}

/// Writes `text` to -o (a file, kept only on success) or stdout.
int writeOutput(StringRef text) {
  std::error_code ec;
  ToolOutputFile output(outputFile, ec, sys::fs::OF_Text);
  if (ec) {
    printError("cannot write '" + outputFile + "': " + ec.message());
    return 1;
  }
  output.os() << text;
  output.keep();
  return 0;
}

/// Compiles the single input file and returns the first run `--run` names (null, with the
/// diagnostics or the error printed, when compilation fails or the run is unknown).
const ir::Run *compileSelectedRun(const VerifyOptions &verifyOptions,
                                  std::unique_ptr<Compilation> &compilation) {
  compilation = compile(nullptr, inputFiles[0], verifyOptions, nullptr);
  if (!compilation->ok)
    return nullptr;
  Expected<std::vector<const ir::Run *>> runs =
      selectRuns(*compilation->program, runNames, inputFiles[0]);
  if (!runs) {
    printError(toString(runs.takeError()));
    return nullptr;
  }
  return runs->front();
}

/// `placec compile FILE --run NAME --target=deepspeed|megatron|torchtitan [-o FILE]`.
int runExport(bridge::Target target) {
  if (inputFiles.size() != 1 || runNames.size() != 1) {
    printError("compile --target=" + bridge::toString(target) +
               " takes one input file and one --run NAME");
    return 1;
  }
  // As in report, capacity is a warning: the memory figures are estimates, and another run of
  // the file that does not fit should not stop this one's export.
  std::unique_ptr<Compilation> compilation;
  const ir::Run *run = compileSelectedRun(reportVerifyOptions(), compilation);
  if (!run)
    return 1;
  std::string text;
  raw_string_ostream os(text);
  if (!bridge::exportRun(*run, target, compilation->diags, os))
    return 1;
  return writeOutput(text);
}

/// Reads an import's input: the --megatron string or file, or the one input file.
std::unique_ptr<MemoryBuffer> readImportInput(bool megatron) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> file =
      !megatron ? MemoryBuffer::getFileOrSTDIN(inputFiles[0])
      : sys::fs::is_regular_file(importMegatronFlags.getValue())
          ? MemoryBuffer::getFile(importMegatronFlags)
          : ErrorOr<std::unique_ptr<MemoryBuffer>>(
                MemoryBuffer::getMemBufferCopy(importMegatronFlags, "<megatron flags>"));
  if (!file) {
    printError("cannot open '" + (megatron ? importMegatronFlags.getValue() : inputFiles[0]) +
               "': " + file.getError().message());
    return nullptr;
  }
  return std::move(*file);
}

/// `placec import config.json [--seq N] [-o OUT]` (Hugging Face),
/// `placec import CONFIG.json --model M --cluster C [--from F] [-o OUT]` (DeepSpeed),
/// `placec import job.toml --cluster C --from F [--model M] [-o OUT]` (torchtitan) and
/// `placec import --megatron FLAGS --cluster C [--from F] [-o OUT]`.
int runImport() {
  bool megatron = !importMegatronFlags.empty();
  if ((megatron && !inputFiles.empty()) || (!megatron && inputFiles.size() != 1)) {
    printError("import takes one configuration file (a Hugging Face config.json, a DeepSpeed "
               "config, a torchtitan job .toml), or --megatron FLAGS");
    return 1;
  }
  std::unique_ptr<MemoryBuffer> buffer = readImportInput(megatron);
  if (!buffer)
    return 1;
  enum class Kind { HuggingFace, DeepSpeed, Torchtitan, Megatron } kind = Kind::Megatron;
  if (!megatron) {
    StringRef inputName = buffer->getBufferIdentifier();
    if (sys::path::extension(inputName) == ".toml")
      kind = Kind::Torchtitan;
    else if (bridge::isHuggingFaceConfig(buffer->getBuffer()) ||
             (importModel.empty() && importCluster.empty()))
      kind = Kind::HuggingFace;
    else
      kind = Kind::DeepSpeed;
  }
  if (kind == Kind::HuggingFace &&
      (!importModel.empty() || !importCluster.empty() || !importFrom.empty())) {
    printError("a Hugging Face config.json declares a model only: --model, --cluster and --from "
               "are for DeepSpeed configs, torchtitan jobs and Megatron-LM flags");
    return 1;
  }
  if (kind != Kind::HuggingFace && importSeq.getNumOccurrences()) {
    printError("--seq is for a model declared from a Hugging Face config.json");
    return 1;
  }
  // Given, it is 1 or more (0 is not taken for "max_position_embeddings").
  if (kind == Kind::HuggingFace && importSeq.getNumOccurrences() && importSeq <= 0) {
    printError("--seq must be a whole number of at least 1");
    return 1;
  }
  if (kind != Kind::HuggingFace &&
      (importCluster.empty() || (kind == Kind::DeepSpeed && importModel.empty()))) {
    printError("import takes a DeepSpeed config with --model and --cluster, a torchtitan job or "
               "--megatron FLAGS with --cluster, and --from FILE declaring them");
    return 1;
  }
  SourceMgr sourceMgr;
  DiagnosticEngine diags(sourceMgr);
  diags.setErrorLimit(errorLimit);
  bridge::ImportOptions options;
  options.modelName = importModel;
  options.clusterName = importCluster;
  options.fromPath = importFrom;
  options.seq = importSeq;
  // The program of --from, alive through the import (ImportOptions::model points into it).
  std::unique_ptr<ir::Program> program;
  if (!importFrom.empty()) {
    // The model and cluster must exist; the cluster gives the device count.
    program = loadProgram(importFrom, diags);
    if (!program || diags.hasErrors())
      return 1;
    const ir::Cluster *cluster = program->findCluster(importCluster);
    if (!cluster) {
      printError("no cluster named '" + importCluster + "' in '" + importFrom + "'");
      return 1;
    }
    options.devices = cluster->getNumDevices();
    if (!importModel.empty()) {
      const ir::Model *model = program->findModel(importModel);
      if (!model) {
        printError("no model named '" + importModel + "' in '" + importFrom + "'");
        return 1;
      }
      options.layers = model->getNumLayers();
      if (model->kind == ir::ModelKind::Transformer) {
        options.modelSeq = model->transformer.seq;
        options.modelExperts = model->transformer.moe.experts;
        options.modelAttention = ir::toString(model->transformer.attention).str();
      }
      options.model = model;
    }
    // The import line is relative to the output file's folder.
    if (outputFile != "-" && !sys::path::is_absolute(importFrom)) {
      SmallString<256> from(importFrom), out(outputFile);
      sys::fs::make_absolute(from);
      sys::fs::make_absolute(out);
      StringRef outDir = sys::path::parent_path(out);
      if (StringRef(from).starts_with(outDir) && from.size() > outDir.size() + 1)
        options.fromPath = StringRef(from).drop_front(outDir.size() + 1).str();
      else
        options.fromPath = std::string(from);
    }
  }
  options.inputName = buffer->getBufferIdentifier().str();
  if (outputFile != "-")
    options.name = sys::path::stem(outputFile).str();
  unsigned bufferId = sourceMgr.AddNewSourceBuffer(std::move(buffer), SMLoc());
  std::string text;
  raw_string_ostream os(text);
  bool ok = false;
  switch (kind) {
  case Kind::HuggingFace:
    ok = bridge::importHuggingFace(bufferId, options, diags, os);
    break;
  case Kind::DeepSpeed:
    ok = bridge::importDeepSpeed(bufferId, options, diags, os);
    break;
  case Kind::Torchtitan:
    ok = bridge::importTorchtitan(bufferId, options, diags, os);
    break;
  case Kind::Megatron:
    ok = bridge::importMegatron(bufferId, options, diags, os);
    break;
  }
  if (!ok || diags.hasErrors())
    return 1;
  return writeOutput(text);
}

/// `placec format FILE [-i]`.
int runFormat() {
  if (inputFiles.size() != 1) {
    printError("format takes one input file, but " + describeInputFiles());
    return 1;
  }
  if (formatInPlace && outputFile != "-") {
    printError("format takes either -i or -o FILE, not both");
    return 1;
  }
  SourceMgr sourceMgr;
  DiagnosticEngine diags(sourceMgr);
  diags.setErrorLimit(errorLimit);
  ErrorOr<std::unique_ptr<MemoryBuffer>> file = MemoryBuffer::getFileOrSTDIN(inputFiles[0]);
  if (!file) {
    printError("cannot open '" + inputFiles[0] + "': " + file.getError().message());
    return 1;
  }
  unsigned bufferId = sourceMgr.AddNewSourceBuffer(std::move(*file), SMLoc());
  std::optional<std::string> formatted = formatBuffer(bufferId, diags);
  if (!formatted)
    return 1;
  if (formatInPlace) {
    if (sourceMgr.getMemoryBuffer(bufferId)->getBuffer() == *formatted)
      return 0;
    outputFile = inputFiles[0];
  }
  return writeOutput(*formatted);
}

/// argv[0], to find the running executable.
const char *programPath = "placec";

/// The directory a generated project searches first for the CMake package of placert (`cuda`:
/// placert_cuda): `--placert-dir`, or the package that belongs to this placec, in its build tree
/// (placec in <build>/tools, placert in <build>/runtime) or next to its installation (placec in
/// <prefix>/bin, placert in <prefix>/lib/cmake). Empty for `--placert-dir=none`.
std::string getPlacertHint(bool cuda) {
  if (placertDir == "none")
    return "";
  SmallString<256> dir;
  if (!placertDir.empty()) {
    dir = placertDir;
    sys::fs::make_absolute(dir);
  } else {
    std::string executable =
        sys::fs::getMainExecutable(programPath, reinterpret_cast<void *>(&getPlacertHint));
    if (executable.empty())
      return "";
    SmallString<256> bin(sys::path::parent_path(executable));
    // The CPU package is in every build tree, so it tells a build tree from an installation.
    SmallString<256> buildConfig(bin);
    sys::path::append(buildConfig, PLACEC_PLACERT_BUILD_DIR, "placertConfig.cmake");
    bool buildTree = sys::fs::exists(buildConfig);
    dir = bin;
    if (buildTree)
      sys::path::append(dir, cuda ? PLACEC_PLACERT_CUDA_BUILD_DIR : PLACEC_PLACERT_BUILD_DIR);
    else
      sys::path::append(dir, cuda ? PLACEC_PLACERT_CUDA_INSTALL_DIR : PLACEC_PLACERT_INSTALL_DIR);
  }
  sys::path::remove_dots(dir, /*remove_dot_dot=*/true);
  return std::string(dir);
}

/// `placec compile FILE --run NAME -o DIR --target=cuda`: the run as a program over placert's
/// GPU trainer (docs/gpu.md); what the trainer cannot run is refused at its source location.
int runCompileCuda() {
  std::unique_ptr<Compilation> compilation;
  const ir::Run *run = compileSelectedRun(VerifyOptions{}, compilation);
  if (!run)
    return 1;
  std::string error;
  if (!codegen::emitCudaProject(*run, inputFiles[0], outputFile, getPlacertHint(/*cuda=*/true),
                                compilation->diags, error)) {
    if (!error.empty())
      printError(error);
    return 1;
  }
  return 0;
}

/// `placec compile FILE --run NAME -o DIR [--target=cpu]`: the run's step plan as a C++ program
/// over placert (docs/running.md). A strategy the verifier rejects is not compiled.
int runCompile() {
  if (std::optional<bridge::Target> target = bridge::parseTarget(compileTarget))
    return runExport(*target);
  if (inputFiles.size() != 1) {
    printError("compile takes one input file, but " + describeInputFiles());
    return 1;
  }
  if (runNames.size() != 1 || outputFile == "-") {
    printError("compile takes one input file, one --run NAME and -o DIR (the directory that "
               "receives main.cpp and CMakeLists.txt)");
    return 1;
  }
  if (compileTarget == "cuda")
    return runCompileCuda();
  if (compileTarget != "cpu") {
    printError("compile: unknown --target '" + compileTarget +
               "' (the targets are: cpu, cuda, deepspeed, megatron, torchtitan)");
    return 1;
  }
  std::unique_ptr<Compilation> compilation;
  const ir::Run *run = compileSelectedRun(VerifyOptions{}, compilation);
  if (!run)
    return 1;
  if (!codegen::checkCpuSupported(*run, compilation->diags))
    return 1;
  std::unique_ptr<plan::StepPlan> stepPlan = plan::lowerRun(*run);
  if (Error error = codegen::emitCppProject(*stepPlan, inputFiles[0], outputFile,
                                            getPlacertHint(/*cuda=*/false))) {
    printError(toString(std::move(error)));
    return 1;
  }
  return 0;
}

/// Whether `command`, which prints text or JSON, was asked for JSON; an error for any other
/// --format.
std::optional<bool> textOrJson(StringRef command) {
  if (outputFormat != report::Format::Text && outputFormat != report::Format::Json) {
    printError(command + " prints text or --format=json");
    return std::nullopt;
  }
  return outputFormat == report::Format::Json;
}

/// `placec devices`: the device presets a cluster can name (docs/language.md).
int runDevices() {
  if (!inputFiles.empty()) {
    printError("devices takes no input file; it lists the presets a cluster can name");
    return 1;
  }
  std::optional<bool> json = textOrJson("devices");
  if (!json)
    return 1;
  std::string text;
  raw_string_ostream os(text);
  report::printDevices(*json, os);
  return writeOutput(text);
}

/// `placec fidelity --fit`: the rows timed at every point of the grid of the cost model's fitted
/// constants, each cluster given the point's values in place of the code's.
int runFidelityFit(const std::vector<std::unique_ptr<Compilation>> &compilations,
                   llvm::function_ref<std::vector<report::FidelityRow>()> predict) {
  for (const cl::opt<double> *limit :
       {&fidelityMaxMeanError, &fidelityMaxError, &fidelityMaxMemoryError})
    if (limit->getNumOccurrences()) {
      printError(fmt::format("--{} does not apply with --fit, which reports the error at each "
                             "point of its grid",
                             limit->ArgStr.str()));
      return 1;
    }
  // The constants time only the clusters timed from shapes (a device preset, no `efficiency`).
  bool shaped = false;
  for (const std::unique_ptr<Compilation> &compilation : compilations)
    for (const std::unique_ptr<ir::Run> &run : compilation->program->runs)
      shaped |= run->measuredStep && run->cluster->hasShapeModel();
  if (!shaped) {
    printError("--fit needs runs that record measured_step on a cluster timed from shapes (one "
               "that names a device preset and writes no efficiency); the constants it fits "
               "change nothing else");
    return 1;
  }
  std::optional<bool> json = textOrJson("fidelity");
  if (!json)
    return 1;
  std::vector<report::FidelityFitPoint> grid = report::getFidelityFitGrid();
  for (report::FidelityFitPoint &point : grid) {
    for (const std::unique_ptr<Compilation> &compilation : compilations)
      for (const std::unique_ptr<ir::Cluster> &cluster : compilation->program->clusters) {
        cluster->fittedTileOverheadK = point.tileOverheadK;
        cluster->fittedKernelEfficiency = point.kernelEfficiency;
      }
    report::scoreFidelityFit(point, predict());
  }
  std::string text;
  raw_string_ostream os(text);
  report::printFidelityFit(grid, *json, os);
  return writeOutput(text);
}

/// `placec fidelity FILE|DIR...`: every run with `measured_step` or `measured_memory`,
/// predicted against measured (docs/fidelity.md). A folder contributes its .place files,
/// recursively; each row's set is the name of the folder its file is in.
int runFidelity() {
  std::vector<std::string> files;
  for (const std::string &input : inputFiles) {
    if (!sys::fs::is_directory(input)) {
      files.push_back(input);
      continue;
    }
    std::error_code ec;
    std::vector<std::string> found;
    for (sys::fs::recursive_directory_iterator it(input, ec), end; it != end && !ec;
         it.increment(ec))
      if (sys::path::extension(it->path()) == ".place")
        found.push_back(it->path());
    if (ec) {
      printError("cannot read '" + input + "': " + ec.message());
      return 1;
    }
    llvm::sort(found);
    files.insert(files.end(), found.begin(), found.end());
  }
  // The compiled files stay alive: --fit times their runs again with other constants.
  std::vector<std::unique_ptr<Compilation>> compilations;
  // Each run is lowered once: the step plan does not depend on the cost model, which the
  // analysis builds from the cluster at each call.
  struct Measured {
    const ir::Run *run;
    std::unique_ptr<plan::StepPlan> plan;
    std::string set, file;
  };
  std::vector<Measured> measured;
  bool ok = true;
  for (const std::string &file : files) {
    VerifyOptions options;
    options.capacityIsError = false;
    std::unique_ptr<Compilation> compilation = compile(nullptr, file, options, nullptr);
    if (!compilation->ok) {
      ok = false;
      continue;
    }
    for (const std::unique_ptr<ir::Run> &run : compilation->program->runs)
      if (run->measuredStep || run->measuredMemory)
        measured.push_back({run.get(), plan::lowerRun(*run),
                            sys::path::filename(sys::path::parent_path(file)).str(),
                            sys::path::filename(file).str()});
    compilations.push_back(std::move(compilation));
  }
  if (!ok)
    return 1;
  if (measured.empty()) {
    printError("no run in the inputs records measured_step or measured_memory");
    return 1;
  }
  auto predict = [&] {
    std::vector<report::FidelityRow> rows;
    for (const Measured &entry : measured) {
      const ir::Run &run = *entry.run;
      analysis::RunAnalysis result = analysis::analyze(*entry.plan);
      report::FidelityRow row;
      row.set = entry.set;
      row.file = entry.file;
      row.run = run.name;
      row.devices = run.cluster->getNumDevices();
      row.device = run.cluster->device ? run.cluster->device->name : run.cluster->name;
      row.modelKind = run.model->kind == ir::ModelKind::Mlp ? "mlp"
                      : run.model->isMoe()                  ? "mixture of experts"
                                                            : "dense transformer";
      row.predictedTime = result.time;
      row.measuredStep = run.measuredStep;
      row.predictedMemory = result.memory.device.peak;
      row.measuredMemory = run.measuredMemory;
      rows.push_back(std::move(row));
    }
    return rows;
  };
  if (fidelityFit)
    return runFidelityFit(compilations, predict);
  std::vector<report::FidelityRow> rows = predict();
  // A limit given is a finite percentage, zero or more; one not given is no limit.
  report::FidelityLimits limits;
  bool limitsOk = true;
  auto limit = [&](const cl::opt<double> &option) -> std::optional<double> {
    if (!option.getNumOccurrences())
      return std::nullopt;
    double percent = option;
    if (!std::isfinite(percent) || percent < 0) {
      printError(fmt::format("--{}: expected a finite percentage of 0 or more, got {}",
                             option.ArgStr.str(), percent));
      limitsOk = false;
      return std::nullopt;
    }
    return percent / 100;
  };
  limits.maxMeanStepError = limit(fidelityMaxMeanError);
  limits.maxStepError = limit(fidelityMaxError);
  limits.maxMemoryError = limit(fidelityMaxMemoryError);
  if (!limitsOk)
    return 1;
  std::optional<bool> json = textOrJson("fidelity");
  if (!json)
    return 1;
  std::string text;
  raw_string_ostream os(text);
  bool within = report::printFidelity(rows, limits, *json, os);
  if (writeOutput(text) != 0)
    return 1;
  return within ? 0 : 1;
}

/// Every command by the name that selects it, in the order --help lists them.
constexpr std::pair<const char *, Command> kCommands[] = {
    {"check", Command::Check},    {"report", Command::Report},   {"diff", Command::Diff},
    {"search", Command::Search},  {"compile", Command::Compile}, {"import", Command::Import},
    {"format", Command::Format},  {"inspect", Command::Inspect}, {"fidelity", Command::Fidelity},
    {"devices", Command::Devices}};

StringRef commandName(Command command) {
  for (const auto &[name, known] : kCommands)
    if (known == command)
      return name;
  return "?";
}

/// `a`, `a and b`, `a, b and c`.
std::string joinAnd(ArrayRef<std::string> items) {
  if (items.size() < 2)
    return items.empty() ? std::string() : items.front();
  return join(items.drop_back(), ", ") + " and " + items.back();
}

/// An option given to a command that does not read it is an error, not an option silently
/// ignored. Each option lists the commands that read it, and those that refuse it with a message
/// of their own later (--emit, --format and --explain on check, --placert-dir).
bool checkOptionsApply(Command command) {
  using C = Command;
  using Commands = std::vector<C>;
  // The commands that read an option, and those that take it only to refuse it later with a
  // message of their own.
  struct Scope {
    const cl::Option *option;
    Commands readers;
    Commands refusers = {};
  };
  const Commands compiling = {C::Check,   C::Report,   C::Diff,   C::Search,
                              C::Compile, C::Fidelity, C::Import, C::Format};
  const Commands afterInputs = {C::Report, C::Diff, C::Search, C::Compile, C::Fidelity};
  const Commands search = {C::Search}, import = {C::Import}, fidelity = {C::Fidelity};
  const Scope scopes[] = {
      {std::addressof(runNames), {C::Check, C::Report, C::Diff, C::Search, C::Compile}},
      {&explain, {C::Report, C::Diff}, {C::Check}},
      {&outputFormat, {C::Report, C::Diff, C::Search, C::Fidelity, C::Devices}, {C::Check}},
      {&outputFile,
       {C::Check, C::Report, C::Diff, C::Search, C::Compile, C::Import, C::Format, C::Fidelity,
        C::Devices}},
      {&emitKind, {C::Check}, afterInputs},
      {&verifyDiagnostics, {C::Check}, afterInputs},
      {&splitInputFile, {C::Check}, afterInputs},
      {&printAfterAll, compiling},
      {&warningsAsErrors, compiling},
      {&errorLimit, compiling},
      {&searchDevices, search},
      {&searchBudget, search},
      {&searchTop, search},
      {&searchThreads, search},
      {&searchPrecision, search},
      {&searchSchedules, search},
      {&searchActivations, search},
      {&searchAsyncTp, search},
      {&searchEpOverlap, search},
      {&searchContext, search},
      {&searchSpInputs, search},
      {&searchDpOverlap, search},
      {&searchMaxParams, search},
      {&importModel, import},
      {&importCluster, import},
      {&importFrom, import},
      {&importMegatronFlags, import},
      {&importSeq, import},
      {&fidelityMaxMeanError, fidelity},
      {&fidelityMaxError, fidelity},
      {&fidelityMaxMemoryError, fidelity},
      {&fidelityFit, fidelity},
      {&placertDir, {C::Compile}},
      {&compileTarget, {C::Compile, C::Search}},
      {&formatInPlace, {C::Format}},
  };
  for (const Scope &scope : scopes) {
    if (!scope.option->getNumOccurrences() || is_contained(scope.readers, command) ||
        is_contained(scope.refusers, command))
      continue;
    std::vector<std::string> names;
    for (C reader : scope.readers)
      names.push_back(commandName(reader).str());
    StringRef name = scope.option->ArgStr;
    printError(fmt::format("{}{} applies to {}, not to {}", name.size() == 1 ? "-" : "--",
                           name.str(), joinAnd(names), commandName(command).str()));
    return false;
  }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);
  programPath = argv[0];

  // The first argument may name a command.
  std::vector<const char *> args(argv, argv + argc);
  Command command = Command::Check;
  if (args.size() > 1) {
    StringRef first = args[1];
    std::optional<Command> named;
    for (const auto &[name, known] : kCommands)
      if (first == name)
        named = known;
    if (named) {
      command = *named;
      args.erase(args.begin() + 1);
    } else if (!first.starts_with("-") && !first.contains('.') && !first.contains('/') &&
               !first.contains(':') && !sys::fs::exists(first)) {
      std::vector<std::string> names;
      for (const auto &[name, known] : kCommands)
        names.push_back(name);
      printError("unknown command '" + first + "'; the commands are " + joinAnd(names) +
                 " (run 'placec --help')");
      return 1;
    }
  }

  cl::HideUnrelatedOptions(placecCategory);
  cl::SetVersionPrinter([](raw_ostream &os) {
    os << "placec version " << PLACEC_VERSION << "\n"
       << "  source revision " << getRevision() << "\n"
       << "  built by " << PLACEC_BUILD_COMPILER << " (" << PLACEC_BUILD_TYPE << ") with LLVM "
       << LLVM_VERSION_STRING << "\n";
  });
  if (!cl::ParseCommandLineOptions(static_cast<int>(args.size()), args.data(), kOverview, &errs()))
    return 1;
  if (!checkOptionsApply(command))
    return 1;

  if (command == Command::Import)
    return runImport();
  if (command == Command::Format)
    return runFormat();
  if (command == Command::Inspect)
    return runInspect();
  if (command == Command::Devices)
    return runDevices();
  if (inputFiles.empty()) {
    printError("no input file; run 'placec --help' for usage");
    return 1;
  }
  if (command != Command::Check && emitKind != EmitKind::None) {
    printError("--emit applies to check; 'report' and 'diff' print reports");
    return 1;
  }
  if (command == Command::Check && (outputFormat != report::Format::Text || explain)) {
    printError("--format and --explain apply to report and diff; did you mean 'placec report'?");
    return 1;
  }
  if (command == Command::Check && !runNames.empty() && emitKind != EmitKind::Plan) {
    printError("--run selects runs for report, diff and --emit=plan");
    return 1;
  }
  if (command != Command::Check && (splitInputFile || verifyDiagnostics)) {
    printError("--split-input-file and --verify-diagnostics apply to check");
    return 1;
  }

  if (command == Command::Search) {
    search::retainFreedMemory();
    return runSearch();
  }
  if (command == Command::Fidelity)
    return runFidelity();
  if (command == Command::Compile)
    return runCompile();

  std::error_code ec;
  auto output = std::make_unique<ToolOutputFile>(outputFile, ec, sys::fs::OF_None);
  if (ec) {
    printError("cannot write '" + outputFile + "': " + ec.message());
    return 1;
  }

  bool ok = true;
  switch (command) {
  case Command::Search: // Returned above.
    break;
  case Command::Report:
    ok = runReport(output->os());
    break;
  case Command::Diff:
    ok = runDiff(output->os());
    break;
  case Command::Check:
    for (const std::string &input : inputFiles) {
      if (!splitInputFile) {
        ok &= checkOne(nullptr, input, output->os());
        continue;
      }
      ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFileOrSTDIN(input);
      if (!buffer) {
        printError("cannot open '" + input + "': " + buffer.getError().message());
        ok = false;
        continue;
      }
      for (std::unique_ptr<MemoryBuffer> &chunk : splitBuffer(**buffer))
        ok &= checkOne(std::move(chunk), input, output->os());
    }
    break;
  case Command::Compile: // Returned above.
  case Command::Fidelity:
  case Command::Devices:
  case Command::Import:
  case Command::Format:
  case Command::Inspect:
    break;
  }
  if (!ok)
    return 1;
  output->keep();
  return 0;
}

// placec: the driver. Parses the command line, runs the front end and the pass pipeline, and
// prints what was asked for.
#include "placec/frontend/Frontend.h"
#include "placec/passes/Passes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

using namespace llvm;
using namespace placec;

namespace {

cl::OptionCategory placecCategory("placec options");

enum class EmitKind { None, Ast, Ir };

cl::list<std::string> inputFiles(cl::Positional, cl::desc("<input .place files>"),
                                 cl::cat(placecCategory));

cl::opt<EmitKind> emitKind(
    "emit", cl::desc("What to print, in pipeline order:"), cl::init(EmitKind::None),
    cl::values(clEnumValN(EmitKind::Ast, "ast", "the syntax tree of each input file"),
               clEnumValN(EmitKind::Ir, "ir", "the IR after verification (docs/ir.md)")),
    cl::cat(placecCategory));

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

constexpr const char *kOverview = R"(placec: the compiler for placement semantics

A .place file declares models, clusters, strategies (a device mesh and where each training state
lives on it) and runs. placec checks that every run's strategy is correct and fits, and prints
what it understood.

USAGE: placec [command] [options] <input.place>...

COMMANDS:
  check     Parse and verify every input; print nothing on success (the default).

EXAMPLES:
  placec check model.place              verify; exit code 1 and file:line:col errors if wrong
  placec --emit=ir model.place          print the verified IR: tensors, meshes, placements, runs
  placec --emit=ast model.place         print the syntax tree
  placec --verify-diagnostics bad.place check expected-error comments (for tests)

Documentation: docs/language.md (the language), docs/rules.md (the checks), docs/ir.md (the IR).
)";

/// The known commands. A first argument that is none of them is an input file.
enum class Command { Check };

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

/// Compiles one program (a file or a chunk) and prints what was asked. Returns true on success.
bool compileOne(std::unique_ptr<MemoryBuffer> preloaded, StringRef path, raw_ostream &out) {
  SourceMgr sourceMgr;
  DiagnosticEngine diags(sourceMgr);
  diags.setWarningsAsErrors(warningsAsErrors);
  diags.setErrorLimit(verifyDiagnostics ? 0 : errorLimit);
  if (verifyDiagnostics)
    diags.enableVerifyMode();

  std::vector<std::unique_ptr<ast::File>> files =
      preloaded ? parseProgram(std::move(preloaded), diags) : parseProgram(path, diags);
  std::unique_ptr<ir::Program> program;
  if (!files.empty()) {
    if (emitKind == EmitKind::Ast)
      printAst(*files.back(), out);
    program = buildProgram(files, diags);
  }
  if (program) {
    PassManager passes;
    passes.addPass(createVerifyPass());
    if (printAfterAll)
      passes.setPrintAfterAll(&errs());
    bool ok = passes.run(*program, diags);
    if (ok && emitKind == EmitKind::Ir)
      ir::printProgram(*program, out);
  }
  if (verifyDiagnostics)
    return diags.verify();
  return !diags.hasErrors();
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM initLLVM(argc, argv);

  // The first argument may name a command.
  std::vector<const char *> args(argv, argv + argc);
  Command command = Command::Check;
  if (args.size() > 1) {
    std::optional<Command> named =
        StringSwitch<std::optional<Command>>(args[1]).Case("check", Command::Check).Default(
            std::nullopt);
    if (named) {
      command = *named;
      args.erase(args.begin() + 1);
    }
  }
  (void)command;

  cl::HideUnrelatedOptions(placecCategory);
  cl::SetVersionPrinter([](raw_ostream &os) { os << "placec version 0.1.0\n"; });
  if (!cl::ParseCommandLineOptions(static_cast<int>(args.size()), args.data(), kOverview,
                                   &errs()))
    return 1;

  if (inputFiles.empty()) {
    errs() << "placec: error: no input file; run 'placec --help' for usage\n";
    return 1;
  }

  std::error_code ec;
  auto output = std::make_unique<ToolOutputFile>(outputFile, ec, sys::fs::OF_None);
  if (ec) {
    errs() << "placec: error: cannot write '" << outputFile << "': " << ec.message() << "\n";
    return 1;
  }

  bool ok = true;
  for (const std::string &input : inputFiles) {
    if (!splitInputFile) {
      ok &= compileOne(nullptr, input, output->os());
      continue;
    }
    ErrorOr<std::unique_ptr<MemoryBuffer>> buffer = MemoryBuffer::getFileOrSTDIN(input);
    if (!buffer) {
      errs() << "placec: error: cannot open '" << input << "': " << buffer.getError().message()
             << "\n";
      ok = false;
      continue;
    }
    for (std::unique_ptr<MemoryBuffer> &chunk : splitBuffer(**buffer))
      ok &= compileOne(std::move(chunk), input, output->os());
  }
  if (!ok)
    return 1;
  output->keep();
  return 0;
}

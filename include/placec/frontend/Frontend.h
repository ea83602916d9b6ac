// The front end's entry points: parse a .place file (and its imports, and the prelude) into the IR.
#ifndef PLACEC_FRONTEND_FRONTEND_H
#define PLACEC_FRONTEND_FRONTEND_H

#include "placec/frontend/AST.h"
#include "placec/ir/Diagnostics.h"
#include "placec/ir/IR.h"

#include "llvm/ADT/StringRef.h"

#include <memory>

namespace llvm {
class MemoryBuffer;
}

namespace placec {

/// The text of the standard prelude (frontend/Prelude.place).
extern const char *const kPreludeText;

/// The name under which the prelude's buffer is registered.
constexpr llvm::StringLiteral kPreludeName = "<prelude>";

/// Parses one buffer already added to the diagnostic engine's source manager into an AST.
/// Reports every lexical and syntax error; returns null when there was any.
std::unique_ptr<ast::File> parseBuffer(unsigned bufferId, DiagnosticEngine &diags);

/// Parses a whole program: `path` (or "-" for standard input), every file it imports, and the
/// prelude. Files are read once each; an import cycle is an error. Returns the files in
/// dependency order (the prelude first, the main file last), or an empty vector after errors.
std::vector<std::unique_ptr<ast::File>> parseProgram(llvm::StringRef path, DiagnosticEngine &diags);

/// Like parseProgram, with the main file's text given: `buffer` is named by the main file's path
/// (imports resolve relative to it). Used for `--split-input-file`, where each chunk of a file is
/// compiled on its own.
std::vector<std::unique_ptr<ast::File>> parseProgram(std::unique_ptr<llvm::MemoryBuffer> buffer,
                                                     DiagnosticEngine &diags);

/// Resolves names and builds the IR from parsed files (the prelude first). Returns null after
/// errors, which have been reported.
std::unique_ptr<ir::Program> buildProgram(llvm::ArrayRef<std::unique_ptr<ast::File>> files,
                                          DiagnosticEngine &diags);

/// Prints the AST of one file as an indented tree (`placec --emit=ast`).
void printAst(const ast::File &file, llvm::raw_ostream &os);

/// parseProgram followed by buildProgram.
std::unique_ptr<ir::Program> loadProgram(llvm::StringRef path, DiagnosticEngine &diags);

} // namespace placec

#endif // PLACEC_FRONTEND_FRONTEND_H

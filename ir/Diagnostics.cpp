// The diagnostic engine: printing with carets on long lines, counting, and --verify-diagnostics.
#include "placec/ir/Diagnostics.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace placec {

std::string Diagnostic::getFullMessage() const {
  if (rule.empty())
    return message;
  return message + " [" + rule + "]";
}

DiagnosticEngine::DiagnosticEngine(SourceMgr &sourceMgr) : sourceMgr(sourceMgr), out(&errs()) {}

static SourceMgr::DiagKind toDiagKind(Severity severity) {
  switch (severity) {
  case Severity::Error:
    return SourceMgr::DK_Error;
  case Severity::Warning:
    return SourceMgr::DK_Warning;
  case Severity::Note:
    return SourceMgr::DK_Note;
  }
  return SourceMgr::DK_Error;
}

void DiagnosticEngine::report(Severity severity, SMLoc loc, const Twine &message, StringRef rule,
                              ArrayRef<SMRange> ranges) {
  if (severity == Severity::Warning && warningsAsErrors)
    severity = Severity::Error;
  if (severity == Severity::Note) {
    if (suppressNotes)
      return;
  } else {
    suppressNotes = limitReached;
    if (limitReached)
      return;
  }
  if (severity == Severity::Error)
    ++numErrors;
  else if (severity == Severity::Warning)
    ++numWarnings;

  Diagnostic diag{severity, loc, message.str(), rule.str()};
  if (!verifyMode && !quiet)
    print(diag, ranges);
  diagnostics.push_back(std::move(diag));

  if (severity == Severity::Error && errorLimit != 0 && numErrors >= errorLimit && !limitReached) {
    limitReached = true;
    if (!verifyMode && !quiet)
      *out << "placec: note: too many errors, stopping after " << errorLimit << "\n";
  }
}

/// Lines longer than this are shown as a window around the column.
static constexpr unsigned kMaxShownLine = 160;

void DiagnosticEngine::print(const Diagnostic &diag, ArrayRef<SMRange> ranges) {
  std::string text = diag.getFullMessage();
  SourceMgr::DiagKind kind = toDiagKind(diag.severity);
  if (!diag.loc.isValid()) {
    SMDiagnostic(StringRef(), kind, text).print("placec", *out, /*ShowColors=*/false);
    return;
  }
  unsigned bufferId = sourceMgr.FindBufferContainingLoc(diag.loc);
  if (bufferId == 0) {
    SMDiagnostic(StringRef(), kind, text).print("placec", *out, false);
    return;
  }
  const MemoryBuffer *buffer = sourceMgr.getMemoryBuffer(bufferId);
  auto [line, col] = sourceMgr.getLineAndColumn(diag.loc, bufferId);

  // Find the source line around the location.
  const char *bufStart = buffer->getBufferStart();
  const char *bufEnd = buffer->getBufferEnd();
  const char *lineStart = diag.loc.getPointer();
  while (lineStart != bufStart && lineStart[-1] != '\n' && lineStart[-1] != '\r')
    --lineStart;
  const char *lineEnd = diag.loc.getPointer();
  while (lineEnd != bufEnd && *lineEnd != '\n' && *lineEnd != '\r')
    ++lineEnd;

  StringRef lineText(lineStart, lineEnd - lineStart);
  unsigned caretCol = diag.loc.getPointer() - lineStart;
  std::string shown;
  if (lineText.size() > kMaxShownLine) {
    size_t from = caretCol > kMaxShownLine / 2 ? caretCol - kMaxShownLine / 2 : 0;
    size_t length = std::min<size_t>(kMaxShownLine, lineText.size() - from);
    shown = (from > 0 ? "..." : "") + lineText.substr(from, length).str() +
            (from + length < lineText.size() ? "..." : "");
    caretCol = caretCol - from + (from > 0 ? 3 : 0);
  } else {
    shown = lineText.str();
  }
  // Non-printable bytes would garble the terminal; show them as '?'.
  for (char &c : shown)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
      c = '?';

  SmallVector<std::pair<unsigned, unsigned>, 2> colRanges;
  for (SMRange range : ranges) {
    if (!range.isValid() || range.Start.getPointer() < lineStart ||
        range.End.getPointer() > lineEnd || lineText.size() > kMaxShownLine)
      continue;
    colRanges.emplace_back(range.Start.getPointer() - lineStart,
                           range.End.getPointer() - lineStart);
  }
  SMDiagnostic smDiag(sourceMgr, diag.loc, buffer->getBufferIdentifier(), line, caretCol, kind,
                      text, shown, colRanges);
  (void)col;
  smDiag.print(nullptr, *out, /*ShowColors=*/false);
}

namespace {
/// One `expected-*` comment.
struct Expectation {
  Severity severity;
  unsigned bufferId;
  unsigned line;
  std::string text;
  SMLoc commentLoc;
  bool matched = false;
};
} // namespace

static StringRef severityName(Severity severity) {
  switch (severity) {
  case Severity::Error:
    return "error";
  case Severity::Warning:
    return "warning";
  case Severity::Note:
    return "note";
  }
  return "error";
}

bool DiagnosticEngine::verify() {
  std::vector<Expectation> expectations;
  bool ok = true;
  Regex pattern("expected-(error|warning|note)(@[+-][0-9]+|@above|@below)? *\\{\\{");
  for (unsigned id = 1, e = sourceMgr.getNumBuffers(); id <= e; ++id) {
    StringRef buffer = sourceMgr.getMemoryBuffer(id)->getBuffer();
    size_t pos = 0;
    while (true) {
      size_t found = buffer.find("expected-", pos);
      if (found == StringRef::npos)
        break;
      pos = found + 1;
      // Only comments count.
      size_t lineBegin = buffer.rfind('\n', found);
      lineBegin = lineBegin == StringRef::npos ? 0 : lineBegin + 1;
      if (!buffer.slice(lineBegin, found).contains("//"))
        continue;
      SmallVector<StringRef, 3> groups;
      StringRef rest = buffer.substr(found);
      if (!pattern.match(rest.take_until([](char c) { return c == '\n'; }), &groups) ||
          !rest.starts_with(groups[0]))
        continue;
      Severity severity = groups[1] == "error"     ? Severity::Error
                          : groups[1] == "warning" ? Severity::Warning
                                                   : Severity::Note;
      SMLoc loc = SMLoc::getFromPointer(buffer.data() + found);
      unsigned line = sourceMgr.getLineAndColumn(loc, id).first;
      StringRef offset = groups[2];
      if (offset.starts_with("@+") || offset.starts_with("@-")) {
        unsigned delta = 0;
        offset.drop_front(2).getAsInteger(10, delta);
        line = offset[1] == '+' ? line + delta : line - delta;
      }
      size_t textStart = found + groups[0].size();
      size_t textEnd = buffer.find("}}", textStart);
      size_t lineEnd = buffer.find('\n', textStart);
      if (textEnd == StringRef::npos || (lineEnd != StringRef::npos && textEnd > lineEnd)) {
        *out << buffer.substr(0, 0);
        SMDiagnostic(sourceMgr, loc, sourceMgr.getMemoryBuffer(id)->getBufferIdentifier(), line, 0,
                     SourceMgr::DK_Error, "expectation has no closing '}}'", "", {})
            .print(nullptr, *out, false);
        ok = false;
        continue;
      }
      expectations.push_back(
          {severity, id, line, buffer.slice(textStart, textEnd).str(), loc, false});
    }
  }

  for (const Diagnostic &diag : diagnostics) {
    unsigned id = diag.loc.isValid() ? sourceMgr.FindBufferContainingLoc(diag.loc) : 0;
    unsigned line = id ? sourceMgr.getLineAndColumn(diag.loc, id).first : 0;
    if (id && llvm::is_contained(uncheckedBuffers, id))
      continue;
    std::string full = diag.getFullMessage();
    auto it = llvm::find_if(expectations, [&](const Expectation &exp) {
      return !exp.matched && exp.severity == diag.severity && exp.bufferId == id &&
             exp.line == line && StringRef(full).contains(exp.text);
    });
    if (it != expectations.end()) {
      it->matched = true;
      continue;
    }
    ok = false;
    std::string where = "<unknown>";
    if (id) {
      where = (sourceMgr.getMemoryBuffer(id)->getBufferIdentifier() + ":" + Twine(line)).str();
    }
    *out << where << ": unexpected " << severityName(diag.severity) << ": " << full << "\n";
  }
  for (const Expectation &exp : expectations) {
    if (exp.matched)
      continue;
    ok = false;
    *out << sourceMgr.getMemoryBuffer(exp.bufferId)->getBufferIdentifier() << ":" << exp.line
         << ": expected " << severityName(exp.severity) << " was not produced: " << exp.text
         << "\n";
  }
  return ok;
}

} // namespace placec

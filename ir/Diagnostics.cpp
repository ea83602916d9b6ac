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
static constexpr size_t kMaxShownLine = 160;
/// Tabs in the shown line expand to the next multiple of this many columns.
static constexpr unsigned kTabStop = 8;

StringRef toString(Severity severity) {
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

void DiagnosticEngine::print(const Diagnostic &diag, ArrayRef<SMRange> ranges) {
  (void)ranges;
  std::string text = diag.getFullMessage();
  unsigned bufferId = diag.loc.isValid() ? sourceMgr.FindBufferContainingLoc(diag.loc) : 0;
  if (bufferId == 0) {
    *out << "placec: " << toString(diag.severity) << ": " << text << "\n";
    return;
  }
  const MemoryBuffer *buffer = sourceMgr.getMemoryBuffer(bufferId);
  unsigned line = sourceMgr.getLineAndColumn(diag.loc, bufferId).first;

  // The source line around the location.
  const char *bufStart = buffer->getBufferStart();
  const char *bufEnd = buffer->getBufferEnd();
  const char *lineStart = diag.loc.getPointer();
  while (lineStart != bufStart && lineStart[-1] != '\n' && lineStart[-1] != '\r')
    --lineStart;
  const char *lineEnd = diag.loc.getPointer();
  while (lineEnd != bufEnd && *lineEnd != '\n' && *lineEnd != '\r')
    ++lineEnd;
  size_t byteColumn = diag.loc.getPointer() - lineStart;

  // Columns count bytes, from 1.
  *out << buffer->getBufferIdentifier() << ":" << line << ":" << byteColumn + 1 << ": "
       << toString(diag.severity) << ": " << text << "\n";

  // Show the line, or a window of it around the column, and a caret under the location. Tabs
  // expand to tab stops; a UTF-8 sequence takes one column; control characters and bytes that
  // are not UTF-8 show as '?'.
  StringRef lineText(lineStart, lineEnd - lineStart);
  size_t from = 0, to = lineText.size();
  if (lineText.size() > kMaxShownLine) {
    from = byteColumn > kMaxShownLine / 2 ? byteColumn - kMaxShownLine / 2 : 0;
    to = std::min(lineText.size(), from + kMaxShownLine);
    // Do not start or end inside a UTF-8 sequence.
    while (from > 0 && (static_cast<unsigned char>(lineText[from]) & 0xC0) == 0x80)
      --from;
    while (to < lineText.size() && (static_cast<unsigned char>(lineText[to]) & 0xC0) == 0x80)
      ++to;
  }
  std::string shown = from > 0 ? "..." : "";
  unsigned column = shown.size(), caretColumn = column;
  for (size_t i = from; i < to;) {
    if (i == byteColumn)
      caretColumn = column;
    unsigned char c = static_cast<unsigned char>(lineText[i]);
    if (c == '\t') {
      unsigned spaces = kTabStop - column % kTabStop;
      shown.append(spaces, ' ');
      column += spaces;
      ++i;
      continue;
    }
    unsigned length = c < 0x80           ? 1
                      : (c >> 5) == 0x6  ? 2
                      : (c >> 4) == 0xE  ? 3
                      : (c >> 3) == 0x1E ? 4
                                         : 0;
    bool valid = length != 0 && i + length <= to;
    for (unsigned k = 1; valid && k < length; ++k)
      valid = (static_cast<unsigned char>(lineText[i + k]) & 0xC0) == 0x80;
    if (!valid || c < 0x20 || c == 0x7f) {
      shown += '?';
      ++column;
      ++i;
      continue;
    }
    shown.append(lineText.data() + i, length);
    ++column;
    i += length;
  }
  if (byteColumn >= to)
    caretColumn = column;
  if (to < lineText.size())
    shown += "...";
  *out << shown << "\n";
  out->indent(caretColumn) << "^\n";
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
    *out << where << ": unexpected " << toString(diag.severity) << ": " << full << "\n";
  }
  for (const Expectation &exp : expectations) {
    if (exp.matched)
      continue;
    ok = false;
    *out << sourceMgr.getMemoryBuffer(exp.bufferId)->getBufferIdentifier() << ":" << exp.line
         << ": expected " << toString(exp.severity) << " was not produced: " << exp.text << "\n";
  }
  return ok;
}

} // namespace placec

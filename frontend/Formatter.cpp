// `placec format`: a token-level pretty-printer. The file is first parsed (so that only valid
// files are formatted), then lexed again here with its comments, which the grammar skips, and
// printed in the canonical layout of docs/format.md.
#include "placec/frontend/Formatter.h"

#include "placec/frontend/Frontend.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <string>
#include <vector>

using namespace llvm;

namespace placec {

namespace {

enum class TokenKind { Word, Number, String, Punct, LineComment, BlockComment };

struct Token {
  TokenKind kind;
  StringRef text;
  /// Line breaks between the end of the previous token and the start of this one.
  unsigned newlinesBefore = 0;

  bool isComment() const {
    return kind == TokenKind::LineComment || kind == TokenKind::BlockComment;
  }
  bool is(char c) const { return kind == TokenKind::Punct && text.size() == 1 && text[0] == c; }
};

bool isIdentStart(char c) { return isAlpha(c) || c == '_'; }
bool isIdentChar(char c) { return isAlnum(c) || c == '_'; }

/// Lexes a file the parser has accepted: every token, comments included.
std::vector<Token> lex(StringRef text) {
  std::vector<Token> tokens;
  if (text.starts_with("\xEF\xBB\xBF"))
    text = text.drop_front(3);
  size_t i = 0;
  unsigned newlines = 0;
  auto push = [&](TokenKind kind, size_t start, size_t end) {
    tokens.push_back({kind, text.slice(start, end), newlines});
    newlines = 0;
  };
  while (i < text.size()) {
    char c = text[i];
    size_t start = i;
    // A line ends at '\n', "\r\n" or a lone '\r', as the grammar's line comments do.
    if (c == '\n' || (c == '\r' && (i + 1 == text.size() || text[i + 1] != '\n'))) {
      ++newlines;
      ++i;
    } else if (isSpace(c)) {
      ++i;
    } else if (text.substr(i).starts_with("//")) {
      i = std::min(text.find_first_of("\r\n", i), text.size());
      tokens.push_back({TokenKind::LineComment, text.slice(start, i).rtrim(" \t\r\f\v"), newlines});
      newlines = 0;
    } else if (text.substr(i).starts_with("/*")) {
      size_t close = text.find("*/", i + 2);
      i = close == StringRef::npos ? text.size() : close + 2;
      push(TokenKind::BlockComment, start, i);
    } else if (c == '"') {
      size_t close = text.find('"', i + 1);
      i = close == StringRef::npos ? text.size() : close + 1;
      push(TokenKind::String, start, i);
    } else if (text.substr(i).starts_with("1f1b") &&
               (i + 4 >= text.size() || !isIdentChar(text[i + 4]))) {
      i += 4;
      push(TokenKind::Word, start, i);
    } else if (isDigit(c)) {
      while (i < text.size() && isDigit(text[i]))
        ++i;
      if (i + 1 < text.size() && text[i] == '.' && isDigit(text[i + 1])) {
        ++i;
        while (i < text.size() && isDigit(text[i]))
          ++i;
      }
      if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
        size_t j = i + 1;
        if (j < text.size() && (text[j] == '+' || text[j] == '-'))
          ++j;
        if (j < text.size() && isDigit(text[j])) {
          i = j;
          while (i < text.size() && isDigit(text[i]))
            ++i;
        }
      }
      if (i < text.size() && StringRef("KMBT").contains(text[i]))
        ++i;
      push(TokenKind::Number, start, i);
    } else if (isIdentStart(c)) {
      while (i < text.size() && isIdentChar(text[i]))
        ++i;
      push(TokenKind::Word, start, i);
    } else {
      ++i;
      push(TokenKind::Punct, start, i);
    }
  }
  return tokens;
}

/// One output line: indentation, code, and a trailing comment aligned with its neighbours'.
struct Line {
  unsigned indent = 0;
  std::string code;
  std::string comment;
  bool blankBefore = false;
};

class Printer {
public:
  std::string print(ArrayRef<Token> tokens) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const Token &token = tokens[i];
      if (token.isComment()) {
        printComment(token, i + 1 < tokens.size() ? &tokens[i + 1] : nullptr);
        continue;
      }
      // `{` directly followed by `}` is an empty body, printed `{}`.
      if (token.is('{') && i + 1 < tokens.size() && tokens[i + 1].is('}')) {
        append(token, "{}");
        ++i;
        lineDone = true;
        statementOpen = false;
        continue;
      }
      if (token.is('}')) {
        --braceDepth;
        statementOpen = false;
        startLine(token.newlinesBefore, /*closesBlock=*/true);
        current.code.assign(1, '}'); // Not `= "}"`, which GCC 12 -O3 misreads (-Wrestrict).
        lineDone = true;
        prev = &token;
        continue;
      }
      append(token, token.text);
      if (token.is('{')) {
        ++braceDepth;
        lineDone = true;
        statementOpen = false;
      } else if (token.is(';')) {
        lineDone = true;
        statementOpen = false;
      }
    }
    flush();
    return render();
  }

private:
  /// Appends a code token to the current line, or starts a new line for it.
  void append(const Token &token, StringRef text) {
    if (lineDone || current.code.empty()) {
      startLine(token.newlinesBefore, false);
      current.code = text.str();
    } else {
      if (needsSpace(*prev, token))
        current.code += ' ';
      current.code += text;
    }
    if (token.is('['))
      ++bracketDepth;
    if (token.is(']'))
      --bracketDepth;
    statementOpen = !token.is(';') && !token.is('{');
    prev = &token;
  }

  bool needsSpace(const Token &left, const Token &right) const {
    if (right.is(';') || right.is(',') || right.is(')') || right.is(']') || right.is('/'))
      return false;
    if (left.is('(') || left.is('[') || left.is('/'))
      return false;
    if (right.is('('))
      return !(left.kind == TokenKind::Word);
    if (right.is(':'))
      return bracketDepth == 0; // `model m : transformer`, but `[node: batch = 8]`.
    return true;
  }

  void printComment(const Token &comment, const Token *next) {
    bool trailing = comment.newlinesBefore == 0 && !current.code.empty();
    bool codeFollows = next && next->newlinesBefore == 0 && !next->isComment();
    if (trailing && comment.kind == TokenKind::BlockComment && !lineDone && codeFollows) {
      current.code += (" " + comment.text).str(); // Inside a statement: `x = /* why */ 4;`.
      return;
    }
    if (trailing) {
      if (!current.comment.empty())
        current.comment += ' ';
      current.comment += comment.text.str();
      if (comment.kind == TokenKind::LineComment || !codeFollows)
        lineDone = true;
      return;
    }
    // A comment on its own line.
    startLine(comment.newlinesBefore, false);
    current.code = comment.text.str();
    commentOnly = true;
    lineDone = comment.kind == TokenKind::LineComment || !codeFollows;
    if (!lineDone)
      prev = &comment; // Code follows on the same line: `/* note */ model m {`.
  }

  /// Ends the current line and starts a new one at the current indentation.
  void startLine(unsigned newlinesBefore, bool closesBlock) {
    flush();
    current = Line();
    current.indent = braceDepth * 2 + (statementOpen ? 4 : 0);
    bool afterOpen = !lines.empty() && StringRef(lines.back().code).ends_with("{") &&
                     !lines.back().code.ends_with("{}") && lines.back().comment.empty() &&
                     !lineWasComment;
    current.blankBefore = newlinesBefore >= 2 && !lines.empty() && !closesBlock && !afterOpen;
    lineDone = false;
  }

  void flush() {
    if (!current.code.empty() || !current.comment.empty()) {
      lines.push_back(current);
      lineWasComment = commentOnly;
    }
    current = Line();
    commentOnly = false;
  }

  /// Joins the lines, aligning the trailing comments of consecutive lines.
  std::string render() {
    std::string out;
    size_t i = 0;
    while (i < lines.size()) {
      // A run of consecutive lines at one indentation, each with code and a trailing comment,
      // shares one comment column.
      size_t end = i;
      size_t column = 0;
      auto inRun = [&](size_t index) {
        const Line &line = lines[index];
        return !line.comment.empty() && !line.code.empty() &&
               line.code.find('\n') == std::string::npos &&
               (index == i || (!line.blankBefore && line.indent == lines[i].indent));
      };
      while (end < lines.size() && inRun(end)) {
        column = std::max(column, lines[end].indent + lines[end].code.size());
        ++end;
      }
      if (end == i)
        end = i + 1;
      for (size_t index = i; index < end; ++index) {
        const Line &line = lines[index];
        if (line.blankBefore)
          out += '\n';
        std::string text(line.indent, ' ');
        text += line.code;
        if (!line.comment.empty()) {
          if (line.code.empty())
            text += line.comment;
          else if (line.code.find('\n') != std::string::npos || column == 0)
            text += "  " + line.comment;
          else
            text += std::string(column + 2 - line.indent - line.code.size(), ' ') + line.comment;
        }
        out += StringRef(text).rtrim(" \t").str();
        out += '\n';
      }
      i = end;
    }
    return out;
  }

  std::vector<Line> lines;
  Line current;
  const Token *prev = nullptr;
  unsigned braceDepth = 0;
  unsigned bracketDepth = 0;
  bool lineDone = false;
  bool statementOpen = false;
  bool commentOnly = false;
  bool lineWasComment = false;
};

} // namespace

std::optional<std::string> formatBuffer(unsigned bufferId, DiagnosticEngine &diags) {
  // Only a file the parser accepts is formatted.
  if (!parseBuffer(bufferId, diags) || diags.hasErrors())
    return std::nullopt;
  StringRef text = diags.getSourceMgr().getMemoryBuffer(bufferId)->getBuffer();
  std::vector<Token> tokens = lex(text);
  return Printer().print(tokens);
}

} // namespace placec

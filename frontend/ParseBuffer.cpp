// parseBuffer: one .place buffer to an AST. Checks that the buffer is text, lexes it with the
// generated lexer, reports lexical errors, parses in two stages (fast SLL prediction first, full
// LL with error recovery only when that fails) and hands the parse tree to AstBuilder.
#include "AstBuilder.h"
#include "PlaceLexer.h"
#include "PlaceParser.h"
#include "antlr4-runtime.h"
#include "placec/frontend/Frontend.h"

#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/MemoryBuffer.h"

#include <limits>
#include <mutex>
#include <string>

using namespace llvm;

namespace placec {

namespace {

/// The lexer's input: the buffer decoded to one UTF-32 unit per code point. ANTLRInputStream
/// would decode it too, but throws on invalid UTF-8 and keeps no map back to byte offsets.
class CodePointStream : public antlr4::ANTLRInputStream {
public:
  CodePointStream(std::u32string codePoints, std::string sourceName) {
    _data = std::move(codePoints);
    p = 0;
    name = std::move(sourceName);
  }
};

/// The lexer's ATN simulator, reading the DFA's edges without the runtime's reader-writer lock.
/// That lock is taken and released for every character and costs about a quarter of the lexing
/// time; parseBuffer runs one lexer at a time (parseMutex), so nothing writes the shared DFA
/// while it is read.
class UnlockedLexerSimulator : public antlr4::atn::LexerATNSimulator {
public:
  using LexerATNSimulator::LexerATNSimulator;

protected:
  antlr4::dfa::DFAState *getExistingTargetState(antlr4::dfa::DFAState *state,
                                                size_t symbol) override {
    if (symbol > MAX_DFA_EDGE)
      return nullptr;
    auto it = state->edges.find(symbol - MIN_DFA_EDGE);
    return it == state->edges.end() ? nullptr : it->second;
  }
};

/// The generated lexer, on UnlockedLexerSimulator (sharing the generated lexer's DFA cache), and
/// asking it for the line and column without the runtime's dynamic_cast for every token.
class Lexer : public grammar::PlaceLexer {
public:
  explicit Lexer(antlr4::CharStream *input) : PlaceLexer(input) {
    auto *generated = getInterpreter<antlr4::atn::LexerATNSimulator>();
    simulator = new UnlockedLexerSimulator(this, getATN(), generated->_decisionToDFA,
                                           generated->getSharedContextCache());
    _interpreter = simulator; // Deleted by ~PlaceLexer.
    delete generated;
  }

  size_t getLine() const override { return simulator->getLine(); }
  size_t getCharPositionInLine() override { return simulator->getCharPositionInLine(); }

private:
  UnlockedLexerSimulator *simulator;
};

/// Serializes parseBuffer's use of the generated lexer's DFA cache (see UnlockedLexerSimulator).
std::mutex parseMutex;

} // namespace

/// Decodes `text` (after a UTF-8 byte order mark, if any) into code points, and records in
/// `offsets` where each code point starts when the text is not all ASCII. Returns the offset of
/// the first byte that is not text, a NUL or the start of an invalid UTF-8 sequence, or npos.
static size_t decodeText(StringRef text, std::u32string &codePoints, CharOffsets &offsets) {
  size_t size = text.size();
  size_t start = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;
  const auto *bytes = reinterpret_cast<const UTF8 *>(text.data());
  codePoints.reserve(size - start);
  offsets.base = start;
  offsets.endOffset = size;
  std::vector<uint32_t> &table = offsets.charOffsets;
  bool ascii = true;
  for (size_t i = start; i < size;) {
    UTF8 first = bytes[i];
    if (first < 0x80) {
      if (first == 0)
        return i;
      if (!ascii)
        table.push_back(static_cast<uint32_t>(i));
      codePoints.push_back(first);
      ++i;
      continue;
    }
    unsigned length = getNumBytesForUTF8(first);
    if (length > size - i || !isLegalUTF8Sequence(bytes + i, bytes + i + length))
      return i;
    if (ascii) {
      // The first character outside ASCII: from here on, offsets are kept in a table.
      ascii = false;
      table.reserve(size - start);
      for (size_t index = 0; index < codePoints.size(); ++index)
        table.push_back(static_cast<uint32_t>(start + index));
    }
    UTF32 codePoint = 0;
    const UTF8 *source = bytes + i;
    UTF32 *target = &codePoint;
    ConvertUTF8toUTF32(&source, source + length, &target, target + 1, strictConversion);
    table.push_back(static_cast<uint32_t>(i));
    codePoints.push_back(codePoint);
    i += length;
  }
  offsets.numChars = codePoints.size();
  return StringRef::npos;
}

std::unique_ptr<ast::File> parseBuffer(unsigned bufferId, DiagnosticEngine &diags) {
  const MemoryBuffer *buffer = diags.getSourceMgr().getMemoryBuffer(bufferId);
  StringRef text = buffer->getBuffer();
  if (text.size() >= std::numeric_limits<uint32_t>::max()) {
    diags.error(SMLoc::getFromPointer(text.data()), "file is too large (4 GiB or more)");
    return nullptr;
  }

  // 1. Text only: a NUL byte or invalid UTF-8 means this is not a .place file.
  std::u32string codePoints;
  CharOffsets offsets;
  size_t badOffset = decodeText(text, codePoints, offsets);
  if (badOffset != StringRef::npos) {
    diags.error(SMLoc::getFromPointer(text.data() + badOffset), "file is not valid UTF-8 text");
    return nullptr;
  }

  AstBuilder builder(bufferId, diags, std::move(offsets));
  std::lock_guard<std::mutex> lock(parseMutex);
  try {
    // 2. Lex the whole buffer, and report lexical errors before parsing.
    CodePointStream input(std::move(codePoints), buffer->getBufferIdentifier().str());
    Lexer lexer(&input);
    lexer.removeErrorListeners();
    lexer.addErrorListener(&builder);
    antlr4::CommonTokenStream tokens(&lexer);
    tokens.fill();
    if (!builder.checkTokens(tokens.getTokens()))
      return nullptr;

    // 3. Parse: SLL prediction, bailing out at the first error, is enough for almost every input;
    // only an input it rejects is parsed again with full LL prediction and error recovery, which
    // reports the errors.
    // BailErrorStrategy still reports a failed prediction to the listeners before it bails out;
    // the first stage has none, so that only the second stage's errors are shown.
    grammar::PlaceParser parser(&tokens);
    parser.removeErrorListeners();
    // AstBuilder reads the contexts through their labels and start and stop tokens, never their
    // children, so the parser need not link them into a tree or make a node for every token.
    parser.setBuildParseTree(false);
    auto *simulator = parser.getInterpreter<antlr4::atn::ParserATNSimulator>();
    simulator->setPredictionMode(antlr4::atn::PredictionMode::SLL);
    parser.setErrorHandler(std::make_shared<antlr4::BailErrorStrategy>());
    grammar::PlaceParser::ProgramContext *program = nullptr;
    try {
      program = parser.program();
    } catch (const antlr4::ParseCancellationException &) {
      tokens.seek(0);
      parser.reset();
      parser.addErrorListener(&builder);
      parser.setErrorHandler(std::make_shared<SyntaxErrorStrategy>(builder));
      simulator->setPredictionMode(antlr4::atn::PredictionMode::LL);
      try {
        program = parser.program();
      } catch (const antlr4::ParseCancellationException &) {
        // SyntaxErrorStrategy stopped after too many errors; they have been reported.
        program = nullptr;
      }
    }
    if (!program || builder.hasErrors())
      return nullptr;

    // 4. The AST.
    return builder.build(program);
  } catch (const std::exception &e) {
    // Not expected: ANTLR's own exceptions are all handled above. Report rather than crash.
    diags.error(SMLoc::getFromPointer(text.data()),
                Twine("internal error while parsing: ") + e.what());
    return nullptr;
  }
}

} // namespace placec

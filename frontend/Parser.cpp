// parseBuffer: one .place buffer to an AST. Checks that the buffer is text, lexes it with the
// generated lexer, reports lexical errors, parses in two stages (fast SLL prediction first, full
// LL with error recovery only when that fails) and hands the parse tree to AstBuilder.
#include "AstBuilder.h"
#include "PlaceLexer.h"
#include "PlaceParser.h"
#include "placec/frontend/Frontend.h"

#include "antlr4-runtime.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/MemoryBuffer.h"

#include <limits>
#include <chrono>
#include <cstdio>
#include <cstdlib>
static double nowMs(){return std::chrono::duration<double,std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();}
#define T(name) if(getenv("PT")) fprintf(stderr, "%s %.2f\n", name, nowMs()-t0), t0 = nowMs();
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
      // The first non-ASCII character: from here on, offsets are kept in a table.
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
  double t0 = nowMs();
  std::u32string codePoints;
  CharOffsets offsets;
  size_t badOffset = decodeText(text, codePoints, offsets);
  if (badOffset != StringRef::npos) {
    diags.error(SMLoc::getFromPointer(text.data() + badOffset), "file is not valid UTF-8 text");
    return nullptr;
  }

  T("decode");
  AstBuilder builder(bufferId, diags, std::move(offsets));
  try {
    // 2. Lex the whole buffer, and report lexical errors before parsing.
    CodePointStream input(std::move(codePoints), buffer->getBufferIdentifier().str());
    grammar::PlaceLexer lexer(&input);
    lexer.removeErrorListeners();
    lexer.addErrorListener(&builder);
    antlr4::CommonTokenStream tokens(&lexer);
    tokens.fill();
    T("lex");
    if (!builder.checkTokens(tokens.getTokens()))
      return nullptr;
    T("check");

    // 3. Parse: SLL prediction, bailing out at the first error, is enough for almost every input;
    // only an input it rejects is parsed again with full LL prediction and error recovery, which
    // reports the errors.
    grammar::PlaceParser parser(&tokens);
    parser.removeErrorListeners();
    parser.addErrorListener(&builder);
    auto *simulator = parser.getInterpreter<antlr4::atn::ParserATNSimulator>();
    simulator->setPredictionMode(antlr4::atn::PredictionMode::SLL);
    parser.setErrorHandler(std::make_shared<antlr4::BailErrorStrategy>());
    grammar::PlaceParser::ProgramContext *program = nullptr;
    try {
      program = parser.program();
    } catch (const antlr4::ParseCancellationException &) {
      tokens.seek(0);
      parser.reset();
      parser.setErrorHandler(std::make_shared<SyntaxErrorStrategy>(builder));
      simulator->setPredictionMode(antlr4::atn::PredictionMode::LL);
      try {
        program = parser.program();
      } catch (const antlr4::ParseCancellationException &) {
        // SyntaxErrorStrategy stopped after too many errors; they have been reported.
        program = nullptr;
      }
    }
    T("parse");
    if (!program || builder.hasErrors())
      return nullptr;

    // 4. The AST.
    auto f = builder.build(program);
    T("build");
    return f;
  } catch (const std::exception &e) {
    // Not expected: ANTLR's own exceptions are all handled above. Report rather than crash.
    diags.error(SMLoc::getFromPointer(text.data()),
                Twine("internal error while parsing: ") + e.what());
    return nullptr;
  }
}

} // namespace placec

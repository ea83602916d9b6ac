// AstBuilder: placec's messages for lexical and syntax errors, and the walk from ANTLR's parse tree
// to the AST. The walk reads the labels that the grammar puts on every part it needs (no visitor
// returning antlrcpp::Any, no search through a context's children); it neither throws nor prints.
#include "AstBuilder.h"

#include "antlr4-runtime.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/ConvertUTF.h"

#include <charconv>
#include <cmath>

using namespace llvm;
using placec::grammar::PlaceParser;

namespace placec {

//===----------------------------------------------------------------------===//
// Tokens and characters
//===----------------------------------------------------------------------===//

/// A name: an identifier or one of the keywords, which are names wherever a name may stand.
static bool isWord(size_t type) {
  return type == PlaceParser::ID || (type >= PlaceParser::IMPORT && type <= PlaceParser::PIPELINE);
}

/// The unit words of section 2 of the language reference. Only used to suggest how to write a
/// number glued to its unit.
static bool isUnitWord(StringRef word) {
  return StringSwitch<bool>(word)
      .Cases("B", "KB", "MB", "GB", "TB", true)
      .Cases("KiB", "MiB", "GiB", "TiB", true)
      .Cases("B/s", "KB/s", "MB/s", "GB/s", "TB/s", "Gbit/s", true)
      .Cases("TFLOPS", "PFLOPS", "ns", "us", "ms", "s", true)
      .Default(false);
}

/// Shows bytes in a message: control characters as \xNN.
static std::string escapeForMessage(StringRef text) {
  std::string shown;
  shown.reserve(text.size());
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f)
      shown += "\\x" + utohexstr(byte, /*LowerCase=*/false, /*Width=*/2);
    else
      shown += c;
  }
  return shown;
}

AstBuilder::AstBuilder(unsigned bufferId, DiagnosticEngine &diags, CharOffsets offsets)
    : diags(diags), bufferId(bufferId),
      buffer(diags.getSourceMgr().getMemoryBuffer(bufferId)->getBuffer()),
      offsets(std::move(offsets)) {}

SMLoc AstBuilder::getLoc(size_t charIndex) const {
  size_t offset = std::min(offsets.getByteOffset(charIndex), buffer.size());
  return SMLoc::getFromPointer(buffer.data() + offset);
}

SMLoc AstBuilder::getStartLoc(const antlr4::Token *token) const {
  return getLoc(token->getStartIndex());
}

SMLoc AstBuilder::getEndLoc(const antlr4::Token *token) const {
  // EOF's stop index is one before its start; every other token ends after its stop index.
  if (token->getType() == antlr4::Token::EOF)
    return getStartLoc(token);
  return getLoc(token->getStopIndex() + 1);
}

StringRef AstBuilder::getText(const antlr4::Token *token) const {
  const char *start = getStartLoc(token).getPointer();
  const char *end = getEndLoc(token).getPointer();
  if (end < start)
    return StringRef();
  return StringRef(start, end - start);
}

/// A character in quotes; a character outside ASCII also by its code point, since it may look like
/// an ASCII one or not show at all (a non-breaking space, a curly quote).
static std::string describeCharacter(StringRef bytes) {
  if (bytes.empty())
    return "end of file";
  if (static_cast<unsigned char>(bytes[0]) < 0x80)
    return ("'" + Twine(escapeForMessage(bytes.take_front(1))) + "'").str();
  unsigned length = getNumBytesForUTF8(static_cast<UTF8>(bytes[0]));
  if (length > bytes.size())
    length = bytes.size();
  UTF32 codePoint = 0;
  const auto *source = reinterpret_cast<const UTF8 *>(bytes.data());
  UTF32 *target = &codePoint;
  ConvertUTF8toUTF32(&source, source + length, &target, target + 1, lenientConversion);
  return ("'" + bytes.take_front(length) + "' (U+" +
          utohexstr(codePoint, /*LowerCase=*/false, /*Width=*/4) + ")")
      .str();
}

std::string AstBuilder::describeToken(const antlr4::Token *token) const {
  if (token->getType() == antlr4::Token::EOF)
    return "end of file";
  constexpr size_t kMaxShown = 40;
  StringRef text = getText(token);
  if (text.size() <= kMaxShown)
    return ("'" + Twine(escapeForMessage(text)) + "'").str();
  // Cut a long token (a string, a name) at a character boundary.
  size_t cut = kMaxShown;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;
  return ("'" + Twine(escapeForMessage(text.take_front(cut))) + "...'").str();
}

//===----------------------------------------------------------------------===//
// Lexical errors
//===----------------------------------------------------------------------===//

bool AstBuilder::reportLimited(unsigned &count, StringRef stopped, SMLoc loc,
                               const Twine &message) {
  if (count >= kMaxErrors)
    return false;
  ++count;
  diags.error(loc, message);
  if (count < kMaxErrors)
    return true;
  diags.note(SMLoc(), stopped + " '" +
                          diags.getSourceMgr().getMemoryBuffer(bufferId)->getBufferIdentifier() +
                          "'");
  return false;
}

bool AstBuilder::reportLexicalError(SMLoc loc, const Twine &message) {
  return reportLimited(numLexicalErrors, "too many lexical errors, stopped reading", loc, message);
}

/// `80GiB` lexes as the number `80` and the name `GiB`; `80KB` as `80K` and `B`; `80B/s` as `80B`,
/// `/` and `s`. Returns how the quantity should be written and the index of its last token, or an
/// empty string when the number is not glued to a unit.
std::string AstBuilder::describeUnitMistake(const std::vector<antlr4::Token *> &tokens,
                                            size_t numberIndex, size_t &lastIndex) const {
  // Whether token `index` starts right where the one before it ends, and is a name (or a `/`).
  auto isGlued = [&](size_t index) {
    return index < tokens.size() &&
           tokens[index]->getStartIndex() == tokens[index - 1]->getStopIndex() + 1;
  };
  auto isGluedWord = [&](size_t index) {
    return isGlued(index) && isWord(tokens[index]->getType());
  };
  auto isGluedSlash = [&](size_t index) {
    return isGlued(index) && tokens[index]->getType() == PlaceParser::SLASH;
  };
  StringRef number = getText(tokens[numberIndex]);
  bool hasMultiplier = !number.empty() && StringRef("KMBT").contains(number.back());

  size_t next = numberIndex + 1;
  std::string unit;
  if (isGluedWord(next)) {
    unit = getText(tokens[next]).str();
    ++next;
  } else if (!hasMultiplier || !isGluedSlash(next)) {
    return "";
  }
  if (isGluedSlash(next) && isGluedWord(next + 1)) {
    unit += '/';
    unit += getText(tokens[next + 1]);
    next += 2;
  }
  lastIndex = next - 1;

  // `80KB` means 80 kilobytes, not 80 thousand bytes: move the multiplier into the unit when that
  // makes a unit word.
  if (hasMultiplier) {
    std::string moved = number.back() + unit;
    if (isUnitWord(moved))
      return (number.drop_back() + " " + moved).str();
  }
  if (unit.empty() || unit[0] == '/')
    return "";
  return (number + " " + unit).str();
}

bool AstBuilder::checkTokens(const std::vector<antlr4::Token *> &tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const antlr4::Token *token = tokens[i];
    bool more = true;
    switch (token->getType()) {
    case PlaceParser::UNTERMINATED_BLOCK_COMMENT:
      more = reportLexicalError(getStartLoc(token), "unterminated block comment");
      break;
    case PlaceParser::UNTERMINATED_STRING:
      more = reportLexicalError(getStartLoc(token), "unterminated string");
      break;
    case PlaceParser::BAD_CHAR:
      more = reportLexicalError(getStartLoc(token),
                                "unexpected character " + describeCharacter(getText(token)));
      break;
    case PlaceParser::NUMBER: {
      size_t lastIndex = i;
      std::string written = describeUnitMistake(tokens, i, lastIndex);
      if (written.empty())
        break;
      more = reportLexicalError(getStartLoc(token),
                                "a unit must be separated from its number by a space: write '" +
                                    written + "'");
      i = lastIndex;
      break;
    }
    default:
      break;
    }
    if (!more)
      break;
  }
  return numLexicalErrors == 0;
}

//===----------------------------------------------------------------------===//
// Syntax errors
//===----------------------------------------------------------------------===//

void AstBuilder::syntaxError(antlr4::Recognizer *recognizer, antlr4::Token *offendingSymbol,
                             size_t line, size_t charPositionInLine, const std::string &msg,
                             std::exception_ptr e) {
  if (auto *lexer = dynamic_cast<antlr4::Lexer *>(recognizer)) {
    SMLoc loc = getLoc(lexer->tokenStartCharIndex);
    StringRef rest = buffer.substr(loc.getPointer() - buffer.data());
    reportLexicalError(loc, "unexpected character " + describeCharacter(rest));
    return;
  }
  SMLoc loc = offendingSymbol ? getStartLoc(offendingSymbol) : SMLoc();
  reportSyntaxError(loc, msg);
}

bool AstBuilder::reportSyntaxError(SMLoc loc, const Twine &message) {
  return reportLimited(numSyntaxErrors, "too many syntax errors, stopped parsing", loc, message);
}

/// The expected tokens, readably: "a name or '}'", "a value", "a declaration", "',' or ']'".
/// Empty when the set is too large to be helpful.
static std::string describeExpected(const antlr4::misc::IntervalSet &expected,
                                    const antlr4::dfa::Vocabulary &vocabulary) {
  bool name = expected.contains(size_t(PlaceParser::ID));
  bool number = expected.contains(size_t(PlaceParser::NUMBER));
  bool string = expected.contains(size_t(PlaceParser::STRING));
  bool declaration =
      !name && llvm::all_of(std::initializer_list<size_t>{PlaceParser::IMPORT, PlaceParser::MODEL,
                                                          PlaceParser::CLUSTER,
                                                          PlaceParser::STRATEGY, PlaceParser::RUN},
                            [&](size_t type) { return expected.contains(type); });
  std::vector<std::string> items;
  if (declaration) {
    items.push_back("a declaration");
  } else if (name && number && string) {
    items.push_back("a value");
  } else {
    if (name)
      items.push_back("a name");
    if (number)
      items.push_back("a number");
    if (string)
      items.push_back("a string");
  }
  bool endOfFile = false;
  for (ssize_t element : expected.toList()) {
    if (element < 0) {
      endOfFile = element == ssize_t(-1);
      continue;
    }
    auto type = static_cast<size_t>(element);
    if (type == PlaceParser::ID || type == PlaceParser::NUMBER || type == PlaceParser::STRING)
      continue;
    // Keywords are covered by "a name" or "a declaration" when those are listed.
    if (isWord(type) && (name || declaration))
      continue;
    std::string literal = vocabulary.getLiteralName(type);
    items.push_back(literal.empty() ? vocabulary.getDisplayName(type) : literal);
  }
  if (endOfFile && !declaration)
    items.push_back("end of file");

  constexpr size_t kMaxListed = 6;
  if (items.empty() || items.size() > kMaxListed)
    return "";
  std::string text = items[0];
  for (size_t i = 1; i < items.size(); ++i)
    text += (i + 1 == items.size() ? " or " : ", ") + items[i];
  return text;
}

/// What a `;` ends in the rule being parsed, for "expected ';' after the value".
static const char *describeStatement(antlr4::ParserRuleContext *ctx) {
  if (!ctx)
    return nullptr;
  switch (ctx->getRuleIndex()) {
  case PlaceParser::RuleField:
    return "the value";
  case PlaceParser::RuleImportDecl:
    return "the import path";
  case PlaceParser::RuleStrategyAlias:
    return "the strategy";
  case PlaceParser::RuleStrategyItem: {
    auto *item = static_cast<PlaceParser::StrategyItemContext *>(ctx);
    return item->mesh ? "the mesh" : item->pipeline ? "the pipeline schedule" : "the placement";
  }
  default:
    return nullptr;
  }
}

/// The last token before `token` on the default channel, or null.
static const antlr4::Token *getPreviousToken(antlr4::TokenStream *stream,
                                             const antlr4::Token *token) {
  size_t index = token->getTokenIndex();
  if (!stream || index == INVALID_INDEX || index > stream->size())
    return nullptr;
  while (index-- > 0) {
    const antlr4::Token *previous = stream->get(index);
    if (previous->getChannel() == antlr4::Token::DEFAULT_CHANNEL)
      return previous;
  }
  return nullptr;
}

bool AstBuilder::reportUnexpectedToken(antlr4::Parser &parser, antlr4::Token *offending,
                                       const antlr4::misc::IntervalSet &expected) {
  std::string expectedText = describeExpected(expected, parser.getVocabulary());
  std::string expecting = expectedText.empty() ? "" : ", expected " + expectedText;
  if (offending->getType() == antlr4::Token::EOF)
    return reportSyntaxError(getStartLoc(offending), "unexpected end of file" + expecting);

  // A missing `;` is the most common mistake; say so, and where it belongs.
  if (expected.contains(size_t(PlaceParser::SEMI))) {
    const antlr4::Token *previous = getPreviousToken(parser.getTokenStream(), offending);
    const antlr4::Token *found = nullptr;
    SMLoc loc;
    if (previous && previous->getLine() < offending->getLine()) {
      // The statement ended at a line break: `layers = 4` then `}` on the next line.
      loc = getEndLoc(previous);
      found = offending;
    } else if (const antlr4::Token *beforePrevious =
                   previous ? getPreviousToken(parser.getTokenStream(), previous) : nullptr;
               beforePrevious && isWord(previous->getType()) &&
               beforePrevious->getType() == PlaceParser::NUMBER &&
               beforePrevious->getLine() < previous->getLine()) {
      // `layers = 48` then `hidden = 1600;` on the next line: `48 hidden` was read as a quantity.
      loc = getEndLoc(beforePrevious);
      found = previous;
    } else if (expected.size() == 1) {
      loc = getStartLoc(offending);
      found = offending;
    }
    if (found) {
      const char *statement = describeStatement(parser.getContext());
      return reportSyntaxError(loc, std::string("expected ';'") +
                                        (statement ? std::string(" after ") + statement : "") +
                                        ", found " + describeToken(found));
    }
  }
  return reportSyntaxError(getStartLoc(offending),
                           "unexpected " + describeToken(offending) + expecting);
}

void SyntaxErrorStrategy::report(antlr4::Parser *parser, antlr4::Token *offending,
                                 const antlr4::misc::IntervalSet &expected) {
  if (!builder.reportUnexpectedToken(*parser, offending, expected))
    throw antlr4::ParseCancellationException("too many syntax errors");
}

void SyntaxErrorStrategy::reportNoViableAlternative(antlr4::Parser *parser,
                                                    const antlr4::NoViableAltException &e) {
  // The expected set belongs to the token where the decision started; past it, it would mislead.
  antlr4::Token *offending = e.getOffendingToken();
  if (e.getStartToken() == offending)
    report(parser, offending, e.getExpectedTokens());
  else
    report(parser, offending, antlr4::misc::IntervalSet());
}

void SyntaxErrorStrategy::reportInputMismatch(antlr4::Parser *parser,
                                              const antlr4::InputMismatchException &e) {
  report(parser, e.getOffendingToken(), e.getExpectedTokens());
}

void SyntaxErrorStrategy::reportFailedPredicate(antlr4::Parser *parser,
                                                const antlr4::FailedPredicateException &e) {
  report(parser, e.getOffendingToken(), antlr4::misc::IntervalSet());
}

void SyntaxErrorStrategy::reportUnwantedToken(antlr4::Parser *parser) {
  if (inErrorRecoveryMode(parser))
    return;
  beginErrorCondition(parser);
  report(parser, parser->getCurrentToken(), getExpectedTokens(parser));
}

void SyntaxErrorStrategy::reportMissingToken(antlr4::Parser *parser) {
  if (inErrorRecoveryMode(parser))
    return;
  beginErrorCondition(parser);
  report(parser, parser->getCurrentToken(), getExpectedTokens(parser));
}

//===----------------------------------------------------------------------===//
// Building the AST
//===----------------------------------------------------------------------===//

/// Parses the text of a NUMBER token: digits, an optional fraction and exponent, and an optional
/// multiplier K, M, B or T (10^3, 10^6, 10^9, 10^12). The multiplier is applied as a decimal
/// exponent, so `1.3T` is the double nearest to 1.3e12. Returns false when the value does not fit
/// in a double (`1e400`) or a nonzero literal would become zero (`1e-400`).
static bool parseNumber(StringRef text, double &value) {
  int shift = StringSwitch<int>(text.empty() ? StringRef() : text.take_back())
                  .Case("K", 3)
                  .Case("M", 6)
                  .Case("B", 9)
                  .Case("T", 12)
                  .Default(0);
  std::string scaled;
  StringRef digits = text;
  if (shift != 0) {
    StringRef mantissa = text.drop_back();
    size_t e = mantissa.find_first_of("eE");
    long long exponent = 0;
    if (e != StringRef::npos) {
      StringRef exponentText = mantissa.substr(e + 1);
      bool negative = exponentText.consume_front("-");
      exponentText.consume_front("+");
      for (char c : exponentText)
        exponent = std::min(exponent * 10 + (c - '0'), 1000000LL);
      if (negative)
        exponent = -exponent;
      mantissa = mantissa.take_front(e);
    }
    scaled = (mantissa + "e" + Twine(exponent + shift)).str();
    digits = scaled;
  }
  const char *end = digits.data() + digits.size();
  auto [ptr, error] = std::from_chars(digits.data(), end, value, std::chars_format::general);
  if (error != std::errc() || ptr != end || !std::isfinite(value))
    return false;
  // A literal with a nonzero digit that came out as zero underflowed.
  if (value == 0 && digits.take_until([](char c) {
                            return c == 'e' || c == 'E';
                          }).find_first_of("123456789") != StringRef::npos)
    return false;
  return true;
}

std::string AstBuilder::getName(antlr4::ParserRuleContext *ident) const {
  return getText(ident->getStart()).str();
}

SMLoc AstBuilder::getLoc(antlr4::ParserRuleContext *ctx) const {
  return getStartLoc(ctx->getStart());
}

SMRange AstBuilder::getRange(antlr4::ParserRuleContext *ctx) const {
  return SMRange(getStartLoc(ctx->getStart()), getEndLoc(ctx->getStop()));
}

/// The contents of a STRING token, without its quotes (the language has no escapes).
static std::string unquote(StringRef text) {
  text.consume_front("\"");
  text.consume_back("\"");
  return text.str();
}

std::unique_ptr<ast::File> AstBuilder::build(PlaceParser::ProgramContext *program) {
  auto file = std::make_unique<ast::File>();
  file->bufferId = bufferId;
  file->path = diags.getSourceMgr().getMemoryBuffer(bufferId)->getBufferIdentifier().str();
  file->decls.reserve(program->decls.size());
  for (PlaceParser::TopDeclContext *top : program->decls) {
    if (top->importDecl_)
      file->decls.push_back(buildImport(top->importDecl_));
    else if (top->modelDecl_)
      file->decls.push_back(buildModel(top->modelDecl_));
    else if (top->clusterDecl_)
      file->decls.push_back(buildCluster(top->clusterDecl_));
    else if (top->strategyDecl_)
      file->decls.push_back(buildStrategy(top->strategyDecl_));
    else if (top->runDecl_)
      file->decls.push_back(buildRun(top->runDecl_));
  }
  if (numValueErrors != 0)
    return nullptr;
  return file;
}

std::unique_ptr<ast::ImportDecl> AstBuilder::buildImport(PlaceParser::ImportDeclContext *ctx) {
  return std::make_unique<ast::ImportDecl>(getLoc(ctx), unquote(getText(ctx->path)),
                                           getStartLoc(ctx->path));
}

std::unique_ptr<ast::ModelDecl> AstBuilder::buildModel(PlaceParser::ModelDeclContext *ctx) {
  auto decl = std::make_unique<ast::ModelDecl>(getLoc(ctx), getName(ctx->name), getLoc(ctx->name));
  if (ctx->kind) {
    decl->modelKind = getName(ctx->kind);
    decl->modelKindLoc = getLoc(ctx->kind);
  }
  buildFields(*decl, ctx->fields, ctx->rbrace);
  return decl;
}

std::unique_ptr<ast::ClusterDecl> AstBuilder::buildCluster(PlaceParser::ClusterDeclContext *ctx) {
  auto decl =
      std::make_unique<ast::ClusterDecl>(getLoc(ctx), getName(ctx->name), getLoc(ctx->name));
  buildFields(*decl, ctx->fields, ctx->rbrace);
  return decl;
}

std::unique_ptr<ast::RunDecl> AstBuilder::buildRun(PlaceParser::RunDeclContext *ctx) {
  auto decl = std::make_unique<ast::RunDecl>(getLoc(ctx), getName(ctx->name), getLoc(ctx->name));
  buildFields(*decl, ctx->fields, ctx->rbrace);
  return decl;
}

void AstBuilder::buildFields(ast::FieldsDecl &decl,
                             const std::vector<PlaceParser::FieldContext *> &fields,
                             antlr4::Token *closingBrace) {
  decl.fields.reserve(fields.size());
  for (PlaceParser::FieldContext *field : fields)
    decl.fields.push_back(
        ast::Field{getName(field->key), getLoc(field->key), buildValue(field->val)});
  decl.endLoc = getStartLoc(closingBrace);
}

void AstBuilder::buildNumber(ast::Value &value, antlr4::Token *number,
                             PlaceParser::UnitContext *unit) {
  StringRef text = getText(number);
  value.numberText = text.str();
  if (!parseNumber(text, value.number)) {
    ++numValueErrors;
    diags.error(getStartLoc(number), "number '" + text + "' is out of range");
    value.number = 0;
  }
  value.isInteger = std::floor(value.number) == value.number;
  if (!unit) {
    value.kind = ast::Value::Kind::Number;
    return;
  }
  value.kind = ast::Value::Kind::Quantity;
  value.unitLoc = getLoc(unit);
  value.unit = getName(unit->first);
  if (unit->second) {
    value.unit += '/';
    value.unit += getText(unit->second->getStart());
  }
}

ast::Value AstBuilder::buildValue(PlaceParser::ValueContext *ctx) {
  ast::Value value;
  value.range = getRange(ctx);
  if (ctx->num) {
    buildNumber(value, ctx->num, ctx->unitWord);
  } else if (ctx->str) {
    value.kind = ast::Value::Kind::String;
    value.text = unquote(getText(ctx->str));
  } else if (ctx->name) {
    value.text = getName(ctx->name);
    if (ctx->lparen) {
      value.kind = ast::Value::Kind::Call;
      value.args = buildArgs(ctx->args);
    } else {
      value.kind = ast::Value::Kind::Name;
    }
  }
  return value;
}

ast::Value AstBuilder::buildPlainValue(PlaceParser::PlainValueContext *ctx) {
  ast::Value value;
  value.range = getRange(ctx);
  if (ctx->num) {
    buildNumber(value, ctx->num, ctx->unitWord);
  } else if (ctx->str) {
    value.kind = ast::Value::Kind::String;
    value.text = unquote(getText(ctx->str));
  } else if (ctx->name) {
    value.kind = ast::Value::Kind::Name;
    value.text = getName(ctx->name);
  }
  return value;
}

std::vector<ast::Arg> AstBuilder::buildArgs(PlaceParser::ArgListContext *ctx) {
  std::vector<ast::Arg> args;
  if (!ctx)
    return args;
  args.reserve(ctx->args.size());
  for (PlaceParser::ArgContext *arg : ctx->args) {
    ast::Arg result;
    // A positional argument's keyLoc is where the argument starts, so that a message about it
    // still has a place to point at.
    result.keyLoc = getLoc(arg);
    if (arg->key)
      result.key = getName(arg->key);
    result.value = std::make_unique<ast::Value>(buildPlainValue(arg->val));
    args.push_back(std::move(result));
  }
  return args;
}

std::unique_ptr<ast::StrategyDecl>
AstBuilder::buildStrategy(PlaceParser::StrategyDeclContext *ctx) {
  auto decl =
      std::make_unique<ast::StrategyDecl>(getLoc(ctx), getName(ctx->name), getLoc(ctx->name));
  if (ctx->params) {
    decl->hasParams = true;
    for (PlaceParser::ParamContext *param : ctx->params->params) {
      ast::Param result;
      result.name = getName(param->name);
      result.nameLoc = getLoc(param->name);
      if (param->defaultValue)
        result.defaultValue = std::make_unique<ast::Value>(buildPlainValue(param->defaultValue));
      decl->params.push_back(std::move(result));
    }
  }
  if (ctx->body) {
    for (PlaceParser::StrategyItemContext *item : ctx->body->items)
      buildStrategyItem(*decl, item);
  } else if (ctx->alias) {
    decl->isComposition = true;
    for (PlaceParser::StrategyTermContext *term : ctx->alias->terms) {
      ast::StrategyRef ref;
      ref.name = getName(term->name);
      ref.nameLoc = getLoc(term->name);
      ref.hasParens = term->lparen != nullptr;
      ref.args = buildArgs(term->args);
      decl->terms.push_back(std::move(ref));
    }
  }
  return decl;
}

void AstBuilder::buildStrategyItem(ast::StrategyDecl &decl, PlaceParser::StrategyItemContext *ctx) {
  if (ctx->mesh) {
    if (decl.mesh) {
      decl.extraMeshLocs.push_back(getLoc(ctx));
      return;
    }
    ast::Mesh mesh;
    mesh.loc = getLoc(ctx);
    for (PlaceParser::AxisContext *axis : ctx->axes) {
      ast::MeshAxis result;
      result.name = getName(axis->name);
      result.nameLoc = getLoc(axis->name);
      if (axis->kind) {
        result.kind = getName(axis->kind);
        result.kindLoc = getLoc(axis->kind);
      }
      result.size = buildPlainValue(axis->size);
      mesh.axes.push_back(std::move(result));
    }
    decl.mesh = std::move(mesh);
  } else if (ctx->pipeline) {
    ast::PipelineSpec pipeline;
    pipeline.loc = getLoc(ctx);
    pipeline.schedule = getName(ctx->schedule);
    pipeline.scheduleLoc = getLoc(ctx->schedule);
    pipeline.args = buildArgs(ctx->args);
    decl.pipelines.push_back(std::move(pipeline));
  } else if (ctx->state) {
    ast::Placement placement;
    placement.state = getName(ctx->state);
    placement.stateLoc = getLoc(ctx->state);
    for (PlaceParser::ModeTermContext *term : ctx->modes) {
      ast::Mode mode;
      mode.name = getName(term->name);
      mode.nameLoc = getLoc(term->name);
      mode.hasParens = term->lparen != nullptr;
      mode.args = buildArgs(term->args);
      placement.modes.push_back(std::move(mode));
    }
    if (ctx->tier) {
      placement.tier = getName(ctx->tier);
      placement.tierLoc = getLoc(ctx->tier);
    }
    decl.placements.push_back(std::move(placement));
  }
}

} // namespace placec

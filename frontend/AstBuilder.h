// AstBuilder: reports the lexical and syntax errors of one buffer (it is the lexer's and the
// parser's ANTLR error listener) and builds the AST from ANTLR's parse tree of that buffer.
#ifndef PLACEC_FRONTEND_ASTBUILDER_H
#define PLACEC_FRONTEND_ASTBUILDER_H

#include "BaseErrorListener.h"
#include "DefaultErrorStrategy.h"
#include "PlaceParser.h"
#include "placec/frontend/AST.h"
#include "placec/ir/Diagnostics.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/SMLoc.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace placec {

/// Where the characters of the lexer's input lie in the buffer. ANTLR counts code points, the
/// source manager bytes: `charOffsets[i]` is the byte offset of code point `i` or, when the table
/// is empty (ASCII text), the offset is `base + i`.
struct CharOffsets {
  size_t base = 0;      ///< Where the text starts (after a byte order mark).
  size_t numChars = 0;  ///< How many code points the lexer sees.
  size_t endOffset = 0; ///< The size of the buffer.
  std::vector<uint32_t> charOffsets;

  /// The byte offset of code point `charIndex`; the end of the buffer for any index past the
  /// last code point (EOF, or a token ANTLR made up during recovery).
  size_t getByteOffset(size_t charIndex) const {
    if (charIndex >= numChars)
      return endOffset;
    return charOffsets.empty() ? base + charIndex : charOffsets[charIndex];
  }
};

class AstBuilder : public antlr4::BaseErrorListener {
public:
  /// At most this many lexical errors, and this many syntax errors, are reported per buffer.
  static constexpr unsigned kMaxErrors = 20;

  AstBuilder(unsigned bufferId, DiagnosticEngine &diags, CharOffsets offsets);

  /// Reports unterminated comments and strings, stray characters and numbers written against a
  /// unit word (`80GiB`: no character between the number and the name; the lexer skips
  /// whitespace and comments, so the check compares positions) in the whole token stream.
  /// Returns true when there were none.
  bool checkTokens(const std::vector<antlr4::Token *> &tokens);

  /// ANTLR's listener entry point. The parser's own errors come through SyntaxErrorStrategy; this
  /// only sees what ANTLR reports by itself (none is expected from this grammar).
  void syntaxError(antlr4::Recognizer *recognizer, antlr4::Token *offendingSymbol, size_t line,
                   size_t charPositionInLine, const std::string &msg,
                   std::exception_ptr e) override;

  /// Reports that `offending` was found where one of `expected` was needed. Returns false when
  /// the error limit has been reached and parsing should stop.
  bool reportUnexpectedToken(antlr4::Parser &parser, antlr4::Token *offending,
                             const antlr4::misc::IntervalSet &expected);

  unsigned getNumSyntaxErrors() const { return numSyntaxErrors; }
  bool hasErrors() const { return numLexicalErrors + numSyntaxErrors + numValueErrors != 0; }

  /// Builds the AST of a parse tree that has no syntax errors. Returns null when a literal is
  /// invalid (a number out of range); the error has been reported.
  std::unique_ptr<ast::File> build(grammar::PlaceParser::ProgramContext *program);

  llvm::SMLoc getLoc(size_t charIndex) const;
  llvm::SMLoc getStartLoc(const antlr4::Token *token) const;
  /// One past the last character of the token.
  llvm::SMLoc getEndLoc(const antlr4::Token *token) const;
  llvm::StringRef getText(const antlr4::Token *token) const;

private:
  /// Reports an error counted in `count` while it is under kMaxErrors; the one that reaches it
  /// adds the note `stopped` and the buffer's name. Returns false once the limit is reached.
  bool reportLimited(unsigned &count, llvm::StringRef stopped, llvm::SMLoc loc,
                     const llvm::Twine &message);
  bool reportSyntaxError(llvm::SMLoc loc, const llvm::Twine &message);
  bool reportLexicalError(llvm::SMLoc loc, const llvm::Twine &message);
  std::string describeToken(const antlr4::Token *token) const;
  std::string describeUnitMistake(const std::vector<antlr4::Token *> &tokens, size_t numberIndex,
                                  size_t &lastIndex) const;

  using Parser = grammar::PlaceParser;
  std::unique_ptr<ast::ImportDecl> buildImport(Parser::ImportDeclContext *ctx);
  std::unique_ptr<ast::ModelDecl> buildModel(Parser::ModelDeclContext *ctx);
  std::unique_ptr<ast::ClusterDecl> buildCluster(Parser::ClusterDeclContext *ctx);
  std::unique_ptr<ast::RunDecl> buildRun(Parser::RunDeclContext *ctx);
  std::unique_ptr<ast::StrategyDecl> buildStrategy(Parser::StrategyDeclContext *ctx);
  void buildFields(ast::FieldsDecl &decl, const std::vector<Parser::FieldContext *> &fields,
                   antlr4::Token *closingBrace);
  void buildStrategyItem(ast::StrategyDecl &decl, Parser::StrategyItemContext *ctx);
  ast::Value buildValue(Parser::ValueContext *ctx);
  ast::Value buildPlainValue(Parser::PlainValueContext *ctx);
  void buildNumber(ast::Value &value, antlr4::Token *number, Parser::UnitContext *unit);
  std::vector<ast::Arg> buildArgs(Parser::ArgListContext *ctx);
  std::string getName(antlr4::ParserRuleContext *ident) const;
  llvm::SMLoc getLoc(antlr4::ParserRuleContext *ctx) const;
  llvm::SMRange getRange(antlr4::ParserRuleContext *ctx) const;

  DiagnosticEngine &diags;
  unsigned bufferId;
  llvm::StringRef buffer;
  CharOffsets offsets;
  unsigned numLexicalErrors = 0;
  unsigned numSyntaxErrors = 0;
  unsigned numValueErrors = 0;
};

/// ANTLR's default recovery, with its messages replaced by placec's: "unexpected 'x', expected
/// ';'", "expected ';' after the value, found 'x'", "unexpected end of file, expected '}'". Stops
/// the parse (ParseCancellationException) once AstBuilder::kMaxErrors errors have been reported.
class SyntaxErrorStrategy : public antlr4::DefaultErrorStrategy {
public:
  explicit SyntaxErrorStrategy(AstBuilder &builder) : builder(builder) {}

protected:
  void reportNoViableAlternative(antlr4::Parser *parser,
                                 const antlr4::NoViableAltException &e) override;
  void reportInputMismatch(antlr4::Parser *parser,
                           const antlr4::InputMismatchException &e) override;
  void reportFailedPredicate(antlr4::Parser *parser,
                             const antlr4::FailedPredicateException &e) override;
  void reportUnwantedToken(antlr4::Parser *parser) override;
  void reportMissingToken(antlr4::Parser *parser) override;

private:
  void report(antlr4::Parser *parser, antlr4::Token *offending,
              const antlr4::misc::IntervalSet &expected);

  AstBuilder &builder;
};

} // namespace placec

#endif // PLACEC_FRONTEND_ASTBUILDER_H

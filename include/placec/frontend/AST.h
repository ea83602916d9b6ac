// The abstract syntax tree of a .place file, built from ANTLR's parse tree by AstBuilder. It keeps
// what the user wrote and where; names are resolved and values checked by Sema.
#ifndef PLACEC_FRONTEND_AST_H
#define PLACEC_FRONTEND_AST_H

#include "llvm/Support/Casting.h"
#include "llvm/Support/SMLoc.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace placec::ast {

/// A plain value, or a call such as `mixed(bf16)`.
struct Value;

/// `key = value` inside a call or after a parameter: `microbatches = 16`, or a positional `16`.
struct Arg {
  std::string key; ///< Empty for a positional argument.
  llvm::SMLoc keyLoc;
  std::unique_ptr<Value> value;
};

struct Value {
  enum class Kind { Number, Quantity, String, Name, Call };
  Kind kind = Kind::Number;
  llvm::SMRange range;
  /// Number and Quantity: the value with the K/M/B/T multiplier applied (not the unit).
  double number = 0;
  /// Number and Quantity: the literal as written, for messages.
  std::string numberText;
  /// Number and Quantity: true when the value, multiplier applied, is a whole number: `4096`,
  /// `7.5B`, `1.5e9` and `4.0` are integers, `0.5` is not.
  bool isInteger = false;
  /// Quantity: the unit word as written (`GiB`, `GB/s`).
  std::string unit;
  llvm::SMLoc unitLoc;
  /// String: the contents without quotes. Name and Call: the name.
  std::string text;
  /// Call: the arguments.
  std::vector<Arg> args;

  llvm::SMLoc getLoc() const { return range.Start; }
};

/// `key = value;` in a model, cluster or run body.
struct Field {
  std::string key;
  llvm::SMLoc keyLoc;
  Value value;
};

class Decl {
public:
  enum class Kind { Import, Model, Cluster, Strategy, Run };

  Decl(Kind kind, llvm::SMLoc loc) : kind(kind), loc(loc) {}
  virtual ~Decl() = default;

  Kind getKind() const { return kind; }
  /// The first token of the declaration.
  llvm::SMLoc getLoc() const { return loc; }

private:
  Kind kind;
  llvm::SMLoc loc;
};

/// `import "path.place";`
class ImportDecl : public Decl {
public:
  ImportDecl(llvm::SMLoc loc, std::string path, llvm::SMLoc pathLoc)
      : Decl(Kind::Import, loc), path(std::move(path)), pathLoc(pathLoc) {}
  static bool classof(const Decl *decl) { return decl->getKind() == Kind::Import; }

  std::string path;
  llvm::SMLoc pathLoc;
};

/// A named declaration with a body of fields: `model`, `cluster` and `run`.
class FieldsDecl : public Decl {
public:
  FieldsDecl(Kind kind, llvm::SMLoc loc, std::string name, llvm::SMLoc nameLoc)
      : Decl(kind, loc), name(std::move(name)), nameLoc(nameLoc) {}
  static bool classof(const Decl *decl) {
    return decl->getKind() == Kind::Model || decl->getKind() == Kind::Cluster ||
           decl->getKind() == Kind::Run;
  }

  std::string name;
  llvm::SMLoc nameLoc;
  std::vector<Field> fields;
  /// The closing brace, for "missing field" diagnostics.
  llvm::SMLoc endLoc;
};

/// `model NAME [: KIND] { fields }`
class ModelDecl : public FieldsDecl {
public:
  ModelDecl(llvm::SMLoc loc, std::string name, llvm::SMLoc nameLoc)
      : FieldsDecl(Kind::Model, loc, std::move(name), nameLoc) {}
  static bool classof(const Decl *decl) { return decl->getKind() == Kind::Model; }

  std::string modelKind; ///< Empty for an abstract model.
  llvm::SMLoc modelKindLoc;
};

class ClusterDecl : public FieldsDecl {
public:
  ClusterDecl(llvm::SMLoc loc, std::string name, llvm::SMLoc nameLoc)
      : FieldsDecl(Kind::Cluster, loc, std::move(name), nameLoc) {}
  static bool classof(const Decl *decl) { return decl->getKind() == Kind::Cluster; }
};

class RunDecl : public FieldsDecl {
public:
  RunDecl(llvm::SMLoc loc, std::string name, llvm::SMLoc nameLoc)
      : FieldsDecl(Kind::Run, loc, std::move(name), nameLoc) {}
  static bool classof(const Decl *decl) { return decl->getKind() == Kind::Run; }
};

/// `name [: kind] = size` in a mesh. The size is a number or a parameter name.
struct MeshAxis {
  std::string name;
  llvm::SMLoc nameLoc;
  std::string kind; ///< Empty when not written.
  llvm::SMLoc kindLoc;
  Value size;
};

struct Mesh {
  llvm::SMLoc loc;
  std::vector<MeshAxis> axes;
};

/// One mode of a placement: `replicate(dp)`, `gather(dp, keep_after_forward = true)`, `keep`,
/// `recompute(selective)`.
struct Mode {
  std::string name;
  llvm::SMLoc nameLoc;
  bool hasParens = false;
  std::vector<Arg> args;
};

/// `state = mode, mode @ tier;`
struct Placement {
  std::string state;
  llvm::SMLoc stateLoc;
  std::vector<Mode> modes;
  std::string tier; ///< Empty when not written.
  llvm::SMLoc tierLoc;
};

/// `pipeline = 1f1b(microbatches = 16);`
struct PipelineSpec {
  llvm::SMLoc loc;
  std::string schedule;
  llvm::SMLoc scheduleLoc;
  std::vector<Arg> args;
};

/// A strategy parameter: `dp`, or `microbatches = auto`.
struct Param {
  std::string name;
  llvm::SMLoc nameLoc;
  std::unique_ptr<Value> defaultValue;
};

/// A use of a strategy in a composition: `zero3(dp = 64)`, `tp8`.
struct StrategyRef {
  std::string name;
  llvm::SMLoc nameLoc;
  bool hasParens = false;
  std::vector<Arg> args;
};

/// `strategy NAME(params) { body }` or `strategy NAME = a * b(…);`
class StrategyDecl : public Decl {
public:
  StrategyDecl(llvm::SMLoc loc, std::string name, llvm::SMLoc nameLoc)
      : Decl(Kind::Strategy, loc), name(std::move(name)), nameLoc(nameLoc) {}
  static bool classof(const Decl *decl) { return decl->getKind() == Kind::Strategy; }

  std::string name;
  llvm::SMLoc nameLoc;
  bool hasParams = false;
  std::vector<Param> params;

  /// True for `= a * b;`, false for a body.
  bool isComposition = false;
  std::vector<StrategyRef> terms;

  std::optional<Mesh> mesh;
  /// Further `mesh [...]` lines, reported as duplicates.
  std::vector<llvm::SMLoc> extraMeshLocs;
  std::vector<Placement> placements;
  std::vector<PipelineSpec> pipelines;
};

/// One parsed file.
struct File {
  std::string path;
  unsigned bufferId = 0;
  std::vector<std::unique_ptr<Decl>> decls;
};

} // namespace placec::ast

#endif // PLACEC_FRONTEND_AST_H

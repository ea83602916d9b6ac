// Sema: resolves names across files, checks values, units and axis-kind rules, applies defaults,
// binds and composes strategies, and builds the IR.
#include "Units.h"
#include "placec/frontend/Frontend.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>

using namespace llvm;

namespace placec {

namespace {

/// The largest parameter count placec accepts: byte counts of 16 bytes per parameter and their
/// sums then stay far inside int64 and exact in double.
constexpr double kMaxParams = 1e15;
using ir::kMaxDevices;
/// The largest value of a count field (layers, hidden, batch sizes, …).
constexpr int64_t kMaxCount = int64_t(1) << 40;
/// The most training metrics a run may compute from its logits (each one more pass over them).
constexpr int64_t kMaxTrainMetrics = 64;

/// A bound strategy parameter.
struct ParamValue {
  bool isAuto = false;
  int64_t value = 0;
};
using ParamEnv = StringMap<ParamValue>;

/// Returns the candidate closest to `name` when it is close enough to be a likely typo.
std::optional<std::string> suggest(StringRef name, ArrayRef<std::string> candidates) {
  unsigned best = ~0u;
  std::optional<std::string> result;
  for (const std::string &candidate : candidates) {
    unsigned distance = name.edit_distance(candidate, /*AllowReplacements=*/true, best);
    if (distance < best) {
      best = distance;
      result = candidate;
    }
  }
  unsigned limit = std::max<unsigned>(1, name.size() / 3);
  if (best > limit)
    return std::nullopt;
  return result;
}

std::string didYouMean(StringRef name, ArrayRef<std::string> candidates) {
  if (std::optional<std::string> best = suggest(name, candidates))
    return "; did you mean '" + *best + "'?";
  return "";
}

/// The text of a value as written, for messages.
std::string spell(const ast::Value &value) {
  switch (value.kind) {
  case ast::Value::Kind::Number:
    return value.numberText;
  case ast::Value::Kind::Quantity:
    return value.numberText + " " + value.unit;
  case ast::Value::Kind::String:
    return "\"" + value.text + "\"";
  case ast::Value::Kind::Name:
    return value.text;
  case ast::Value::Kind::Call: {
    std::string text = value.text + "(";
    for (size_t i = 0; i < value.args.size(); ++i) {
      if (i)
        text += ", ";
      if (!value.args[i].key.empty())
        text += value.args[i].key + " = ";
      text += spell(*value.args[i].value);
    }
    return text + ")";
  }
  }
  return "";
}

StringRef kindNoun(ast::Value::Kind kind) {
  switch (kind) {
  case ast::Value::Kind::Number:
    return "a number";
  case ast::Value::Kind::Quantity:
    return "a quantity";
  case ast::Value::Kind::String:
    return "a string";
  case ast::Value::Kind::Name:
    return "a name";
  case ast::Value::Kind::Call:
    return "a call";
  }
  return "a value";
}

/// An approximate count for messages, in the style of the limits it is compared with: `2.5e15`.
/// Takes a double because the estimate may be far beyond int64 (`layers = 1000000` with
/// `hidden = 16777216`).
std::string formatEstimate(double value) {
  std::string text = llvm::formatv("{0:e2}", value).str();
  // `2.50e+15` -> `2.5e15`.
  size_t e = text.find('e');
  std::string mantissa = text.substr(0, e), exponent = text.substr(e + 1);
  while (mantissa.back() == '0')
    mantissa.pop_back();
  if (mantissa.back() == '.')
    mantissa.pop_back();
  if (exponent[0] == '+')
    exponent.erase(0, 1);
  while (exponent.size() > 1 && exponent[0] == '0')
    exponent.erase(0, 1);
  return mantissa + "e" + exponent;
}

class Sema {
public:
  Sema(DiagnosticEngine &diags, ir::Program &program) : diags(diags), program(program) {}

  void run(ArrayRef<std::unique_ptr<ast::File>> files);

private:
  //===--------------------------------------------------------------------===//
  // Declarations and names
  //===--------------------------------------------------------------------===//

  void declare(const ast::Decl &decl, bool inPrelude);
  template <typename T>
  const T *lookup(const StringMap<const T *> &table, StringRef name, SMLoc loc, StringRef noun);

  //===--------------------------------------------------------------------===//
  // Values
  //===--------------------------------------------------------------------===//

  /// Indexes the fields of a body by key, reporting unknown and repeated keys.
  StringMap<const ast::Field *> collectFields(const ast::FieldsDecl &decl, StringRef what,
                                              ArrayRef<std::string> allowed);
  bool requireFields(const ast::FieldsDecl &decl, StringRef what,
                     const StringMap<const ast::Field *> &fields, ArrayRef<StringRef> required);
  std::optional<int64_t> getCount(const ast::Value &value, StringRef what, int64_t min = 1,
                                  int64_t max = kMaxCount);
  std::optional<double> getQuantity(const ast::Value &value, StringRef what, Dimension dimension,
                                    bool allowZero = false);
  std::optional<double> getFraction(const ast::Value &value, StringRef what);
  /// A plain number in [min, max] (in (min, max] when `minExclusive`).
  std::optional<double> getReal(const ast::Value &value, StringRef what, double min, double max,
                                bool minExclusive = false);
  std::optional<bool> getBool(const ast::Value &value, StringRef what);
  /// Reads the boolean field `name`, when written, into `target` and its key's location into
  /// `loc` (when given); false after a diagnostic, `target` then left as it was.
  bool readFlag(const StringMap<const ast::Field *> &fields, StringRef name, bool &target,
                SMLoc *loc = nullptr);
  /// The RecomputeModule bits of `recompute(core_attn, moe_act, …)`, or nothing after an error.
  std::optional<unsigned> getRecomputeModules(const ast::Mode &mode);
  /// A name from a fixed set of choices.
  std::optional<std::string> getChoice(const ast::Value &value, StringRef what,
                                       ArrayRef<std::string> choices);
  /// A count that may be a strategy parameter: `64`, `dp`, or `auto` when allowed.
  std::optional<ParamValue> getParamCount(const ast::Value &value, StringRef what,
                                          const ParamEnv &env, bool allowAuto);

  //===--------------------------------------------------------------------===//
  // Models, clusters, runs
  //===--------------------------------------------------------------------===//

  void buildModel(const ast::ModelDecl &decl);
  /// Reads the mixture-of-experts fields of a transformer into `config.moe`.
  bool buildMoe(const ast::ModelDecl &decl, const StringMap<const ast::Field *> &fields,
                ir::TransformerConfig &config);
  bool buildLatentAttention(const StringMap<const ast::Field *> &fields,
                            ir::TransformerConfig &config);
  void buildCluster(const ast::ClusterDecl &decl);
  void buildRun(const ast::RunDecl &decl);

  //===--------------------------------------------------------------------===//
  // Strategies
  //===--------------------------------------------------------------------===//

  /// The bound strategy a declaration without parameters stands for (memoized), or null after
  /// errors.
  const ir::Strategy *resolveStrategy(const ast::StrategyDecl &decl, SMLoc useLoc);
  /// A strategy term `name` or `name(args)`, with argument names resolved in `env`.
  const ir::Strategy *resolveTerm(StringRef name, SMLoc nameLoc, bool hasParens,
                                  ArrayRef<ast::Arg> args, const ParamEnv &env);
  /// Binds a strategy declaration's parameters to arguments.
  std::optional<ParamEnv> bindArguments(const ast::StrategyDecl &decl, SMLoc useLoc,
                                        ArrayRef<ast::Arg> args, const ParamEnv &outer);
  /// Builds a strategy from a declaration and bound parameters.
  std::unique_ptr<ir::Strategy> instantiate(const ast::StrategyDecl &decl, const ParamEnv &env,
                                            std::string name, SMLoc loc);
  std::unique_ptr<ir::Strategy> bindBody(const ast::StrategyDecl &decl, const ParamEnv &env,
                                         std::string name, SMLoc loc);
  bool bindPlacement(const ast::Placement &placement, ir::Strategy &strategy);
  /// The strategy settings written like placements: `context = ring;`, `async_tp = true;`,
  /// `sp_inputs = keep;`, `dp_overlap = all;`, `ep_overlap = true;`.
  bool bindSetting(const ast::Placement &placement, ir::Strategy &strategy);
  bool bindActivations(const ast::Placement &placement, ir::Strategy &strategy);
  bool bindPipeline(const ast::PipelineSpec &spec, const ParamEnv &env, ir::Strategy &strategy);
  std::unique_ptr<ir::Strategy> compose(ArrayRef<const ir::Strategy *> operands,
                                        ArrayRef<SMLoc> operandLocs, std::string name, SMLoc loc);
  /// Fills the default mode of every axis a state's placement does not name.
  static void applyDefaults(ir::Strategy &strategy);

  ir::Strategy *addStrategy(std::unique_ptr<ir::Strategy> strategy) {
    program.strategies.push_back(std::move(strategy));
    return program.strategies.back().get();
  }

  DiagnosticEngine &diags;
  ir::Program &program;

  StringMap<const ast::ModelDecl *> modelDecls;
  StringMap<const ast::ClusterDecl *> clusterDecls;
  StringMap<const ast::StrategyDecl *> strategyDecls;
  StringMap<const ast::RunDecl *> runDecls;
  /// Names declared by the prelude, and where.
  StringMap<SMLoc> preludeNames;

  StringMap<ir::Model *> models;
  StringMap<ir::Cluster *> clusters;
  /// Strategies without parameters, bound once. A null entry means "being bound" while
  /// resolution is in progress, and "failed" afterwards (see strategyFailed).
  StringMap<const ir::Strategy *> boundStrategies;
  StringSet<> strategyFailed;
  /// Strategies whose binding is in progress, for cycle detection.
  std::vector<const ast::StrategyDecl *> strategyStack;
};

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

StringRef declNoun(ast::Decl::Kind kind) {
  switch (kind) {
  case ast::Decl::Kind::Model:
    return "model";
  case ast::Decl::Kind::Cluster:
    return "cluster";
  case ast::Decl::Kind::Strategy:
    return "strategy";
  case ast::Decl::Kind::Run:
    return "run";
  case ast::Decl::Kind::Import:
    return "import";
  }
  return "declaration";
}

template <typename T>
void insertUnique(StringMap<const T *> &table, const T &decl, StringRef name, SMLoc nameLoc,
                  StringRef noun, DiagnosticEngine &diags) {
  auto [it, inserted] = table.try_emplace(name, &decl);
  if (inserted)
    return;
  diags.error(nameLoc, Twine("redefinition of ") + noun + " '" + name + "'");
  diags.note(it->second->nameLoc, Twine("'") + name + "' was first declared here");
}

void Sema::declare(const ast::Decl &decl, bool inPrelude) {
  StringRef name;
  SMLoc nameLoc;
  if (auto *fields = dyn_cast<ast::FieldsDecl>(&decl)) {
    name = fields->name;
    nameLoc = fields->nameLoc;
  } else if (auto *strategy = dyn_cast<ast::StrategyDecl>(&decl)) {
    name = strategy->name;
    nameLoc = strategy->nameLoc;
  } else {
    return;
  }
  if (inPrelude) {
    preludeNames.try_emplace(name, nameLoc);
  } else if (auto it = preludeNames.find(name); it != preludeNames.end()) {
    diags.error(nameLoc, Twine("'") + name + "' is a prelude strategy; a " +
                             declNoun(decl.getKind()) + " may not reuse its name");
    diags.note(it->second, "the prelude declares it here");
    return;
  }
  switch (decl.getKind()) {
  case ast::Decl::Kind::Model:
    insertUnique(modelDecls, cast<ast::ModelDecl>(decl), name, nameLoc, "model", diags);
    break;
  case ast::Decl::Kind::Cluster:
    insertUnique(clusterDecls, cast<ast::ClusterDecl>(decl), name, nameLoc, "cluster", diags);
    break;
  case ast::Decl::Kind::Strategy:
    insertUnique(strategyDecls, cast<ast::StrategyDecl>(decl), name, nameLoc, "strategy", diags);
    break;
  case ast::Decl::Kind::Run:
    insertUnique(runDecls, cast<ast::RunDecl>(decl), name, nameLoc, "run", diags);
    break;
  case ast::Decl::Kind::Import:
    break;
  }
}

template <typename T>
const T *Sema::lookup(const StringMap<const T *> &table, StringRef name, SMLoc loc,
                      StringRef noun) {
  auto it = table.find(name);
  if (it != table.end())
    return it->second;
  std::vector<std::string> names;
  for (const auto &entry : table)
    names.push_back(entry.getKey().str());
  llvm::sort(names);
  diags.error(loc, Twine("unknown ") + noun + " '" + name + "'" + didYouMean(name, names));
  return nullptr;
}

void Sema::run(ArrayRef<std::unique_ptr<ast::File>> files) {
  // The prelude is the first file; the main file is the last.
  for (size_t i = 0; i < files.size(); ++i)
    for (const std::unique_ptr<ast::Decl> &decl : files[i]->decls)
      declare(*decl, /*inPrelude=*/i == 0);

  if (files.size() >= 2 && files.back()->decls.empty()) {
    const ast::File &main = *files.back();
    SMLoc start = SMLoc::getFromPointer(
        diags.getSourceMgr().getMemoryBuffer(main.bufferId)->getBufferStart());
    diags.error(start, "the file declares nothing: expected a model, cluster, strategy, run or "
                       "import");
    return;
  }

  for (size_t i = 1; i < files.size(); ++i) {
    for (const std::unique_ptr<ast::Decl> &decl : files[i]->decls) {
      if (auto *model = dyn_cast<ast::ModelDecl>(decl.get()))
        buildModel(*model);
      else if (auto *cluster = dyn_cast<ast::ClusterDecl>(decl.get()))
        buildCluster(*cluster);
    }
  }
  // Strategies without parameters are bound even when no run uses them, so their errors show.
  for (size_t i = 1; i < files.size(); ++i)
    for (const std::unique_ptr<ast::Decl> &decl : files[i]->decls)
      if (auto *strategy = dyn_cast<ast::StrategyDecl>(decl.get());
          strategy && !strategy->hasParams)
        resolveStrategy(*strategy, strategy->nameLoc);
  for (size_t i = 1; i < files.size(); ++i)
    for (const std::unique_ptr<ast::Decl> &decl : files[i]->decls)
      if (auto *run = dyn_cast<ast::RunDecl>(decl.get()))
        buildRun(*run);
}

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

StringMap<const ast::Field *> Sema::collectFields(const ast::FieldsDecl &decl, StringRef what,
                                                  ArrayRef<std::string> allowed) {
  StringMap<const ast::Field *> fields;
  for (const ast::Field &field : decl.fields) {
    if (!llvm::is_contained(allowed, field.key)) {
      diags.error(field.keyLoc, Twine("unknown field '") + field.key + "' in " + what +
                                    didYouMean(field.key, allowed));
      continue;
    }
    auto [it, inserted] = fields.try_emplace(field.key, &field);
    if (!inserted) {
      diags.error(field.keyLoc, Twine("field '") + field.key + "' is set twice");
      diags.note(it->second->keyLoc, "first set here");
    }
  }
  return fields;
}

bool Sema::requireFields(const ast::FieldsDecl &decl, StringRef what,
                         const StringMap<const ast::Field *> &fields,
                         ArrayRef<StringRef> required) {
  SmallVector<StringRef, 8> missing;
  for (StringRef key : required)
    if (!fields.count(key))
      missing.push_back(key);
  if (missing.empty())
    return true;
  std::string list;
  for (size_t i = 0; i < missing.size(); ++i) {
    if (i)
      list += i + 1 == missing.size() ? " and " : ", ";
    list += ("'" + missing[i] + "'").str();
  }
  diags.error(decl.nameLoc, Twine(what) + " '" + decl.name + "' is missing required field" +
                                (missing.size() > 1 ? "s " : " ") + list);
  return false;
}

std::optional<int64_t> Sema::getCount(const ast::Value &value, StringRef what, int64_t min,
                                      int64_t max) {
  if (value.kind == ast::Value::Kind::Quantity) {
    diags.error(value.unitLoc, Twine("'") + what + "' is a plain number, not a quantity: remove '" +
                                   value.unit + "'");
    return std::nullopt;
  }
  if (value.kind != ast::Value::Kind::Number) {
    diags.error(value.getLoc(), Twine("'") + what + "' must be a whole number, found " +
                                    kindNoun(value.kind) + " '" + spell(value) + "'");
    return std::nullopt;
  }
  if (!value.isInteger) {
    diags.error(value.getLoc(),
                Twine("'") + what + "' must be a whole number, found '" + value.numberText + "'");
    return std::nullopt;
  }
  if (value.number < static_cast<double>(min)) {
    diags.error(value.getLoc(), Twine("'") + what + "' must be at least " + Twine(min) +
                                    ", found " + value.numberText);
    return std::nullopt;
  }
  if (value.number > static_cast<double>(max)) {
    diags.error(value.getLoc(), Twine("'") + what + "' is out of range: " + value.numberText +
                                    " is more than " + Twine(max));
    return std::nullopt;
  }
  return static_cast<int64_t>(value.number);
}

std::optional<double> Sema::getQuantity(const ast::Value &value, StringRef what,
                                        Dimension dimension, bool allowZero) {
  if (value.kind == ast::Value::Kind::Number) {
    diags.error(value.getLoc(), Twine("'") + what + "' is " + describe(dimension) +
                                    " and needs a unit: write it like '" + example(dimension) +
                                    "'");
    return std::nullopt;
  }
  if (value.kind != ast::Value::Kind::Quantity) {
    diags.error(value.getLoc(), Twine("'") + what + "' must be " + describe(dimension) +
                                    " such as '" + example(dimension) + "', found " +
                                    kindNoun(value.kind) + " '" + spell(value) + "'");
    return std::nullopt;
  }
  std::optional<UnitInfo> unit = lookupUnit(value.unit);
  if (!unit) {
    diags.error(value.unitLoc, Twine("unknown unit '") + value.unit + "'");
    return std::nullopt;
  }
  if (unit->dimension != dimension) {
    diags.error(value.getLoc(), Twine("'") + what + "' is " + describe(dimension) + ", but '" +
                                    spell(value) + "' is " + describe(unit->dimension));
    return std::nullopt;
  }
  double result = value.number * unit->factor;
  if (!std::isfinite(result) || result > 1e30) {
    diags.error(value.getLoc(), Twine("'") + what + "' is out of range: " + spell(value));
    return std::nullopt;
  }
  if (result < 0 || (result == 0 && !allowZero)) {
    diags.error(value.getLoc(), Twine("'") + what + "' must be positive, found " + spell(value));
    return std::nullopt;
  }
  return result;
}

std::optional<double> Sema::getFraction(const ast::Value &value, StringRef what) {
  if (value.kind != ast::Value::Kind::Number) {
    diags.error(value.getLoc(), Twine("'") + what + "' must be a plain number in (0, 1], found " +
                                    kindNoun(value.kind) + " '" + spell(value) + "'");
    return std::nullopt;
  }
  if (!(value.number > 0 && value.number <= 1)) {
    diags.error(value.getLoc(),
                Twine("'") + what + "' must be in (0, 1], found " + value.numberText);
    return std::nullopt;
  }
  return value.number;
}

/// A real number as `%g` spells it: 1000, 0.01, 4.
static std::string spellReal(double value) {
  std::string text;
  raw_string_ostream(text) << format("%g", value);
  return text;
}

std::optional<double> Sema::getReal(const ast::Value &value, StringRef what, double min, double max,
                                    bool minExclusive) {
  if (value.kind != ast::Value::Kind::Number) {
    diags.error(value.getLoc(), Twine("'") + what + "' must be a plain number, found " +
                                    kindNoun(value.kind) + " '" + spell(value) + "'");
    return std::nullopt;
  }
  bool below = minExclusive ? !(value.number > min) : !(value.number >= min);
  if (below || !(value.number <= max)) {
    diags.error(value.getLoc(), Twine("'") + what + "' must be in " + (minExclusive ? "(" : "[") +
                                    spellReal(min) + ", " + spellReal(max) + "], found " +
                                    value.numberText);
    return std::nullopt;
  }
  return value.number;
}

std::optional<bool> Sema::getBool(const ast::Value &value, StringRef what) {
  if (value.kind == ast::Value::Kind::Name && (value.text == "true" || value.text == "false"))
    return value.text == "true";
  diags.error(value.getLoc(),
              Twine("'") + what + "' must be true or false, found '" + spell(value) + "'");
  return std::nullopt;
}

bool Sema::readFlag(const StringMap<const ast::Field *> &fields, StringRef name, bool &target,
                    SMLoc *loc) {
  const ast::Field *field = fields.lookup(name);
  if (!field)
    return true;
  std::optional<bool> value = getBool(field->value, name);
  if (!value)
    return false;
  target = *value;
  if (loc)
    *loc = field->keyLoc;
  return true;
}

std::optional<std::string> Sema::getChoice(const ast::Value &value, StringRef what,
                                           ArrayRef<std::string> choices) {
  std::string options;
  for (size_t i = 0; i < choices.size(); ++i)
    options += (i ? (i + 1 == choices.size() ? " or " : ", ") : "") + choices[i];
  if (value.kind != ast::Value::Kind::Name) {
    diags.error(value.getLoc(),
                Twine("'") + what + "' must be " + options + ", found '" + spell(value) + "'");
    return std::nullopt;
  }
  if (!llvm::is_contained(choices, value.text)) {
    diags.error(value.getLoc(), Twine("unknown ") + what + " '" + value.text + "': expected " +
                                    options + didYouMean(value.text, choices));
    return std::nullopt;
  }
  return value.text;
}

std::optional<ParamValue> Sema::getParamCount(const ast::Value &value, StringRef what,
                                              const ParamEnv &env, bool allowAuto) {
  if (value.kind == ast::Value::Kind::Name) {
    if (value.text == "auto") {
      if (!allowAuto) {
        diags.error(value.getLoc(), Twine("'") + what + "' cannot be 'auto'");
        return std::nullopt;
      }
      return ParamValue{true, 0};
    }
    auto it = env.find(value.text);
    if (it == env.end()) {
      std::vector<std::string> names;
      for (const auto &entry : env)
        names.push_back(entry.getKey().str());
      llvm::sort(names);
      diags.error(value.getLoc(), Twine("unknown parameter '") + value.text + "' for '" + what +
                                      "'" + didYouMean(value.text, names));
      return std::nullopt;
    }
    if (it->second.isAuto && !allowAuto) {
      diags.error(value.getLoc(), Twine("'") + what + "' cannot be 'auto' (parameter '" +
                                      value.text + "' is 'auto')");
      return std::nullopt;
    }
    return it->second;
  }
  std::optional<int64_t> count = getCount(value, what, 1, kMaxDevices);
  if (!count)
    return std::nullopt;
  return ParamValue{false, *count};
}

//===----------------------------------------------------------------------===//
// Models
//===----------------------------------------------------------------------===//

/// Multi-head latent attention's fields (ir::TransformerConfig::kvLoraRank), after the others
/// of the transformer are read: errors without `kv_lora_rank`, and for what such attention does
/// not have (grouped key/value heads, biases, q/k norms, separate or packed projections) or what
/// placec does not account for it (materialized attention).
bool Sema::buildLatentAttention(const StringMap<const ast::Field *> &fields,
                                ir::TransformerConfig &config) {
  static const char *const latentKeys[] = {"q_lora_rank", "rope_head_dim", "v_head_dim"};
  const ast::Field *rankField = fields.lookup("kv_lora_rank");
  if (!rankField) {
    bool ok = true;
    for (const char *key : latentKeys)
      if (const ast::Field *field = fields.lookup(key)) {
        diags.error(field->keyLoc, Twine("'") + key +
                                       "' applies to multi-head latent attention; write "
                                       "'kv_lora_rank = R;' to make the attention latent");
        ok = false;
      }
    return ok;
  }
  bool ok = true;
  auto count = [&](StringRef key, int64_t &out, int64_t max) {
    if (const ast::Field *field = fields.lookup(key)) {
      std::optional<int64_t> value = getCount(field->value, key, 1, max);
      ok &= value.has_value();
      out = value.value_or(0);
    }
  };
  config.kvLoraRankLoc = rankField->keyLoc;
  count("kv_lora_rank", config.kvLoraRank, 1 << 20);
  count("q_lora_rank", config.qLoraRank, 1 << 20);
  count("rope_head_dim", config.ropeHeadDim, 1 << 16);
  count("v_head_dim", config.valueHeadDim, 1 << 16);
  if (!ok)
    return false;
  SMLoc at = rankField->keyLoc;
  auto refuse = [&](const Twine &message) {
    diags.error(at, message);
    ok = false;
  };
  if (const ast::Field *field = fields.lookup("rope_head_dim")) {
    if (config.ropeHeadDim % 2 != 0) {
      diags.error(field->value.getLoc(),
                  "rope_head_dim = " + Twine(config.ropeHeadDim) +
                      " is odd: the rotary embedding turns pairs of elements");
      ok = false;
    }
  } else {
    refuse("multi-head latent attention needs 'rope_head_dim': the rotary part of each query "
           "and key head, decoupled from the latent (DeepSeek-V2 and V3: 64)");
  }
  if (config.positions != ir::PositionKind::Rope)
    refuse("multi-head latent attention carries its positions in a decoupled rotary part; "
           "write positions = rope");
  // What latent attention has in place of a field, or what placec does not account for with it.
  static const std::pair<const char *, const char *> conflicts[] = {
      {"kv_heads", "every head's keys and values come up from one latent, so there are no "
                   "key/value groups"},
      {"kv_repeat", "the keys and values are already one per query head"},
      {"qk_norm", "the latents are normalized, not each head's queries and keys"},
      {"unpad", "placec accounts for it in padded batches only"},
  };
  for (const auto &[key, why] : conflicts)
    if (const ast::Field *field = fields.lookup(key)) {
      diags.error(field->keyLoc, Twine("'") + key + "' with multi-head latent attention ('" +
                                     "kv_lora_rank'): " + why);
      ok = false;
    }
  if (config.bias || config.qkvBias) {
    const ast::Field *bias = fields.lookup("bias");
    diags.error(bias ? bias->value.getLoc() : at,
                Twine("multi-head latent attention has no biases in placec (DeepSeek's "
                      "projections have none); write bias = false") +
                    (bias ? "" : " (bias defaults to true)"));
    ok = false;
  }
  if (config.attention == ir::AttentionKind::Materialized) {
    diags.error(fields.lookup("attention")->value.getLoc(),
                "attention = materialized keeps Korthikanti et al.'s accounting of multi-head "
                "attention; multi-head latent attention is accounted with fused attention "
                "(flash, flash3 or cudnn)");
    ok = false;
  }
  return ok;
}

bool Sema::buildMoe(const ast::ModelDecl &decl, const StringMap<const ast::Field *> &fields,
                    ir::TransformerConfig &config) {
  static const char *const moeKeys[] = {
      "top_k",        "expert_ffn",    "shared_experts",     "shared_expert_ffn", "moe_every",
      "dense_layers", "router",        "capacity_factor",    "aux_loss",          "imbalance",
      "router_bias",  "router_groups", "router_group_top_k", "aux_loss_scope"};
  const ast::Field *expertsField = fields.lookup("experts");
  if (!expertsField) {
    bool ok = true;
    for (const char *key : moeKeys)
      if (const ast::Field *field = fields.lookup(key)) {
        diags.error(field->keyLoc, Twine("'") + key +
                                       "' applies to mixture-of-experts layers; write 'experts = "
                                       "N;' to make this a mixture-of-experts model");
        ok = false;
      }
    return ok;
  }
  ir::MoeConfig &moe = config.moe;
  bool ok = true;
  auto count = [&](StringRef key, int64_t &out, int64_t min, int64_t max) {
    if (const ast::Field *field = fields.lookup(key)) {
      std::optional<int64_t> value = getCount(field->value, key, min, max);
      ok &= value.has_value();
      out = value.value_or(out);
    }
  };
  count("experts", moe.experts, 2, 1 << 16);
  if (!ok)
    return false;
  if (!fields.lookup("top_k")) {
    diags.error(expertsField->keyLoc,
                "a mixture-of-experts model needs 'top_k', the experts each token is sent to");
    return false;
  }
  count("top_k", moe.topK, 1, moe.experts);
  moe.expertFfn = config.ffn;
  count("expert_ffn", moe.expertFfn, 1, 1 << 26);
  count("shared_experts", moe.sharedExperts, 0, 1 << 10);
  moe.sharedExpertFfn = moe.expertFfn;
  if (const ast::Field *field = fields.lookup("shared_expert_ffn")) {
    if (moe.sharedExperts == 0) {
      diags.error(field->keyLoc,
                  "'shared_expert_ffn' needs shared experts: write 'shared_experts = N;'");
      ok = false;
    }
    count("shared_expert_ffn", moe.sharedExpertFfn, 1, 1 << 26);
  }
  count("moe_every", moe.every, 1, std::max<int64_t>(config.layers, 1));
  count("dense_layers", moe.denseLayers, 0, std::max<int64_t>(config.layers - 1, 0));
  ok &= readFlag(fields, "router_bias", moe.routerBias);
  // Group-limited routing: both fields or neither, whole groups, enough experts in the chosen
  // groups for top_k.
  const ast::Field *groupsField = fields.lookup("router_groups");
  const ast::Field *groupTopKField = fields.lookup("router_group_top_k");
  if (groupsField || groupTopKField) {
    if (!groupsField || !groupTopKField) {
      diags.error((groupsField ? groupsField : groupTopKField)->keyLoc,
                  Twine("group-limited routing needs both 'router_groups' (the groups of "
                        "experts) and 'router_group_top_k' (the groups a token's experts come "
                        "from); '") +
                      (groupsField ? "router_group_top_k" : "router_groups") + "' is missing");
      ok = false;
    } else {
      count("router_groups", moe.routerGroups, 1, moe.experts);
      count("router_group_top_k", moe.routerGroupTopK, 1, std::max<int64_t>(moe.routerGroups, 1));
      if (moe.routerGroups > 0 && moe.experts % moe.routerGroups != 0) {
        diags.error(groupsField->value.getLoc(),
                    Twine("'router_groups' must divide the ") + Twine(moe.experts) +
                        " experts into equal groups, but " + Twine(moe.routerGroups) + " does not");
        ok = false;
      } else if (moe.routerGroups > 0 &&
                 moe.routerGroupTopK * (moe.experts / moe.routerGroups) < moe.topK) {
        diags.error(groupTopKField->value.getLoc(),
                    Twine("'router_group_top_k' = ") + Twine(moe.routerGroupTopK) + " groups of " +
                        Twine(moe.experts / moe.routerGroups) + " experts hold fewer than the " +
                        Twine(moe.topK) + " experts a token is sent to (top_k)");
        ok = false;
      }
    }
  }
  if (const ast::Field *field = fields.lookup("router")) {
    std::optional<std::string> choice = getChoice(field->value, "router", {"softmax", "sigmoid"});
    ok &= choice.has_value();
    if (choice)
      moe.router = *choice == "softmax" ? ir::RouterKind::Softmax : ir::RouterKind::Sigmoid;
  }
  if (const ast::Field *field = fields.lookup("capacity_factor")) {
    std::optional<double> value = getReal(field->value, "capacity_factor", 0, 1e3, true);
    ok &= value.has_value();
    moe.capacityFactor = value;
  }
  if (const ast::Field *field = fields.lookup("aux_loss")) {
    std::optional<double> value = getReal(field->value, "aux_loss", 0, 1);
    ok &= value.has_value();
    moe.auxLoss = value.value_or(moe.auxLoss);
  }
  if (const ast::Field *field = fields.lookup("aux_loss_scope")) {
    std::optional<std::string> choice =
        getChoice(field->value, "aux_loss_scope", {"global", "local", "sequence"});
    ok &= choice.has_value();
    if (choice) {
      moe.auxLossScope = *choice == "global"  ? ir::AuxLossScope::Global
                         : *choice == "local" ? ir::AuxLossScope::Local
                                              : ir::AuxLossScope::Sequence;
      moe.auxLossScopeLoc = field->keyLoc;
    }
    if (choice && moe.auxLoss == 0) {
      diags.error(field->keyLoc, "'aux_loss_scope' scopes the load-balancing loss, and 'aux_loss "
                                 "= 0' has none: remove one of them");
      ok = false;
    }
  }
  if (const ast::Field *field = fields.lookup("imbalance")) {
    // The busiest expert cannot get more than every token, experts / top_k times the mean.
    double most = static_cast<double>(moe.experts) / std::max<int64_t>(moe.topK, 1);
    std::optional<double> value = getReal(field->value, "imbalance", 1, most);
    ok &= value.has_value();
    moe.imbalance = value.value_or(1.0);
    if (value && moe.capacityFactor) {
      diags.error(field->keyLoc,
                  "'imbalance' describes dropless routing; with 'capacity_factor' every expert "
                  "computes its full capacity");
      ok = false;
    }
  }
  (void)decl;
  return ok;
}

void Sema::buildModel(const ast::ModelDecl &decl) {
  auto model = std::make_unique<ir::Model>();
  model->name = decl.name;
  model->loc = decl.nameLoc;
  bool ok = true;

  if (decl.modelKind.empty()) {
    model->kind = ir::ModelKind::Abstract;
    auto fields = collectFields(decl, "an abstract model", {"params"});
    if (!requireFields(decl, "abstract model", fields, {"params"}))
      return;
    const ast::Value &value = fields["params"]->value;
    if (value.kind == ast::Value::Kind::Number && value.number > kMaxParams) {
      diags.error(value.getLoc(), Twine("parameter count ") + value.numberText +
                                      " is out of range: placec supports at most 1e15 "
                                      "parameters");
      return;
    }
    std::optional<int64_t> params = getCount(value, "params", 1, int64_t(kMaxParams));
    if (!params)
      return;
    model->numParams = *params;
  } else if (decl.modelKind == "transformer") {
    model->kind = ir::ModelKind::Transformer;
    static const std::vector<std::string> keys = {"layers",
                                                  "hidden",
                                                  "heads",
                                                  "seq",
                                                  "vocab",
                                                  "ffn",
                                                  "mlp",
                                                  "norm",
                                                  "bias",
                                                  "kv_heads",
                                                  "kv_repeat",
                                                  "rope_complex",
                                                  "unpad",
                                                  "projections",
                                                  "attention",
                                                  "positions",
                                                  "embedding_norm",
                                                  "tied_embeddings",
                                                  "experts",
                                                  "top_k",
                                                  "expert_ffn",
                                                  "shared_experts",
                                                  "shared_expert_ffn",
                                                  "moe_every",
                                                  "dense_layers",
                                                  "router",
                                                  "capacity_factor",
                                                  "aux_loss",
                                                  "aux_loss_scope",
                                                  "imbalance",
                                                  "head_dim",
                                                  "qk_norm",
                                                  "window",
                                                  "full_every",
                                                  "post_norm",
                                                  "sinks",
                                                  "router_bias",
                                                  "router_groups",
                                                  "router_group_top_k",
                                                  "kv_lora_rank",
                                                  "q_lora_rank",
                                                  "rope_head_dim",
                                                  "v_head_dim",
                                                  "mtp_layers"};
    auto fields = collectFields(decl, "a transformer", keys);
    ok &= requireFields(decl, "transformer", fields, {"layers", "hidden", "heads", "seq", "vocab"});
    ir::TransformerConfig &config = model->transformer;
    auto count = [&](StringRef key, int64_t &out, int64_t max) {
      if (const ast::Field *field = fields.lookup(key)) {
        std::optional<int64_t> value = getCount(field->value, key, 1, max);
        ok &= value.has_value();
        out = value.value_or(0);
      }
    };
    count("layers", config.layers, ir::kMaxLayers);
    count("hidden", config.hidden, 1 << 24);
    count("heads", config.heads, 1 << 20);
    count("seq", config.seq, 1 << 30);
    count("vocab", config.vocab, 1 << 30);
    config.ffn = 4 * config.hidden;
    count("ffn", config.ffn, 1 << 26);
    count("kv_heads", config.kvHeads, 1 << 20);
    count("head_dim", config.headDim, 1 << 16);
    count("window", config.window, 1 << 30);
    // Multi-token prediction modules: 0 (none, the default) or more.
    if (const ast::Field *field = fields.lookup("mtp_layers")) {
      std::optional<int64_t> value = getCount(field->value, "mtp_layers", 0, ir::kMaxLayers);
      ok &= value.has_value();
      config.mtpLayers = value.value_or(0);
      config.mtpLayersLoc = field->keyLoc;
    }
    if (const ast::Field *field = fields.lookup("window"))
      config.windowLoc = field->keyLoc;
    if (const ast::Field *field = fields.lookup("full_every")) {
      config.fullEveryLoc = field->keyLoc;
      if (!fields.lookup("window")) {
        diags.error(field->keyLoc,
                    "'full_every' makes every n-th layer attend the whole prefix among "
                    "sliding-window ones; write 'window = W;' for the others");
        ok = false;
      } else {
        // One layer in n of full attention, n from 2 (1 would leave the window to no layer)
        // to the layer count (the n-th layer must exist).
        std::optional<int64_t> value =
            getCount(field->value, "full_every", 2, std::max<int64_t>(config.layers, 1));
        ok &= value.has_value();
        config.fullEvery = value.value_or(0);
      }
    }
    ok &= readFlag(fields, "kv_repeat", config.kvRepeat, &config.kvRepeatLoc);
    ok &= readFlag(fields, "rope_complex", config.ropeComplex, &config.ropeComplexLoc);
    ok &= readFlag(fields, "unpad", config.unpad, &config.unpadLoc);
    ok &= readFlag(fields, "post_norm", config.postNorm, &config.postNormLoc);
    ok &= readFlag(fields, "sinks", config.sinks, &config.sinksLoc);
    ok &= readFlag(fields, "qk_norm", config.qkNorm);
    if (const ast::Field *field = fields.lookup("attention")) {
      std::optional<std::string> choice =
          getChoice(field->value, "attention", {"flash", "flash3", "cudnn", "materialized"});
      ok &= choice.has_value();
      config.attentionLoc = field->keyLoc;
      if (choice)
        config.attention = *choice == "flash"    ? ir::AttentionKind::Flash
                           : *choice == "flash3" ? ir::AttentionKind::Flash3
                           : *choice == "cudnn"  ? ir::AttentionKind::Cudnn
                                                 : ir::AttentionKind::Materialized;
    }
    if (const ast::Field *field = fields.lookup("mlp")) {
      std::optional<std::string> choice =
          getChoice(field->value, "mlp", {"gelu", "swiglu", "relu2"});
      ok &= choice.has_value();
      config.mlpLoc = field->keyLoc;
      if (choice)
        config.mlp = *choice == "gelu"     ? ir::MlpActivation::Gelu
                     : *choice == "swiglu" ? ir::MlpActivation::Swiglu
                                           : ir::MlpActivation::Relu2;
    }
    if (const ast::Field *field = fields.lookup("norm")) {
      std::optional<std::string> choice = getChoice(field->value, "norm", {"layernorm", "rmsnorm"});
      ok &= choice.has_value();
      if (choice)
        config.norm = *choice == "layernorm" ? ir::NormKind::LayerNorm : ir::NormKind::RmsNorm;
    }
    if (const ast::Field *field = fields.lookup("positions")) {
      std::optional<std::string> choice =
          getChoice(field->value, "positions", {"learned", "rope", "alibi"});
      ok &= choice.has_value();
      config.positionsLoc = field->keyLoc;
      if (choice)
        config.positions = *choice == "learned" ? ir::PositionKind::Learned
                           : *choice == "rope"  ? ir::PositionKind::Rope
                                                : ir::PositionKind::Alibi;
    }
    ok &= readFlag(fields, "embedding_norm", config.embeddingNorm, &config.embeddingNormLoc);
    if (const ast::Field *field = fields.lookup("projections")) {
      std::optional<std::string> choice =
          getChoice(field->value, "projections", {"fused", "separate"});
      ok &= choice.has_value();
      config.projectionsLoc = field->keyLoc;
      if (choice)
        config.projections =
            *choice == "fused" ? ir::Projections::Fused : ir::Projections::Separate;
    }
    if (const ast::Field *field = fields.lookup("bias")) {
      std::optional<std::string> choice = getChoice(field->value, "bias", {"true", "false", "qkv"});
      ok &= choice.has_value();
      config.bias = !choice || *choice == "true";
      config.qkvBias = choice == std::optional<std::string>("qkv");
    }
    ok &= readFlag(fields, "tied_embeddings", config.tiedEmbeddings);
    if (ok && config.ropeComplex && config.positions != ir::PositionKind::Rope) {
      diags.error(config.ropeComplexLoc,
                  "rope_complex = true with positions = " + ir::toString(config.positions) +
                      ": the model has no rotary embedding to apply as a complex product "
                      "(write positions = rope, or leave rope_complex out)");
      ok = false;
    }
    // ALiBi's bias is added to the scores inside FlashAttention-2 (alibi_slopes, from v2.4) or to
    // the materialized scores; FlashAttention-3 has none (Dao-AILab/flash-attention#1666), and
    // Transformer Engine passes it to cuDNN as a bias tensor the kernel reads, which placec has
    // no measurement of.
    if (ok && config.positions == ir::PositionKind::Alibi &&
        (config.attention == ir::AttentionKind::Flash3 ||
         config.attention == ir::AttentionKind::Cudnn)) {
      diags.error(config.attentionLoc,
                  "attention = " + ir::toString(config.attention) + " with positions = alibi: " +
                      (config.attention == ir::AttentionKind::Flash3
                           ? "FlashAttention-3 has no ALiBi"
                           : "placec does not time cuDNN's fused attention with ALiBi's bias") +
                      " (write attention = flash, FlashAttention-2's alibi_slopes, or "
                      "materialized)");
      diags.note(config.positionsLoc, "ALiBi is chosen here");
      ok = false;
    }
    if (ok && config.unpad && config.attention == ir::AttentionKind::Materialized) {
      diags.error(config.unpadLoc,
                  "unpad = true with attention = materialized: the packed tokens go to a "
                  "variable-length fused kernel (write attention = flash, flash3 or cudnn, or "
                  "leave unpad out)");
      ok = false;
    }
    ok &= buildMoe(decl, fields, config);
    if (ok)
      ok &= buildLatentAttention(fields, config);
    if (ok && config.moe.isEnabled() && config.attention == ir::AttentionKind::Materialized) {
      diags.error(fields["attention"]->value.getLoc(),
                  "attention = materialized keeps Korthikanti et al.'s accounting of dense "
                  "layers; mixture-of-experts layers are accounted with fused attention (flash)");
      ok = false;
    }
    if (!ok)
      return;
    if (config.headDim == 0 && config.hidden % config.heads != 0) {
      diags.error(fields["heads"]->value.getLoc(), Twine("hidden size ") + Twine(config.hidden) +
                                                       " is not divisible by " +
                                                       Twine(config.heads) + " heads");
      return;
    }
    if (config.kvHeads > 0 && config.heads % config.kvHeads != 0) {
      diags.error(fields["kv_heads"]->value.getLoc(),
                  Twine("kv_heads = ") + Twine(config.kvHeads) +
                      " does not divide heads = " + Twine(config.heads) +
                      ": grouped-query attention shares each key/value head among an equal "
                      "number of query heads");
      return;
    }
    // The multi-token prediction modules are layers of the last layer's kind, each with a
    // projection of 2·h² (bounded with the layers').
    double h = config.hidden, l = static_cast<double>(config.getNumBlocks()), f = config.ffn;
    // Attention projections wider than h with head_dim; latent attention's up-projections and
    // rotary parts are bounded by their widest head times the heads.
    double attentionWidth =
        config.headDim > 0 ? static_cast<double>(config.heads) * config.headDim : h;
    if (config.isLatentAttention())
      attentionWidth =
          static_cast<double>(config.heads) *
              std::max({config.getQueryKeyHeadDim(), config.getValueHeadDim(), int64_t{1}}) +
          static_cast<double>(config.qLoraRank) + config.kvLoraRank + config.ropeHeadDim;
    // MoE layers hold every routed and shared expert's MLP in place of the dense one.
    const ir::MoeConfig &moe = config.moe;
    double moeLayers = static_cast<double>(moe.getNumMoeLayers(config.layers)) +
                       (config.isMoeBlock(config.layers) ? config.mtpLayers : 0);
    double mlpWidth = (l - moeLayers) * f +
                      moeLayers * (static_cast<double>(moe.experts) * moe.expertFfn +
                                   static_cast<double>(moe.sharedExperts) * moe.sharedExpertFfn);
    double estimate = l * (4 * h * std::max(h, attentionWidth) + 16 * h) + mlpWidth * (3 * h + 3) +
                      moeLayers * static_cast<double>(moe.experts) * 2 * h +
                      (2.0 * config.vocab + config.seq + 2) * h +
                      static_cast<double>(config.mtpLayers) * 2 * h * h;
    // Latent attention's up-projections read their latents, not h.
    if (config.isLatentAttention())
      estimate += l * (static_cast<double>(config.qLoraRank) + config.kvLoraRank) * attentionWidth;
    if (estimate > kMaxParams) {
      diags.error(decl.nameLoc, Twine("model '") + decl.name + "' is too large: about " +
                                    formatEstimate(estimate) +
                                    " parameters, placec supports at most 1e15");
      return;
    }
    model->tensors = ir::buildTransformerTensors(config);
  } else if (decl.modelKind == "mlp") {
    model->kind = ir::ModelKind::Mlp;
    auto fields = collectFields(decl, "an mlp", {"layers", "width", "input", "output"});
    if (!requireFields(decl, "mlp", fields, {"layers", "width", "input", "output"}))
      return;
    ir::MlpConfig &config = model->mlp;
    auto count = [&](StringRef key, int64_t &out, int64_t max) {
      std::optional<int64_t> value = getCount(fields[key]->value, key, 1, max);
      ok &= value.has_value();
      out = value.value_or(0);
    };
    count("layers", config.layers, ir::kMaxLayers);
    count("width", config.width, 1 << 24);
    count("input", config.input, 1 << 24);
    count("output", config.output, 1 << 24);
    if (!ok)
      return;
    double w = config.width;
    double estimate = (config.layers + 1) * (w * w + w) + (config.input + config.output) * (w + 1);
    if (estimate > kMaxParams) {
      diags.error(decl.nameLoc, Twine("model '") + decl.name + "' is too large: about " +
                                    formatEstimate(estimate) +
                                    " parameters, placec supports at most 1e15");
      return;
    }
    model->tensors = ir::buildMlpTensors(config);
  } else {
    diags.error(decl.modelKindLoc, Twine("unknown model kind '") + decl.modelKind +
                                       "': expected transformer or mlp, or no kind for an "
                                       "abstract model" +
                                       didYouMean(decl.modelKind, {"transformer", "mlp"}));
    return;
  }

  if (model->kind != ir::ModelKind::Abstract) {
    int64_t total = 0;
    for (const ir::Tensor &tensor : model->tensors)
      total += tensor.numElements;
    model->numParams = total;
  }
  models[decl.name] = model.get();
  program.models.push_back(std::move(model));
}

//===----------------------------------------------------------------------===//
// Clusters
//===----------------------------------------------------------------------===//

void Sema::buildCluster(const ast::ClusterDecl &decl) {
  static const std::vector<std::string> keys = {"nodes",
                                                "devices_per_node",
                                                "device",
                                                "device_memory",
                                                "peak",
                                                "peak_tf32",
                                                "peak_fp8",
                                                "peak_fp4",
                                                "hbm_bandwidth",
                                                "compute_units",
                                                "intra_bandwidth",
                                                "inter_bandwidth",
                                                "host_bandwidth",
                                                "latency",
                                                "host_memory",
                                                "efficiency",
                                                "nvme_bandwidth",
                                                "nvme_capacity",
                                                "host_memory_bandwidth"};
  auto fields = collectFields(decl, "a cluster", keys);
  auto cluster = std::make_unique<ir::Cluster>();
  cluster->name = decl.name;
  cluster->loc = decl.nameLoc;
  for (const ast::Field &field : decl.fields)
    cluster->fieldLocs.try_emplace(field.key, field.keyLoc);

  // `device = h100_sxm;` fills every field the cluster does not write from the preset.
  bool ok = true;
  if (const ast::Field *field = fields.lookup("device")) {
    std::vector<std::string> names;
    for (const ir::DevicePreset &preset : ir::getDevicePresets())
      names.push_back(preset.name);
    std::optional<std::string> choice = getChoice(field->value, "device", names);
    ok &= choice.has_value();
    if (choice) {
      const ir::DevicePreset *preset = ir::findDevicePreset(*choice);
      cluster->device = preset;
      cluster->deviceMemory = preset->memory;
      cluster->peakFlops = preset->peakBf16;
      cluster->peakTf32 = preset->peakTf32;
      cluster->peakFp8 = preset->peakFp8;
      cluster->peakFp4 = preset->peakFp4;
      cluster->hbmBandwidth = preset->hbmBandwidth;
      cluster->computeUnits = preset->computeUnits;
      cluster->intraBandwidth = preset->intraBandwidth;
      cluster->interBandwidth = preset->interBandwidth;
      cluster->hostBandwidth = preset->hostBandwidth;
      cluster->latency = preset->latency;
    }
  }
  if (cluster->device || fields.lookup("device"))
    ok &= requireFields(decl, "cluster", fields, {"nodes", "devices_per_node"});
  else
    ok &= requireFields(decl, "cluster", fields,
                        {"nodes", "devices_per_node", "device_memory", "peak", "intra_bandwidth",
                         "inter_bandwidth"});

  auto count = [&](StringRef key, int64_t &out, int64_t max) {
    if (const ast::Field *field = fields.lookup(key)) {
      std::optional<int64_t> value = getCount(field->value, key, 1, max);
      ok &= value.has_value();
      out = value.value_or(0);
    }
  };
  // A written quantity overrides the preset's value.
  auto quantity = [&](StringRef key, Dimension dimension, auto &out, bool allowZero = false) {
    if (const ast::Field *field = fields.lookup(key)) {
      std::optional<double> value = getQuantity(field->value, key, dimension, allowZero);
      ok &= value.has_value();
      if (value)
        out = *value;
    }
  };
  count("nodes", cluster->nodes, kMaxDevices);
  count("devices_per_node", cluster->devicesPerNode, kMaxDevices);
  count("compute_units", cluster->computeUnits, 1 << 20);
  // A preset's host memory bandwidth is per device; a node has its devices' share.
  if (cluster->device)
    cluster->hostMemoryBandwidth = cluster->device->hostMemoryBandwidthPerDevice *
                                   static_cast<double>(cluster->devicesPerNode);
  quantity("device_memory", Dimension::Bytes, cluster->deviceMemory);
  quantity("peak", Dimension::Rate, cluster->peakFlops);
  quantity("peak_tf32", Dimension::Rate, cluster->peakTf32);
  quantity("peak_fp8", Dimension::Rate, cluster->peakFp8);
  quantity("peak_fp4", Dimension::Rate, cluster->peakFp4);
  quantity("hbm_bandwidth", Dimension::Bandwidth, cluster->hbmBandwidth);
  quantity("intra_bandwidth", Dimension::Bandwidth, cluster->intraBandwidth);
  quantity("inter_bandwidth", Dimension::Bandwidth, cluster->interBandwidth);
  quantity("host_bandwidth", Dimension::Bandwidth, cluster->hostBandwidth);
  quantity("latency", Dimension::Time, cluster->latency, /*allowZero=*/true);
  quantity("host_memory", Dimension::Bytes, cluster->hostMemory);
  quantity("nvme_bandwidth", Dimension::Bandwidth, cluster->nvmeBandwidth);
  quantity("nvme_capacity", Dimension::Bytes, cluster->nvmeCapacity);
  quantity("host_memory_bandwidth", Dimension::Bandwidth, cluster->hostMemoryBandwidth);
  if (const ast::Field *field = fields.lookup("efficiency")) {
    std::optional<double> value = getFraction(field->value, "efficiency");
    ok &= value.has_value();
    cluster->efficiency = value.value_or(0.5);
    cluster->efficiencyExplicit = true;
  }
  if (!ok)
    return;
  if (cluster->getNumDevices() > kMaxDevices) {
    diags.error(decl.nameLoc, Twine("cluster '") + decl.name + "' has " +
                                  Twine(cluster->getNumDevices()) +
                                  " devices; placec supports at most " + Twine(kMaxDevices));
    return;
  }
  clusters[decl.name] = cluster.get();
  program.clusters.push_back(std::move(cluster));
}

//===----------------------------------------------------------------------===//
// Strategies
//===----------------------------------------------------------------------===//

std::string describeParams(const ast::StrategyDecl &decl) {
  std::string text;
  for (size_t i = 0; i < decl.params.size(); ++i)
    text += (i ? ", " : "") + decl.params[i].name + " = …";
  return text;
}

const ir::Strategy *Sema::resolveStrategy(const ast::StrategyDecl &decl, SMLoc useLoc) {
  if (auto it = boundStrategies.find(decl.name); it != boundStrategies.end())
    return it->second;
  if (strategyFailed.contains(decl.name))
    return nullptr;
  if (llvm::is_contained(strategyStack, &decl)) {
    diags.error(useLoc, Twine("strategy '") + decl.name + "' is defined in terms of itself");
    for (const ast::StrategyDecl *entry : llvm::reverse(strategyStack)) {
      diags.note(entry->nameLoc, Twine("while binding strategy '") + entry->name + "'");
      if (entry == &decl)
        break;
    }
    return nullptr;
  }
  strategyStack.push_back(&decl);
  std::unique_ptr<ir::Strategy> bound = instantiate(decl, ParamEnv(), decl.name, decl.nameLoc);
  strategyStack.pop_back();
  if (!bound) {
    strategyFailed.insert(decl.name);
    return nullptr;
  }
  const ir::Strategy *result = addStrategy(std::move(bound));
  boundStrategies[decl.name] = result;
  return result;
}

std::optional<ParamEnv> Sema::bindArguments(const ast::StrategyDecl &decl, SMLoc useLoc,
                                            ArrayRef<ast::Arg> args, const ParamEnv &outer) {
  ParamEnv env;
  bool ok = true;
  bool sawKeyword = false;
  std::vector<std::string> paramNames;
  for (const ast::Param &param : decl.params)
    paramNames.push_back(param.name);
  for (size_t i = 0; i < args.size(); ++i) {
    const ast::Arg &arg = args[i];
    SMLoc loc = arg.key.empty() ? arg.value->getLoc() : arg.keyLoc;
    std::string name;
    if (arg.key.empty()) {
      if (sawKeyword) {
        diags.error(loc, "a positional argument cannot follow a named one");
        ok = false;
        continue;
      }
      if (i >= decl.params.size()) {
        diags.error(loc, Twine("strategy '") + decl.name + "' takes " + Twine(decl.params.size()) +
                             " argument" + (decl.params.size() == 1 ? "" : "s") + ", found " +
                             Twine(args.size()));
        diags.note(decl.nameLoc, Twine("'") + decl.name + "' is declared here");
        return std::nullopt;
      }
      name = decl.params[i].name;
    } else {
      sawKeyword = true;
      if (!llvm::is_contained(paramNames, arg.key)) {
        diags.error(loc, Twine("strategy '") + decl.name + "' has no parameter '" + arg.key + "'" +
                             didYouMean(arg.key, paramNames));
        diags.note(decl.nameLoc, Twine("'") + decl.name + "' is declared here");
        ok = false;
        continue;
      }
      name = arg.key;
    }
    if (env.count(name)) {
      diags.error(loc, Twine("argument '") + name + "' is given twice");
      ok = false;
      continue;
    }
    std::optional<ParamValue> value = getParamCount(*arg.value, name, outer, /*allowAuto=*/true);
    if (!value) {
      ok = false;
      continue;
    }
    env[name] = *value;
  }
  if (!ok)
    return std::nullopt;
  for (const ast::Param &param : decl.params) {
    if (env.count(param.name))
      continue;
    if (!param.defaultValue) {
      diags.error(useLoc, Twine("missing argument '") + param.name + "' for strategy '" +
                              decl.name + "': write '" + decl.name + "(" + describeParams(decl) +
                              ")'");
      diags.note(param.nameLoc, Twine("parameter '") + param.name + "' is declared here");
      ok = false;
      continue;
    }
    std::optional<ParamValue> value =
        getParamCount(*param.defaultValue, param.name, ParamEnv(), /*allowAuto=*/true);
    if (!value) {
      ok = false;
      continue;
    }
    env[param.name] = *value;
  }
  if (!ok)
    return std::nullopt;
  return env;
}

const ir::Strategy *Sema::resolveTerm(StringRef name, SMLoc nameLoc, bool hasParens,
                                      ArrayRef<ast::Arg> args, const ParamEnv &env) {
  const ast::StrategyDecl *decl = lookup(strategyDecls, name, nameLoc, "strategy");
  if (!decl)
    return nullptr;
  if (!decl->hasParams) {
    if (hasParens) {
      diags.error(nameLoc, Twine("strategy '") + name + "' takes no arguments");
      diags.note(decl->nameLoc, Twine("'") + name + "' is declared here");
      return nullptr;
    }
    return resolveStrategy(*decl, nameLoc);
  }
  bool allDefaulted = llvm::all_of(
      decl->params, [](const ast::Param &param) { return param.defaultValue != nullptr; });
  if (!hasParens && !allDefaulted) {
    diags.error(nameLoc, Twine("strategy '") + name + "' takes parameters: write '" + name + "(" +
                             describeParams(*decl) + ")'");
    diags.note(decl->nameLoc, Twine("'") + name + "' is declared here");
    return nullptr;
  }
  if (llvm::is_contained(strategyStack, decl)) {
    diags.error(nameLoc, Twine("strategy '") + name + "' is defined in terms of itself");
    return nullptr;
  }
  std::optional<ParamEnv> bound = bindArguments(*decl, nameLoc, args, env);
  if (!bound)
    return nullptr;
  // Name the instance as written, with arguments resolved: `zero3(dp = 64)`.
  std::string instanceName = name.str() + "(";
  for (size_t i = 0; i < decl->params.size(); ++i) {
    const ParamValue &value = (*bound)[decl->params[i].name];
    instanceName += (i ? ", " : "") + decl->params[i].name + " = " +
                    (value.isAuto ? std::string("auto") : std::to_string(value.value));
  }
  instanceName += ")";
  unsigned errorsBefore = diags.getNumErrors();
  strategyStack.push_back(decl);
  std::unique_ptr<ir::Strategy> instance = instantiate(*decl, *bound, instanceName, nameLoc);
  strategyStack.pop_back();
  if (!instance) {
    // The error points into the strategy's body (perhaps in the prelude); say which use it came
    // from.
    if (diags.getNumErrors() != errorsBefore)
      diags.note(nameLoc, Twine("in '") + instanceName + "', instantiated here");
    return nullptr;
  }
  return addStrategy(std::move(instance));
}

std::unique_ptr<ir::Strategy> Sema::instantiate(const ast::StrategyDecl &decl, const ParamEnv &env,
                                                std::string name, SMLoc loc) {
  // Parameters must be distinct; checked at each instantiation (cheap, and reported once per
  // use at worst).
  StringSet<> seen;
  for (const ast::Param &param : decl.params) {
    if (!seen.insert(param.name).second) {
      diags.error(param.nameLoc, Twine("parameter '") + param.name + "' is declared twice");
      return nullptr;
    }
  }
  if (!decl.isComposition)
    return bindBody(decl, env, std::move(name), loc);

  SmallVector<const ir::Strategy *, 4> operands;
  SmallVector<SMLoc, 4> operandLocs;
  bool ok = true;
  for (const ast::StrategyRef &term : decl.terms) {
    const ir::Strategy *operand =
        resolveTerm(term.name, term.nameLoc, term.hasParens, term.args, env);
    ok &= operand != nullptr;
    operands.push_back(operand);
    operandLocs.push_back(term.nameLoc);
  }
  if (!ok)
    return nullptr;
  return compose(operands, operandLocs, std::move(name), loc);
}

std::optional<ir::AxisKind> parseAxisKind(StringRef text) {
  if (text == "batch")
    return ir::AxisKind::Batch;
  if (text == "tensor")
    return ir::AxisKind::Tensor;
  if (text == "layers")
    return ir::AxisKind::Layers;
  if (text == "sequence")
    return ir::AxisKind::Sequence;
  if (text == "expert")
    return ir::AxisKind::Expert;
  return std::nullopt;
}

std::unique_ptr<ir::Strategy> Sema::bindBody(const ast::StrategyDecl &decl, const ParamEnv &env,
                                             std::string name, SMLoc loc) {
  auto strategy = std::make_unique<ir::Strategy>();
  strategy->name = std::move(name);
  strategy->loc = loc;
  bool ok = true;

  for (SMLoc extra : decl.extraMeshLocs) {
    diags.error(extra, Twine("strategy '") + decl.name + "' declares a second mesh");
    diags.note(decl.mesh->loc, "the first mesh is here");
    ok = false;
  }
  if (decl.mesh) {
    strategy->hasMesh = true;
    StringMap<SMLoc> axisNames;
    for (const ast::MeshAxis &axisDecl : decl.mesh->axes) {
      ir::Axis axis;
      axis.name = axisDecl.name;
      axis.loc = axisDecl.nameLoc;
      if (!axisDecl.kind.empty()) {
        std::optional<ir::AxisKind> kind = parseAxisKind(axisDecl.kind);
        if (!kind) {
          diags.error(
              axisDecl.kindLoc,
              Twine("unknown axis kind '") + axisDecl.kind +
                  "': expected batch, tensor, layers, sequence or expert" +
                  didYouMean(axisDecl.kind, {"batch", "tensor", "layers", "sequence", "expert"}),
              "placement");
          ok = false;
          continue;
        }
        axis.kind = *kind;
      } else if (axisDecl.name == "dp") {
        axis.kind = ir::AxisKind::Batch;
      } else if (axisDecl.name == "tp") {
        axis.kind = ir::AxisKind::Tensor;
      } else if (axisDecl.name == "pp") {
        axis.kind = ir::AxisKind::Layers;
      } else if (axisDecl.name == "cp") {
        axis.kind = ir::AxisKind::Sequence;
      } else if (axisDecl.name == "ep") {
        axis.kind = ir::AxisKind::Expert;
      } else {
        diags.error(axisDecl.nameLoc,
                    Twine("axis '") + axisDecl.name + "' needs a kind: write '" + axisDecl.name +
                        ": batch = …' (or tensor, layers, sequence, expert); only dp, "
                        "tp, pp, cp and ep imply theirs",
                    "placement");
        ok = false;
        continue;
      }
      auto [it, inserted] = axisNames.try_emplace(axisDecl.name, axisDecl.nameLoc);
      if (!inserted) {
        diags.error(axisDecl.nameLoc,
                    Twine("axis '") + axisDecl.name + "' appears twice in the mesh", "mesh-size");
        diags.note(it->second, "first declared here");
        ok = false;
        continue;
      }
      std::optional<ParamValue> size =
          getParamCount(axisDecl.size, "axis size", env, /*allowAuto=*/false);
      if (!size) {
        ok = false;
        continue;
      }
      axis.size = size->value;
      strategy->mesh.axes.push_back(std::move(axis));
    }
    if (ok && strategy->mesh.getNumDevices() > kMaxDevices) {
      diags.error(decl.mesh->loc,
                  Twine("the mesh has more than ") + Twine(kMaxDevices) +
                      " devices, the most placec supports",
                  "mesh-size");
      ok = false;
    }
    unsigned layersAxes = 0;
    for (const ir::Axis &axis : strategy->mesh.axes)
      layersAxes += axis.kind == ir::AxisKind::Layers;
    if (layersAxes > 1) {
      diags.error(decl.mesh->loc, "a mesh may have at most one layers axis", "composition");
      ok = false;
    }
  }
  if (!ok)
    return nullptr;

  for (ir::StatePlacement &placement : strategy->placements)
    placement.axes.resize(strategy->mesh.axes.size());
  for (ir::StatePlacement &placement : strategy->expertPlacements)
    placement.axes.resize(strategy->mesh.axes.size());

  StringMap<SMLoc> statesSeen;
  for (const ast::Placement &placement : decl.placements) {
    auto [it, inserted] = statesSeen.try_emplace(placement.state, placement.stateLoc);
    if (!inserted) {
      diags.error(placement.stateLoc, Twine("'") + placement.state + "' is placed twice");
      diags.note(it->second, "first placed here");
      ok = false;
      continue;
    }
    ok &= bindPlacement(placement, *strategy);
  }

  for (size_t i = 0; i < decl.pipelines.size(); ++i) {
    if (i > 0) {
      diags.error(decl.pipelines[i].loc,
                  Twine("strategy '") + decl.name + "' has a second pipeline", "composition");
      diags.note(decl.pipelines[0].loc, "the first pipeline is here");
      ok = false;
      continue;
    }
    ok &= bindPipeline(decl.pipelines[i], env, *strategy);
  }
  if (!ok)
    return nullptr;

  bool hasLayersAxis = strategy->mesh.getDegree(ir::AxisKind::Layers) > 1 ||
                       llvm::any_of(strategy->mesh.axes, [](const ir::Axis &axis) {
                         return axis.kind == ir::AxisKind::Layers;
                       });
  if (strategy->pipeline && !hasLayersAxis) {
    diags.error(strategy->pipeline->loc,
                "a pipeline schedule needs a layers axis in the same strategy (for example "
                "'mesh [pp = 4]')",
                "composition");
    return nullptr;
  }
  if (hasLayersAxis && !strategy->pipeline) {
    ir::Pipeline pipeline;
    pipeline.loc = decl.nameLoc;
    strategy->pipeline = pipeline;
  }
  applyDefaults(*strategy);
  return strategy;
}

bool Sema::bindSetting(const ast::Placement &placement, ir::Strategy &strategy) {
  const ast::Mode *value = placement.modes.size() == 1 ? &placement.modes[0] : nullptr;
  bool plain = value && !value->hasParens && placement.tier.empty();
  // Sets `field` to the value among `choices` (spelled by ir::toString) and `loc` to where it is
  // written, or reports an error that lists them.
  auto choose = [&](auto choices, auto &field, llvm::SMLoc &loc, const Twine &what) {
    std::vector<std::string> names;
    for (auto choice : choices) {
      names.push_back(ir::toString(choice).str());
      if (plain && value->name == names.back()) {
        field = choice;
        loc = placement.stateLoc;
        return true;
      }
    }
    diags.error(value ? value->nameLoc : placement.stateLoc,
                what + (value ? didYouMean(value->name, names) : std::string()), "placement");
    return false;
  };
  if (placement.state == "context")
    return choose(std::array{ir::ContextMethod::Ring, ir::ContextMethod::AllGather,
                             ir::ContextMethod::AllToAll},
                  strategy.contextMethod, strategy.contextLoc,
                  "'context' takes ring, all_gather or all_to_all (how context-parallel attention "
                  "exchanges keys and values)");
  if (placement.state == "sp_inputs")
    return choose(
        std::array{ir::SequenceParallelInputs::Regather, ir::SequenceParallelInputs::Keep},
        strategy.sequenceParallelInputs, strategy.sequenceParallelInputsLoc,
        "'sp_inputs' takes regather (each column-parallel product keeps its sequence "
        "shard and gathers it again in the backward) or keep (it keeps the gathered "
        "input)");
  if (placement.state == "dp_overlap")
    return choose(
        std::array{ir::DataParallelOverlap::Grads, ir::DataParallelOverlap::All,
                   ir::DataParallelOverlap::None},
        strategy.dataParallelOverlap, strategy.dataParallelOverlapLoc,
        "'dp_overlap' takes grads (the step's gradient reductions beside the last backward), all "
        "(and the updated parameters' all-gathers beside the next forward) or none (both after "
        "the backward, exposed)");
  if (placement.state == "grad_reduce")
    return choose(std::array{ir::GradReduce::ReduceScatter, ir::GradReduce::AllReduce},
                  strategy.gradReduce, strategy.gradReduceLoc,
                  "'grad_reduce' takes reduce_scatter (each rank receives the summed gradients of "
                  "the optimizer shard it updates) or all_reduce (every rank receives the whole "
                  "sum)");
  if (placement.state == "ep_overlap")
    return choose(std::array{ir::ExpertOverlap::On, ir::ExpertOverlap::Off}, strategy.expertOverlap,
                  strategy.expertOverlapLoc,
                  "'ep_overlap' takes true (each micro-batch's expert all-to-alls beside another "
                  "micro-batch's compute) or false");
  if (placement.state == "expert_tensor")
    return choose(std::array{ir::ExpertTensor::Split, ir::ExpertTensor::Fold},
                  strategy.expertTensor, strategy.expertTensorLoc,
                  "'expert_tensor' takes split (each routed expert split over the tensor axes like "
                  "a dense MLP) or fold (whole experts, the tensor axes' devices joining the "
                  "expert group: Megatron-Core's --expert-tensor-parallel-size 1)");
  if (placement.state == "expert_context")
    return choose(std::array{ir::ExpertTensor::Split, ir::ExpertTensor::Fold},
                  strategy.expertContext, strategy.expertContextLoc,
                  "'expert_context' takes split (the sequence axes' devices hold the same routed "
                  "experts) or fold (their devices join the expert group, as Megatron-Core and "
                  "torchtitan form it under context parallelism)");
  if (placement.state == "dispatcher")
    return choose(std::array{ir::ExpertDispatcher::AllToAll, ir::ExpertDispatcher::DeepEP,
                             ir::ExpertDispatcher::HybridEP},
                  strategy.expertDispatcher, strategy.expertDispatcherLoc,
                  "'dispatcher' takes alltoall (one all-to-all over the expert group), deepep or "
                  "hybridep (Megatron-Core's flex dispatcher: each token sent once to each other "
                  "node that holds one of its experts, then over NVLink)");
  return choose(std::array{ir::AsyncTensorParallel::All, ir::AsyncTensorParallel::Off,
                           ir::AsyncTensorParallel::Forward,
                           ir::AsyncTensorParallel::WeightGradient},
                strategy.asyncTensorParallel, strategy.asyncTensorParallelLoc,
                "'async_tp' takes true (the collectives of both passes overlap their products), "
                "forward (those of the forward computation only), wgrad (the backward's "
                "input-gradient reductions beside the weight gradients) or false");
}

bool Sema::bindPlacement(const ast::Placement &placement, ir::Strategy &strategy) {
  if (placement.state == "context" || placement.state == "async_tp" ||
      placement.state == "sp_inputs" || placement.state == "dp_overlap" ||
      placement.state == "grad_reduce" || placement.state == "ep_overlap" ||
      placement.state == "dispatcher" || placement.state == "expert_tensor" ||
      placement.state == "expert_context")
    return bindSetting(placement, strategy);
  std::optional<ir::State> state;
  StringRef stateName = placement.state;
  // `expert_params`, `expert_grads`, `expert_optimizer`: the routed experts' states.
  bool expert = stateName.consume_front("expert_");
  if (stateName == "params")
    state = ir::State::Params;
  else if (stateName == "grads")
    state = ir::State::Grads;
  else if (stateName == "optimizer")
    state = ir::State::Optimizer;
  else if (stateName == "activations" && !expert)
    state = ir::State::Activations;
  if (!state) {
    diags.error(placement.stateLoc,
                Twine("unknown state '") + placement.state +
                    "': expected params, grads, optimizer or activations, their experts' "
                    "expert_params, expert_grads and expert_optimizer, or the settings context, "
                    "async_tp, sp_inputs, dp_overlap, grad_reduce, ep_overlap, dispatcher, "
                    "expert_tensor and expert_context" +
                    didYouMean(placement.state,
                               {"params", "grads", "optimizer", "activations", "expert_params",
                                "expert_grads", "expert_optimizer", "mesh", "pipeline", "context",
                                "async_tp", "sp_inputs", "dp_overlap", "grad_reduce", "ep_overlap",
                                "dispatcher", "expert_tensor", "expert_context"}));
    return false;
  }
  ir::StatePlacement &target =
      expert ? strategy.getExpertPlacement(*state) : strategy.getPlacement(*state);
  target.loc = placement.stateLoc;
  bool ok = true;
  if (expert && !placement.tier.empty()) {
    diags.error(placement.tierLoc,
                Twine("'") + placement.state +
                    "' takes no tier: the experts' states live where the dense ones do; write "
                    "the tier on '" +
                    stateName + "'",
                "placement");
    return false;
  }
  if (!placement.tier.empty()) {
    if (placement.tier == "device")
      target.tier = ir::Tier::Device;
    else if (placement.tier == "host")
      target.tier = ir::Tier::Host;
    else if (placement.tier == "nvme")
      target.tier = ir::Tier::Nvme;
    else {
      diags.error(placement.tierLoc, Twine("unknown memory tier '") + placement.tier +
                                         "': expected device, host or nvme" +
                                         didYouMean(placement.tier, {"device", "host", "nvme"}));
      ok = false;
    }
    target.tierExplicit = true;
    target.tierLoc = placement.tierLoc;
  }
  if (*state == ir::State::Activations)
    return bindActivations(placement, strategy) && ok;

  for (const ast::Mode &mode : placement.modes) {
    std::optional<ir::PlacementMode> kind;
    if (mode.name == "replicate")
      kind = ir::PlacementMode::Replicated;
    else if (mode.name == "shard")
      kind = ir::PlacementMode::Sharded;
    else if (mode.name == "gather")
      kind = ir::PlacementMode::ShardedWithGather;
    if (!kind) {
      if (mode.name == "keep" || mode.name == "recompute")
        diags.error(mode.nameLoc,
                    Twine("'") + mode.name + "' applies to activations only; " + placement.state +
                        " take replicate, shard or gather",
                    "placement");
      else
        diags.error(mode.nameLoc,
                    Twine("unknown placement mode '") + mode.name +
                        "': expected replicate, shard or gather" +
                        didYouMean(mode.name, {"replicate", "shard", "gather"}),
                    "placement");
      ok = false;
      continue;
    }
    if (!strategy.hasMesh) {
      diags.error(mode.nameLoc,
                  "a strategy without a mesh sets only tiers and activation "
                  "modes: write for example '" +
                      placement.state + " = @ host'",
                  "composition");
      ok = false;
      continue;
    }
    if (*kind == ir::PlacementMode::ShardedWithGather && *state != ir::State::Params) {
      diags.error(mode.nameLoc,
                  Twine("'gather' applies to params only: ") +
                      (*state == ir::State::Grads ? "gradients are" : "optimizer state is") +
                      " never gathered for use; write 'shard' instead",
                  "placement");
      ok = false;
      continue;
    }
    bool keepAfterForward = false;
    SmallVector<const ast::Arg *, 2> axisArgs;
    for (const ast::Arg &arg : mode.args) {
      if (arg.key.empty()) {
        axisArgs.push_back(&arg);
        continue;
      }
      if (arg.key == "keep_after_forward" && *kind == ir::PlacementMode::ShardedWithGather) {
        std::optional<bool> value = getBool(*arg.value, "keep_after_forward");
        ok &= value.has_value();
        keepAfterForward = value.value_or(false);
        continue;
      }
      diags.error(arg.keyLoc,
                  Twine("'") + mode.name + "' has no option '" + arg.key + "'" +
                      (*kind == ir::PlacementMode::ShardedWithGather
                           ? "; its option is keep_after_forward"
                           : ""),
                  "placement");
      ok = false;
    }
    if (axisArgs.empty()) {
      diags.error(mode.nameLoc,
                  Twine("'") + mode.name + "' needs the axes it applies to: write '" + mode.name +
                      "(" + (strategy.mesh.axes.empty() ? "dp" : strategy.mesh.axes[0].name) + ")'",
                  "placement");
      ok = false;
      continue;
    }
    for (const ast::Arg *arg : axisArgs) {
      const ast::Value &value = *arg->value;
      if (value.kind != ast::Value::Kind::Name) {
        diags.error(value.getLoc(),
                    Twine("expected an axis name in '") + mode.name + "(…)', found '" +
                        spell(value) + "'",
                    "placement");
        ok = false;
        continue;
      }
      int index = strategy.mesh.findAxis(value.text);
      if (index < 0) {
        std::vector<std::string> names;
        std::string list;
        for (const ir::Axis &axis : strategy.mesh.axes) {
          names.push_back(axis.name);
          list += (list.empty() ? "" : ", ") + axis.name;
        }
        diags.error(value.getLoc(),
                    Twine("unknown axis '") + value.text + "' in the placement of " +
                        placement.state + "; the mesh has " +
                        (list.empty() ? std::string("no axes") : list) +
                        didYouMean(value.text, names),
                    "placement");
        ok = false;
        continue;
      }
      const ir::Axis &axis = strategy.mesh.axes[index];
      ir::AxisPlacement &slot = target.axes[index];
      if (slot.isExplicit) {
        diags.error(value.getLoc(),
                    Twine("axis '") + value.text + "' is placed twice in " + placement.state,
                    "placement");
        diags.note(slot.loc, "first placed here");
        ok = false;
        continue;
      }
      if (axis.kind == ir::AxisKind::Layers) {
        diags.error(value.getLoc(),
                    Twine("'") + axis.name +
                        "' is a layers axis: every state is split by pipeline "
                        "stage on it, so it takes no mode",
                    "placement");
        ok = false;
        continue;
      }
      if (axis.kind == ir::AxisKind::Expert && expert && *kind != ir::PlacementMode::Sharded) {
        diags.error(value.getLoc(),
                    Twine("'") + mode.name + "(" + axis.name + ")' is not allowed: '" + axis.name +
                        "' is an expert axis, which splits the routed experts among its devices "
                        "and never gathers them; leave it out or write 'shard(" +
                        axis.name + ")'",
                    "placement");
        ok = false;
        continue;
      }
      if (axis.kind == ir::AxisKind::Tensor && *kind != ir::PlacementMode::Sharded) {
        diags.error(value.getLoc(),
                    Twine("'") + mode.name + "(" + axis.name + ")' is not allowed: '" + axis.name +
                        "' is a tensor axis, which splits " + placement.state +
                        " by each tensor's tensor-parallel kind; leave it out or "
                        "write 'shard(" +
                        axis.name + ")'",
                    "placement");
        ok = false;
        continue;
      }
      slot.mode = axis.kind == ir::AxisKind::Tensor ? ir::PlacementMode::TensorSplit : *kind;
      slot.keepAfterForward = keepAfterForward;
      slot.isExplicit = true;
      slot.loc = value.getLoc();
    }
  }
  return ok;
}

std::optional<unsigned> Sema::getRecomputeModules(const ast::Mode &mode) {
  unsigned modules = 0;
  std::string known;
  for (const auto &[module, name] : ir::getRecomputeModuleNames())
    known += (known.empty() ? "" : ", ") + name.str();
  for (const ast::Arg &arg : mode.args) {
    SMLoc loc = arg.key.empty() ? arg.value->getLoc() : arg.keyLoc;
    if (!arg.key.empty() || arg.value->kind != ast::Value::Kind::Name) {
      diags.error(loc,
                  "'recompute' with Megatron-Core's modules takes their names only (" + known +
                      "), not '" + (arg.key.empty() ? arg.value->text : arg.key) + "'",
                  "placement");
      return std::nullopt;
    }
    StringRef name = arg.value->text;
    if (ir::isUndescribedRecomputeModule(name)) {
      diags.error(
          loc,
          "Megatron-Core's '" + name + "' recomputation (a checkpoint of the whole " +
              (name == "moe" ? "MoE layer, its all-to-alls included" : "shared experts' MLP") +
              ") is not one placec describes; it describes " + known,
          "placement");
      return std::nullopt;
    }
    std::optional<ir::RecomputeModule> module = ir::findRecomputeModule(name);
    if (!module) {
      diags.error(loc,
                  "'" + name + "' is not a Megatron-Core module 'recompute' names (" + known +
                      "); its other forms are 'recompute', 'recompute(selective)', "
                      "'recompute(attention)', 'recompute(op)' and 'recompute(layers = n)'",
                  "placement");
      return std::nullopt;
    }
    if (modules & *module) {
      diags.error(loc, "'" + name + "' is named twice", "placement");
      return std::nullopt;
    }
    modules |= *module;
  }
  return modules;
}

bool Sema::bindActivations(const ast::Placement &placement, ir::Strategy &strategy) {
  ir::StatePlacement &target = strategy.getPlacement(ir::State::Activations);
  bool ok = true;
  SMLoc modeLoc;
  for (const ast::Mode &mode : placement.modes) {
    if (mode.name == "keep" || mode.name == "recompute") {
      ir::ActivationMode activationMode = ir::ActivationMode::Keep;
      int64_t recomputeLayers = 0;
      unsigned recomputeModules = 0;
      if (mode.name == "recompute") {
        activationMode = ir::ActivationMode::RecomputeFull;
        // recompute[(full | selective | op)], recompute([full,] layers = n), or Megatron-Core's
        // modules: recompute(core_attn, moe_act, …).
        const ast::Arg *kindArg = nullptr, *layersArg = nullptr;
        bool argsOk = true;
        auto isModuleArg = [](const ast::Arg &arg) {
          if (!arg.key.empty() || arg.value->kind != ast::Value::Kind::Name)
            return false;
          StringRef name = arg.value->text;
          return ir::isUndescribedRecomputeModule(name) || ir::findRecomputeModule(name);
        };
        if (!mode.args.empty() && isModuleArg(mode.args.front())) {
          std::optional<unsigned> modules = getRecomputeModules(mode);
          if (!modules) {
            ok = false;
            continue;
          }
          activationMode = *modules == ir::kRecomputeCoreAttention
                               ? ir::ActivationMode::RecomputeAttention
                               : ir::ActivationMode::RecomputeModules;
          recomputeModules = *modules;
        }
        for (const ast::Arg &arg : recomputeModules ? ArrayRef<ast::Arg>() : ArrayRef(mode.args)) {
          if (arg.key.empty() && !kindArg && !layersArg)
            kindArg = &arg;
          else if (arg.key == "layers" && !layersArg)
            layersArg = &arg;
          else {
            diags.error(arg.key.empty() ? arg.value->getLoc() : arg.keyLoc,
                        arg.key.empty() || arg.key == "layers"
                            ? "'recompute' takes one kind and at most one 'layers = n': write "
                              "'recompute', 'recompute(selective)', 'recompute(attention)', "
                              "'recompute(op)', 'recompute(full)' or 'recompute(layers = n)'"
                            : "unknown argument '" + arg.key +
                                  "' of 'recompute': it takes 'layers = n' (recompute the "
                                  "first n layers of each model chunk)",
                        "placement");
            argsOk = false;
            break;
          }
        }
        if (argsOk && kindArg &&
            (kindArg->value->kind != ast::Value::Kind::Name ||
             (kindArg->value->text != "selective" && kindArg->value->text != "full" &&
              kindArg->value->text != "op" && kindArg->value->text != "attention"))) {
          diags.error(kindArg->value->getLoc(),
                      "'recompute' takes 'selective', 'attention', 'op' or 'full': write "
                      "'recompute', 'recompute(selective)', 'recompute(attention)', "
                      "'recompute(op)', 'recompute(full)' or 'recompute(layers = n)'",
                      "placement");
          argsOk = false;
        }
        if (argsOk && kindArg && kindArg->value->text == "selective")
          activationMode = ir::ActivationMode::RecomputeSelective;
        else if (argsOk && kindArg && kindArg->value->text == "op")
          activationMode = ir::ActivationMode::RecomputeOps;
        else if (argsOk && kindArg && kindArg->value->text == "attention")
          activationMode = ir::ActivationMode::RecomputeAttention;
        if (argsOk && layersArg) {
          if (activationMode != ir::ActivationMode::RecomputeFull) {
            diags.error(layersArg->keyLoc,
                        Twine("'layers = n' recomputes whole layers; 'recompute(") +
                            kindArg->value->text +
                            ")' applies to every layer: write 'recompute(layers = n)'",
                        "placement");
            argsOk = false;
          } else if (std::optional<int64_t> n = getCount(*layersArg->value, "layers", 1,
                                                         std::numeric_limits<int32_t>::max())) {
            recomputeLayers = *n;
          } else {
            argsOk = false;
          }
        }
        if (!argsOk) {
          ok = false;
          continue;
        }
      } else if (mode.hasParens) {
        diags.error(mode.nameLoc, "'keep' takes no arguments", "placement");
        ok = false;
        continue;
      }
      if (modeLoc.isValid()) {
        diags.error(mode.nameLoc,
                    "activations have two modes; choose one of keep, recompute, "
                    "recompute(selective) and recompute(op)",
                    "placement");
        diags.note(modeLoc, "the first is here");
        ok = false;
        continue;
      }
      modeLoc = mode.nameLoc;
      strategy.activationMode = activationMode;
      strategy.recomputeLayers = recomputeLayers;
      strategy.recomputeModules =
          activationMode == ir::ActivationMode::RecomputeModules ? recomputeModules : 0;
      strategy.activationModeLoc = mode.nameLoc;
      continue;
    }
    if (mode.name != "shard") {
      diags.error(mode.nameLoc,
                  Twine("'") + mode.name +
                      "' does not apply to activations: they take keep, recompute, "
                      "recompute(selective), recompute(op) and shard(t) over a tensor axis",
                  "placement");
      ok = false;
      continue;
    }
    if (!strategy.hasMesh) {
      diags.error(mode.nameLoc, "a strategy without a mesh sets only tiers and activation modes",
                  "composition");
      ok = false;
      continue;
    }
    if (mode.args.empty()) {
      diags.error(mode.nameLoc, "'shard' needs the tensor axis it applies to: write 'shard(tp)'",
                  "placement");
      ok = false;
      continue;
    }
    for (const ast::Arg &arg : mode.args) {
      const ast::Value &value = *arg.value;
      int index = value.kind == ast::Value::Kind::Name && arg.key.empty()
                      ? strategy.mesh.findAxis(value.text)
                      : -1;
      if (index < 0) {
        std::vector<std::string> names;
        std::string list;
        for (const ir::Axis &axis : strategy.mesh.axes) {
          names.push_back(axis.name);
          list += (list.empty() ? "" : ", ") + axis.name;
        }
        diags.error(value.getLoc(),
                    Twine("unknown axis '") + spell(value) +
                        "' in the placement of activations; the mesh has " +
                        (list.empty() ? std::string("no axes") : list) +
                        didYouMean(spell(value), names),
                    "placement");
        ok = false;
        continue;
      }
      const ir::Axis &axis = strategy.mesh.axes[index];
      if (axis.kind != ir::AxisKind::Tensor) {
        diags.error(value.getLoc(),
                    Twine("activations are always split ") +
                        (axis.kind == ir::AxisKind::Batch || axis.kind == ir::AxisKind::Expert
                             ? "by the batch"
                         : axis.kind == ir::AxisKind::Sequence ? "along the sequence"
                                                               : "by pipeline stage") +
                        " over '" + axis.name +
                        "', which takes no mode; 'shard' on activations means "
                        "sequence parallelism over a tensor axis",
                    "placement");
        ok = false;
        continue;
      }
      target.axes[index].mode = ir::PlacementMode::Sharded;
      target.axes[index].isExplicit = true;
      target.axes[index].loc = value.getLoc();
      strategy.sequenceParallel = true;
    }
  }
  return ok;
}

bool Sema::bindPipeline(const ast::PipelineSpec &spec, const ParamEnv &env,
                        ir::Strategy &strategy) {
  ir::Pipeline pipeline;
  pipeline.loc = spec.loc;
  static const std::vector<std::string> schedules = {
      "1f1b", "gpipe", "interleaved", "zero_bubble", "zbv", "dualpipe", "dualpipev"};
  if (spec.schedule == "1f1b")
    pipeline.schedule = ir::Schedule::OneFOneB;
  else if (spec.schedule == "gpipe")
    pipeline.schedule = ir::Schedule::GPipe;
  else if (spec.schedule == "interleaved")
    pipeline.schedule = ir::Schedule::Interleaved;
  else if (spec.schedule == "zero_bubble")
    pipeline.schedule = ir::Schedule::ZeroBubble;
  else if (spec.schedule == "zbv")
    pipeline.schedule = ir::Schedule::ZeroBubbleV;
  else if (spec.schedule == "dualpipe")
    pipeline.schedule = ir::Schedule::DualPipe;
  else if (spec.schedule == "dualpipev")
    pipeline.schedule = ir::Schedule::DualPipeV;
  else {
    diags.error(spec.scheduleLoc, Twine("unknown pipeline schedule '") + spec.schedule +
                                      "': expected 1f1b, gpipe, interleaved, zero_bubble, zbv, "
                                      "dualpipe or dualpipev" +
                                      didYouMean(spec.schedule, schedules));
    return false;
  }
  // The V-shaped schedules hold two model chunks per stage.
  if (pipeline.schedule == ir::Schedule::ZeroBubbleV ||
      pipeline.schedule == ir::Schedule::DualPipeV)
    pipeline.chunks = 2;
  bool ok = true;
  bool sawChunks = false;
  StringSet<> seen;
  for (const ast::Arg &arg : spec.args) {
    SMLoc loc = arg.key.empty() ? arg.value->getLoc() : arg.keyLoc;
    StringRef key = arg.key.empty() ? StringRef("microbatches") : StringRef(arg.key);
    if (!seen.insert(key).second) {
      diags.error(loc, Twine("'") + key + "' is given twice");
      ok = false;
      continue;
    }
    if (key == "microbatches") {
      std::optional<ParamValue> value =
          getParamCount(*arg.value, "microbatches", env, /*allowAuto=*/true);
      if (!value) {
        ok = false;
        continue;
      }
      if (!value->isAuto)
        pipeline.microbatches = value->value;
    } else if ((key == "chunks" || key == "group") &&
               pipeline.schedule == ir::Schedule::Interleaved) {
      std::optional<ParamValue> value = getParamCount(*arg.value, key, env, false);
      if (!value) {
        ok = false;
        continue;
      }
      if (key == "chunks") {
        pipeline.chunks = value->value;
        sawChunks = true;
      } else {
        pipeline.group = value->value;
        pipeline.groupLoc = loc;
      }
    } else if ((key == "first" || key == "last") && pipeline.chunks == 1 &&
               pipeline.schedule != ir::Schedule::Interleaved) {
      std::optional<ParamValue> value = getParamCount(*arg.value, key, env, false);
      if (!value) {
        ok = false;
        continue;
      }
      (key == "first" ? pipeline.firstStageLayers : pipeline.lastStageLayers) = value->value;
    } else if (key == "layout" && (pipeline.schedule == ir::Schedule::OneFOneB ||
                                   pipeline.schedule == ir::Schedule::Interleaved)) {
      if (arg.value->kind != ast::Value::Kind::String) {
        diags.error(arg.value->getLoc(),
                    "'layout' is Megatron-Core's pipeline layout as a string, such as "
                    "layout = \"Et*4|(t*4|)*14tmL\"");
        ok = false;
        continue;
      }
      std::string error;
      size_t offset = 0;
      std::optional<ir::PipelineLayoutSpec> layout =
          ir::parsePipelineLayout(arg.value->text, error, offset);
      if (!layout) {
        // The byte at fault, after the opening quote.
        diags.error(SMLoc::getFromPointer(arg.value->getLoc().getPointer() + 1 + offset),
                    "pipeline layout: " + error);
        ok = false;
        continue;
      }
      pipeline.layout = std::move(*layout);
      pipeline.layout.loc = arg.value->getLoc();
    } else if (key == "embedding_layer" || key == "loss_layer") {
      std::optional<bool> value = getBool(*arg.value, key);
      if (!value) {
        ok = false;
        continue;
      }
      (key == "embedding_layer" ? pipeline.embeddingLayer : pipeline.lossLayer) = *value;
    } else if (key == "sends") {
      std::optional<std::string> value = getChoice(*arg.value, key, {"whole", "scatter"});
      if (!value) {
        ok = false;
        continue;
      }
      pipeline.scatterSends = *value == "scatter";
    } else {
      StringRef options =
          pipeline.schedule == ir::Schedule::Interleaved
              ? "microbatches, chunks, group (the micro-batches each chunk runs in a row), layout "
                "(Megatron-Core's pipeline layout), embedding_layer, loss_layer and sends"
          : pipeline.chunks > 1 ? "microbatches, embedding_layer, loss_layer and sends"
          : pipeline.schedule == ir::Schedule::OneFOneB
              ? "microbatches, first and last (the layers of the first and last stages), layout "
                "(Megatron-Core's pipeline layout), embedding_layer, loss_layer and sends"
              : "microbatches, first and last (the layers of the first and last stages), "
                "embedding_layer, loss_layer and sends";
      diags.error(loc, Twine("pipeline schedule '") + spec.schedule + "' has no option '" + key +
                           "'; its options are " + options);
      ok = false;
    }
  }
  // Megatron-Core refuses the two ways of evening out the edge stages together.
  if (ok && (pipeline.embeddingLayer || pipeline.lossLayer) &&
      (pipeline.firstStageLayers || pipeline.lastStageLayers)) {
    diags.error(spec.scheduleLoc,
                "'first' and 'last' give the edge stages their layers, 'embedding_layer' and "
                "'loss_layer' count the embedding and the loss as layers of an even split; "
                "write one or the other");
    ok = false;
  }
  // A layout gives every virtual stage its layers, which the other ways of splitting would
  // contradict.
  if (ok && !pipeline.layout.empty() &&
      (pipeline.firstStageLayers || pipeline.lastStageLayers || pipeline.embeddingLayer ||
       pipeline.lossLayer)) {
    diags.error(pipeline.layout.loc,
                Twine("'layout' places every layer, the embedding and the loss itself; drop '") +
                    (pipeline.firstStageLayers  ? "first"
                     : pipeline.lastStageLayers ? "last"
                     : pipeline.embeddingLayer  ? "embedding_layer"
                                                : "loss_layer") +
                    "'");
    ok = false;
  }
  if (ok && pipeline.schedule == ir::Schedule::Interleaved && !sawChunks) {
    diags.error(spec.scheduleLoc, "an interleaved schedule needs 'chunks', the number of model "
                                  "chunks per stage: write 'interleaved(microbatches = 16, "
                                  "chunks = 2)'");
    ok = false;
  }
  if (ok && pipeline.group > 0 && pipeline.chunks <= 1) {
    diags.error(pipeline.groupLoc, "'group' is the micro-batches each model chunk runs in a row; "
                                   "with one chunk per stage the schedule is 1F1B and has none");
    ok = false;
  }
  if (ok && pipeline.chunks > 1 && (pipeline.firstStageLayers || pipeline.lastStageLayers)) {
    diags.error(spec.scheduleLoc,
                Twine("'first' and 'last' apply to schedules with one model chunk per stage; ") +
                    spec.schedule + " has " + Twine(pipeline.chunks));
    ok = false;
  }
  if (ok)
    strategy.pipeline = pipeline;
  return ok;
}

void Sema::applyDefaults(ir::Strategy &strategy) {
  for (ir::State state : ir::kAllStates) {
    ir::StatePlacement &placement = strategy.getPlacement(state);
    placement.axes.resize(strategy.mesh.axes.size());
    for (size_t i = 0; i < strategy.mesh.axes.size(); ++i) {
      ir::AxisPlacement &slot = placement.axes[i];
      if (slot.isExplicit)
        continue;
      switch (strategy.mesh.axes[i].kind) {
      case ir::AxisKind::Batch:
        slot.mode = state == ir::State::Activations ? ir::PlacementMode::BatchSplit
                                                    : ir::PlacementMode::Replicated;
        break;
      case ir::AxisKind::Tensor:
        slot.mode = ir::PlacementMode::TensorSplit;
        break;
      case ir::AxisKind::Layers:
        slot.mode = ir::PlacementMode::StageSplit;
        break;
      case ir::AxisKind::Sequence:
        slot.mode = state == ir::State::Activations ? ir::PlacementMode::SequenceSplit
                                                    : ir::PlacementMode::Replicated;
        break;
      case ir::AxisKind::Expert:
        // Dense tensors see an expert axis as a batch axis.
        slot.mode = state == ir::State::Activations ? ir::PlacementMode::BatchSplit
                                                    : ir::PlacementMode::Replicated;
        break;
      }
    }
  }
  ir::resolveExpertPlacements(strategy);
}

std::unique_ptr<ir::Strategy> Sema::compose(ArrayRef<const ir::Strategy *> operands,
                                            ArrayRef<SMLoc> operandLocs, std::string name,
                                            SMLoc loc) {
  auto result = std::make_unique<ir::Strategy>();
  result->name = std::move(name);
  result->loc = loc;
  bool ok = true;
  StringMap<size_t> axisOwner;
  std::optional<size_t> layersOwner, pipelineOwner, activationOwner, contextOwner, asyncTpOwner,
      spInputsOwner, dpOverlapOwner, gradReduceOwner, epOverlapOwner, dispatcherOwner,
      expertTensorOwner, expertContextOwner;
  std::array<std::optional<size_t>, ir::kNumStates> tierOwner;
  // A setting written like a placement (`async_tp`, `sp_inputs`, `dp_overlap`, `ep_overlap`): the
  // first operand that writes it sets it, and another that writes a different value is an error.
  auto agreeOn = [&](size_t i, std::optional<size_t> &owner, auto ir::Strategy::*value,
                     llvm::SMLoc ir::Strategy::*loc, StringRef name) {
    const ir::Strategy &operand = *operands[i];
    if (!(operand.*loc).isValid())
      return;
    if (owner && operands[*owner]->*value != operand.*value) {
      diags.error(operandLocs[i], "the operands of '*' disagree on " + name, "composition");
      diags.note(operandLocs[*owner], Twine("'") + operands[*owner]->name + "' sets it");
      ok = false;
    } else if (!owner) {
      owner = i;
      result.get()->*value = operand.*value;
      result.get()->*loc = operand.*loc;
    }
  };

  for (size_t i = 0; i < operands.size(); ++i) {
    const ir::Strategy &operand = *operands[i];
    result->hasMesh |= operand.hasMesh;
    for (const ir::Axis &axis : operand.mesh.axes) {
      auto [it, inserted] = axisOwner.try_emplace(axis.name, i);
      if (!inserted) {
        diags.error(operandLocs[i],
                    Twine("the operands of '*' overlap: both name axis '") + axis.name + "'",
                    "composition");
        diags.note(operandLocs[it->second],
                   Twine("'") + operands[it->second]->name + "' has axis '" + axis.name + "'");
        diags.note(operandLocs[i], Twine("'") + operand.name + "' has axis '" + axis.name + "'");
        ok = false;
        continue;
      }
      if (axis.kind == ir::AxisKind::Layers) {
        if (layersOwner) {
          diags.error(operandLocs[i],
                      "the composition has two layers axes; a strategy pipelines "
                      "over at most one",
                      "composition");
          diags.note(operandLocs[*layersOwner],
                     Twine("'") + operands[*layersOwner]->name + "' has a layers axis");
          diags.note(operandLocs[i], Twine("'") + operand.name + "' has a layers axis");
          ok = false;
          continue;
        }
        layersOwner = i;
      }
    }
    // A pipeline comes with its layers axis, so two pipelines are two layers axes (above).
    if (operand.pipeline && !pipelineOwner)
      pipelineOwner = i;
    if (operand.activationModeLoc.isValid()) {
      auto modeText = [](const ir::Strategy &x) {
        return ir::getActivationModeText(x.activationMode, x.recomputeLayers, x.recomputeModules);
      };
      if (activationOwner && modeText(*operands[*activationOwner]) != modeText(operand)) {
        diags.error(operandLocs[i],
                    Twine("the operands of '*' disagree on activations: '") +
                        modeText(*operands[*activationOwner]) + "' and '" + modeText(operand) + "'",
                    "composition");
        diags.note(operandLocs[*activationOwner], Twine("'") + operands[*activationOwner]->name +
                                                      "' sets '" +
                                                      modeText(*operands[*activationOwner]) + "'");
        diags.note(operandLocs[i],
                   Twine("'") + operand.name + "' sets '" + modeText(operand) + "'");
        ok = false;
      } else if (!activationOwner) {
        activationOwner = i;
        result->activationMode = operand.activationMode;
        result->recomputeLayers = operand.recomputeLayers;
        result->recomputeModules = operand.recomputeModules;
        result->activationModeLoc = operand.activationModeLoc;
      }
    }
    result->sequenceParallel |= operand.sequenceParallel;
    if (operand.contextLoc.isValid()) {
      if (contextOwner && operands[*contextOwner]->contextMethod != operand.contextMethod) {
        diags.error(operandLocs[i],
                    Twine("the operands of '*' disagree on the context exchange: '") +
                        ir::toString(operands[*contextOwner]->contextMethod) + "' and '" +
                        ir::toString(operand.contextMethod) + "'",
                    "composition");
        diags.note(operandLocs[*contextOwner],
                   Twine("'") + operands[*contextOwner]->name + "' sets '" +
                       ir::toString(operands[*contextOwner]->contextMethod) + "'");
        ok = false;
      } else if (!contextOwner) {
        contextOwner = i;
        result->contextMethod = operand.contextMethod;
        result->contextLoc = operand.contextLoc;
      }
    }
    agreeOn(i, asyncTpOwner, &ir::Strategy::asyncTensorParallel,
            &ir::Strategy::asyncTensorParallelLoc, "async_tp");
    agreeOn(i, spInputsOwner, &ir::Strategy::sequenceParallelInputs,
            &ir::Strategy::sequenceParallelInputsLoc, "sp_inputs");
    agreeOn(i, dpOverlapOwner, &ir::Strategy::dataParallelOverlap,
            &ir::Strategy::dataParallelOverlapLoc, "dp_overlap");
    agreeOn(i, gradReduceOwner, &ir::Strategy::gradReduce, &ir::Strategy::gradReduceLoc,
            "grad_reduce");
    agreeOn(i, epOverlapOwner, &ir::Strategy::expertOverlap, &ir::Strategy::expertOverlapLoc,
            "ep_overlap");
    agreeOn(i, dispatcherOwner, &ir::Strategy::expertDispatcher, &ir::Strategy::expertDispatcherLoc,
            "dispatcher");
    agreeOn(i, expertTensorOwner, &ir::Strategy::expertTensor, &ir::Strategy::expertTensorLoc,
            "expert_tensor");
    agreeOn(i, expertContextOwner, &ir::Strategy::expertContext, &ir::Strategy::expertContextLoc,
            "expert_context");
    for (ir::State state : ir::kAllStates) {
      const ir::StatePlacement &from = operand.getPlacement(state);
      ir::StatePlacement &to = result->getPlacement(state);
      unsigned index = static_cast<unsigned>(state);
      if (from.tierExplicit) {
        if (tierOwner[index] && to.tier != from.tier) {
          diags.error(operandLocs[i],
                      Twine("the operands of '*' disagree on the tier of ") + ir::toString(state) +
                          ": '" + ir::toString(to.tier) + "' and '" + ir::toString(from.tier) + "'",
                      "composition");
          diags.note(operandLocs[*tierOwner[index]],
                     Twine("'") + operands[*tierOwner[index]]->name + "' places " +
                         ir::toString(state) + " @ " + ir::toString(to.tier));
          diags.note(operandLocs[i], Twine("'") + operand.name + "' places " + ir::toString(state) +
                                         " @ " + ir::toString(from.tier));
          ok = false;
        } else if (!tierOwner[index]) {
          tierOwner[index] = i;
          to.tier = from.tier;
          to.tierExplicit = true;
          to.tierLoc = from.tierLoc;
        }
      }
      if (!to.loc.isValid())
        to.loc = from.loc;
      ir::StatePlacement &toExpert = result->getExpertPlacement(state);
      if (!toExpert.loc.isValid())
        toExpert.loc = operand.getExpertPlacement(state).loc;
    }
  }
  if (!ok)
    return nullptr;

  // Concatenate meshes and per-axis modes in operand order.
  for (const ir::Strategy *operand : operands) {
    for (size_t a = 0; a < operand->mesh.axes.size(); ++a) {
      result->mesh.axes.push_back(operand->mesh.axes[a]);
      for (ir::State state : ir::kAllStates) {
        result->getPlacement(state).axes.push_back(operand->getPlacement(state).axes[a]);
        result->getExpertPlacement(state).axes.push_back(
            operand->getExpertPlacement(state).axes[a]);
      }
    }
  }
  if (result->mesh.getNumDevices() > kMaxDevices) {
    diags.error(loc,
                Twine("the composed mesh has more than ") + Twine(kMaxDevices) +
                    " devices, the most placec supports",
                "mesh-size");
    return nullptr;
  }
  if (pipelineOwner)
    result->pipeline = operands[*pipelineOwner]->pipeline;
  applyDefaults(*result);
  return result;
}

//===----------------------------------------------------------------------===//
// Runs
//===----------------------------------------------------------------------===//

void Sema::buildRun(const ast::RunDecl &decl) {
  static const std::vector<std::string> keys = {
      "model",     "cluster",      "strategy",      "micro_batch",     "global_batch",
      "precision", "optimizer",    "measured_step", "measured_memory", "cross_entropy",
      "kernels",   "param_gather", "train_metrics", "context_merge",   "grad_accumulation"};
  auto fields = collectFields(decl, "a run", keys);
  bool ok = requireFields(decl, "run", fields,
                          {"model", "cluster", "strategy", "micro_batch", "global_batch"});
  auto run = std::make_unique<ir::Run>();
  run->name = decl.name;
  run->loc = decl.nameLoc;
  for (const ast::Field &field : decl.fields)
    run->fieldLocs.try_emplace(field.key, field.keyLoc);

  auto nameOf = [&](StringRef key) -> std::optional<std::string> {
    const ast::Field *field = fields.lookup(key);
    if (!field)
      return std::nullopt;
    if (field->value.kind != ast::Value::Kind::Name) {
      diags.error(field->value.getLoc(), Twine("'") + key + "' must name a " + key + ", found " +
                                             kindNoun(field->value.kind) + " '" +
                                             spell(field->value) + "'");
      ok = false;
      return std::nullopt;
    }
    return field->value.text;
  };

  if (std::optional<std::string> name = nameOf("model")) {
    const ast::ModelDecl *modelDecl =
        lookup(modelDecls, *name, fields["model"]->value.getLoc(), "model");
    run->model = modelDecl ? models.lookup(*name) : nullptr;
    ok &= run->model != nullptr;
  }
  if (std::optional<std::string> name = nameOf("cluster")) {
    const ast::ClusterDecl *clusterDecl =
        lookup(clusterDecls, *name, fields["cluster"]->value.getLoc(), "cluster");
    run->cluster = clusterDecl ? clusters.lookup(*name) : nullptr;
    ok &= run->cluster != nullptr;
  }
  if (const ast::Field *field = fields.lookup("strategy")) {
    const ast::Value &value = field->value;
    if (value.kind == ast::Value::Kind::Name || value.kind == ast::Value::Kind::Call) {
      run->strategy = resolveTerm(value.text, value.getLoc(), value.kind == ast::Value::Kind::Call,
                                  value.args, ParamEnv());
      if (run->strategy && !run->strategy->hasMesh) {
        diags.error(value.getLoc(),
                    Twine("strategy '") + run->strategy->name +
                        "' has no mesh; compose it with one, for example '" + run->strategy->name +
                        " * zero3(dp = 8)'",
                    "composition");
        run->strategy = nullptr;
      }
    } else {
      diags.error(value.getLoc(), Twine("'strategy' must name a strategy, found ") +
                                      kindNoun(value.kind) + " '" + spell(value) + "'");
    }
    ok &= run->strategy != nullptr;
  }
  if (const ast::Field *field = fields.lookup("micro_batch")) {
    std::optional<int64_t> value = getCount(field->value, "micro_batch");
    ok &= value.has_value();
    run->microBatch = value.value_or(0);
  }
  if (const ast::Field *field = fields.lookup("global_batch")) {
    std::optional<int64_t> value = getCount(field->value, "global_batch");
    ok &= value.has_value();
    run->globalBatch = value.value_or(0);
  }
  if (const ast::Field *field = fields.lookup("precision")) {
    const ast::Value &value = field->value;
    if (value.kind == ast::Value::Kind::Name && value.text == "fp32") {
      run->precision = ir::Precision::FP32;
    } else if (value.kind == ast::Value::Kind::Call && value.text == "mixed" &&
               !value.args.empty() && value.args[0].key.empty() &&
               value.args[0].value->kind == ast::Value::Kind::Name &&
               (value.args[0].value->text == "bf16" || value.args[0].value->text == "fp16" ||
                value.args[0].value->text == "fp8" || value.args[0].value->text == "fp4")) {
      StringRef type = value.args[0].value->text;
      run->precision = type == "bf16"   ? ir::Precision::MixedBF16
                       : type == "fp16" ? ir::Precision::MixedFP16
                                        : ir::Precision::MixedFP8;
      // `mixed(fp4)`: the products in NVFP4, the one FP4 recipe placec models (ir::Fp8Scaling).
      // Its linears keep their inputs as NVFP4 (Transformer Engine saves the quantized input):
      // `saved = fp4` unless written otherwise, which the verifier refuses.
      if (type == "fp4") {
        run->fp8Scaling = ir::Fp8Scaling::Nvfp4;
        run->fp8Saved = true;
      }
      // The gradients' own type is the parameters' (bf16 under mixed(fp8)) unless written.
      StringRef gradType = type == "fp16" ? "fp16" : "bf16";
      llvm::StringSet<> seen;
      llvm::SMLoc lowGradsLoc;
      for (size_t i = 1; i < value.args.size(); ++i) {
        const ast::Arg &arg = value.args[i];
        const ast::Value &option = *arg.value;
        if (!arg.key.empty() && !seen.insert(arg.key).second) {
          diags.error(arg.keyLoc,
                      Twine("option '") + arg.key + "' of mixed(" + type + ") is given twice");
          ok = false;
          continue;
        }
        if (type == "fp8" && arg.key == "gather" && option.kind == ast::Value::Kind::Name &&
            (option.text == "fp8" || option.text == "bf16")) {
          run->fp8Gather = option.text == "fp8";
          continue;
        }
        if ((type == "fp8" || type == "fp4") && arg.key == "saved" &&
            option.kind == ast::Value::Kind::Name &&
            (option.text == type || option.text == "bf16")) {
          run->fp8Saved = option.text == type;
          continue;
        }
        if ((type == "fp8" || type == "fp4") && arg.key == "attention" &&
            option.kind == ast::Value::Kind::Name &&
            (option.text == "fp8" || option.text == "bf16")) {
          run->fp8Attention = option.text == "fp8";
          continue;
        }
        if (type == "fp8" && arg.key == "scaling" && option.kind == ast::Value::Kind::Name) {
          static constexpr ir::Fp8Scaling kScalings[] = {
              ir::Fp8Scaling::Tensor, ir::Fp8Scaling::Current, ir::Fp8Scaling::Mx};
          const auto *scaling = llvm::find_if(
              kScalings, [&](ir::Fp8Scaling s) { return ir::toString(s) == option.text; });
          if (scaling != std::end(kScalings)) {
            run->fp8Scaling = *scaling;
            continue;
          }
        }
        if (arg.key == "grads" && option.kind == ast::Value::Kind::Name &&
            (option.text == "fp32" || option.text == gradType)) {
          run->fp32Grads = option.text == "fp32";
          if (!run->fp32Grads)
            lowGradsLoc = option.getLoc();
          continue;
        }
        if (arg.key == "params" && option.kind == ast::Value::Kind::Name &&
            (option.text == "fp32" || option.text == gradType)) {
          run->fp32Params = option.text == "fp32";
          continue;
        }
        // `params = fp8` (`params = fp4` under mixed(fp4)): the parameters as their quantized
        // copies alone (the verifier's rule `precision` requires gather = fp8 under one scale
        // per tensor).
        if ((type == "fp8" || type == "fp4") && arg.key == "params" &&
            option.kind == ast::Value::Kind::Name && option.text == type) {
          run->fp8Params = true;
          continue;
        }
        diags.error(arg.key.empty() ? option.getLoc() : arg.keyLoc,
                    Twine("mixed(") + type + ") takes " +
                        (type == "fp8"   ? "'scaling = tensor', 'scaling = current' or 'scaling = "
                                           "mx' (one scale per tensor, from the amax history or "
                                           "from the tensor's own amax, or MXFP8's per block of "
                                           "32), 'gather = fp8' or "
                                           "'gather = bf16' (the type parameters are all-gathered "
                                           "in), 'saved = fp8' or 'saved = bf16' (the type the FP8 "
                                           "products keep their inputs in), 'attention = fp8' or "
                                           "'attention = bf16' (the type the attention kernel "
                                           "reads), "
                         : type == "fp4" ? "'saved = fp4' or 'saved = bf16' (the type the NVFP4 "
                                           "products keep their inputs in), 'attention = fp8' or "
                                           "'attention = bf16' (the type the attention kernel "
                                           "reads), "
                                         : "") +
                        "'grads = fp32' or 'grads = " + gradType +
                        "' (the type gradients are accumulated, kept and reduced in) and "
                        "'params = fp32' or 'params = " +
                        gradType + "' (the type the parameters are kept in" +
                        (type == "fp8"   ? "; 'params = fp8': their FP8 copies alone, "
                                           "without a bf16 weight"
                         : type == "fp4" ? "; 'params = fp4': their NVFP4 copies alone, "
                                           "without a bf16 weight"
                                         : "") +
                        ")");
        ok = false;
      }
      // An fp32 parameter's gradient is fp32 (autograd accumulates it in the parameter's type).
      if (run->fp32Params && lowGradsLoc.isValid()) {
        diags.error(lowGradsLoc, Twine("'grads = ") + gradType +
                                     "' with 'params = fp32': the gradients of fp32 parameters "
                                     "are fp32 (leave grads out, or write grads = fp32)");
        ok = false;
      }
      run->fp32Grads |= run->fp32Params;
    } else {
      diags.error(value.getLoc(),
                  Twine("unknown precision '") + spell(value) +
                      "': expected mixed(bf16), mixed(fp16), mixed(fp8), mixed(fp4) "
                      "or fp32");
      ok = false;
    }
  }
  if (const ast::Field *field = fields.lookup("optimizer")) {
    const ast::Value &value = field->value;
    if (value.kind == ast::Value::Kind::Name && value.text == "adam") {
      run->optimizer = ir::OptimizerKind::Adam;
    } else if (value.kind == ast::Value::Kind::Call && value.text == "adam") {
      // adam(moments = fp32 | bf16, master = fp32 | none): ir::OptimizerStates.
      run->optimizer = ir::OptimizerKind::Adam;
      llvm::StringSet<> seen;
      for (const ast::Arg &arg : value.args) {
        SMLoc loc = arg.key.empty() ? arg.value->getLoc() : arg.keyLoc;
        bool name = arg.value->kind == ast::Value::Kind::Name;
        StringRef text = arg.value->text;
        if (arg.key != "moments" && arg.key != "master") {
          diags.error(loc, arg.key.empty()
                               ? Twine("'adam' takes named arguments: adam(moments = fp32 | "
                                       "bf16, master = fp32 | none)")
                               : "unknown argument '" + arg.key +
                                     "' of 'adam': it takes moments = fp32 | bf16 and master = "
                                     "fp32 | none");
          ok = false;
        } else if (!seen.insert(arg.key).second) {
          diags.error(arg.keyLoc, "'" + arg.key + "' is given twice");
          ok = false;
        } else if (arg.key == "moments" && name && (text == "fp32" || text == "bf16")) {
          run->optimizerStates.momentBytes = text == "bf16" ? 2 : 4;
        } else if (arg.key == "master" && name && (text == "fp32" || text == "none")) {
          run->optimizerStates.master = text == "fp32";
        } else {
          diags.error(arg.value->getLoc(),
                      "unknown " + arg.key + " '" + spell(*arg.value) + "': expected " +
                          (arg.key == "moments"
                               ? "fp32 (Adam's two moments in fp32, the default) or bf16"
                               : "fp32 (an fp32 master copy of 16-bit parameters, the "
                                 "default) or none (the step updates the parameters "
                                 "themselves)"));
          ok = false;
        }
      }
    } else if (value.kind == ast::Value::Kind::Name && value.text == "sgd") {
      run->optimizer = ir::OptimizerKind::Sgd;
    } else if (value.kind == ast::Value::Kind::Call && value.text == "sgd" &&
               value.args.size() == 1 && value.args[0].key == "momentum") {
      std::optional<bool> momentum = getBool(*value.args[0].value, "momentum");
      ok &= momentum.has_value();
      run->optimizer =
          momentum.value_or(false) ? ir::OptimizerKind::SgdMomentum : ir::OptimizerKind::Sgd;
    } else {
      diags.error(value.getLoc(), Twine("unknown optimizer '") + spell(value) +
                                      "': expected adam, adam(moments = bf16, master = none), "
                                      "sgd or sgd(momentum = true)");
      ok = false;
    }
  }
  // A field of a few words, each value named with what it means in the message for any other.
  auto words =
      [&](StringRef key, StringRef meaning, auto &target,
          std::initializer_list<std::pair<StringRef, std::decay_t<decltype(target)>>> choices) {
        const ast::Field *field = fields.lookup(key);
        if (!field)
          return;
        const ast::Value &value = field->value;
        if (value.kind == ast::Value::Kind::Name)
          for (const auto &[word, choice] : choices)
            if (value.text == word) {
              target = choice;
              return;
            }
        diags.error(value.getLoc(),
                    Twine("unknown ") + key + " '" + spell(value) + "': expected " + meaning);
        ok = false;
      };
  words("cross_entropy",
        "fused (one fused kernel each way, the default: Transformer Engine's), vocab_parallel "
        "(Megatron-LM's unfused vocabulary-parallel loss, a kernel per operation over fp32 "
        "logits), fused_vocab_parallel (Megatron-Core's jit-fused vocabulary-parallel loss, "
        "--cross-entropy-fusion-impl native), unfused (PyTorch's F.cross_entropy over fp32 logits) "
        "or chunked (one "
        "sequence's logits at a time)",
        run->crossEntropy,
        {{"fused", ir::CrossEntropyKind::Fused},
         {"vocab_parallel", ir::CrossEntropyKind::VocabParallel},
         {"fused_vocab_parallel", ir::CrossEntropyKind::FusedVocabParallel},
         {"unfused", ir::CrossEntropyKind::Unfused},
         {"chunked", ir::CrossEntropyKind::Chunked}});
  words("kernels",
        "fused (one kernel per norm, rotary embedding and activation, the default) or eager "
        "(PyTorch without torch.compile)",
        run->kernels, {{"fused", ir::KernelMode::Fused}, {"eager", ir::KernelMode::Eager}});
  words("param_gather",
        "in_place (each all-gather of the parameters lands in their own storage, the default) "
        "or copy_out (PyTorch's FSDP2 copies each parameter out of the all-gather's buffer)",
        run->paramGather,
        {{"in_place", ir::ParamGather::InPlace}, {"copy_out", ir::ParamGather::CopyOut}});
  words("context_merge",
        "fused (Transformer Engine's context-parallel attention, the default) or eager "
        "(PyTorch's: a kernel per key/value chunk, merged in fp32 by eager operators)",
        run->contextMerge,
        {{"fused", ir::ContextMerge::Fused}, {"eager", ir::ContextMerge::Eager}});
  words("grad_accumulation",
        "fused (each micro-batch's weight gradients added into the stored ones in the "
        "product's epilogue, the default: Megatron-LM's gradient accumulation fusion), add (a "
        "kernel of its own adds them) or cast_add (they are cast to the stored type, then added: "
        "DeepSpeed's BF16 optimizer)",
        run->gradAccumulation,
        {{"fused", ir::GradAccumulation::Fused},
         {"add", ir::GradAccumulation::Add},
         {"cast_add", ir::GradAccumulation::CastAdd}});
  if (const ast::Field *field = fields.lookup("train_metrics")) {
    std::optional<int64_t> value = getCount(field->value, "train_metrics", 0, kMaxTrainMetrics);
    ok &= value.has_value();
    run->trainMetrics = value.value_or(0);
  }
  // What the run measured, for placec to compare its predictions with (`placec fidelity`).
  if (const ast::Field *field = fields.lookup("measured_step")) {
    std::optional<double> value = getQuantity(field->value, "measured_step", Dimension::Time);
    ok &= value.has_value();
    run->measuredStep = value;
  }
  if (const ast::Field *field = fields.lookup("measured_memory")) {
    std::optional<double> value = getQuantity(field->value, "measured_memory", Dimension::Bytes);
    ok &= value.has_value();
    run->measuredMemory = value;
  }
  if (!ok)
    return;

  // Micro-batches per step: the pipeline's, or derived from the batch sizes.
  const ir::Strategy &strategy = *run->strategy;
  if (strategy.pipeline && strategy.pipeline->microbatches) {
    run->microbatchesPerStep = *strategy.pipeline->microbatches;
  } else {
    int64_t perStep = run->microBatch * strategy.mesh.getSampleDegree();
    run->microbatchesPerStep =
        perStep > 0 && run->globalBatch % perStep == 0 ? run->globalBatch / perStep : 0;
  }
  program.runs.push_back(std::move(run));
}

} // namespace

std::unique_ptr<ir::Program> buildProgram(ArrayRef<std::unique_ptr<ast::File>> files,
                                          DiagnosticEngine &diags) {
  auto program = std::make_unique<ir::Program>();
  unsigned errorsBefore = diags.getNumErrors();
  Sema(diags, *program).run(files);
  if (diags.getNumErrors() != errorsBefore)
    return nullptr;
  return program;
}

} // namespace placec

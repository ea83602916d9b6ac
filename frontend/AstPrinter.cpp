// Prints the AST as an indented tree for `placec --emit=ast`.
#include "placec/frontend/Frontend.h"

#include "llvm/Support/raw_ostream.h"

using namespace llvm;

namespace placec {

namespace {

class AstPrinter {
public:
  explicit AstPrinter(raw_ostream &os) : os(os) {}

  void print(const ast::File &file) {
    os << "file \"" << file.path << "\"\n";
    for (const std::unique_ptr<ast::Decl> &decl : file.decls)
      printDecl(*decl, 1);
  }

private:
  raw_ostream &indent(unsigned depth) { return os.indent(depth * 2); }

  void printValue(const ast::Value &value) {
    switch (value.kind) {
    case ast::Value::Kind::Number:
      os << "number " << value.numberText;
      return;
    case ast::Value::Kind::Quantity:
      os << "quantity " << value.numberText << " " << value.unit;
      return;
    case ast::Value::Kind::String:
      os << "string \"" << value.text << "\"";
      return;
    case ast::Value::Kind::Name:
      os << "name " << value.text;
      return;
    case ast::Value::Kind::Call:
      os << "call " << value.text;
      printArgs(value.args);
      return;
    }
  }

  void printArgs(ArrayRef<ast::Arg> args) {
    os << "(";
    for (size_t i = 0; i < args.size(); ++i) {
      if (i)
        os << ", ";
      if (!args[i].key.empty())
        os << args[i].key << " = ";
      printValue(*args[i].value);
    }
    os << ")";
  }

  void printFields(const ast::FieldsDecl &decl, unsigned depth) {
    for (const ast::Field &field : decl.fields) {
      indent(depth) << "field " << field.key << " = ";
      printValue(field.value);
      os << "\n";
    }
  }

  void printDecl(const ast::Decl &decl, unsigned depth) {
    if (auto *import = dyn_cast<ast::ImportDecl>(&decl)) {
      indent(depth) << "import \"" << import->path << "\"\n";
    } else if (auto *model = dyn_cast<ast::ModelDecl>(&decl)) {
      indent(depth) << "model " << model->name;
      if (!model->modelKind.empty())
        os << " : " << model->modelKind;
      os << "\n";
      printFields(*model, depth + 1);
    } else if (auto *cluster = dyn_cast<ast::ClusterDecl>(&decl)) {
      indent(depth) << "cluster " << cluster->name << "\n";
      printFields(*cluster, depth + 1);
    } else if (auto *run = dyn_cast<ast::RunDecl>(&decl)) {
      indent(depth) << "run " << run->name << "\n";
      printFields(*run, depth + 1);
    } else if (auto *strategy = dyn_cast<ast::StrategyDecl>(&decl)) {
      printStrategy(*strategy, depth);
    }
  }

  void printStrategy(const ast::StrategyDecl &strategy, unsigned depth) {
    indent(depth) << "strategy " << strategy.name;
    if (strategy.hasParams) {
      os << "(";
      for (size_t i = 0; i < strategy.params.size(); ++i) {
        os << (i ? ", " : "") << strategy.params[i].name;
        if (strategy.params[i].defaultValue) {
          os << " = ";
          printValue(*strategy.params[i].defaultValue);
        }
      }
      os << ")";
    }
    os << "\n";
    if (strategy.isComposition) {
      for (const ast::StrategyRef &term : strategy.terms) {
        indent(depth + 1) << "term " << term.name;
        if (term.hasParens)
          printArgs(term.args);
        os << "\n";
      }
      return;
    }
    if (strategy.mesh) {
      indent(depth + 1) << "mesh\n";
      for (const ast::MeshAxis &axis : strategy.mesh->axes) {
        indent(depth + 2) << "axis " << axis.name;
        if (!axis.kind.empty())
          os << " : " << axis.kind;
        os << " = ";
        printValue(axis.size);
        os << "\n";
      }
    }
    for (const ast::Placement &placement : strategy.placements) {
      indent(depth + 1) << "place " << placement.state << " =";
      for (size_t i = 0; i < placement.modes.size(); ++i) {
        const ast::Mode &mode = placement.modes[i];
        os << (i ? ", " : " ") << mode.name;
        if (mode.hasParens)
          printArgs(mode.args);
      }
      if (!placement.tier.empty())
        os << " @ " << placement.tier;
      os << "\n";
    }
    for (const ast::PipelineSpec &pipeline : strategy.pipelines) {
      indent(depth + 1) << "pipeline " << pipeline.schedule;
      printArgs(pipeline.args);
      os << "\n";
    }
  }

  raw_ostream &os;
};

} // namespace

void printAst(const ast::File &file, raw_ostream &os) { AstPrinter(os).print(file); }

} // namespace placec

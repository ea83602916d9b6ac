// Unit tests of the parser (parseBuffer): the AST it builds, and its lexical and syntax errors with
// their line and column.
#include "placec/frontend/AST.h"
#include "placec/frontend/Frontend.h"
#include "placec/ir/Diagnostics.h"

#include "llvm/Support/Casting.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <gtest/gtest.h>
#include <random>
#include <string>

using namespace placec;
using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;

namespace {

class ParserTest : public ::testing::Test {
protected:
  void SetUp() override { diags.setQuiet(true); }

  /// Parses `text` as a new buffer named test.place.
  std::unique_ptr<ast::File> parse(llvm::StringRef text) {
    bufferId = sourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(text, "test.place"), llvm::SMLoc());
    return parseBuffer(bufferId, diags);
  }

  /// "line:col" of a location in the last buffer.
  std::string where(llvm::SMLoc loc) {
    if (!loc.isValid())
      return "<invalid>";
    auto [line, col] = sourceMgr.getLineAndColumn(loc, bufferId);
    return std::to_string(line) + ":" + std::to_string(col);
  }

  /// Every diagnostic as "line:col: message", one per line.
  std::string diagnostics() {
    std::string text;
    for (const Diagnostic &diag : diags.getDiagnostics())
      text += where(diag.loc) + ": " + diag.message + "\n";
    return text;
  }

  /// Parses `text`, which must have exactly one error, and returns it as "line:col: message".
  std::string singleError(llvm::StringRef text) {
    auto file = parse(text);
    EXPECT_EQ(file, nullptr);
    EXPECT_EQ(diags.getNumErrors(), 1u) << diagnostics();
    return diagnostics();
  }

  /// Parses `text`, which must have no error.
  std::unique_ptr<ast::File> parseOk(llvm::StringRef text) {
    auto file = parse(text);
    EXPECT_NE(file, nullptr);
    EXPECT_EQ(diags.getNumErrors(), 0u) << diagnostics();
    return file;
  }

  llvm::SourceMgr sourceMgr;
  DiagnosticEngine diags{sourceMgr};
  unsigned bufferId = 0;
};

template <typename T> const T &declAt(const ast::File &file, size_t index) {
  return *cast<T>(file.decls.at(index).get());
}

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

TEST_F(ParserTest, EmptyFileGivesEmptyAst) {
  auto file = parseOk("");
  ASSERT_NE(file, nullptr);
  EXPECT_TRUE(file->decls.empty());
  EXPECT_EQ(file->path, "test.place");
  EXPECT_EQ(file->bufferId, bufferId);
}

TEST_F(ParserTest, CommentsOnly) {
  auto file = parseOk("// a line comment\n/* a block\n   comment */\n\t\r\n");
  ASSERT_NE(file, nullptr);
  EXPECT_TRUE(file->decls.empty());
}

TEST_F(ParserTest, ModelWithKindAndFields) {
  auto file = parseOk("model gpt2_xl : transformer {\n"
                      "  layers = 48; hidden = 1600;\n"
                      "  mlp = swiglu; bias = false;\n"
                      "}\n");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(file->decls.size(), 1u);
  const auto &model = declAt<ast::ModelDecl>(*file, 0);
  EXPECT_EQ(model.name, "gpt2_xl");
  EXPECT_EQ(where(model.getLoc()), "1:1");
  EXPECT_EQ(where(model.nameLoc), "1:7");
  EXPECT_EQ(model.modelKind, "transformer");
  EXPECT_EQ(where(model.modelKindLoc), "1:17");
  EXPECT_EQ(where(model.endLoc), "4:1");
  ASSERT_EQ(model.fields.size(), 4u);
  EXPECT_EQ(model.fields[0].key, "layers");
  EXPECT_EQ(where(model.fields[0].keyLoc), "2:3");
  EXPECT_EQ(model.fields[0].value.kind, ast::Value::Kind::Number);
  EXPECT_EQ(model.fields[0].value.number, 48);
  EXPECT_TRUE(model.fields[0].value.isInteger);
  EXPECT_EQ(where(model.fields[0].value.getLoc()), "2:12");
  EXPECT_EQ(where(model.fields[0].value.range.End), "2:14");
  EXPECT_EQ(model.fields[2].value.kind, ast::Value::Kind::Name);
  EXPECT_EQ(model.fields[2].value.text, "swiglu");
  EXPECT_EQ(model.fields[3].value.text, "false");
}

TEST_F(ParserTest, AbstractModelHasNoKind) {
  auto file = parseOk("model zero_7_5b { params = 7.5B; }");
  ASSERT_NE(file, nullptr);
  const auto &model = declAt<ast::ModelDecl>(*file, 0);
  EXPECT_TRUE(model.modelKind.empty());
  EXPECT_FALSE(model.modelKindLoc.isValid());
  EXPECT_EQ(where(model.endLoc), "1:34");
}

TEST_F(ParserTest, NumbersWithMultipliers) {
  auto file = parseOk("model m { a = 7.5B; b = 64K; c = 1.3T; d = 340M; e = 1.5e9; f = 0.5;\n"
                      "  g = 4096; h = 175B; i = 2.5e-3K; j = 1E3; k = 0.001K; l = 4.0; }");
  ASSERT_NE(file, nullptr);
  const auto &fields = declAt<ast::ModelDecl>(*file, 0).fields;
  ASSERT_EQ(fields.size(), 12u);
  struct Expected {
    double value;
    bool isInteger;
    const char *text;
  };
  Expected expected[] = {
      {7500000000, true, "7.5B"}, {64000, true, "64K"},   {1.3e12, true, "1.3T"},
      {340000000, true, "340M"},  {1.5e9, true, "1.5e9"}, {0.5, false, "0.5"},
      {4096, true, "4096"},       {175e9, true, "175B"},  {2.5, false, "2.5e-3K"},
      {1000, true, "1E3"},        {1, true, "0.001K"},    {4, true, "4.0"}};
  for (size_t i = 0; i < fields.size(); ++i) {
    SCOPED_TRACE(expected[i].text);
    EXPECT_EQ(fields[i].value.kind, ast::Value::Kind::Number);
    EXPECT_EQ(fields[i].value.number, expected[i].value);
    EXPECT_EQ(fields[i].value.isInteger, expected[i].isInteger);
    EXPECT_EQ(fields[i].value.numberText, expected[i].text);
  }
  EXPECT_EQ(fields[2].value.number, 1300000000000.0);
}

TEST_F(ParserTest, Quantities) {
  auto file = parseOk("cluster dgx {\n"
                      "  device_memory = 80 GiB; peak = 312 TFLOPS;\n"
                      "  intra_bandwidth = 300 GB/s; latency = 5 us; bytes = 80 B;\n"
                      "  nic = 100 Gbit / s;\n"
                      "}");
  ASSERT_NE(file, nullptr);
  const auto &cluster = declAt<ast::ClusterDecl>(*file, 0);
  ASSERT_EQ(cluster.fields.size(), 6u);
  const ast::Value &memory = cluster.fields[0].value;
  EXPECT_EQ(memory.kind, ast::Value::Kind::Quantity);
  EXPECT_EQ(memory.number, 80);
  EXPECT_EQ(memory.unit, "GiB");
  EXPECT_EQ(where(memory.unitLoc), "2:22");
  EXPECT_EQ(where(memory.range.Start), "2:19");
  EXPECT_EQ(where(memory.range.End), "2:25");
  EXPECT_EQ(cluster.fields[1].value.unit, "TFLOPS");
  const ast::Value &bandwidth = cluster.fields[2].value;
  EXPECT_EQ(bandwidth.kind, ast::Value::Kind::Quantity);
  EXPECT_EQ(bandwidth.number, 300);
  EXPECT_EQ(bandwidth.unit, "GB/s");
  EXPECT_EQ(where(bandwidth.unitLoc), "3:25");
  EXPECT_EQ(cluster.fields[3].value.unit, "us");
  EXPECT_EQ(cluster.fields[4].value.unit, "B");
  EXPECT_EQ(cluster.fields[4].value.number, 80);
  // The unit's parts are joined without the spaces.
  EXPECT_EQ(cluster.fields[5].value.unit, "Gbit/s");
}

TEST_F(ParserTest, StringsAndImports) {
  auto file = parseOk("import \"common/clusters.place\";\nrun r { note = \"a b\"; }");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(file->decls.size(), 2u);
  const auto &import = declAt<ast::ImportDecl>(*file, 0);
  EXPECT_EQ(import.path, "common/clusters.place");
  EXPECT_EQ(where(import.getLoc()), "1:1");
  EXPECT_EQ(where(import.pathLoc), "1:8");
  const ast::Value &note = declAt<ast::RunDecl>(*file, 1).fields[0].value;
  EXPECT_EQ(note.kind, ast::Value::Kind::String);
  EXPECT_EQ(note.text, "a b");
}

TEST_F(ParserTest, CallsWithNamedAndPositionalArgs) {
  auto file = parseOk("run gpt2_zero3 {\n"
                      "  model = gpt2_xl; precision = mixed(bf16);\n"
                      "  optimizer = sgd(momentum = true); schedule = 1f1b(microbatches = 16);\n"
                      "  empty = f(); several = g(1, x = 2 GiB, \"s\");\n"
                      "}");
  ASSERT_NE(file, nullptr);
  const auto &run = declAt<ast::RunDecl>(*file, 0);
  ASSERT_EQ(run.fields.size(), 6u);
  EXPECT_EQ(run.fields[0].value.kind, ast::Value::Kind::Name);

  const ast::Value &precision = run.fields[1].value;
  EXPECT_EQ(precision.kind, ast::Value::Kind::Call);
  EXPECT_EQ(precision.text, "mixed");
  ASSERT_EQ(precision.args.size(), 1u);
  EXPECT_TRUE(precision.args[0].key.empty());
  EXPECT_EQ(precision.args[0].value->kind, ast::Value::Kind::Name);
  EXPECT_EQ(precision.args[0].value->text, "bf16");

  const ast::Value &optimizer = run.fields[2].value;
  EXPECT_EQ(optimizer.text, "sgd");
  ASSERT_EQ(optimizer.args.size(), 1u);
  EXPECT_EQ(optimizer.args[0].key, "momentum");
  EXPECT_EQ(where(optimizer.args[0].keyLoc), "3:19");
  EXPECT_EQ(optimizer.args[0].value->text, "true");

  const ast::Value &schedule = run.fields[3].value;
  EXPECT_EQ(schedule.kind, ast::Value::Kind::Call);
  EXPECT_EQ(schedule.text, "1f1b");
  ASSERT_EQ(schedule.args.size(), 1u);
  EXPECT_EQ(schedule.args[0].key, "microbatches");
  EXPECT_EQ(schedule.args[0].value->number, 16);

  EXPECT_EQ(run.fields[4].value.kind, ast::Value::Kind::Call);
  EXPECT_TRUE(run.fields[4].value.args.empty());

  const ast::Value &several = run.fields[5].value;
  ASSERT_EQ(several.args.size(), 3u);
  EXPECT_EQ(several.args[0].value->number, 1);
  EXPECT_EQ(several.args[1].key, "x");
  EXPECT_EQ(several.args[1].value->kind, ast::Value::Kind::Quantity);
  EXPECT_EQ(several.args[1].value->unit, "GiB");
  EXPECT_EQ(several.args[2].value->kind, ast::Value::Kind::String);
  EXPECT_EQ(several.args[2].value->text, "s");
}

TEST_F(ParserTest, KeywordsAreNames) {
  auto file = parseOk("model model : mlp { optimizer = adam; model = run; layers = 4; }\n"
                      "cluster import { strategy = mesh; }\n"
                      "run run { model = model; cluster = import; strategy = pipeline; }\n"
                      "strategy strategy { model = shard(run); import = keep @ cluster; }\n"
                      "strategy mesh = pipeline * strategy(mesh = model);\n");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(file->decls.size(), 5u);
  const auto &model = declAt<ast::ModelDecl>(*file, 0);
  EXPECT_EQ(model.name, "model");
  EXPECT_EQ(model.modelKind, "mlp");
  EXPECT_EQ(model.fields[0].key, "optimizer");
  EXPECT_EQ(model.fields[1].key, "model");
  EXPECT_EQ(model.fields[1].value.text, "run");
  EXPECT_EQ(declAt<ast::ClusterDecl>(*file, 1).name, "import");
  EXPECT_EQ(declAt<ast::ClusterDecl>(*file, 1).fields[0].value.text, "mesh");
  const auto &run = declAt<ast::RunDecl>(*file, 2);
  EXPECT_EQ(run.name, "run");
  EXPECT_EQ(run.fields[2].value.text, "pipeline");
  const auto &strategy = declAt<ast::StrategyDecl>(*file, 3);
  EXPECT_EQ(strategy.name, "strategy");
  ASSERT_EQ(strategy.placements.size(), 2u);
  EXPECT_EQ(strategy.placements[0].state, "model");
  EXPECT_EQ(strategy.placements[0].modes[0].args[0].value->text, "run");
  EXPECT_EQ(strategy.placements[1].tier, "cluster");
  const auto &composition = declAt<ast::StrategyDecl>(*file, 4);
  EXPECT_EQ(composition.name, "mesh");
  ASSERT_EQ(composition.terms.size(), 2u);
  EXPECT_EQ(composition.terms[0].name, "pipeline");
  EXPECT_EQ(composition.terms[1].args[0].key, "mesh");
}

TEST_F(ParserTest, StrategyBody) {
  auto file = parseOk("strategy s {\n"
                      "  mesh [pp = 4, node: batch = 8, tp = 8];\n"
                      "  params = gather(dp, keep_after_forward = true), shard(tp) @ device;\n"
                      "  optimizer = @ host;\n"
                      "  activations = shard(tp), recompute(selective);\n"
                      "  grads = keep;\n"
                      "  pipeline = interleaved(microbatches = 16, chunks = 2);\n"
                      "}");
  ASSERT_NE(file, nullptr);
  const auto &strategy = declAt<ast::StrategyDecl>(*file, 0);
  EXPECT_EQ(strategy.name, "s");
  EXPECT_FALSE(strategy.hasParams);
  EXPECT_FALSE(strategy.isComposition);
  ASSERT_TRUE(strategy.mesh.has_value());
  EXPECT_EQ(where(strategy.mesh->loc), "2:3");
  const auto &axes = strategy.mesh->axes;
  ASSERT_EQ(axes.size(), 3u);
  EXPECT_EQ(axes[0].name, "pp");
  EXPECT_TRUE(axes[0].kind.empty());
  EXPECT_EQ(axes[0].size.number, 4);
  EXPECT_EQ(axes[1].name, "node");
  EXPECT_EQ(axes[1].kind, "batch");
  EXPECT_EQ(where(axes[1].kindLoc), "2:23");
  EXPECT_EQ(axes[1].size.number, 8);
  EXPECT_EQ(where(axes[2].nameLoc), "2:34");

  ASSERT_EQ(strategy.placements.size(), 4u);
  const ast::Placement &params = strategy.placements[0];
  EXPECT_EQ(params.state, "params");
  EXPECT_EQ(where(params.stateLoc), "3:3");
  ASSERT_EQ(params.modes.size(), 2u);
  EXPECT_EQ(params.modes[0].name, "gather");
  EXPECT_TRUE(params.modes[0].hasParens);
  ASSERT_EQ(params.modes[0].args.size(), 2u);
  EXPECT_EQ(params.modes[0].args[0].value->text, "dp");
  EXPECT_EQ(params.modes[0].args[1].key, "keep_after_forward");
  EXPECT_EQ(params.modes[1].name, "shard");
  EXPECT_EQ(params.tier, "device");
  EXPECT_EQ(where(params.tierLoc), "3:63");

  const ast::Placement &optimizer = strategy.placements[1];
  EXPECT_TRUE(optimizer.modes.empty());
  EXPECT_EQ(optimizer.tier, "host");

  const ast::Placement &activations = strategy.placements[2];
  ASSERT_EQ(activations.modes.size(), 2u);
  EXPECT_EQ(activations.modes[1].name, "recompute");
  EXPECT_EQ(activations.modes[1].args[0].value->text, "selective");
  EXPECT_TRUE(activations.tier.empty());

  const ast::Placement &grads = strategy.placements[3];
  ASSERT_EQ(grads.modes.size(), 1u);
  EXPECT_EQ(grads.modes[0].name, "keep");
  EXPECT_FALSE(grads.modes[0].hasParens);

  ASSERT_EQ(strategy.pipelines.size(), 1u);
  EXPECT_EQ(strategy.pipelines[0].schedule, "interleaved");
  EXPECT_EQ(where(strategy.pipelines[0].loc), "7:3");
  EXPECT_EQ(where(strategy.pipelines[0].scheduleLoc), "7:14");
  ASSERT_EQ(strategy.pipelines[0].args.size(), 2u);
  EXPECT_EQ(strategy.pipelines[0].args[1].key, "chunks");
  EXPECT_EQ(strategy.pipelines[0].args[1].value->number, 2);
}

TEST_F(ParserTest, PipelineWithoutArgsAndDuplicates) {
  auto file = parseOk("strategy s { mesh [pp = 2]; pipeline = 1f1b; mesh [dp = 2];\n"
                      "  pipeline = gpipe(microbatches = 8); mesh []; }");
  ASSERT_NE(file, nullptr);
  const auto &strategy = declAt<ast::StrategyDecl>(*file, 0);
  ASSERT_TRUE(strategy.mesh.has_value());
  EXPECT_EQ(strategy.mesh->axes[0].name, "pp");
  ASSERT_EQ(strategy.extraMeshLocs.size(), 2u);
  EXPECT_EQ(where(strategy.extraMeshLocs[0]), "1:46");
  EXPECT_EQ(where(strategy.extraMeshLocs[1]), "2:39");
  ASSERT_EQ(strategy.pipelines.size(), 2u);
  EXPECT_EQ(strategy.pipelines[0].schedule, "1f1b");
  EXPECT_TRUE(strategy.pipelines[0].args.empty());
  EXPECT_EQ(strategy.pipelines[1].schedule, "gpipe");
}

TEST_F(ParserTest, StrategyParameters) {
  auto file = parseOk("strategy pp(pp, microbatches = auto) {\n"
                      "  mesh [pp = pp]; pipeline = 1f1b(microbatches = microbatches);\n"
                      "}\n"
                      "strategy hsdp(shard, replicate) {\n"
                      "  mesh [dp_replicate: batch = replicate, dp_shard: batch = shard];\n"
                      "}\n"
                      "strategy none() { }\n"
                      "strategy offload_optimizer { optimizer = @ host; }\n");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(file->decls.size(), 4u);
  const auto &pp = declAt<ast::StrategyDecl>(*file, 0);
  EXPECT_TRUE(pp.hasParams);
  ASSERT_EQ(pp.params.size(), 2u);
  EXPECT_EQ(pp.params[0].name, "pp");
  EXPECT_EQ(pp.params[0].defaultValue, nullptr);
  EXPECT_EQ(pp.params[1].name, "microbatches");
  EXPECT_EQ(where(pp.params[1].nameLoc), "1:17");
  ASSERT_NE(pp.params[1].defaultValue, nullptr);
  EXPECT_EQ(pp.params[1].defaultValue->kind, ast::Value::Kind::Name);
  EXPECT_EQ(pp.params[1].defaultValue->text, "auto");
  EXPECT_EQ(pp.mesh->axes[0].size.kind, ast::Value::Kind::Name);
  EXPECT_EQ(pp.mesh->axes[0].size.text, "pp");

  const auto &hsdp = declAt<ast::StrategyDecl>(*file, 1);
  ASSERT_EQ(hsdp.mesh->axes.size(), 2u);
  EXPECT_EQ(hsdp.mesh->axes[0].name, "dp_replicate");
  EXPECT_EQ(hsdp.mesh->axes[0].kind, "batch");
  EXPECT_EQ(hsdp.mesh->axes[0].size.text, "replicate");

  const auto &none = declAt<ast::StrategyDecl>(*file, 2);
  EXPECT_TRUE(none.hasParams);
  EXPECT_TRUE(none.params.empty());
  EXPECT_FALSE(none.mesh.has_value());

  const auto &offload = declAt<ast::StrategyDecl>(*file, 3);
  EXPECT_FALSE(offload.hasParams);
  EXPECT_FALSE(offload.mesh.has_value());
  ASSERT_EQ(offload.placements.size(), 1u);
  EXPECT_EQ(offload.placements[0].tier, "host");
}

TEST_F(ParserTest, Composition) {
  auto file = parseOk("strategy ptd = pp4 * zero1_16 * tp8;\n"
                      "strategy big = zero3(dp = 64) * offload_optimizer;\n"
                      "strategy t = tp(8);\n"
                      "strategy u = f() * g;\n");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(file->decls.size(), 4u);
  const auto &ptd = declAt<ast::StrategyDecl>(*file, 0);
  EXPECT_TRUE(ptd.isComposition);
  EXPECT_FALSE(ptd.hasParams);
  EXPECT_FALSE(ptd.mesh.has_value());
  ASSERT_EQ(ptd.terms.size(), 3u);
  EXPECT_EQ(ptd.terms[0].name, "pp4");
  EXPECT_EQ(where(ptd.terms[0].nameLoc), "1:16");
  EXPECT_EQ(ptd.terms[1].name, "zero1_16");
  EXPECT_EQ(ptd.terms[2].name, "tp8");
  EXPECT_FALSE(ptd.terms[2].hasParens);

  const auto &big = declAt<ast::StrategyDecl>(*file, 1);
  ASSERT_EQ(big.terms.size(), 2u);
  EXPECT_EQ(big.terms[0].name, "zero3");
  EXPECT_TRUE(big.terms[0].hasParens);
  ASSERT_EQ(big.terms[0].args.size(), 1u);
  EXPECT_EQ(big.terms[0].args[0].key, "dp");
  EXPECT_EQ(big.terms[0].args[0].value->number, 64);
  EXPECT_EQ(big.terms[1].name, "offload_optimizer");

  const auto &t = declAt<ast::StrategyDecl>(*file, 2);
  ASSERT_EQ(t.terms.size(), 1u);
  EXPECT_TRUE(t.terms[0].args[0].key.empty());
  EXPECT_EQ(t.terms[0].args[0].value->number, 8);

  const auto &u = declAt<ast::StrategyDecl>(*file, 3);
  EXPECT_TRUE(u.terms[0].hasParens);
  EXPECT_TRUE(u.terms[0].args.empty());
}

TEST_F(ParserTest, NonAsciiTextKeepsByteColumns) {
  // Columns count bytes: "é" is two bytes, so the name after the string starts at column 25,
  // not 24.
  auto file = parseOk("run r { note = \"caf\xC3\xA9\"; x = y; }");
  ASSERT_NE(file, nullptr);
  const auto &run = declAt<ast::RunDecl>(*file, 0);
  EXPECT_EQ(run.fields[0].value.text, "caf\xC3\xA9");
  EXPECT_EQ(where(run.fields[1].keyLoc), "1:25");
  EXPECT_EQ(where(run.fields[1].value.getLoc()), "1:29");
}

TEST_F(ParserTest, ByteOrderMarkIsSkipped) {
  auto file = parseOk("\xEF\xBB\xBFmodel m { }");
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(where(declAt<ast::ModelDecl>(*file, 0).nameLoc), "1:10");
}

//===----------------------------------------------------------------------===//
// Lexical errors
//===----------------------------------------------------------------------===//

TEST_F(ParserTest, UnterminatedBlockComment) {
  EXPECT_EQ(singleError("model m { }\n  /* never closed\n model n {}"),
            "2:3: unterminated block comment\n");
}

TEST_F(ParserTest, UnterminatedString) {
  EXPECT_EQ(singleError("import \"a.place;\n"), "1:8: unterminated string\n");
}

TEST_F(ParserTest, NumberGluedToUnit) {
  EXPECT_EQ(singleError("cluster c {\n  device_memory = 80GiB;\n}"),
            "2:19: a unit must be separated from its number by a space: write '80 GiB'\n");
}

TEST_F(ParserTest, NumberGluedToUnitWithMultiplierLetter) {
  // `80KB` lexes as `80K` and `B`; the suggestion keeps the unit the user meant.
  EXPECT_EQ(singleError("cluster c { m = 80KB; }"),
            "1:17: a unit must be separated from its number by a space: write '80 KB'\n");
}

TEST_F(ParserTest, NumberGluedToBandwidthUnit) {
  EXPECT_EQ(singleError("cluster c { b = 25GB/s; }"),
            "1:17: a unit must be separated from its number by a space: write '25 GB/s'\n");
}

TEST_F(ParserTest, NumberGluedToBytesPerSecond) {
  EXPECT_EQ(singleError("cluster c { b = 80B/s; }"),
            "1:17: a unit must be separated from its number by a space: write '80 B/s'\n");
}

TEST_F(ParserTest, CommentSeparatesNumberAndUnit) {
  auto file = parseOk("cluster c { m = 80/* GiB */GiB; }");
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(declAt<ast::ClusterDecl>(*file, 0).fields[0].value.unit, "GiB");
}

TEST_F(ParserTest, StrayHash) {
  EXPECT_EQ(singleError("# not a comment\nmodel m {}"), "1:1: unexpected character '#'\n");
}

TEST_F(ParserTest, ControlCharacter) {
  EXPECT_EQ(singleError("model m {\x01}"), "1:10: unexpected character '\\x01'\n");
}

TEST_F(ParserTest, NonAsciiCharacter) {
  EXPECT_EQ(singleError("model m { \xC3\xA9 = 1; }"),
            "1:11: unexpected character '\xC3\xA9' (U+00E9)\n");
}

TEST_F(ParserTest, NonAsciiCharacterAfterNonAsciiText) {
  // U+00A0 (a non-breaking space) after a string with a three-byte character.
  EXPECT_EQ(singleError("run r { a = \"\xE2\x86\x92\";\xC2\xA0}"),
            "1:19: unexpected character '\xC2\xA0' (U+00A0)\n");
}

TEST_F(ParserTest, LexicalErrorsAreAllReported) {
  auto file = parse("model m { a = 1 # 2; }\nmodel n { b = 3$; }");
  EXPECT_EQ(file, nullptr);
  EXPECT_EQ(diagnostics(), "1:17: unexpected character '#'\n2:16: unexpected character '$'\n");
}

TEST_F(ParserTest, TooManyLexicalErrors) {
  auto file = parse(std::string(100, '$'));
  EXPECT_EQ(file, nullptr);
  EXPECT_EQ(diags.getNumErrors(), 20u);
}

//===----------------------------------------------------------------------===//
// Text checks
//===----------------------------------------------------------------------===//

TEST_F(ParserTest, NulByteIsBinary) {
  EXPECT_EQ(singleError(llvm::StringRef("model m {\n  x\0 = 1; }", 20)),
            "2:4: file is not valid UTF-8 text\n");
}

TEST_F(ParserTest, InvalidUtf8) {
  EXPECT_EQ(singleError("model m { // caf\xC3(\n}"), "1:17: file is not valid UTF-8 text\n");
}

TEST_F(ParserTest, TruncatedUtf8AtEnd) {
  EXPECT_EQ(singleError("model m {}\n// \xE2\x86"), "2:4: file is not valid UTF-8 text\n");
}

TEST_F(ParserTest, Utf16SurrogateIsInvalid) {
  EXPECT_EQ(singleError("// \xED\xA0\x80\n"), "1:4: file is not valid UTF-8 text\n");
}

//===----------------------------------------------------------------------===//
// Numbers
//===----------------------------------------------------------------------===//

TEST_F(ParserTest, NumberOutOfRange) {
  EXPECT_EQ(singleError("model m {\n  params = 1e400;\n}"),
            "2:12: number '1e400' is out of range\n");
}

TEST_F(ParserTest, NumberOutOfRangeWithMultiplier) {
  EXPECT_EQ(singleError("model m { params = 1e300T; }"), "1:20: number '1e300T' is out of range\n");
}

TEST_F(ParserTest, NumberUnderflow) {
  EXPECT_EQ(singleError("model m { params = 1e-400; }"), "1:20: number '1e-400' is out of range\n");
}

//===----------------------------------------------------------------------===//
// Syntax errors
//===----------------------------------------------------------------------===//

TEST_F(ParserTest, MissingSemicolonAtEndOfLine) {
  // `4` then `hidden` on the next line reads as the quantity `4 hidden`; the message still points
  // after the number.
  EXPECT_EQ(singleError("model m {\n  layers = 4\n  hidden = 5;\n}"),
            "2:13: expected ';' after the value, found 'hidden'\n");
}

TEST_F(ParserTest, MissingSemicolonAfterName) {
  EXPECT_EQ(singleError("model m {\n  mlp = swiglu\n  norm = rmsnorm;\n}"),
            "2:15: expected ';' after the value, found 'norm'\n");
}

TEST_F(ParserTest, MissingSemicolonBeforeBrace) {
  EXPECT_EQ(singleError("run r { model = m }"), "1:19: expected ';' after the value, found '}'\n");
}

TEST_F(ParserTest, MissingSemicolonAfterMesh) {
  EXPECT_EQ(singleError("strategy s {\n  mesh [dp = 8]\n  params = shard(dp);\n}"),
            "2:16: expected ';' after the mesh, found 'params'\n");
}

TEST_F(ParserTest, MissingSemicolonAfterComposition) {
  EXPECT_EQ(singleError("strategy s = a * b\nrun r {}"),
            "1:19: expected ';' after the strategy, found 'run'\n");
}

TEST_F(ParserTest, ExtraTokenBeforeSemicolon) {
  EXPECT_EQ(singleError("model m { layers = 4 5; }"),
            "1:22: expected ';' after the value, found '5'\n");
}

TEST_F(ParserTest, ColonInsteadOfEquals) {
  EXPECT_EQ(singleError("model m { layers: 4; }"), "1:17: unexpected ':', expected '='\n");
}

TEST_F(ParserTest, MissingValue) {
  EXPECT_EQ(singleError("model m { layers = ; }"), "1:20: unexpected ';', expected a value\n");
}

TEST_F(ParserTest, UnknownDeclaration) {
  EXPECT_EQ(singleError("modle m { }"), "1:1: unexpected 'modle', expected a declaration\n");
}

TEST_F(ParserTest, BodyOrComposition) {
  EXPECT_EQ(singleError("strategy s(a) mesh"), "1:15: unexpected 'mesh', expected '{' or '='\n");
}

TEST_F(ParserTest, MeshItemNeedsBrackets) {
  EXPECT_EQ(singleError("strategy s { mesh = 4; }"), "1:19: unexpected '=', expected '['\n");
}

TEST_F(ParserTest, UnexpectedEndOfFile) {
  EXPECT_EQ(singleError("model m {"), "1:10: unexpected end of file, expected a name or '}'\n");
}

TEST_F(ParserTest, UnexpectedEndOfFileInCall) {
  EXPECT_EQ(singleError("run r { p = mixed(bf16"), "1:23: unexpected end of file, expected ')'\n");
}

TEST_F(ParserTest, LongTokenIsShortenedInMessages) {
  std::string name(100, 'x');
  EXPECT_EQ(singleError("model m { a = 1; } " + name),
            "1:20: unexpected '" + std::string(40, 'x') + "...', expected a declaration\n");
}

TEST_F(ParserTest, SeveralSyntaxErrorsAreReported) {
  auto file = parse("model m { a = 1 }\nmodel n { b: 2; }\nrun r { c = ; }\n");
  EXPECT_EQ(file, nullptr);
  EXPECT_EQ(diagnostics(), "1:17: expected ';' after the value, found '}'\n"
                           "2:12: unexpected ':', expected '='\n"
                           "3:13: unexpected ';', expected a value\n");
}

TEST_F(ParserTest, TooManySyntaxErrors) {
  std::string text;
  for (int i = 0; i < 100; ++i)
    text += "model m" + std::to_string(i) + " { x y; }\n";
  auto file = parse(text);
  EXPECT_EQ(file, nullptr);
  EXPECT_EQ(diags.getNumErrors(), 20u);
  // One note says that parsing stopped.
  EXPECT_EQ(diags.getDiagnostics().back().severity, Severity::Note);
}

//===----------------------------------------------------------------------===//
// Robustness and speed
//===----------------------------------------------------------------------===//

TEST_F(ParserTest, LongLine) {
  std::string text = "model m { x = ";
  for (int i = 0; i < 200000; ++i)
    text += "a ";
  text += "; }";
  EXPECT_EQ(parse(text), nullptr);
  EXPECT_GE(diags.getNumErrors(), 1u);
}

TEST_F(ParserTest, LongStringAndComment) {
  std::string text =
      "run r { s = \"" + std::string(1 << 20, 's') + "\"; }\n/*" + std::string(1 << 20, '*') + "*/";
  auto file = parseOk(text);
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(declAt<ast::RunDecl>(*file, 0).fields[0].value.text.size(), size_t(1) << 20);
}

TEST_F(ParserTest, DeepNesting) {
  EXPECT_EQ(parse(std::string(100000, '{') + std::string(100000, '}')), nullptr);
  EXPECT_EQ(parse("run r { x = " + std::string(100000, '(') + "; }"), nullptr);
  EXPECT_EQ(parse("strategy s = " + std::string(100000, '[') + ";"), nullptr);
}

TEST_F(ParserTest, RandomInputDoesNotCrash) {
  std::mt19937 random(12345);
  const char alphabet[] = "model cluster strategy run mesh pipeline import {}[]();,=:*@/ \n"
                          "\"1f1b 4.5e3B x_y // /* */ \t#\x01";
  for (int round = 0; round < 300; ++round) {
    std::string text;
    size_t length = random() % 400;
    for (size_t i = 0; i < length; ++i) {
      if (round % 3 == 0)
        text += static_cast<char>(random() % 256);
      else
        text += alphabet[random() % (sizeof(alphabet) - 1)];
    }
    llvm::SourceMgr localSourceMgr;
    DiagnosticEngine localDiags(localSourceMgr);
    localDiags.setQuiet(true);
    unsigned id = localSourceMgr.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(text, "random.place"), llvm::SMLoc());
    auto file = parseBuffer(id, localDiags);
    EXPECT_EQ(file == nullptr, localDiags.hasErrors());
  }
}

TEST_F(ParserTest, TenThousandLinesParseQuickly) {
  std::string text;
  for (int i = 0; i < 2500; ++i) {
    std::string n = std::to_string(i);
    switch (i % 4) {
    case 0:
      text += "model m" + n + " : transformer {\n  layers = 48; hidden = 1600; heads = 25;\n" +
              "  seq = 1024; vocab = 50257; // a comment\n}\n";
      break;
    case 1:
      text += "cluster c" + n + " {\n  nodes = 8; devices_per_node = 8;\n" +
              "  device_memory = 80 GiB; intra_bandwidth = 300 GB/s;\n}\n";
      break;
    case 2:
      text += "strategy s" + n + " {\n  mesh [pp = 4, dp = 16, tp = 8];\n" +
              "  params = gather(dp, keep_after_forward = true), shard(tp) @ device;\n}\n";
      break;
    default:
      text += "run r" + n + " {\n  model = m; cluster = c; strategy = zero3(dp = 64);\n" +
              "  precision = mixed(bf16); optimizer = sgd(momentum = true);\n}\n";
      break;
    }
  }
  auto start = std::chrono::steady_clock::now();
  auto file = parseOk(text);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->decls.size(), 2500u);
  // The budget is 100 ms on one core in an optimized build; this bound leaves room for debug and
  // sanitizer builds and busy machines, and still catches anything quadratic.
  EXPECT_LT(ms, 2000.0);
}

} // namespace

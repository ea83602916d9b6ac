// Unit tests for the IR: tensor lists and parameter counts against closed forms, mesh geometry
// against brute force, bytes per state, and the textual printer.
#include "placec/ir/IR.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

using namespace placec::ir;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

TransformerConfig gptConfig(int64_t layers, int64_t hidden, int64_t vocab, int64_t seq) {
  TransformerConfig config;
  config.layers = layers;
  config.hidden = hidden;
  config.heads = 16;
  config.seq = seq;
  config.vocab = vocab;
  config.ffn = 4 * hidden;
  return config;
}

TransformerConfig llama27bConfig() {
  TransformerConfig config;
  config.layers = 32;
  config.hidden = 4096;
  config.heads = 32;
  config.seq = 4096;
  config.vocab = 32000;
  config.ffn = 11008;
  config.mlp = MlpActivation::Swiglu;
  config.norm = NormKind::RmsNorm;
  config.bias = false;
  config.positions = PositionKind::Rope;
  config.tiedEmbeddings = false;
  return config;
}

Model makeTransformer(const TransformerConfig &config, std::string name = "m") {
  Model model;
  model.name = std::move(name);
  model.kind = ModelKind::Transformer;
  model.transformer = config;
  model.tensors = buildTransformerTensors(config);
  model.numParams = model.getTensorParams();
  return model;
}

Model makeMlp(const MlpConfig &config, std::string name = "m") {
  Model model;
  model.name = std::move(name);
  model.kind = ModelKind::Mlp;
  model.mlp = config;
  model.tensors = buildMlpTensors(config);
  model.numParams = model.getTensorParams();
  return model;
}

Mesh makeMesh(std::vector<std::pair<std::string, int64_t>> axes, AxisKind kind = AxisKind::Batch) {
  Mesh mesh;
  for (auto &[name, size] : axes) {
    Axis axis;
    axis.name = name;
    axis.size = size;
    axis.kind = name == "tp" ? AxisKind::Tensor : name == "pp" ? AxisKind::Layers : kind;
    mesh.axes.push_back(axis);
  }
  return mesh;
}

const Tensor *findTensor(const std::vector<Tensor> &tensors, llvm::StringRef name) {
  for (const Tensor &tensor : tensors)
    if (tensor.name == name)
      return &tensor;
  return nullptr;
}

/// The part of a tensor name after `layers.<l>.`, or the whole name outside the layers.
std::string localName(const Tensor &tensor) {
  llvm::StringRef name = tensor.name;
  if (!name.consume_front("layers."))
    return tensor.name;
  return name.split('.').second.str();
}

//===----------------------------------------------------------------------===//
// Spellings
//===----------------------------------------------------------------------===//

TEST(IRSpellingTest, EnumsUseTheLanguageSpellings) {
  EXPECT_EQ(toString(TensorSplit::Column), "column");
  EXPECT_EQ(toString(TensorSplit::Row), "row");
  EXPECT_EQ(toString(TensorSplit::Vocabulary), "vocabulary");
  EXPECT_EQ(toString(TensorSplit::Replicated), "replicated");
  EXPECT_EQ(toString(ModelKind::Transformer), "transformer");
  EXPECT_EQ(toString(ModelKind::Mlp), "mlp");
  EXPECT_EQ(toString(ModelKind::Abstract), "abstract");
  EXPECT_EQ(toString(MlpActivation::Gelu), "gelu");
  EXPECT_EQ(toString(MlpActivation::Swiglu), "swiglu");
  EXPECT_EQ(toString(MlpActivation::Relu2), "relu2");
  EXPECT_EQ(toString(NormKind::LayerNorm), "layernorm");
  EXPECT_EQ(toString(NormKind::RmsNorm), "rmsnorm");
  EXPECT_EQ(toString(PositionKind::Learned), "learned");
  EXPECT_EQ(toString(PositionKind::Rope), "rope");
  EXPECT_EQ(toString(AxisKind::Batch), "batch");
  EXPECT_EQ(toString(AxisKind::Tensor), "tensor");
  EXPECT_EQ(toString(AxisKind::Layers), "layers");
  EXPECT_EQ(toString(State::Params), "params");
  EXPECT_EQ(toString(State::Grads), "grads");
  EXPECT_EQ(toString(State::Optimizer), "optimizer");
  EXPECT_EQ(toString(State::Activations), "activations");
  EXPECT_EQ(toString(PlacementMode::Replicated), "replicate");
  EXPECT_EQ(toString(PlacementMode::Sharded), "shard");
  EXPECT_EQ(toString(PlacementMode::ShardedWithGather), "gather");
  EXPECT_EQ(toString(PlacementMode::TensorSplit), "tensor-split");
  EXPECT_EQ(toString(PlacementMode::StageSplit), "stage-split");
  EXPECT_EQ(toString(PlacementMode::BatchSplit), "batch-split");
  EXPECT_EQ(toString(Tier::Device), "device");
  EXPECT_EQ(toString(Tier::Host), "host");
  EXPECT_EQ(toString(Tier::Nvme), "nvme");
  EXPECT_EQ(toString(ActivationMode::Keep), "keep");
  EXPECT_EQ(toString(ActivationMode::RecomputeSelective), "recompute(selective)");
  EXPECT_EQ(toString(ActivationMode::RecomputeFull), "recompute");
  EXPECT_EQ(toString(Schedule::OneFOneB), "1f1b");
  EXPECT_EQ(toString(Schedule::GPipe), "gpipe");
  EXPECT_EQ(toString(Schedule::Interleaved), "interleaved");
  EXPECT_EQ(toString(Precision::MixedBF16), "mixed(bf16)");
  EXPECT_EQ(toString(Precision::MixedFP16), "mixed(fp16)");
  EXPECT_EQ(toString(Precision::FP32), "fp32");
  EXPECT_EQ(toString(OptimizerKind::Adam), "adam");
  EXPECT_EQ(toString(OptimizerKind::Sgd), "sgd");
  EXPECT_EQ(toString(OptimizerKind::SgdMomentum), "sgd(momentum = true)");
}

//===----------------------------------------------------------------------===//
// Transformer parameter counts
//===----------------------------------------------------------------------===//

/// Narayanan et al.: P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)), evaluated in floating point.
double narayananClosedForm(double l, double h, double v, double s) {
  return 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h));
}

TEST(TransformerTest, GptDefaultsMatchTheClosedForms) {
  struct Case {
    int64_t l, h, v, s;
  };
  for (Case c :
       {Case{1, 8, 100, 16}, Case{2, 64, 1000, 128}, Case{12, 768, 50257, 1024},
        Case{24, 2304, 51200, 2048}, Case{48, 1600, 50257, 1024}, Case{96, 12288, 51200, 2048}}) {
    SCOPED_TRACE(testing::Message() << "l=" << c.l << " h=" << c.h);
    Model model = makeTransformer(gptConfig(c.l, c.h, c.v, c.s));
    EXPECT_EQ(model.getLayerParams(), 12 * c.l * c.h * c.h + 13 * c.l * c.h);
    EXPECT_EQ(model.getEmbeddingParams(), (c.v + c.s) * c.h);
    EXPECT_EQ(model.getHeadParams(), 2 * c.h);
    EXPECT_EQ(model.numParams,
              model.getLayerParams() + model.getEmbeddingParams() + model.getHeadParams());
    double closedForm = narayananClosedForm(c.l, c.h, c.v, c.s);
    double narayanan = static_cast<double>(model.getLayerParams() + model.getEmbeddingParams());
    EXPECT_NEAR(narayanan / closedForm, 1.0, 1e-12);
  }
}

TEST(TransformerTest, ReferenceNumbers) {
  // REFERENCE-NUMBERS.md §3: 1.65B (their table rounds to 1.7B).
  Model small = makeTransformer(gptConfig(24, 2304, 51200, 2048));
  int64_t smallCount = small.getLayerParams() + small.getEmbeddingParams();
  EXPECT_EQ(std::llround(smallCount / 1e7), 165);
  EXPECT_EQ(smallCount, 1652226048);

  // 1008.0B to four significant figures.
  Model large = makeTransformer(gptConfig(128, 25600, 51200, 2048));
  int64_t largeCount = large.getLayerParams() + large.getEmbeddingParams();
  EXPECT_EQ(std::llround(largeCount / 1e9), 1008);
  EXPECT_EQ(largeCount, int64_t{1008038707200});
}

TEST(TransformerTest, Gpt2Xl) {
  TransformerConfig config = gptConfig(48, 1600, 50257, 1024);
  config.heads = 25;
  Model model = makeTransformer(config);
  EXPECT_EQ(model.getLayerParams(), 1475558400);
  EXPECT_EQ(model.getEmbeddingParams(), 82049600);
  EXPECT_EQ(model.getHeadParams(), 3200);
  EXPECT_EQ(model.numParams, 1557611200);
  // 2 embeddings, 12 tensors per layer, 2 final-norm tensors.
  EXPECT_EQ(model.tensors.size(), 2u + 48u * 12u + 2u);
}

TEST(TransformerTest, Llama27b) {
  Model model = makeTransformer(llama27bConfig());
  EXPECT_EQ(model.numParams, int64_t{6738415616});
  EXPECT_EQ(model.getEmbeddingParams(), 32000 * 4096);
  EXPECT_EQ(model.getHeadParams(), 4096 + 32000 * 4096);
  // Per layer: two norms, qkv, proj, gate, up, down.
  EXPECT_EQ(model.getLayerParams(), 32 * (2 * 4096 + 4 * 4096 * 4096 + 3 * int64_t{11008} * 4096));
  EXPECT_EQ(model.tensors.size(), 1u + 32u * 7u + 2u);
  EXPECT_EQ(findTensor(model.tensors, "embed.positions"), nullptr);
  EXPECT_EQ(findTensor(model.tensors, "final_norm.bias"), nullptr);
  const Tensor *output = findTensor(model.tensors, "output.weight");
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(output->split, TensorSplit::Vocabulary);
  EXPECT_EQ(output->layer, 32);
  EXPECT_EQ(output->shape, (std::vector<int64_t>{32000, 4096}));
}

TEST(TransformerTest, FfnZeroMeansFourTimesHidden) {
  TransformerConfig config = gptConfig(2, 64, 1000, 128);
  config.ffn = 0;
  EXPECT_EQ(makeTransformer(config).numParams,
            makeTransformer(gptConfig(2, 64, 1000, 128)).numParams);
}

TEST(TransformerTest, GeluTensorsHaveTheDocumentedSplits) {
  const std::map<std::string, TensorSplit> expected = {
      {"embed.tokens", TensorSplit::Vocabulary},      {"embed.positions", TensorSplit::Replicated},
      {"ln1.weight", TensorSplit::Replicated},        {"ln1.bias", TensorSplit::Replicated},
      {"attn.qkv.weight", TensorSplit::Column},       {"attn.qkv.bias", TensorSplit::Column},
      {"attn.proj.weight", TensorSplit::Row},         {"attn.proj.bias", TensorSplit::Replicated},
      {"ln2.weight", TensorSplit::Replicated},        {"ln2.bias", TensorSplit::Replicated},
      {"mlp.fc.weight", TensorSplit::Column},         {"mlp.fc.bias", TensorSplit::Column},
      {"mlp.proj.weight", TensorSplit::Row},          {"mlp.proj.bias", TensorSplit::Replicated},
      {"final_norm.weight", TensorSplit::Replicated}, {"final_norm.bias", TensorSplit::Replicated},
      {"output.weight", TensorSplit::Vocabulary},
  };
  TransformerConfig config = gptConfig(3, 16, 50, 8);
  config.ffn = 40;
  config.tiedEmbeddings = false;
  std::vector<Tensor> tensors = buildTransformerTensors(config);
  std::set<std::string> seen, names;
  for (const Tensor &tensor : tensors) {
    SCOPED_TRACE(tensor.name);
    EXPECT_TRUE(names.insert(tensor.name).second) << "duplicate tensor name";
    std::string local = localName(tensor);
    auto it = expected.find(local);
    ASSERT_NE(it, expected.end()) << "undocumented tensor";
    EXPECT_EQ(tensor.split, it->second);
    seen.insert(local);
    int64_t product = 1;
    for (int64_t extent : tensor.shape)
      product *= extent;
    EXPECT_EQ(tensor.numElements, product);
  }
  EXPECT_EQ(seen.size(), expected.size());

  // Shapes: weights are [out, in].
  auto shapeOf = [&](llvm::StringRef name) {
    const Tensor *tensor = findTensor(tensors, name);
    return tensor ? tensor->shape : std::vector<int64_t>{};
  };
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(shapeOf("embed.tokens"), (Shape{50, 16}));
  EXPECT_EQ(shapeOf("embed.positions"), (Shape{8, 16}));
  EXPECT_EQ(shapeOf("layers.1.attn.qkv.weight"), (Shape{48, 16}));
  EXPECT_EQ(shapeOf("layers.1.attn.qkv.bias"), (Shape{48}));
  EXPECT_EQ(shapeOf("layers.1.attn.proj.weight"), (Shape{16, 16}));
  EXPECT_EQ(shapeOf("layers.1.mlp.fc.weight"), (Shape{40, 16}));
  EXPECT_EQ(shapeOf("layers.1.mlp.fc.bias"), (Shape{40}));
  EXPECT_EQ(shapeOf("layers.1.mlp.proj.weight"), (Shape{16, 40}));
  EXPECT_EQ(shapeOf("layers.2.mlp.proj.bias"), (Shape{16}));
  EXPECT_EQ(shapeOf("final_norm.bias"), (Shape{16}));
  EXPECT_EQ(shapeOf("output.weight"), (Shape{50, 16}));

  // Layer tags: -1 before, 0..L-1 inside, L after.
  EXPECT_EQ(findTensor(tensors, "embed.tokens")->layer, -1);
  EXPECT_EQ(findTensor(tensors, "layers.2.ln2.bias")->layer, 2);
  EXPECT_EQ(findTensor(tensors, "final_norm.weight")->layer, 3);
  // Model order: embeddings, then layer by layer, then the head.
  EXPECT_EQ(tensors.front().name, "embed.tokens");
  EXPECT_EQ(tensors[2].name, "layers.0.ln1.weight");
  EXPECT_EQ(tensors.back().name, "output.weight");
  for (size_t i = 1; i < tensors.size(); ++i)
    EXPECT_LE(tensors[i - 1].layer, tensors[i].layer);
}

TEST(TransformerTest, SwigluTensorsHaveTheDocumentedSplits) {
  TransformerConfig config = llama27bConfig();
  config.layers = 2;
  config.bias = true;
  std::vector<Tensor> tensors = buildTransformerTensors(config);
  const std::map<std::string, TensorSplit> expected = {
      {"mlp.gate.weight", TensorSplit::Column}, {"mlp.gate.bias", TensorSplit::Column},
      {"mlp.up.weight", TensorSplit::Column},   {"mlp.up.bias", TensorSplit::Column},
      {"mlp.down.weight", TensorSplit::Row},    {"mlp.down.bias", TensorSplit::Replicated},
  };
  for (const auto &[local, split] : expected) {
    const Tensor *tensor = findTensor(tensors, "layers.1." + local);
    ASSERT_NE(tensor, nullptr) << local;
    EXPECT_EQ(tensor->split, split) << local;
  }
  EXPECT_EQ(findTensor(tensors, "layers.1.mlp.down.weight")->shape,
            (std::vector<int64_t>{4096, 11008}));
  EXPECT_EQ(findTensor(tensors, "layers.0.ln1.bias"), nullptr);
  EXPECT_EQ(findTensor(tensors, "layers.0.mlp.fc.weight"), nullptr);
}

TEST(TransformerTest, SplitTotalsAddUp) {
  Model model = makeTransformer(gptConfig(4, 32, 100, 16));
  int64_t h = 32, ffn = 128, l = 4;
  EXPECT_EQ(model.getParamsWithSplit(TensorSplit::Column), l * (3 * h * h + 3 * h + ffn * h + ffn));
  EXPECT_EQ(model.getParamsWithSplit(TensorSplit::Row), l * (h * h + h * ffn));
  EXPECT_EQ(model.getParamsWithSplit(TensorSplit::Vocabulary), 100 * h);
  EXPECT_EQ(model.getParamsWithSplit(TensorSplit::Replicated), l * 6 * h + 16 * h + 2 * h);
}

TEST(TransformerTest, HugeShapesSaturateInsteadOfOverflowing) {
  TransformerConfig config = gptConfig(1, int64_t{1} << 40, int64_t{1} << 40, 8);
  Model model = makeTransformer(config);
  const Tensor *qkv = findTensor(model.tensors, "layers.0.attn.qkv.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->numElements, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(model.numParams, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(model.getLayerParams(), std::numeric_limits<int64_t>::max());
}

//===----------------------------------------------------------------------===//
// MLP and abstract models
//===----------------------------------------------------------------------===//

TEST(MlpTest, ShapesAndMegatronPairs) {
  Model model = makeMlp({/*layers=*/4, /*width=*/256, /*input=*/64, /*output=*/16});
  ASSERT_EQ(model.tensors.size(), 8u);
  using Shape = std::vector<int64_t>;
  const Shape weights[] = {{256, 64}, {256, 256}, {256, 256}, {16, 256}};
  const TensorSplit splits[] = {TensorSplit::Column, TensorSplit::Row, TensorSplit::Column,
                                TensorSplit::Row};
  const TensorSplit biasSplits[] = {TensorSplit::Column, TensorSplit::Replicated,
                                    TensorSplit::Column, TensorSplit::Replicated};
  for (int i = 0; i < 4; ++i) {
    const Tensor &weight = model.tensors[2 * i];
    const Tensor &bias = model.tensors[2 * i + 1];
    EXPECT_EQ(weight.name, (llvm::Twine("layers.") + llvm::Twine(i) + ".weight").str());
    EXPECT_EQ(bias.name, (llvm::Twine("layers.") + llvm::Twine(i) + ".bias").str());
    EXPECT_EQ(weight.shape, weights[i]);
    EXPECT_EQ(bias.shape, Shape{weights[i][0]});
    EXPECT_EQ(weight.split, splits[i]);
    EXPECT_EQ(bias.split, biasSplits[i]);
    EXPECT_EQ(weight.layer, i);
    EXPECT_EQ(bias.layer, i);
  }
  EXPECT_EQ(model.numParams, 64 * 256 + 256 + 2 * (256 * 256 + 256) + 256 * 16 + 16);
  EXPECT_EQ(model.getLayerParams(), model.numParams);
  EXPECT_EQ(model.getEmbeddingParams(), 0);
  EXPECT_EQ(model.getHeadParams(), 0);
}

TEST(MlpTest, TrailingUnpairedLayerIsReplicated) {
  for (int64_t layers = 1; layers <= 7; ++layers) {
    SCOPED_TRACE(layers);
    Model model = makeMlp({layers, 32, 8, 4});
    ASSERT_EQ(model.tensors.size(), static_cast<size_t>(2 * layers));
    for (int64_t i = 0; i < layers; ++i) {
      TensorSplit weight = model.tensors[2 * i].split;
      TensorSplit bias = model.tensors[2 * i + 1].split;
      if (i % 2 == 1) {
        EXPECT_EQ(weight, TensorSplit::Row);
        EXPECT_EQ(bias, TensorSplit::Replicated);
      } else if (i + 1 < layers) {
        EXPECT_EQ(weight, TensorSplit::Column);
        EXPECT_EQ(bias, TensorSplit::Column);
      } else {
        EXPECT_EQ(layers % 2, 1);
        EXPECT_EQ(weight, TensorSplit::Replicated);
        EXPECT_EQ(bias, TensorSplit::Replicated);
      }
    }
    // Input and output ends.
    EXPECT_EQ(model.tensors.front().shape.back(), 8);
    EXPECT_EQ(model.tensors[2 * layers - 2].shape.front(), 4);
  }
  Model single = makeMlp({1, 32, 8, 4});
  EXPECT_EQ(single.tensors[0].shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(single.numParams, 4 * 8 + 4);
}

TEST(ModelTest, AbstractModelHasNoTensors) {
  Model model;
  model.kind = ModelKind::Abstract;
  model.numParams = 7500000000;
  EXPECT_EQ(model.getNumLayers(), 0);
  EXPECT_EQ(model.getLayerParams(), 0);
  EXPECT_EQ(model.getEmbeddingParams(), 0);
  EXPECT_EQ(model.getHeadParams(), 0);
  EXPECT_EQ(model.getTensorParams(), 0);
}

//===----------------------------------------------------------------------===//
// Meshes
//===----------------------------------------------------------------------===//

TEST(MeshTest, StridesDegreesAndLookup) {
  Mesh mesh = makeMesh({{"pp", 4}, {"dp", 16}, {"tp", 8}});
  EXPECT_EQ(mesh.getNumDevices(), 512);
  EXPECT_EQ(mesh.findAxis("pp"), 0);
  EXPECT_EQ(mesh.findAxis("tp"), 2);
  EXPECT_EQ(mesh.findAxis("ep"), -1);
  EXPECT_EQ(mesh.getStride(0), 128);
  EXPECT_EQ(mesh.getStride(1), 8);
  EXPECT_EQ(mesh.getStride(2), 1);
  EXPECT_EQ(mesh.getDegree(AxisKind::Batch), 16);
  EXPECT_EQ(mesh.getDegree(AxisKind::Tensor), 8);
  EXPECT_EQ(mesh.getDegree(AxisKind::Layers), 4);
  EXPECT_EQ(makeMesh({{"node", 8}, {"gpu", 8}}).getDegree(AxisKind::Batch), 64);
  EXPECT_EQ(makeMesh({{"dp", 8}}).getDegree(AxisKind::Tensor), 1);
  EXPECT_EQ(Mesh().getNumDevices(), 1);

  EXPECT_EQ(mesh.getNumGroups(1), 32);
  EXPECT_EQ(mesh.getGroup(1, 0), (std::vector<int64_t>{0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88,
                                                       96, 104, 112, 120}));
  EXPECT_EQ(mesh.getGroup(1, 9).front(), 129);
  EXPECT_TRUE(mesh.isIntraNode(2, 8));
  EXPECT_FALSE(mesh.isIntraNode(1, 8));
  EXPECT_FALSE(mesh.isIntraNode(0, 8));
}

/// Every mesh of up to three axes with sizes in [1, 4], in a deterministic order.
std::vector<std::vector<int64_t>> smallMeshShapes() {
  std::vector<std::vector<int64_t>> shapes;
  for (int64_t a = 1; a <= 4; ++a) {
    shapes.push_back({a});
    for (int64_t b = 1; b <= 4; ++b) {
      shapes.push_back({a, b});
      for (int64_t c = 1; c <= 4; ++c)
        shapes.push_back({a, b, c});
    }
  }
  return shapes;
}

Mesh meshOfShape(const std::vector<int64_t> &shape) {
  Mesh mesh;
  for (size_t i = 0; i < shape.size(); ++i) {
    Axis axis;
    axis.name = (llvm::Twine("a") + llvm::Twine(i)).str();
    axis.size = shape[i];
    mesh.axes.push_back(axis);
  }
  return mesh;
}

TEST(MeshTest, GroupsMatchBruteForce) {
  for (const std::vector<int64_t> &shape : smallMeshShapes()) {
    Mesh mesh = meshOfShape(shape);
    int64_t devices = mesh.getNumDevices();
    for (unsigned axis = 0; axis < shape.size(); ++axis) {
      // Brute force: decode every rank into row-major coordinates and group the ranks by their
      // coordinates on the other axes.
      std::map<std::vector<int64_t>, std::vector<int64_t>> byOtherCoords;
      for (int64_t rank = 0; rank < devices; ++rank) {
        std::vector<int64_t> coords(shape.size());
        int64_t rest = rank;
        for (size_t i = shape.size(); i-- > 0;) {
          coords[i] = rest % shape[i];
          rest /= shape[i];
        }
        coords[axis] = -1;
        byOtherCoords[coords].push_back(rank);
      }
      std::vector<std::vector<int64_t>> expected;
      for (auto &[coords, group] : byOtherCoords)
        expected.push_back(group);
      std::sort(expected.begin(), expected.end());

      std::vector<std::vector<int64_t>> groups = mesh.getGroups(axis);
      EXPECT_EQ(groups, expected) << "mesh of " << shape.size() << " axes, axis " << axis;
      EXPECT_EQ(mesh.getNumGroups(axis), static_cast<int64_t>(expected.size()));
      for (const std::vector<int64_t> &group : groups)
        for (size_t k = 1; k < group.size(); ++k)
          EXPECT_EQ(group[k] - group[k - 1], mesh.getStride(axis));
    }
  }
}

TEST(MeshTest, IntraNodeMatchesBruteForce) {
  int checked = 0;
  for (const std::vector<int64_t> &shape : smallMeshShapes()) {
    Mesh mesh = meshOfShape(shape);
    for (unsigned axis = 0; axis < shape.size(); ++axis) {
      std::vector<std::vector<int64_t>> groups = mesh.getGroups(axis);
      // Node sizes that divide the device count (as `mesh-size` guarantees) and ones that do not.
      for (int64_t perNode = 1; perNode <= 70; ++perNode) {
        bool expected = true;
        for (const std::vector<int64_t> &group : groups)
          for (int64_t rank : group)
            expected &= rank / perNode == group.front() / perNode;
        EXPECT_EQ(mesh.isIntraNode(axis, perNode), expected)
            << "axis " << axis << " of " << shape.size() << ", " << perNode << " per node";
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

TEST(MeshTest, IntraNodeOnLargeMeshes) {
  // [pp = 4, dp = 32, tp = 8] on 8-device nodes: tp inside a node, dp and pp across nodes.
  Mesh mesh = makeMesh({{"pp", 4}, {"dp", 32}, {"tp", 8}});
  EXPECT_TRUE(mesh.isIntraNode(2, 8));
  EXPECT_FALSE(mesh.isIntraNode(1, 8));
  EXPECT_FALSE(mesh.isIntraNode(0, 8));
  // hsdp(shard = 8, replicate = 128): the shard axis fills a node.
  Mesh hsdp = makeMesh({{"dp_replicate", 128}, {"dp_shard", 8}});
  EXPECT_TRUE(hsdp.isIntraNode(1, 8));
  EXPECT_FALSE(hsdp.isIntraNode(1, 4));
  EXPECT_FALSE(hsdp.isIntraNode(0, 8));
  EXPECT_TRUE(hsdp.isIntraNode(0, 1024));
  // A size-1 axis is intra-node wherever it sits.
  Mesh withUnit = makeMesh({{"dp", 1024}, {"tp", 1}});
  EXPECT_TRUE(withUnit.isIntraNode(1, 8));
}

TEST(PlacementTest, DegreeOfAMode) {
  Mesh mesh = makeMesh({{"pp", 2}, {"node", 4}, {"gpu", 8}, {"tp", 2}});
  StatePlacement placement;
  placement.axes.resize(4);
  placement.axes[0].mode = PlacementMode::StageSplit;
  placement.axes[1].mode = PlacementMode::ShardedWithGather;
  placement.axes[2].mode = PlacementMode::ShardedWithGather;
  placement.axes[3].mode = PlacementMode::TensorSplit;
  EXPECT_EQ(placement.getDegree(mesh, PlacementMode::ShardedWithGather), 32);
  EXPECT_EQ(placement.getDegree(mesh, PlacementMode::StageSplit), 2);
  EXPECT_EQ(placement.getDegree(mesh, PlacementMode::TensorSplit), 2);
  EXPECT_EQ(placement.getDegree(mesh, PlacementMode::Sharded), 1);
  placement.axes[2].mode = PlacementMode::Replicated;
  EXPECT_EQ(placement.getDegree(mesh, PlacementMode::ShardedWithGather), 4);
  EXPECT_EQ(placement.getDegree(mesh, PlacementMode::Replicated), 8);
}

//===----------------------------------------------------------------------===//
// Bytes per state
//===----------------------------------------------------------------------===//

TEST(StateBytesTest, LanguageTable) {
  struct Row {
    Precision precision;
    OptimizerKind optimizer;
    unsigned params, grads, optimizerBytes;
  };
  const Row table[] = {
      {Precision::MixedBF16, OptimizerKind::Adam, 2, 2, 12},
      {Precision::MixedFP16, OptimizerKind::Adam, 2, 2, 12},
      {Precision::FP32, OptimizerKind::Adam, 4, 4, 8},
      {Precision::MixedBF16, OptimizerKind::SgdMomentum, 2, 2, 8},
      {Precision::MixedFP16, OptimizerKind::SgdMomentum, 2, 2, 8},
      {Precision::MixedBF16, OptimizerKind::Sgd, 2, 2, 4},
      {Precision::MixedFP16, OptimizerKind::Sgd, 2, 2, 4},
      {Precision::FP32, OptimizerKind::SgdMomentum, 4, 4, 4},
      {Precision::FP32, OptimizerKind::Sgd, 4, 4, 0},
  };
  for (const Row &row : table) {
    SCOPED_TRACE(testing::Message()
                 << toString(row.precision).str() << " " << toString(row.optimizer).str());
    StateBytes bytes = getStateBytes(row.precision, row.optimizer, false, false);
    EXPECT_EQ(bytes.params, row.params);
    EXPECT_EQ(bytes.grads, row.grads);
    EXPECT_EQ(bytes.optimizer, row.optimizerBytes);
  }
  // `grads = fp32` (LANGUAGE.md's table with 4-byte gradients): only the gradients change, and
  // under fp32 they are 4 bytes either way.
  for (Precision precision :
       {Precision::MixedBF16, Precision::MixedFP16, Precision::MixedFP8, Precision::FP32}) {
    StateBytes plain = getStateBytes(precision, OptimizerKind::Adam, false, false);
    StateBytes fp32 = getStateBytes(precision, OptimizerKind::Adam, true, false);
    EXPECT_EQ(fp32.grads, 4u) << toString(precision).str();
    EXPECT_EQ(fp32.params, plain.params) << toString(precision).str();
    EXPECT_EQ(fp32.optimizer, plain.optimizer) << toString(precision).str();
  }
  // `params = fp32` (PyTorch's mixed precision over fp32 modules): the parameters are the
  // master weights, 4 bytes, with 4-byte gradients, and the optimizer keeps no copy of its own:
  // the fp32 row of the table for every optimizer, also under mixed(fp8) (no FP8 weight cache).
  for (Precision precision : {Precision::MixedBF16, Precision::MixedFP16, Precision::MixedFP8})
    for (const Row &row : table) {
      if (row.precision != Precision::FP32)
        continue;
      StateBytes bytes = getStateBytes(precision, row.optimizer, true, true);
      SCOPED_TRACE(testing::Message()
                   << toString(precision).str() << " " << toString(row.optimizer).str());
      EXPECT_EQ(bytes.params, row.params);
      EXPECT_EQ(bytes.grads, row.grads);
      EXPECT_EQ(bytes.optimizer, row.optimizerBytes);
      EXPECT_TRUE(bytes.masterParams);
    }
  EXPECT_FALSE(getStateBytes(Precision::MixedBF16, OptimizerKind::Adam, true, false).masterParams);
  EXPECT_TRUE(getStateBytes(Precision::FP32, OptimizerKind::Adam, false, false).masterParams);
  EXPECT_EQ(spellPrecision(Precision::MixedBF16, false, true, false), "mixed(bf16, grads = fp32)");
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, true, true, false),
            "mixed(fp8, gather = fp8, grads = fp32)");
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, true, false, false), "mixed(fp8, gather = fp8)");
  EXPECT_EQ(spellPrecision(Precision::MixedBF16, false, true, true), "mixed(bf16, params = fp32)");
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, true, true, true),
            "mixed(fp8, gather = fp8, params = fp32)");
  EXPECT_EQ(spellPrecision(Precision::FP32, false, false, false), "fp32");
  // `saved = fp8` is an option of mixed(fp8) only, written after `gather`.
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, false, false, false, true),
            "mixed(fp8, saved = fp8)");
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, true, true, false, true),
            "mixed(fp8, gather = fp8, saved = fp8, grads = fp32)");
  EXPECT_EQ(spellPrecision(Precision::MixedBF16, false, false, false, true), "mixed(bf16)");
  // `scaling = mx` is an option of mixed(fp8) only, written first; `tensor` is the default.
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, false, false, false, true, Fp8Scaling::Mx),
            "mixed(fp8, scaling = mx, saved = fp8)");
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, false, false, false, false, Fp8Scaling::Mx),
            "mixed(fp8, scaling = mx)");
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, false, false, false, false, Fp8Scaling::Tensor),
            "mixed(fp8)");
  EXPECT_EQ(spellPrecision(Precision::MixedBF16, false, false, false, false, Fp8Scaling::Mx),
            "mixed(bf16)");
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, true, false, false, true, Fp8Scaling::Current),
            "mixed(fp8, scaling = current, gather = fp8, saved = fp8)");
  // Current scaling caches the weights as delayed scaling does: one byte beside the bf16 weight.
  EXPECT_DOUBLE_EQ(
      getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, false, false, Fp8Scaling::Current)
          .params,
      3);
  // MXFP8's weight cache: two copies of one E4M3 byte and a 32nd of an E8M0 scale each (OCP MX
  // v1.0, block size 32), beside the bf16 weight: 2 + 2·(1 + 1/32) = 4.0625 bytes.
  EXPECT_DOUBLE_EQ(
      getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, false, false, Fp8Scaling::Mx).params,
      4.0625);
  // Over fp32 parameters nothing is cached, whatever the scaling.
  EXPECT_DOUBLE_EQ(
      getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, true, true, Fp8Scaling::Mx).params,
      4);
  // `params = fp8` (Megatron-Core's --fp8-param-gather under MXFP8): the two copies alone, with no
  // bf16 weight beside them, 2·(1 + 1/32) = 2.0625 bytes; the optimizer keeps its fp32 master
  // copy and moments (12 bytes), the gradients stay bf16.
  StateBytes mxParams = getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, false, false,
                                      Fp8Scaling::Mx, {}, /*fp8Params=*/true);
  EXPECT_DOUBLE_EQ(mxParams.params, 2.0625);
  EXPECT_EQ(mxParams.grads, 2u);
  EXPECT_EQ(mxParams.optimizer, 12u);
  EXPECT_FALSE(mxParams.masterParams);
  EXPECT_EQ(
      spellPrecision(Precision::MixedFP8, false, false, false, true, Fp8Scaling::Mx, false, true),
      "mixed(fp8, scaling = mx, saved = fp8, params = fp8)");
  // NVFP4 parameters alone (`params = fp4`, --fp4-param-gather): the two copies of half a byte
  // and a 16th of a byte of scales each, 2·(0.5 + 1/16) = 1.125 bytes, where the bf16 weight and
  // its cast take 2 + 1.125.
  EXPECT_DOUBLE_EQ(getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, false, false,
                                 Fp8Scaling::Nvfp4, {}, /*fp8Params=*/true)
                       .params,
                   1.125);
  EXPECT_DOUBLE_EQ(
      getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, false, false, Fp8Scaling::Nvfp4)
          .params,
      3.125);
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, false, false, false, true, Fp8Scaling::Nvfp4, false,
                           true),
            "mixed(fp4, params = fp4)");
  // Under one scale per tensor (--fp8-param-gather under delayed or tensorwise scaling) the
  // parameters are their one-byte FP8 data alone, where the bf16 weight and its cast take 3 bytes;
  // the master copy and moments stay, and the spelling says the FP8 all-gathers.
  for (Fp8Scaling scaling : {Fp8Scaling::Tensor, Fp8Scaling::Current}) {
    StateBytes tensorParams = getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, false, false,
                                            scaling, {}, /*fp8Params=*/true);
    EXPECT_DOUBLE_EQ(tensorParams.params, 1);
    EXPECT_DOUBLE_EQ(tensorParams.gathered, 1);
    EXPECT_EQ(tensorParams.grads, 2u);
    EXPECT_EQ(tensorParams.optimizer, 12u);
  }
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, true, false, false, true, Fp8Scaling::Current,
                           false, true),
            "mixed(fp8, scaling = current, gather = fp8, saved = fp8, params = fp8)");
  // Where the FP8 products take one layout (Hopper) a copy of one scale per tensor keeps its
  // transpose too: 2 + 1 + 1 bytes beside the bf16 weight, 1 + 1 alone; MXFP8's two copies, and
  // fp32 parameters (no cache), are the same either way.
  struct TransposedCase {
    Fp8Scaling scaling;
    bool fp32Params, fp8Params;
    double params;
  };
  for (const TransposedCase &item : {TransposedCase{Fp8Scaling::Tensor, false, false, 4},
                                     TransposedCase{Fp8Scaling::Current, false, true, 2},
                                     TransposedCase{Fp8Scaling::Mx, false, false, 4.0625},
                                     TransposedCase{Fp8Scaling::Tensor, true, false, 4}})
    EXPECT_DOUBLE_EQ(getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, item.fp32Params,
                                   item.fp32Params, item.scaling, {}, item.fp8Params,
                                   /*fp8Transposes=*/true)
                         .params,
                     item.params)
        << toString(item.scaling).str() << " " << item.fp32Params << " " << item.fp8Params;
  EXPECT_TRUE(keepsFp8Transposes(DeviceFamily::Hopper));
  EXPECT_FALSE(keepsFp8Transposes(DeviceFamily::Blackwell));
  // A parameter that no quantized product reads (the embedding, the output layer) keeps the bf16
  // weight alone, stored and gathered, under every FP8 and FP4 setting; elsewhere its bytes are
  // the others'.
  for (bool fp8Params : {false, true})
    for (Fp8Scaling scaling : {Fp8Scaling::Tensor, Fp8Scaling::Mx, Fp8Scaling::Nvfp4}) {
      StateBytes plain = getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, false, false,
                                       scaling, {}, fp8Params, /*fp8Transposes=*/true)
                             .unquantized();
      EXPECT_DOUBLE_EQ(plain.params, 2);
      EXPECT_DOUBLE_EQ(plain.gathered, 2);
      EXPECT_DOUBLE_EQ(plain.cache, 0);
      EXPECT_EQ(plain.grads, 2u);
      EXPECT_EQ(plain.optimizer, 12u);
    }
  StateBytes fp32Params =
      getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, true, true).unquantized();
  EXPECT_DOUBLE_EQ(fp32Params.params, 4);
  EXPECT_DOUBLE_EQ(fp32Params.gathered, 2);
  EXPECT_DOUBLE_EQ(
      getStateBytes(Precision::FP32, OptimizerKind::Adam, false, false).unquantized().params, 4);
  // NVFP4 is written mixed(fp4), whose saved type is its own: only `saved = bf16` is spelled.
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, false, false, false, true, Fp8Scaling::Nvfp4),
            "mixed(fp4)");
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, false, true, false, true, Fp8Scaling::Nvfp4),
            "mixed(fp4, grads = fp32)");
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, false, false, false, false, Fp8Scaling::Nvfp4),
            "mixed(fp4, saved = bf16)");
  // FP8 attention is spelled after the products' options, under mixed(fp8) and mixed(fp4) only.
  EXPECT_EQ(spellPrecision(Precision::MixedFP8, false, false, false, true, Fp8Scaling::Nvfp4, true),
            "mixed(fp4, attention = fp8)");
  EXPECT_EQ(
      spellPrecision(Precision::MixedFP8, true, true, false, true, Fp8Scaling::Current, true),
      "mixed(fp8, scaling = current, gather = fp8, saved = fp8, attention = fp8, grads = fp32)");
  EXPECT_EQ(
      spellPrecision(Precision::MixedBF16, false, false, false, false, Fp8Scaling::Tensor, true),
      "mixed(bf16)");
  // NVFP4's weight cache: two copies of a 4-bit E2M1 value and a 16th of a one-byte E4M3 scale
  // each (arXiv:2509.25149, §2: blocks of 16), beside the bf16 weight: 2 + 2·(0.5 + 1/16) =
  // 3.125 bytes.
  EXPECT_DOUBLE_EQ(
      getStateBytes(Precision::MixedFP8, OptimizerKind::Adam, false, false, Fp8Scaling::Nvfp4)
          .params,
      3.125);
  EXPECT_TRUE(isBlockScaled(Fp8Scaling::Nvfp4));
  EXPECT_TRUE(isBlockScaled(Fp8Scaling::Mx));
  EXPECT_FALSE(isBlockScaled(Fp8Scaling::Current));
  EXPECT_EQ(getActivationBytes(Precision::MixedBF16), 2u);
  EXPECT_EQ(getActivationBytes(Precision::MixedFP16), 2u);
  EXPECT_EQ(getActivationBytes(Precision::FP32), 4u);
}

TEST(IRTest, AdamStatesInBf16AndWithoutAMasterCopy) {
  // Adam keeps two moments and, over 16-bit parameters, an fp32 master copy: 2·4 + 4 = 12 bytes
  // per parameter; bf16 moments (Megatron-LM's precision-aware optimizer, DeepSeek-V3's Adam)
  // 2·2 + 4 = 8; bf16 moments without the master copy (apex's DistributedFusedAdam with dtype
  // bf16) 2·2 = 4, the step then updating the bf16 parameters themselves.
  OptimizerStates bf16Moments{2, true}, noMaster{2, false};
  StateBytes plain = getStateBytes(Precision::MixedBF16, OptimizerKind::Adam, false, false);
  StateBytes half =
      getStateBytes(Precision::MixedBF16, OptimizerKind::Adam, false, false, {}, bf16Moments);
  StateBytes bare =
      getStateBytes(Precision::MixedBF16, OptimizerKind::Adam, false, false, {}, noMaster);
  EXPECT_EQ(plain.optimizer, 12u);
  EXPECT_EQ(half.optimizer, 8u);
  EXPECT_EQ(bare.optimizer, 4u);
  EXPECT_FALSE(half.masterParams);
  EXPECT_TRUE(bare.masterParams);
  EXPECT_EQ(half.masterCopy(), 4u);
  EXPECT_EQ(bare.masterCopy(), 0u);
  EXPECT_EQ(bare.params, plain.params);
  EXPECT_EQ(bare.grads, plain.grads);
  // Over fp32 parameters there is no copy to leave out: the moments alone change.
  EXPECT_EQ(
      getStateBytes(Precision::FP32, OptimizerKind::Adam, false, false, {}, noMaster).optimizer,
      4u);
  // SGD has no Adam moments: the states change nothing.
  EXPECT_EQ(
      getStateBytes(Precision::MixedBF16, OptimizerKind::SgdMomentum, false, false, {}, noMaster)
          .optimizer,
      8u);
  EXPECT_EQ(spellOptimizer(OptimizerKind::Adam, {}), "adam");
  EXPECT_EQ(spellOptimizer(OptimizerKind::Adam, bf16Moments), "adam(moments = bf16)");
  EXPECT_EQ(spellOptimizer(OptimizerKind::Adam, noMaster), "adam(moments = bf16, master = none)");
  EXPECT_EQ(spellOptimizer(OptimizerKind::Adam, OptimizerStates{4, false}), "adam(master = none)");
}

//===----------------------------------------------------------------------===//
// Programs and the printer
//===----------------------------------------------------------------------===//

/// A small program: a 2-layer transformer, an abstract model, a 2×4 cluster, a [pp, dp, tp]
/// strategy, a mesh-less strategy, and a run.
Program makeSmallProgram() {
  Program program;
  TransformerConfig config = gptConfig(2, 8, 10, 4);
  config.heads = 2;
  program.models.push_back(std::make_unique<Model>(makeTransformer(config, "tiny")));
  auto abstract = std::make_unique<Model>();
  abstract->name = "big";
  abstract->numParams = 7500000000;
  program.models.push_back(std::move(abstract));

  auto cluster = std::make_unique<Cluster>();
  cluster->name = "pod";
  cluster->nodes = 2;
  cluster->devicesPerNode = 4;
  cluster->deviceMemory = 80.0 * (1 << 30);
  cluster->peakFlops = 312e12;
  cluster->intraBandwidth = 300e9;
  cluster->interBandwidth = 25e9;
  cluster->latency = 5e-6;
  cluster->hostMemory = 1024.0 * (1 << 30);
  program.clusters.push_back(std::move(cluster));

  auto strategy = std::make_unique<Strategy>();
  strategy->name = "ptd";
  strategy->hasMesh = true;
  strategy->mesh = makeMesh({{"pp", 2}, {"dp", 2}, {"tp", 2}});
  for (State state : kAllStates) {
    StatePlacement &placement = strategy->getPlacement(state);
    placement.axes.resize(3);
    placement.axes[0].mode = PlacementMode::StageSplit;
    placement.axes[1].mode =
        state == State::Activations ? PlacementMode::BatchSplit : PlacementMode::Replicated;
    placement.axes[2].mode = PlacementMode::TensorSplit;
  }
  StatePlacement &params = strategy->getPlacement(State::Params);
  params.axes[1].mode = PlacementMode::ShardedWithGather;
  params.axes[1].keepAfterForward = true;
  params.axes[1].isExplicit = true;
  strategy->getPlacement(State::Optimizer).tier = Tier::Host;
  strategy->getPlacement(State::Optimizer).tierExplicit = true;
  strategy->pipeline = Pipeline{
      Schedule::OneFOneB, 4, 1, 0, 0, false, false, false, {}, llvm::SMLoc(), 0, llvm::SMLoc()};
  program.strategies.push_back(std::move(strategy));

  auto meshless = std::make_unique<Strategy>();
  meshless->name = "offload_optimizer";
  meshless->getPlacement(State::Optimizer).tier = Tier::Host;
  meshless->getPlacement(State::Optimizer).tierExplicit = true;
  program.strategies.push_back(std::move(meshless));

  auto run = std::make_unique<Run>();
  run->name = "train";
  run->model = program.models[0].get();
  run->cluster = program.clusters[0].get();
  run->strategy = program.strategies[0].get();
  run->microBatch = 2;
  run->globalBatch = 16;
  run->microbatchesPerStep = 4;
  program.runs.push_back(std::move(run));
  return program;
}

std::string printToString(const Program &program) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printProgram(program, os);
  return text;
}

TEST(ProgramTest, FindByName) {
  Program program = makeSmallProgram();
  EXPECT_EQ(program.findModel("tiny"), program.models[0].get());
  EXPECT_EQ(program.findModel("big"), program.models[1].get());
  EXPECT_EQ(program.findModel("pod"), nullptr);
  EXPECT_EQ(program.findCluster("pod"), program.clusters[0].get());
  EXPECT_EQ(program.findCluster("tiny"), nullptr);
  EXPECT_EQ(program.findRun("train"), program.runs[0].get());
  EXPECT_EQ(program.findRun("nope"), nullptr);
}

TEST(PrinterTest, SmallProgram) {
  Program program = makeSmallProgram();
  std::string text = printToString(program);
  auto expectLine = [&](llvm::StringRef expected) {
    EXPECT_NE(text.find("\n" + expected.str() + "\n"), std::string::npos)
        << "missing line: " << expected.str() << "\nin:\n"
        << text;
  };
  EXPECT_EQ(text.rfind("model @tiny : transformer {\n", 0), 0u);
  expectLine("    layers = 2");
  expectLine("    ffn = 32");
  expectLine("  tensors (28) {");
  expectLine("    embed.tokens : [10, 8], elements = 80, split = vocabulary, layer = -1");
  expectLine("    layers.1.attn.qkv.weight : [24, 8], elements = 192, split = column, layer = 1");
  expectLine("    final_norm.bias : [8], elements = 8, split = replicated, layer = 2");
  // 12·2·64 + 13·2·8 = 1744; (10 + 4)·8 = 112; 2·8 = 16.
  expectLine("  params = 1872 {");
  expectLine("    layers = 1744");
  expectLine("    embeddings = 112");
  expectLine("    head = 16");
  expectLine("    narayanan = 1856 (layers + embeddings)");
  expectLine("model @big : abstract {\n  params = 7500000000");
  expectLine("  device_memory = 85899345920 B (80 GiB)");
  expectLine("  peak = 312000000000000 FLOP/s (312 TFLOPS)");
  expectLine("  inter_bandwidth = 25000000000 B/s (25 GB/s)");
  expectLine("  host_bandwidth = none");
  expectLine("  latency = 5e-06 s (5 us)");
  expectLine("  host_memory = 1099511627776 B (1 TiB)");
  expectLine("  efficiency = 0.5");
  expectLine("  mesh (devices = 8) {\n    axis pp : layers, size = 2, stride = 4");
  expectLine("  params {\n    pp = stage-split [default]\n"
             "    dp = gather(keep_after_forward = true) [explicit]\n"
             "    tp = tensor-split [default]\n    tier = device [default]\n  }");
  expectLine("    tier = host [explicit]");
  expectLine("    mode = keep [default]\n    sequence_parallel = false");
  expectLine("  pipeline = 1f1b(microbatches = 4, chunks = 1) [default]\n"
             "  context = ring [default]\n  async_tp = false [default]\n"
             "  sp_inputs = regather [default]\n  dp_overlap = grads [default]");
  expectLine("strategy @offload_optimizer {\n  mesh = none\n  params {\n"
             "    tier = device [default]");
  expectLine("  strategy = @ptd");
  expectLine("  precision = mixed(bf16)");
  expectLine("  bytes_per_param = {params = 2, grads = 2, optimizer = 12}");
  expectLine("  groups on @pod (devices = 8, devices_per_node = 4) {");
  expectLine("    axis pp : layers, size = 2, stride = 4, inter-node, 4 groups\n"
             "      [0, 4]\n      [1, 5]\n      [2, 6]\n      [3, 7]");
  expectLine("    axis tp : tensor, size = 2, stride = 1, intra-node, 4 groups");
  // Deterministic: printing twice gives the same text.
  EXPECT_EQ(printToString(program), text);
}

TEST(PrinterTest, LargeMeshesStayReadable) {
  Program program = makeSmallProgram();
  Cluster &cluster = *program.clusters[0];
  cluster.nodes = 128;
  cluster.devicesPerNode = 8;
  Strategy &strategy = *program.strategies[0];
  strategy.mesh = makeMesh({{"pp", 4}, {"dp", 32}, {"tp", 8}});
  std::string text = printToString(program);
  EXPECT_NE(text.find("    axis dp : batch, size = 32, stride = 8, inter-node, 32 groups\n"
                      "      [0, 8, 16, 24, …, 248]\n"
                      "      [1, 9, 17, 25, …, 249]\n"
                      "      [2, 10, 18, 26, …, 250]\n"
                      "      [3, 11, 19, 27, …, 251]\n"
                      "      … 28 more groups\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    axis tp : tensor, size = 8, stride = 1, intra-node, 128 groups\n"
                      "      [0, 1, 2, 3, 4, 5, 6, 7]\n"),
            std::string::npos)
      << text;
}

TEST(PrinterTest, ClusterUnits) {
  Program program;
  auto cluster = std::make_unique<Cluster>();
  cluster->name = "h100";
  cluster->nodes = 1;
  cluster->devicesPerNode = 8;
  cluster->deviceMemory = 40e9;
  cluster->peakFlops = 1.979e15;
  cluster->intraBandwidth = 12.5e9;
  cluster->interBandwidth = 80;
  cluster->latency = 1.5e-6;
  cluster->efficiency = 0.45;
  cluster->nvmeCapacity = 3.84e12;
  program.clusters.push_back(std::move(cluster));
  EXPECT_EQ(printToString(program), "cluster @h100 {\n"
                                    "  nodes = 1\n"
                                    "  devices_per_node = 8\n"
                                    "  devices = 8\n"
                                    "  device_memory = 40000000000 B (40 GB)\n"
                                    "  peak = 1979000000000000 FLOP/s (1.979 PFLOPS)\n"
                                    "  intra_bandwidth = 12500000000 B/s (12.5 GB/s)\n"
                                    "  inter_bandwidth = 80 B/s\n"
                                    "  host_bandwidth = none\n"
                                    "  latency = 1.5e-06 s (1.5 us)\n"
                                    "  host_memory = none\n"
                                    "  efficiency = 0.45\n"
                                    "  nvme_bandwidth = none\n"
                                    "  nvme_capacity = 3840000000000 B (3.84 TB)\n"
                                    "  device = none\n"
                                    "  peak_tf32 = none\n"
                                    "  peak_fp8 = none\n"
                                    "  peak_fp4 = none\n"
                                    "  hbm_bandwidth = none\n"
                                    "  compute_units = 0\n"
                                    "  host_memory_bandwidth = none\n"
                                    "  compute_model = flat efficiency\n"
                                    "}\n");
}

TEST(PrinterTest, OddNamesAreQuoted) {
  Program program = makeSmallProgram();
  program.strategies[0]->name = "zero3(dp = 64)";
  std::string text = printToString(program);
  EXPECT_NE(text.find("strategy @\"zero3(dp = 64)\" {\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  strategy = @\"zero3(dp = 64)\"\n"), std::string::npos) << text;
}

// Megatron-Bridge's DeepSeek-V3 layouts (scripts/performance/configs/deepseek/
// deepseek_workload_base_configs.py): 16 virtual stages of 4 layers with the last holding one, the
// module and the loss; and 32 of 2 with one layer on the first and none on the last. The expected
// lists are the layouts read by hand.
TEST(PipelineLayoutTest, DeepSeekV3Layouts) {
  std::string error;
  size_t offset = 0;
  std::optional<PipelineLayoutSpec> blackwell =
      parsePipelineLayout("Et*4|(t*4|)*14tmL", error, offset);
  ASSERT_TRUE(blackwell) << error;
  std::vector<int64_t> layers(15, 4), modules(16, 0);
  layers.push_back(1);
  modules.back() = 1;
  EXPECT_EQ(blackwell->layers, layers);
  EXPECT_EQ(blackwell->mtpLayers, modules);
  EXPECT_EQ(blackwell->getNumLayers(), 61);
  EXPECT_EQ(blackwell->getNumMtpLayers(), 1);

  std::optional<PipelineLayoutSpec> hopper = parsePipelineLayout("Et|(tt|)*30mL", error, offset);
  ASSERT_TRUE(hopper) << error;
  ASSERT_EQ(hopper->layers.size(), 32u);
  EXPECT_EQ(hopper->layers.front(), 1);
  EXPECT_EQ(hopper->layers[1], 2);
  EXPECT_EQ(hopper->layers[30], 2);
  EXPECT_EQ(hopper->layers.back(), 0);
  EXPECT_EQ(hopper->getNumLayers(), 61);
  EXPECT_EQ(hopper->mtpLayers.back(), 1);
}

// Megatron-Core's own docstring example, "Ettt|(tt|)*29,m|L": the module on a virtual stage of its
// own before the loss's, which placec does not place (the modules go beside the output layer).
TEST(PipelineLayoutTest, ErrorsPointAtTheSymbol) {
  std::string error;
  size_t offset = 0;
  EXPECT_FALSE(parsePipelineLayout("Ettt|(tt|)*29,m|L", error, offset));
  EXPECT_EQ(offset, 14u) << error; // The m.
  EXPECT_NE(error.find("m outside the last virtual stage"), std::string::npos) << error;
  EXPECT_FALSE(parsePipelineLayout("Ett|t*", error, offset));
  EXPECT_EQ(offset, 5u) << error;
  EXPECT_FALSE(parsePipelineLayout("Ett|(t|t", error, offset));
  EXPECT_EQ(offset, 4u) << error;
  EXPECT_FALSE(parsePipelineLayout("Ett|tx|L", error, offset));
  EXPECT_EQ(offset, 5u) << error;
  // Repeats multiply: a billion layers is refused before anything is built.
  EXPECT_FALSE(parsePipelineLayout("E(t*999999|)*999999L", error, offset));
  EXPECT_NE(error.find("expands to more than"), std::string::npos) << error;
}

} // namespace

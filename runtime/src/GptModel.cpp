// The GPT units' math on one device's tensor-parallel pieces (Megatron-LM's splits, Shoeybi et
// al. 2019 §3; sequence parallelism, Korthikanti et al. 2022 §4.2.2) and its part of each
// sequence (context parallelism: ring attention, Liu et al. 2023; Ulysses, Jacobs et al. 2023;
// Megatron-Core's load-balanced split), shared by the trainer and the single-device reference.
#include "GptModel.h"

#include "GptKernels.h"
#include "MlpReference.h"

#include <algorithm>
#include <cmath>

namespace placert {
namespace gpt {

namespace {

constexpr float kEpsilon = 1e-5f;

void addColumnSums(const float *x, float *sums, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      sums[c] += x[r * cols + c];
}

} // namespace

int32_t sampleToken(uint64_t seed, int64_t sample, int64_t position, int64_t vocab) {
  double u =
      (static_cast<double>(sampleValue(seed ^ 0x746f6b656e732121ULL, sample, false, position)) +
       1.0) /
      2.0;
  int64_t token = static_cast<int64_t>(u * static_cast<double>(vocab));
  return static_cast<int32_t>(std::min<int64_t>(std::max<int64_t>(token, 0), vocab - 1));
}

int64_t contextPosition(int64_t seq, int64_t degree, int64_t index, int64_t local) {
  int64_t chunk = seq / (2 * degree);
  return local < chunk ? index * chunk + local : (2 * degree - 1 - index) * chunk + local - chunk;
}

namespace {

/// The global positions of context rank `index`'s seq / degree tokens of a sequence.
std::vector<int64_t> contextPositions(int64_t seq, int64_t degree, int64_t index) {
  std::vector<int64_t> positions(static_cast<size_t>(seq / degree));
  for (size_t p = 0; p < positions.size(); ++p)
    positions[p] = contextPosition(seq, degree, index, static_cast<int64_t>(p));
  return positions;
}

} // namespace

GptModel::GptModel(GptConfig config) : config(std::move(config)), kernels(createCpuKernels()) {}

std::vector<TensorInfo> GptModel::getTensors(UnitKind kind, int64_t layer) const {
  const GptShape &m = config.shape;
  int64_t h = m.hidden;
  std::vector<TensorInfo> tensors;
  auto add = [&](std::string name, int64_t rows, int64_t cols, Split split, TensorInfo::Init init,
                 int64_t fanIn) {
    TensorInfo tensor;
    tensor.name = std::move(name);
    tensor.rows = rows;
    tensor.cols = cols;
    tensor.split = split;
    tensor.init = init;
    tensor.fanIn = fanIn;
    tensors.push_back(tensor);
  };
  using Init = TensorInfo::Init;
  bool norm = !m.rmsNorm, bias = m.bias;
  if (kind == UnitKind::Embed) {
    add("embed.tokens", m.vocab, h, Split::Vocabulary, Init::Weight, h);
    if (!m.rope)
      add("embed.positions", m.seq, h, Split::Replicated, Init::Weight, h);
  } else if (kind == UnitKind::Layer) {
    std::string p = "layers." + std::to_string(layer) + ".";
    add(p + "ln1.weight", h, 1, Split::Replicated, Init::NormWeight, 1);
    if (norm)
      add(p + "ln1.bias", h, 1, Split::Replicated, Init::Bias, h);
    add(p + "attn.qkv.weight", getQkvRows(), h, Split::Column, Init::Weight, h);
    if (bias)
      add(p + "attn.qkv.bias", getQkvRows(), 1, Split::Column, Init::Bias, h);
    add(p + "attn.proj.weight", h, h, Split::Row, Init::Weight, h);
    if (bias)
      add(p + "attn.proj.bias", h, 1, Split::Replicated, Init::Bias, h);
    add(p + "ln2.weight", h, 1, Split::Replicated, Init::NormWeight, 1);
    if (norm)
      add(p + "ln2.bias", h, 1, Split::Replicated, Init::Bias, h);
    if (isMoeLayer(layer)) {
      // The router and the shared experts (one MLP of width shared_experts · shared_expert_ffn,
      // swiglu's gate and up fused in one tensor, gate rows first).
      const MoeShape &e = m.moe;
      add(p + "moe.router.weight", e.experts, h, Split::Replicated, Init::Weight, h);
      int64_t fused = m.swiglu ? 2 : 1, width = e.sharedExperts * e.sharedExpertFfn;
      if (width > 0) {
        add(p + "moe.shared.up.weight", fused * width, h, Split::Column, Init::Weight, h);
        tensors.back().fused = fused;
        if (bias) {
          add(p + "moe.shared.up.bias", fused * width, 1, Split::Column, Init::Bias, h);
          tensors.back().fused = fused;
        }
        add(p + "moe.shared.down.weight", h, width, Split::Row, Init::Weight, width);
        if (bias)
          add(p + "moe.shared.down.bias", h, 1, Split::Replicated, Init::Bias, width);
      }
    } else if (m.swiglu) {
      add(p + "mlp.gate.weight", m.ffn, h, Split::Column, Init::Weight, h);
      if (bias)
        add(p + "mlp.gate.bias", m.ffn, 1, Split::Column, Init::Bias, h);
      add(p + "mlp.up.weight", m.ffn, h, Split::Column, Init::Weight, h);
      if (bias)
        add(p + "mlp.up.bias", m.ffn, 1, Split::Column, Init::Bias, h);
      add(p + "mlp.down.weight", h, m.ffn, Split::Row, Init::Weight, m.ffn);
      if (bias)
        add(p + "mlp.down.bias", h, 1, Split::Replicated, Init::Bias, m.ffn);
    } else {
      add(p + "mlp.fc.weight", m.ffn, h, Split::Column, Init::Weight, h);
      if (bias)
        add(p + "mlp.fc.bias", m.ffn, 1, Split::Column, Init::Bias, h);
      add(p + "mlp.proj.weight", h, m.ffn, Split::Row, Init::Weight, m.ffn);
      if (bias)
        add(p + "mlp.proj.bias", h, 1, Split::Replicated, Init::Bias, m.ffn);
    }
  } else if (kind == UnitKind::Experts) {
    // [experts, fused · expert_ffn, hidden], [experts, hidden, expert_ffn] and their biases,
    // flattened to [experts · rows, cols]; each rank holds experts / ep of them, split over the
    // tensor axes like a dense MLP, or whole when they fold the tensor axes into their group
    // (experts / (ep · t) of them).
    const MoeShape &e = m.moe;
    const bool fold = config.expertFold;
    const Split column = fold ? Split::Whole : Split::Column,
                row = fold ? Split::Whole : Split::Row;
    const Split rowBias = fold ? Split::Whole : Split::Replicated;
    std::string p = "layers." + std::to_string(layer) + ".moe.experts.";
    int64_t fused = m.swiglu ? 2 : 1, E = e.experts, f = e.expertFfn;
    auto expert = [&](std::vector<int64_t> dims) {
      TensorInfo &tensor = tensors.back();
      tensor.blocks = E;
      tensor.expertSplit = true;
      tensor.fused = tensor.split == Split::Column ? fused : 1;
      tensor.dims = std::move(dims);
    };
    add(p + "up.weight", E * fused * f, h, column, Init::Weight, h);
    expert({E, fused * f, h});
    if (bias) {
      add(p + "up.bias", E * fused * f, 1, column, Init::Bias, h);
      expert({E, fused * f});
    }
    add(p + "down.weight", E * h, f, row, Init::Weight, f);
    expert({E, h, f});
    if (bias) {
      add(p + "down.bias", E * h, 1, rowBias, Init::Bias, f);
      expert({E, h});
    }
  } else {
    add("final_norm.weight", h, 1, Split::Replicated, Init::NormWeight, 1);
    if (norm)
      add("final_norm.bias", h, 1, Split::Replicated, Init::Bias, h);
    if (!m.tiedEmbeddings)
      add("output.weight", m.vocab, h, Split::Vocabulary, Init::Weight, h);
    else if (config.embeddingCopy) {
      add("embed.tokens", m.vocab, h, Split::Vocabulary, Init::Weight, h);
      tensors.back().copy = true;
    }
  }
  int64_t t = config.tensorDegree, offset = 0;
  for (TensorInfo &tensor : tensors) {
    tensor.localRows = tensor.rows;
    tensor.localCols = tensor.cols;
    if (tensor.blocks > 1 || tensor.fused > 1) {
      // Blocks of rows (experts), split over the expert ranks, whose fused segments a column
      // split cuts in t pieces each.
      int64_t ep = tensor.expertSplit ? config.expertDegree : 1;
      int64_t blockRows = tensor.rows / tensor.blocks, localBlocks = tensor.blocks / ep;
      int64_t firstBlock = tensor.expertSplit ? config.expertIndex * localBlocks : 0;
      if (tensor.split == Split::Column) {
        int64_t width = blockRows / tensor.fused;
        tensor.segmentRows = width / t;
        tensor.segments = tensor.fused;
        tensor.blockRows = blockRows;
        tensor.segmentStride = width;
        tensor.firstBlock = firstBlock;
        tensor.rowOffset = config.tensorIndex * tensor.segmentRows;
        tensor.localRows = localBlocks * tensor.fused * tensor.segmentRows;
      } else {
        tensor.localRows = localBlocks * blockRows;
        tensor.rowOffset = firstBlock * blockRows;
        if (tensor.split == Split::Row) {
          tensor.localCols = tensor.cols / t;
          tensor.colOffset = config.tensorIndex * tensor.localCols;
        }
      }
    } else if (tensor.split == Split::Column || tensor.split == Split::Vocabulary) {
      tensor.localRows = tensor.rows / t;
      tensor.rowOffset = config.tensorIndex * tensor.localRows;
    } else if (tensor.split == Split::Row) {
      tensor.localCols = tensor.cols / t;
      tensor.colOffset = config.tensorIndex * tensor.localCols;
    }
    tensor.localOffset = offset;
    offset += tensor.localRows * tensor.localCols;
  }
  return tensors;
}

int64_t GptModel::getLocalParams(UnitKind kind, int64_t layer) const {
  int64_t total = 0;
  for (const TensorInfo &tensor : getTensors(kind, layer))
    total += tensor.localRows * tensor.localCols;
  return total;
}

int64_t GptModel::getFullParams(UnitKind kind, int64_t layer) const {
  int64_t total = 0;
  for (const TensorInfo &tensor : getTensors(kind, layer))
    if (!tensor.copy)
      total += tensor.rows * tensor.cols;
  return total;
}

int64_t GptModel::getQkvRows() const {
  const GptShape &m = config.shape;
  return (m.heads + 2 * m.getKvHeads()) * (m.hidden / m.heads);
}

int64_t GptModel::getLocalRows() const {
  int64_t rows = config.microBatch * getLocalSeq();
  return config.sequenceParallel ? rows / config.tensorDegree : rows;
}

int64_t GptModel::getRoutedRows() const {
  return config.expertFold ? getLocalRows() : config.microBatch * getLocalSeq();
}

int64_t GptModel::getLocalExpertFfn() const {
  const int64_t f = config.shape.moe.expertFfn;
  return config.expertFold ? f : f / config.tensorDegree;
}

int64_t GptModel::getPosition(int64_t local) const {
  return contextPosition(config.shape.seq, config.contextDegree, config.contextIndex, local);
}

std::vector<int64_t> GptModel::rowPositions(int64_t rows) const {
  std::vector<int64_t> positions(static_cast<size_t>(rows));
  int64_t sl = getLocalSeq();
  for (int64_t r = 0; r < rows; ++r)
    positions[static_cast<size_t>(r)] = getPosition(r % sl);
  return positions;
}

float GptModel::initialValue(uint64_t seed, const TensorInfo &tensor, int64_t index) const {
  switch (tensor.init) {
  case TensorInfo::Init::Weight:
  case TensorInfo::Init::Bias:
    return ::placert::initialValue(seed, tensor.name, index, tensor.fanIn);
  case TensorInfo::Init::NormWeight:
    return 1.0f + 0.1f * ::placert::initialValue(seed, tensor.name, index, 1);
  }
  return 0;
}

std::vector<std::pair<int64_t, int64_t>> GptModel::getReplicatedRanges(UnitKind kind,
                                                                       int64_t layer) const {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  if (kind == UnitKind::Embed)
    return ranges;
  // The router and the routed experts see every token of the tensor-parallel group (the MoE
  // block gathers the sequence first), so their gradients are whole on each tensor rank; folded,
  // the router sees this rank's own rows, and its gradients are summed with the norms'.
  for (const TensorInfo &tensor : getTensors(kind, layer))
    if (tensor.split == Split::Replicated && !tensor.expertSplit &&
        (config.expertFold || tensor.name.find(".moe.router.") == std::string::npos))
      ranges.emplace_back(tensor.localOffset, tensor.localRows * tensor.localCols);
  return ranges;
}

void GptModel::recomputeAttention(UnitActivations &saved) {
  if (config.contextDegree > 1)
    return; // The blockwise backward recomputes the probabilities from q, k and saved.lse.
  const GptShape &m = config.shape;
  int64_t localHeads = m.heads / config.tensorDegree, headDim = m.hidden / m.heads;
  int64_t localKvHeads = m.getKvHeads() / config.tensorDegree;
  int64_t b = config.microBatch;
  std::vector<float> out(saved.q.size());
  saved.probs.assign(static_cast<size_t>(b * localHeads * m.seq * m.seq), 0.0f);
  attentionForward(saved.q.data(), saved.k.data(), saved.v.data(), out.data(), saved.probs.data(),
                   b, m.seq, localHeads, localKvHeads, headDim);
}

namespace {

/// Where each tensor of a unit starts in its local piece, by name without the `layers.<l>.`
/// prefix; -1 for a tensor the model does not have (biases with `bias = false`, ...).
class Offsets {
public:
  explicit Offsets(const std::vector<TensorInfo> &tensors) {
    for (const TensorInfo &tensor : tensors) {
      std::string name = tensor.name;
      if (name.rfind("layers.", 0) == 0)
        name = name.substr(name.find('.', 7) + 1);
      offsets.emplace_back(name, tensor.localOffset);
    }
  }
  int64_t operator()(const char *name) const {
    for (const auto &[key, offset] : offsets)
      if (key == name)
        return offset;
    return -1;
  }
  template <class T> T *at(T *base, const char *name) const {
    int64_t offset = (*this)(name);
    return offset < 0 ? nullptr : base + offset;
  }

private:
  std::vector<std::pair<std::string, int64_t>> offsets;
};

} // namespace

void GptModel::normForward(const float *x, const float *weight, const float *bias, float *y,
                           std::vector<float> &mean, std::vector<float> &rstd, int64_t rows) const {
  int64_t h = config.shape.hidden;
  mean.resize(static_cast<size_t>(rows));
  rstd.resize(static_cast<size_t>(rows));
  if (config.shape.rmsNorm)
    rmsNormForward(x, weight, y, rstd.data(), rows, h, kEpsilon);
  else
    layerNormForward(x, weight, bias, y, mean.data(), rstd.data(), rows, h, kEpsilon);
}

void GptModel::normBackward(const float *x, const float *weight, const std::vector<float> &mean,
                            const std::vector<float> &rstd, const float *dy, float *dx,
                            float *dweight, float *dbias, int64_t rows) const {
  int64_t h = config.shape.hidden;
  if (config.shape.rmsNorm)
    rmsNormBackward(x, weight, rstd.data(), dy, dx, dweight, rows, h);
  else
    layerNormBackward(x, weight, mean.data(), rstd.data(), dy, dx, dweight, dbias, rows, h);
}

Status GptModel::reduceRows(UnitCollectives &comm, std::vector<float> &partial,
                            std::vector<float> &result) const {
  const int64_t h = config.shape.hidden, R = config.microBatch * getLocalSeq();
  if (config.tensorDegree > 1 && config.sequenceParallel) {
    result.assign(static_cast<size_t>(getLocalRows() * h), 0.0f);
    return comm.reduceScatter(partial.data(), result.data(), R * h);
  }
  if (config.tensorDegree > 1)
    PLACERT_TRY(comm.allReduce(partial.data(), R * h));
  result = std::move(partial);
  return Status::success();
}

void GptModel::splitQkv(float *qkv, float *q, float *k, float *v, int64_t rows,
                        int64_t localKvHeads, bool merge) const {
  const GptShape &m = config.shape;
  const int64_t headDim = m.hidden / m.heads, group = m.heads / m.getKvHeads();
  const int64_t qWidth = localKvHeads * group * headDim, kvWidth = localKvHeads * headDim;
  const int64_t width = qWidth + 2 * kvWidth;
  // Group g's rows: its `group` query heads, then its key head, then its value head.
  auto move = [merge](float *packed, float *part, int64_t count) {
    if (merge)
      std::copy(part, part + count, packed);
    else
      std::copy(packed, packed + count, part);
  };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < localKvHeads; ++g) {
      float *packed = qkv + r * width + g * (group + 2) * headDim;
      move(packed, q + r * qWidth + g * group * headDim, group * headDim);
      move(packed + group * headDim, k + r * kvWidth + g * headDim, headDim);
      move(packed + (group + 1) * headDim, v + r * kvWidth + g * headDim, headDim);
    }
}

Status GptModel::forward(UnitKind kind, int64_t layer, const float *weights, const float *tiedTable,
                         const int32_t *tokens, const int32_t *targets, const float *input,
                         float *output, UnitActivations &saved, UnitCollectives &comm, double &loss,
                         bool recomputing, ExpertTensors experts) {
  const GptShape &m = config.shape;
  const int64_t h = m.hidden, s = m.seq, b = config.microBatch, R = b * getLocalSeq();
  const int64_t t = config.tensorDegree, Rl = getLocalRows();
  const bool sp = config.sequenceParallel, parallel = t > 1, context = config.contextDegree > 1;
  // Under context parallelism the rows are this rank's tokens at their global positions.
  const std::vector<int64_t> positions = context ? rowPositions(R) : std::vector<int64_t>();
  const int64_t *rowPosition = context ? positions.data() : nullptr;
  std::vector<TensorInfo> T = getTensors(kind, layer);
  Offsets offsets(T);
  auto W = [&](const char *name) { return offsets.at(weights, name); };
  auto reduce = [&](std::vector<float> &partial, std::vector<float> &result) {
    return reduceRows(comm, partial, result);
  };
  // The [Rl, h] layout gathered into [R, h] (sequence parallelism), or as it is.
  auto gather = [&](std::vector<float> &local, std::vector<float> &whole) -> Status {
    if (parallel && sp) {
      whole.assign(static_cast<size_t>(R * h), 0.0f);
      return comm.allGather(local.data(), whole.data(), R * h);
    }
    whole = std::move(local);
    return Status::success();
  };
  // A column-parallel product's input: gathered into `whole`, and kept for the weight gradient
  // in `kept`, whole or (regatherInputs) as the sequence shard, which the backward gathers again.
  // `rows` is set to the gathered rows.
  const bool again = parallel && sp && config.regatherInputs;
  auto gatherInput = [&](std::vector<float> &local, std::vector<float> &kept,
                         std::vector<float> &whole, const float *&rows) -> Status {
    if (!again) {
      PLACERT_TRY(gather(local, kept));
      rows = kept.data();
      return Status::success();
    }
    kept = local;
    PLACERT_TRY(gather(local, whole));
    rows = whole.data();
    return Status::success();
  };
  // out[r, :] = a[r, :] + b[r, :] + bias (when there is one).
  auto residual = [&](const float *a, const float *bRows, const float *bias, float *out) {
    for (int64_t r = 0; r < Rl; ++r)
      for (int64_t c = 0; c < h; ++c)
        out[r * h + c] = a[r * h + c] + bRows[r * h + c] + (bias ? bias[c] : 0.0f);
  };
  loss = 0;

  if (kind == UnitKind::Embed) {
    std::vector<float> partial(static_cast<size_t>(R * h)), result;
    embeddingForward(tokens, W("embed.tokens"),
                     config.tensorIndex == 0 ? W("embed.positions") : nullptr, partial.data(), R, s,
                     h, T[0].rowOffset, T[0].localRows, rowPosition);
    PLACERT_TRY(reduce(partial, result));
    std::copy(result.begin(), result.end(), output);
    saved.complete = true;
    return Status::success();
  }

  if (kind == UnitKind::Layer) {
    const int64_t localHeads = m.heads / t, localKvHeads = m.getKvHeads() / t;
    const int64_t headDim = h / m.heads, hl = h / t, kvl = localKvHeads * headDim, fl = m.ffn / t;
    const int64_t qkvl = getQkvRows() / t;
    std::vector<float> y1l(static_cast<size_t>(Rl * h));
    normForward(input, W("ln1.weight"), W("ln1.bias"), y1l.data(), saved.mean1, saved.rstd1, Rl);
    std::vector<float> y1Whole;
    const float *y1 = nullptr;
    PLACERT_TRY(gatherInput(y1l, saved.y1, y1Whole, y1));
    std::vector<float> qkv(static_cast<size_t>(R * qkvl));
    kernels->linearForward(y1, W("attn.qkv.weight"), W("attn.qkv.bias"), qkv.data(), R, h, qkvl);
    saved.q.resize(static_cast<size_t>(R * hl));
    saved.k.resize(static_cast<size_t>(R * kvl));
    saved.v.resize(static_cast<size_t>(R * kvl));
    splitQkv(qkv.data(), saved.q.data(), saved.k.data(), saved.v.data(), R, localKvHeads, false);
    if (m.rope) {
      ropeApply(saved.q.data(), R, s, localHeads, headDim, false, rowPosition);
      ropeApply(saved.k.data(), R, s, localKvHeads, headDim, false, rowPosition);
    }
    saved.attn.resize(static_cast<size_t>(R * hl));
    if (context) {
      PLACERT_TRY(contextAttentionForward(comm, saved));
    } else {
      saved.probs.assign(static_cast<size_t>(b * localHeads * s * s), 0.0f);
      attentionForward(saved.q.data(), saved.k.data(), saved.v.data(), saved.attn.data(),
                       saved.probs.data(), b, s, localHeads, localKvHeads, headDim);
    }
    std::vector<float> o(static_cast<size_t>(R * h)), oReduced;
    kernels->linearForward(saved.attn.data(), W("attn.proj.weight"), nullptr, o.data(), R, hl, h);
    PLACERT_TRY(reduce(o, oReduced));
    saved.x1.resize(static_cast<size_t>(Rl * h));
    residual(input, oReduced.data(), W("attn.proj.bias"), saved.x1.data());
    std::vector<float> y2l(static_cast<size_t>(Rl * h));
    normForward(saved.x1.data(), W("ln2.weight"), W("ln2.bias"), y2l.data(), saved.mean2,
                saved.rstd2, Rl);
    std::vector<float> y2Whole;
    const float *y2 = nullptr;
    if (isMoeLayer(layer)) {
      // The experts take the dispatched rows of the whole input, kept gathered; folded, this
      // rank's own rows, whose outputs need no reduction.
      std::vector<float> o2, o2Reduced;
      if (config.expertFold) {
        saved.y2 = std::move(y2l);
        PLACERT_TRY(moeForward(layer, weights, experts.weights, saved, comm, o2Reduced));
      } else {
        PLACERT_TRY(gather(y2l, saved.y2));
        PLACERT_TRY(moeForward(layer, weights, experts.weights, saved, comm, o2));
        PLACERT_TRY(reduce(o2, o2Reduced));
      }
      residual(saved.x1.data(), o2Reduced.data(), W("moe.shared.down.bias"), output);
      saved.complete = true;
      if (config.recompute == Recompute::Selective && !recomputing)
        saved.probs = std::vector<float>();
      if (config.recompute == Recompute::Full && !recomputing) {
        double aux = saved.auxLoss; // the step's loss still counts it
        saved = UnitActivations();
        saved.auxLoss = aux;
      }
      return Status::success();
    }
    PLACERT_TRY(gatherInput(y2l, saved.y2, y2Whole, y2));
    saved.f.resize(static_cast<size_t>(R * fl));
    saved.g.resize(static_cast<size_t>(R * fl));
    const float *down;
    const float *downBias;
    if (m.swiglu) {
      saved.u.resize(static_cast<size_t>(R * fl));
      kernels->linearForward(y2, W("mlp.gate.weight"), W("mlp.gate.bias"), saved.f.data(), R, h,
                             fl);
      kernels->linearForward(y2, W("mlp.up.weight"), W("mlp.up.bias"), saved.u.data(), R, h, fl);
      swigluForward(saved.f.data(), saved.u.data(), saved.g.data(), R * fl);
      down = W("mlp.down.weight");
      downBias = W("mlp.down.bias");
    } else {
      kernels->linearForward(y2, W("mlp.fc.weight"), W("mlp.fc.bias"), saved.f.data(), R, h, fl);
      kernels->geluForward(saved.f.data(), saved.g.data(), R * fl);
      down = W("mlp.proj.weight");
      downBias = W("mlp.proj.bias");
    }
    std::vector<float> o2(static_cast<size_t>(R * h)), o2Reduced;
    kernels->linearForward(saved.g.data(), down, nullptr, o2.data(), R, fl, h);
    PLACERT_TRY(reduce(o2, o2Reduced));
    residual(saved.x1.data(), o2Reduced.data(), downBias, output);
    saved.complete = true;
    if (config.recompute == Recompute::Selective && !recomputing)
      saved.probs = std::vector<float>(); // recomputed before the backward
    if (config.recompute == Recompute::Full && !recomputing)
      saved = UnitActivations(); // only the input stays (the previous unit's output)
    return Status::success();
  }

  // The head: final norm, logits over this rank's vocabulary rows, vocabulary-parallel
  // cross-entropy (Megatron-LM): local row maxima, sums of exponentials and target logits are
  // exchanged over the tensor axes, then each rank has the loss and its logits' gradient.
  const int64_t Vl = m.vocab / t, vocabOffset = config.tensorIndex * Vl;
  // Tied: the embedding's table, or the head's own copy of it on another pipeline stage.
  const float *table = !m.tiedEmbeddings      ? W("output.weight")
                       : config.embeddingCopy ? W("embed.tokens")
                                              : tiedTable;
  std::vector<float> yl(static_cast<size_t>(Rl * h));
  normForward(input, W("final_norm.weight"), W("final_norm.bias"), yl.data(), saved.mean1,
              saved.rstd1, Rl);
  std::vector<float> yWhole;
  const float *y = nullptr;
  PLACERT_TRY(gatherInput(yl, saved.y1, yWhole, y));
  std::vector<float> logits(static_cast<size_t>(R * Vl));
  kernels->linearForward(y, table, nullptr, logits.data(), R, h, Vl);
  if (!recomputing) {
    std::vector<float> localMax(static_cast<size_t>(R)), sumExp(static_cast<size_t>(R)),
        target(static_cast<size_t>(R));
    crossEntropyRowMax(logits.data(), localMax.data(), R, Vl);
    crossEntropyPartials(logits.data(), targets, localMax.data(), sumExp.data(), target.data(), R,
                         Vl, vocabOffset);
    std::vector<float> mine(static_cast<size_t>(R * 3));
    for (int64_t r = 0; r < R; ++r) {
      mine[r * 3] = localMax[r];
      mine[r * 3 + 1] = sumExp[r];
      mine[r * 3 + 2] = target[r];
    }
    std::vector<float> all(static_cast<size_t>(t * R * 3));
    if (parallel)
      PLACERT_TRY(comm.allGather(mine.data(), all.data(), t * R * 3));
    else
      all = mine;
    // Combine: M = max_k m_k, S = Σ_k S_k·exp(m_k − M), T = the owner's target logit − M.
    saved.lossStats.assign(static_cast<size_t>(R * 3), 0.0f);
    for (int64_t r = 0; r < R; ++r) {
      double best = -INFINITY;
      for (int64_t k = 0; k < t; ++k)
        best = std::max(best, static_cast<double>(all[(k * R + r) * 3]));
      double total = 0;
      for (int64_t k = 0; k < t; ++k)
        total += all[(k * R + r) * 3 + 1] * std::exp(all[(k * R + r) * 3] - best);
      int64_t owner = targets[r] / Vl;
      double targetLogit = all[(owner * R + r) * 3 + 2] + all[(owner * R + r) * 3] - best;
      saved.lossStats[r * 3] = static_cast<float>(best);
      saved.lossStats[r * 3 + 1] = static_cast<float>(total);
      saved.lossStats[r * 3 + 2] = static_cast<float>(targetLogit);
    }
  }
  std::vector<float> rowMax(static_cast<size_t>(R)), sumExp(static_cast<size_t>(R)),
      target(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    rowMax[r] = saved.lossStats[r * 3];
    sumExp[r] = saved.lossStats[r * 3 + 1];
    target[r] = saved.lossStats[r * 3 + 2];
  }
  saved.dlogits.resize(static_cast<size_t>(R * Vl));
  double scale = 1.0 / static_cast<double>(config.globalBatch * s);
  double value =
      crossEntropyLossAndGrad(logits.data(), targets, rowMax.data(), sumExp.data(), target.data(),
                              saved.dlogits.data(), R, Vl, vocabOffset, scale);
  if (!recomputing)
    loss = value;
  // The head keeps its activations under full recomputation too: the plan recomputes the
  // transformer blocks only (Megatron-LM does not checkpoint the output layer).
  saved.complete = true;
  return Status::success();
}

Status GptModel::backward(UnitKind kind, int64_t layer, const float *weights,
                          const float *tiedTable, const int32_t *tokens, const float *input,
                          const float *outputGrad, float *inputGrad, float *grads, float *tiedGrads,
                          UnitActivations &saved, UnitCollectives &comm, ExpertTensors experts) {
  const GptShape &m = config.shape;
  const int64_t h = m.hidden, s = m.seq, b = config.microBatch, R = b * getLocalSeq();
  const int64_t t = config.tensorDegree, Rl = getLocalRows();
  const bool sp = config.sequenceParallel, parallel = t > 1, context = config.contextDegree > 1;
  const std::vector<int64_t> positions = context ? rowPositions(R) : std::vector<int64_t>();
  const int64_t *rowPosition = context ? positions.data() : nullptr;
  std::vector<TensorInfo> T = getTensors(kind, layer);
  Offsets offsets(T);
  auto W = [&](const char *name) { return offsets.at(weights, name); };
  auto G = [&](const char *name) { return offsets.at(grads, name); };
  auto reduce = [&](std::vector<float> &partial, std::vector<float> &result) {
    return reduceRows(comm, partial, result);
  };
  auto gather = [&](const float *local, std::vector<float> &whole) -> Status {
    whole.assign(static_cast<size_t>(R * h), 0.0f);
    if (parallel && sp)
      return comm.allGather(local, whole.data(), R * h);
    std::copy(local, local + R * h, whole.begin());
    return Status::success();
  };
  // A column-parallel product's kept input for its weight gradient: as kept, or (regatherInputs)
  // the sequence shard gathered again into `whole`.
  const bool again = parallel && sp && config.regatherInputs;
  auto keptInput = [&](const std::vector<float> &kept, std::vector<float> &whole,
                       const float *&rows) -> Status {
    rows = kept.data();
    if (!again)
      return Status::success();
    PLACERT_TRY(gather(kept.data(), whole));
    rows = whole.data();
    return Status::success();
  };
  auto addBiasGrad = [&](const float *rows, float *bias) {
    if (bias)
      addColumnSums(rows, bias, Rl, h);
  };
  if (!saved.complete)
    return Status(StatusCode::InvalidArgument,
                  "backward before the unit's activations were computed (or recomputed)");

  if (kind == UnitKind::Embed) {
    std::vector<float> whole;
    PLACERT_TRY(gather(outputGrad, whole));
    embeddingBackward(tokens, whole.data(), G("embed.tokens"), G("embed.positions"), R, s, h,
                      T[0].rowOffset, T[0].localRows, rowPosition);
    return Status::success();
  }

  if (kind == UnitKind::Layer) {
    const int64_t localHeads = m.heads / t, localKvHeads = m.getKvHeads() / t;
    const int64_t headDim = h / m.heads, hl = h / t, kvl = localKvHeads * headDim, fl = m.ffn / t;
    const int64_t qkvl = getQkvRows() / t;
    const bool moe = isMoeLayer(layer);
    const char *downName = m.swiglu ? "mlp.down.weight" : "mlp.proj.weight";
    addBiasGrad(outputGrad, G(moe        ? "moe.shared.down.bias"
                              : m.swiglu ? "mlp.down.bias"
                                         : "mlp.proj.bias"));
    // Folded experts route this rank's own rows: the output gradient as it is, the input
    // gradient without a reduction.
    const bool folded = moe && config.expertFold;
    std::vector<float> dout;
    if (folded)
      dout.assign(outputGrad, outputGrad + Rl * h);
    else
      PLACERT_TRY(gather(outputGrad, dout));
    std::vector<float> dy2(static_cast<size_t>((folded ? Rl : R) * h)), dy2Reduced;
    std::vector<float> dg(static_cast<size_t>(moe ? 0 : R * fl));
    if (moe) {
      PLACERT_TRY(moeBackward(layer, weights, experts.weights, grads, experts.grads, saved, comm,
                              dout.data(), dy2));
    } else {
      kernels->linearWeightGrad(saved.g.data(), dout.data(), G(downName), nullptr, R, fl, h);
      kernels->linearInputGrad(dout.data(), W(downName), dg.data(), R, fl, h);
    }
    std::vector<float> y2Whole;
    const float *y2 = nullptr;
    if (!moe)
      PLACERT_TRY(keptInput(saved.y2, y2Whole, y2));
    if (!moe && m.swiglu) {
      std::vector<float> dgate(dg.size()), dup(dg.size()), dy2Up(dy2.size());
      swigluBackward(saved.f.data(), saved.u.data(), dg.data(), dgate.data(), dup.data(), R * fl);
      kernels->linearWeightGrad(y2, dgate.data(), G("mlp.gate.weight"), G("mlp.gate.bias"), R, h,
                                fl);
      kernels->linearWeightGrad(y2, dup.data(), G("mlp.up.weight"), G("mlp.up.bias"), R, h, fl);
      kernels->linearInputGrad(dgate.data(), W("mlp.gate.weight"), dy2.data(), R, h, fl);
      kernels->linearInputGrad(dup.data(), W("mlp.up.weight"), dy2Up.data(), R, h, fl);
      for (size_t i = 0; i < dy2.size(); ++i)
        dy2[i] += dy2Up[i];
    } else if (!moe) {
      kernels->geluBackward(saved.f.data(), dg.data(), dg.data(), R * fl);
      kernels->linearWeightGrad(y2, dg.data(), G("mlp.fc.weight"), G("mlp.fc.bias"), R, h, fl);
      kernels->linearInputGrad(dg.data(), W("mlp.fc.weight"), dy2.data(), R, h, fl);
    }
    if (folded)
      dy2Reduced = std::move(dy2);
    else
      PLACERT_TRY(reduce(dy2, dy2Reduced));
    std::vector<float> dx1(static_cast<size_t>(Rl * h));
    normBackward(saved.x1.data(), W("ln2.weight"), saved.mean2, saved.rstd2, dy2Reduced.data(),
                 dx1.data(), G("ln2.weight"), G("ln2.bias"), Rl);
    for (int64_t i = 0; i < Rl * h; ++i)
      dx1[i] += outputGrad[i];
    addBiasGrad(dx1.data(), G("attn.proj.bias"));
    std::vector<float> dx1Whole;
    PLACERT_TRY(gather(dx1.data(), dx1Whole));
    kernels->linearWeightGrad(saved.attn.data(), dx1Whole.data(), G("attn.proj.weight"), nullptr, R,
                              hl, h);
    std::vector<float> da(static_cast<size_t>(R * hl));
    kernels->linearInputGrad(dx1Whole.data(), W("attn.proj.weight"), da.data(), R, hl, h);
    std::vector<float> dq(da.size()), dk(static_cast<size_t>(R * kvl)), dv(dk.size());
    if (context)
      PLACERT_TRY(
          contextAttentionBackward(comm, saved, da.data(), dq.data(), dk.data(), dv.data()));
    else
      attentionBackward(saved.q.data(), saved.k.data(), saved.v.data(), saved.probs.data(),
                        da.data(), dq.data(), dk.data(), dv.data(), b, s, localHeads, localKvHeads,
                        headDim);
    if (m.rope) {
      ropeApply(dq.data(), R, s, localHeads, headDim, true, rowPosition);
      ropeApply(dk.data(), R, s, localKvHeads, headDim, true, rowPosition);
    }
    std::vector<float> dqkv(static_cast<size_t>(R * qkvl));
    splitQkv(dqkv.data(), dq.data(), dk.data(), dv.data(), R, localKvHeads, true);
    std::vector<float> y1Whole;
    const float *y1 = nullptr;
    PLACERT_TRY(keptInput(saved.y1, y1Whole, y1));
    kernels->linearWeightGrad(y1, dqkv.data(), G("attn.qkv.weight"), G("attn.qkv.bias"), R, h,
                              qkvl);
    std::vector<float> dy1(static_cast<size_t>(R * h)), dy1Reduced;
    kernels->linearInputGrad(dqkv.data(), W("attn.qkv.weight"), dy1.data(), R, h, qkvl);
    PLACERT_TRY(reduce(dy1, dy1Reduced));
    normBackward(input, W("ln1.weight"), saved.mean1, saved.rstd1, dy1Reduced.data(), inputGrad,
                 G("ln1.weight"), G("ln1.bias"), Rl);
    for (int64_t i = 0; i < Rl * h; ++i)
      inputGrad[i] += dx1[i];
    return Status::success();
  }

  const int64_t Vl = m.vocab / t;
  const float *table = !m.tiedEmbeddings      ? W("output.weight")
                       : config.embeddingCopy ? W("embed.tokens")
                                              : tiedTable;
  float *tableGrad = !m.tiedEmbeddings      ? G("output.weight")
                     : config.embeddingCopy ? G("embed.tokens")
                                            : tiedGrads;
  std::vector<float> yWhole;
  const float *y = nullptr;
  PLACERT_TRY(keptInput(saved.y1, yWhole, y));
  kernels->linearWeightGrad(y, saved.dlogits.data(), tableGrad, nullptr, R, h, Vl);
  std::vector<float> dy(static_cast<size_t>(R * h)), dyReduced;
  kernels->linearInputGrad(saved.dlogits.data(), table, dy.data(), R, h, Vl);
  PLACERT_TRY(reduce(dy, dyReduced));
  normBackward(input, W("final_norm.weight"), saved.mean1, saved.rstd1, dyReduced.data(), inputGrad,
               G("final_norm.weight"), G("final_norm.bias"), Rl);
  return Status::success();
}

Status GptModel::contextAttentionForward(UnitCollectives &comm, UnitActivations &saved) {
  const GptShape &m = config.shape;
  const int64_t cp = config.contextDegree, me = config.contextIndex, t = config.tensorDegree;
  const int64_t b = config.microBatch, s = m.seq, sl = getLocalSeq(), R = b * sl;
  const int64_t heads = m.heads / t, kvHeads = m.getKvHeads() / t, d = m.hidden / m.heads;
  const int64_t width = heads * d, kvWidth = kvHeads * d;

  if (config.contextMethod == ContextMethod::Ring) {
    // Ring Attention: the local queries meet the local K, V block, then cp − 1 more blocks as
    // each rank passes the block it holds to the next rank and receives the previous rank's;
    // the softmax runs on across the blocks (attentionBlockForward).
    const int64_t block = R * kvWidth;
    std::vector<float> held(static_cast<size_t>(2 * block)), arriving(held.size());
    std::copy(saved.k.begin(), saved.k.end(), held.begin());
    std::copy(saved.v.begin(), saved.v.end(), held.begin() + block);
    std::vector<double> rowMax(static_cast<size_t>(R * heads), -INFINITY),
        rowSum(static_cast<size_t>(R * heads), 0.0), acc(static_cast<size_t>(R * width), 0.0);
    std::vector<int64_t> queries = contextPositions(s, cp, me);
    for (int64_t step = 0; step < cp; ++step) {
      // The block held now is that of the rank `step` places back in the ring.
      std::vector<int64_t> keys = contextPositions(s, cp, (me - step + cp) % cp);
      attentionBlockForward(saved.q.data(), held.data(), held.data() + block, queries.data(),
                            keys.data(), b, sl, sl, heads, kvHeads, d, rowMax.data(), rowSum.data(),
                            acc.data());
      if (step + 1 < cp) {
        PLACERT_TRY(comm.ringStep(held.data(), arriving.data(), 2 * block));
        held.swap(arriving);
      }
    }
    saved.lse.resize(static_cast<size_t>(R * heads));
    attentionBlockFinish(rowMax.data(), rowSum.data(), acc.data(), saved.attn.data(),
                         saved.lse.data(), R, heads, d);
    return Status::success();
  }

  // Ulysses: an all-to-all turns the sequence-split q, k, v (this rank's s/cp tokens, the
  // tensor rank's heads) into head-split ones (every token, heads/cp of them): chunk j of the
  // buffer, for context rank j, holds the rows [b, s/cp] of query heads [j·hq, (j+1)·hq), then
  // of key heads and of value heads [j·hk, (j+1)·hk). Query head j·hq + i reads key/value head
  // j·hk + i / (heads/kv heads), so each rank's heads are whole groups.
  const int64_t hq = heads / cp, hk = kvHeads / cp;
  const int64_t chunk = R * (hq + 2 * hk) * d;
  std::vector<float> out(static_cast<size_t>(cp * chunk)), in(out.size());
  auto pack = [&](float *to, const float *from, int64_t fromWidth, int64_t first, int64_t count) {
    for (int64_t r = 0; r < R; ++r)
      std::copy(from + r * fromWidth + first * d, from + r * fromWidth + (first + count) * d,
                to + r * count * d);
  };
  for (int64_t j = 0; j < cp; ++j) {
    float *to = out.data() + j * chunk;
    pack(to, saved.q.data(), width, j * hq, hq);
    pack(to + R * hq * d, saved.k.data(), kvWidth, j * hk, hk);
    pack(to + R * (hq + hk) * d, saved.v.data(), kvWidth, j * hk, hk);
  }
  PLACERT_TRY(comm.allToAll(out.data(), in.data(), cp * chunk));
  // Rows of the head-split tensors: [b][context rank i][its s/cp tokens], at their positions.
  std::vector<float> q(static_cast<size_t>(b * s * hq * d)), k(static_cast<size_t>(b * s * hk * d)),
      v(k.size());
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < cp; ++i) {
    std::vector<int64_t> part = contextPositions(s, cp, i);
    positions.insert(positions.end(), part.begin(), part.end());
  }
  auto unpack = [&](std::vector<float> &to, const float *from, int64_t count, int64_t source) {
    for (int64_t bi = 0; bi < b; ++bi)
      std::copy(from + bi * sl * count * d, from + (bi + 1) * sl * count * d,
                to.data() + (bi * s + source * sl) * count * d);
  };
  for (int64_t i = 0; i < cp; ++i) {
    const float *from = in.data() + i * chunk;
    unpack(q, from, hq, i);
    unpack(k, from + R * hq * d, hk, i);
    unpack(v, from + R * (hq + hk) * d, hk, i);
  }
  const int64_t rows = b * s;
  std::vector<double> rowMax(static_cast<size_t>(rows * hq), -INFINITY),
      rowSum(static_cast<size_t>(rows * hq), 0.0), acc(static_cast<size_t>(rows * hq * d), 0.0);
  attentionBlockForward(q.data(), k.data(), v.data(), positions.data(), positions.data(), b, s, s,
                        hq, hk, d, rowMax.data(), rowSum.data(), acc.data());
  saved.headOut.resize(static_cast<size_t>(rows * hq * d));
  saved.lse.resize(static_cast<size_t>(rows * hq));
  attentionBlockFinish(rowMax.data(), rowSum.data(), acc.data(), saved.headOut.data(),
                       saved.lse.data(), rows, hq, d);
  saved.q = std::move(q);
  saved.k = std::move(k);
  saved.v = std::move(v);
  // The output back to sequence-split: context rank i gets its tokens' rows of these heads.
  const int64_t outChunk = R * hq * d;
  std::vector<float> back(static_cast<size_t>(cp * outChunk)), home(back.size());
  for (int64_t i = 0; i < cp; ++i)
    for (int64_t bi = 0; bi < b; ++bi)
      std::copy(saved.headOut.data() + (bi * s + i * sl) * hq * d,
                saved.headOut.data() + (bi * s + (i + 1) * sl) * hq * d,
                back.data() + i * outChunk + bi * sl * hq * d);
  PLACERT_TRY(comm.allToAll(back.data(), home.data(), cp * outChunk));
  for (int64_t j = 0; j < cp; ++j)
    for (int64_t r = 0; r < R; ++r)
      std::copy(home.data() + j * outChunk + r * hq * d,
                home.data() + j * outChunk + (r + 1) * hq * d,
                saved.attn.data() + r * width + j * hq * d);
  return Status::success();
}

Status GptModel::contextAttentionBackward(UnitCollectives &comm, UnitActivations &saved,
                                          const float *dattn, float *dq, float *dk, float *dv) {
  const GptShape &m = config.shape;
  const int64_t cp = config.contextDegree, me = config.contextIndex, t = config.tensorDegree;
  const int64_t b = config.microBatch, s = m.seq, sl = getLocalSeq(), R = b * sl;
  const int64_t heads = m.heads / t, kvHeads = m.getKvHeads() / t, d = m.hidden / m.heads;
  const int64_t width = heads * d, kvWidth = kvHeads * d;
  std::fill(dq, dq + R * width, 0.0f);

  if (config.contextMethod == ContextMethod::Ring) {
    // The blocks go around again, each with the dK, dV its visits have summed so far: after
    // cp − 1 steps a rank holds the block of the next rank with every rank's terms, and one last
    // step sends those gradients home.
    const int64_t block = R * kvWidth;
    std::vector<double> delta(static_cast<size_t>(R * heads));
    attentionBlockDelta(saved.attn.data(), dattn, delta.data(), R, heads, d);
    std::vector<float> held(static_cast<size_t>(4 * block), 0.0f), arriving(held.size());
    std::copy(saved.k.begin(), saved.k.end(), held.begin());
    std::copy(saved.v.begin(), saved.v.end(), held.begin() + block);
    std::vector<int64_t> queries = contextPositions(s, cp, me);
    for (int64_t step = 0; step < cp; ++step) {
      std::vector<int64_t> keys = contextPositions(s, cp, (me - step + cp) % cp);
      attentionBlockBackward(saved.q.data(), held.data(), held.data() + block, dattn,
                             saved.lse.data(), delta.data(), queries.data(), keys.data(), b, sl, sl,
                             heads, kvHeads, d, dq, held.data() + 2 * block,
                             held.data() + 3 * block);
      if (step + 1 < cp) {
        PLACERT_TRY(comm.ringStep(held.data(), arriving.data(), 4 * block));
        held.swap(arriving);
      }
    }
    PLACERT_TRY(comm.ringStep(held.data() + 2 * block, arriving.data(), 2 * block));
    std::copy(arriving.data(), arriving.data() + block, dk);
    std::copy(arriving.data() + block, arriving.data() + 2 * block, dv);
    return Status::success();
  }

  // Ulysses: the output gradient to head-split (as the forward's output came back), the
  // blockwise backward over the whole sequence, the q, k, v gradients back to sequence-split.
  const int64_t hq = heads / cp, hk = kvHeads / cp, rows = b * s;
  const int64_t outChunk = R * hq * d;
  std::vector<float> out(static_cast<size_t>(cp * outChunk)), in(out.size());
  for (int64_t j = 0; j < cp; ++j)
    for (int64_t r = 0; r < R; ++r)
      std::copy(dattn + r * width + j * hq * d, dattn + r * width + (j + 1) * hq * d,
                out.data() + j * outChunk + r * hq * d);
  PLACERT_TRY(comm.allToAll(out.data(), in.data(), cp * outChunk));
  std::vector<float> dHeadOut(static_cast<size_t>(rows * hq * d));
  for (int64_t i = 0; i < cp; ++i)
    for (int64_t bi = 0; bi < b; ++bi)
      std::copy(in.data() + i * outChunk + bi * sl * hq * d,
                in.data() + i * outChunk + (bi + 1) * sl * hq * d,
                dHeadOut.data() + (bi * s + i * sl) * hq * d);
  std::vector<int64_t> positions;
  for (int64_t i = 0; i < cp; ++i) {
    std::vector<int64_t> part = contextPositions(s, cp, i);
    positions.insert(positions.end(), part.begin(), part.end());
  }
  std::vector<double> delta(static_cast<size_t>(rows * hq));
  attentionBlockDelta(saved.headOut.data(), dHeadOut.data(), delta.data(), rows, hq, d);
  std::vector<float> dqh(saved.q.size(), 0.0f), dkh(saved.k.size(), 0.0f),
      dvh(saved.v.size(), 0.0f);
  attentionBlockBackward(saved.q.data(), saved.k.data(), saved.v.data(), dHeadOut.data(),
                         saved.lse.data(), delta.data(), positions.data(), positions.data(), b, s,
                         s, hq, hk, d, dqh.data(), dkh.data(), dvh.data());
  // Back to sequence-split: chunk i, for context rank i, holds its tokens' rows of dq, dk, dv.
  const int64_t chunk = R * (hq + 2 * hk) * d;
  std::vector<float> back(static_cast<size_t>(cp * chunk)), home(back.size());
  auto pack = [&](float *to, const std::vector<float> &from, int64_t count, int64_t target) {
    for (int64_t bi = 0; bi < b; ++bi)
      std::copy(from.data() + (bi * s + target * sl) * count * d,
                from.data() + (bi * s + (target + 1) * sl) * count * d, to + bi * sl * count * d);
  };
  for (int64_t i = 0; i < cp; ++i) {
    float *to = back.data() + i * chunk;
    pack(to, dqh, hq, i);
    pack(to + R * hq * d, dkh, hk, i);
    pack(to + R * (hq + hk) * d, dvh, hk, i);
  }
  PLACERT_TRY(comm.allToAll(back.data(), home.data(), cp * chunk));
  auto unpack = [&](float *to, int64_t toWidth, const float *from, int64_t first, int64_t count) {
    for (int64_t r = 0; r < R; ++r)
      std::copy(from + r * count * d, from + (r + 1) * count * d, to + r * toWidth + first * d);
  };
  for (int64_t j = 0; j < cp; ++j) {
    const float *from = home.data() + j * chunk;
    unpack(dq, width, from, j * hq, hq);
    unpack(dk, kvWidth, from + R * hq * d, j * hk, hk);
    unpack(dv, kvWidth, from + R * (hq + hk) * d, j * hk, hk);
  }
  return Status::success();
}

int64_t GptModel::getExpertCapacity() const {
  const MoeShape &e = config.shape.moe;
  if (e.capacityFactor <= 0)
    return 0;
  double tokens = static_cast<double>(getRoutedRows());
  return static_cast<int64_t>(std::ceil(e.capacityFactor * tokens * static_cast<double>(e.topK) /
                                        static_cast<double>(e.experts)));
}

namespace {

/// One expert MLP (or the shared experts' MLP) on `rows` rows of x [rows, h]: `up` holds the
/// [fl, h] gate rows then the [fl, h] up rows (swiglu) or the [fl, h] fc rows (gelu), `down` is
/// [h, fl]; keeps f (the gate or the gelu input), u (swiglu's up) and g (the activation) and
/// writes y [rows, h] (+ downBias when not null).
void expertMlpForward(Kernels &kernels, bool swiglu, const float *x, const float *up,
                      const float *upBias, const float *down, const float *downBias, int64_t rows,
                      int64_t h, int64_t fl, float *f, float *u, float *g, float *y) {
  kernels.linearForward(x, up, upBias, f, rows, h, fl);
  if (swiglu) {
    kernels.linearForward(x, up + fl * h, upBias ? upBias + fl : nullptr, u, rows, h, fl);
    swigluForward(f, u, g, rows * fl);
  } else {
    kernels.geluForward(f, g, rows * fl);
  }
  kernels.linearForward(g, down, downBias, y, rows, fl, h);
}

/// Its backward from dy [rows, h]: accumulates the weight gradients (and the biases' when not
/// null) and writes dx [rows, h].
void expertMlpBackward(Kernels &kernels, bool swiglu, const float *x, const float *up,
                       const float *down, const float *f, const float *u, const float *g,
                       const float *dy, int64_t rows, int64_t h, int64_t fl, float *dUp,
                       float *dUpBias, float *dDown, float *dDownBias, float *dx) {
  kernels.linearWeightGrad(g, dy, dDown, dDownBias, rows, fl, h);
  std::vector<float> dg(static_cast<size_t>(rows * fl));
  kernels.linearInputGrad(dy, down, dg.data(), rows, fl, h);
  if (swiglu) {
    std::vector<float> dgate(dg.size()), dup(dg.size()), dxUp(static_cast<size_t>(rows * h));
    swigluBackward(f, u, dg.data(), dgate.data(), dup.data(), rows * fl);
    kernels.linearWeightGrad(x, dgate.data(), dUp, dUpBias, rows, h, fl);
    kernels.linearWeightGrad(x, dup.data(), dUp + fl * h, dUpBias ? dUpBias + fl : nullptr, rows, h,
                             fl);
    kernels.linearInputGrad(dgate.data(), up, dx, rows, h, fl);
    kernels.linearInputGrad(dup.data(), up + fl * h, dxUp.data(), rows, h, fl);
    for (size_t i = 0; i < dxUp.size(); ++i)
      dx[i] += dxUp[i];
  } else {
    kernels.geluBackward(f, dg.data(), dg.data(), rows * fl);
    kernels.linearWeightGrad(x, dg.data(), dUp, dUpBias, rows, h, fl);
    kernels.linearInputGrad(dg.data(), up, dx, rows, h, fl);
  }
}

/// Where the rows of this rank's local experts are in the received dispatch buffer: source rank
/// s's chunk holds, for each local expert i in order, rows[s · El + i] rows; the experts' input
/// matrix holds expert i's rows from every source in source order. Calls visit(i, received row,
/// expert row, count) for each (source, expert) piece.
template <class Visit>
void forEachExpertPiece(const std::vector<int64_t> &rows, int64_t sources, int64_t localExperts,
                        Visit visit) {
  std::vector<int64_t> expertStart(static_cast<size_t>(localExperts + 1), 0);
  for (int64_t i = 0; i < localExperts; ++i) {
    int64_t total = 0;
    for (int64_t s = 0; s < sources; ++s)
      total += rows[static_cast<size_t>(s * localExperts + i)];
    expertStart[static_cast<size_t>(i + 1)] = expertStart[static_cast<size_t>(i)] + total;
  }
  std::vector<int64_t> filled(static_cast<size_t>(localExperts), 0);
  int64_t received = 0;
  for (int64_t s = 0; s < sources; ++s)
    for (int64_t i = 0; i < localExperts; ++i) {
      int64_t count = rows[static_cast<size_t>(s * localExperts + i)];
      visit(i, received, expertStart[static_cast<size_t>(i)] + filled[static_cast<size_t>(i)],
            count);
      filled[static_cast<size_t>(i)] += count;
      received += count;
    }
}

} // namespace

Status GptModel::moeForward(int64_t layer, const float *weights, const float *expertWeights,
                            UnitActivations &saved, UnitCollectives &comm,
                            std::vector<float> &partial) {
  const GptShape &m = config.shape;
  const MoeShape &e = m.moe;
  const int64_t h = m.hidden, R = getRoutedRows(), t = config.tensorDegree;
  const int64_t E = e.experts, K = e.topK, ep = config.expertDegree, El = E / ep;
  const int64_t fl = getLocalExpertFfn(), fused = m.swiglu ? 2 : 1;
  if (!expertWeights)
    return Status(StatusCode::InvalidArgument,
                  "layer " + std::to_string(layer) + " runs without its experts' weights");
  Offsets offsets(getTensors(UnitKind::Layer, layer));
  Offsets expertOffsets(getTensors(UnitKind::Experts, layer));
  auto W = [&](const char *name) { return offsets.at(weights, name); };
  auto X = [&](const char *name) { return expertOffsets.at(expertWeights, name); };
  const float *y2 = saved.y2.data();

  // The router's scores and each token's top_k experts (ties to the lower index), with their
  // scores renormalised to sum to 1 (Mixtral; DeepSeek-V3 for the sigmoid).
  std::vector<float> logits(static_cast<size_t>(R * E));
  kernels->linearForward(y2, W("moe.router.weight"), nullptr, logits.data(), R, h, E);
  saved.moeScores.resize(logits.size());
  saved.moeExperts.resize(static_cast<size_t>(R * K));
  saved.moeWeights.resize(static_cast<size_t>(R * K));
  std::vector<int64_t> order(static_cast<size_t>(E));
  for (int64_t r = 0; r < R; ++r) {
    const float *z = logits.data() + r * E;
    float *p = saved.moeScores.data() + r * E;
    if (e.router == MoeRouter::Softmax) {
      double best = -INFINITY, sum = 0;
      for (int64_t x = 0; x < E; ++x)
        best = std::max(best, static_cast<double>(z[x]));
      for (int64_t x = 0; x < E; ++x)
        sum += std::exp(z[x] - best);
      for (int64_t x = 0; x < E; ++x)
        p[x] = static_cast<float>(std::exp(z[x] - best) / sum);
    } else {
      for (int64_t x = 0; x < E; ++x)
        p[x] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(z[x]))));
    }
    for (int64_t x = 0; x < E; ++x)
      order[static_cast<size_t>(x)] = x;
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double selected = 0;
    for (int64_t j = 0; j < K; ++j)
      selected += p[order[static_cast<size_t>(j)]];
    for (int64_t j = 0; j < K; ++j) {
      int64_t x = order[static_cast<size_t>(j)];
      saved.moeExperts[static_cast<size_t>(r * K + j)] = x;
      saved.moeWeights[static_cast<size_t>(r * K + j)] = static_cast<float>(p[x] / selected);
    }
  }

  // The load-balancing loss (Fedus et al. 2021, eq. 4): aux_loss · E · Σ_e f_e · P_e over the
  // global micro-batch's N tokens, f_e the fraction of the N · top_k choices that went to e and
  // P_e the mean score of e; the counts and score sums are summed over the batch-like ranks.
  saved.auxLoss = 0;
  saved.moeFraction.assign(static_cast<size_t>(E), 0.0f);
  if (e.auxLoss > 0) {
    std::vector<double> sums(static_cast<size_t>(2 * E), 0.0);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t j = 0; j < K; ++j)
        sums[static_cast<size_t>(saved.moeExperts[static_cast<size_t>(r * K + j)])] += 1;
      for (int64_t x = 0; x < E; ++x)
        sums[static_cast<size_t>(E + x)] += saved.moeScores[static_cast<size_t>(r * E + x)];
    }
    std::vector<float> stats(sums.begin(), sums.end());
    if (config.batchLikeDegree > 1)
      PLACERT_TRY(comm.batchAllReduce(stats.data(), 2 * E));
    double N =
        static_cast<double>(config.globalBatch * m.seq) / static_cast<double>(config.microbatches);
    double aux = 0;
    for (int64_t x = 0; x < E; ++x) {
      double fraction = stats[static_cast<size_t>(x)] / (N * static_cast<double>(K));
      saved.moeFraction[static_cast<size_t>(x)] = static_cast<float>(fraction);
      aux += fraction * stats[static_cast<size_t>(E + x)] / N;
    }
    saved.auxLoss =
        e.auxLoss * static_cast<double>(E) * aux / static_cast<double>(config.microbatches);
  }

  // Dispatch: the dispatch buffer holds, for each expert in order (the experts of expert rank q
  // are chunk q), its rows: with a capacity factor C rows (the choices in token order, then
  // zeros), dropless exactly its choices.
  const int64_t C = getExpertCapacity();
  const bool capacity = C > 0;
  std::vector<int64_t> count(static_cast<size_t>(E), 0), rank(static_cast<size_t>(R * K));
  for (int64_t i = 0; i < R * K; ++i)
    rank[static_cast<size_t>(i)] =
        count[static_cast<size_t>(saved.moeExperts[static_cast<size_t>(i)])]++;
  std::vector<int64_t> sendRows(static_cast<size_t>(E)), start(static_cast<size_t>(E));
  int64_t sendTotal = 0;
  for (int64_t x = 0; x < E; ++x) {
    sendRows[static_cast<size_t>(x)] = capacity ? C : count[static_cast<size_t>(x)];
    start[static_cast<size_t>(x)] = sendTotal;
    sendTotal += sendRows[static_cast<size_t>(x)];
  }
  // How many rows each source sends for each of this rank's experts.
  saved.moeExpertRows.assign(static_cast<size_t>(ep * El), C);
  if (!capacity) {
    if (ep > 1) {
      std::vector<float> mine(sendRows.begin(), sendRows.end()), theirs(mine.size());
      std::vector<int64_t> chunks(static_cast<size_t>(ep), El);
      PLACERT_TRY(comm.expertCounts(mine.data(), chunks, theirs.data(), chunks));
      for (size_t i = 0; i < theirs.size(); ++i)
        saved.moeExpertRows[i] = static_cast<int64_t>(theirs[i]);
    } else {
      saved.moeExpertRows = sendRows;
    }
  }
  saved.moeSlot.resize(static_cast<size_t>(R * K));
  std::vector<float> dispatch(static_cast<size_t>(sendTotal * h), 0.0f);
  for (int64_t i = 0; i < R * K; ++i) {
    int64_t x = saved.moeExperts[static_cast<size_t>(i)];
    int64_t slot = start[static_cast<size_t>(x)] + rank[static_cast<size_t>(i)];
    saved.moeSlot[static_cast<size_t>(i)] = slot;
    std::copy(y2 + (i / K) * h, y2 + (i / K + 1) * h, dispatch.data() + slot * h);
  }
  saved.moeSendCounts.assign(static_cast<size_t>(ep), 0);
  saved.moeRecvCounts.assign(static_cast<size_t>(ep), 0);
  int64_t recvTotal = 0;
  for (int64_t q = 0; q < ep; ++q)
    for (int64_t i = 0; i < El; ++i) {
      saved.moeSendCounts[static_cast<size_t>(q)] += sendRows[static_cast<size_t>(q * El + i)] * h;
      saved.moeRecvCounts[static_cast<size_t>(q)] +=
          saved.moeExpertRows[static_cast<size_t>(q * El + i)] * h;
      recvTotal += saved.moeExpertRows[static_cast<size_t>(q * El + i)];
    }
  std::vector<float> received(static_cast<size_t>(recvTotal * h));
  if (ep > 1)
    PLACERT_TRY(comm.expertAllToAll(dispatch.data(), saved.moeSendCounts, received.data(),
                                    saved.moeRecvCounts, capacity));
  else
    received = dispatch;

  // The experts: each local expert's rows from every source, through its MLP (this tensor
  // rank's column and row pieces, the down bias on tensor rank 0, before the reduction; folded,
  // whole experts with their biases).
  saved.moeInput.resize(received.size());
  forEachExpertPiece(saved.moeExpertRows, ep, El,
                     [&](int64_t, int64_t from, int64_t to, int64_t n) {
                       std::copy(received.data() + from * h, received.data() + (from + n) * h,
                                 saved.moeInput.data() + to * h);
                     });
  std::vector<int64_t> expertRows(static_cast<size_t>(El), 0);
  for (int64_t s = 0; s < ep; ++s)
    for (int64_t i = 0; i < El; ++i)
      expertRows[static_cast<size_t>(i)] += saved.moeExpertRows[static_cast<size_t>(s * El + i)];
  saved.moeF.assign(static_cast<size_t>(recvTotal * fl), 0.0f);
  saved.moeU.assign(m.swiglu ? saved.moeF.size() : 0, 0.0f);
  saved.moeG.assign(saved.moeF.size(), 0.0f);
  std::vector<float> outputs(static_cast<size_t>(recvTotal * h), 0.0f);
  const float *upBias = X("moe.experts.up.bias"), *downBias = X("moe.experts.down.bias");
  for (int64_t i = 0, row = 0; i < El; row += expertRows[static_cast<size_t>(i)], ++i) {
    int64_t n = expertRows[static_cast<size_t>(i)];
    if (n == 0)
      continue;
    expertMlpForward(
        *kernels, m.swiglu, saved.moeInput.data() + row * h,
        X("moe.experts.up.weight") + i * fused * fl * h, upBias ? upBias + i * fused * fl : nullptr,
        X("moe.experts.down.weight") + i * h * fl,
        downBias && (config.expertFold || config.tensorIndex == 0) ? downBias + i * h : nullptr, n,
        h, fl, saved.moeF.data() + row * fl, m.swiglu ? saved.moeU.data() + row * fl : nullptr,
        saved.moeG.data() + row * fl, outputs.data() + row * h);
  }

  // Combine: the outputs go back in the dispatch buffer's layout and each token sums its
  // choices' outputs by their weights.
  std::vector<float> back(received.size());
  forEachExpertPiece(
      saved.moeExpertRows, ep, El, [&](int64_t, int64_t to, int64_t from, int64_t n) {
        std::copy(outputs.data() + from * h, outputs.data() + (from + n) * h, back.data() + to * h);
      });
  saved.moeCombined.assign(dispatch.size(), 0.0f);
  if (ep > 1)
    PLACERT_TRY(comm.expertAllToAll(back.data(), saved.moeRecvCounts, saved.moeCombined.data(),
                                    saved.moeSendCounts, capacity));
  else
    saved.moeCombined = back;
  partial.assign(static_cast<size_t>(R * h), 0.0f);
  for (int64_t i = 0; i < R * K; ++i) {
    float weight = saved.moeWeights[static_cast<size_t>(i)];
    const float *y = saved.moeCombined.data() + saved.moeSlot[static_cast<size_t>(i)] * h;
    float *out = partial.data() + (i / K) * h;
    for (int64_t c = 0; c < h; ++c)
      out[c] += weight * y[c];
  }

  // The shared experts: one column/row-split MLP on every token (its bias after the reduction).
  const int64_t sharedWidth = e.sharedExperts * e.sharedExpertFfn / t;
  if (sharedWidth > 0) {
    saved.sharedF.assign(static_cast<size_t>(R * sharedWidth), 0.0f);
    saved.sharedU.assign(m.swiglu ? saved.sharedF.size() : 0, 0.0f);
    saved.sharedG.assign(saved.sharedF.size(), 0.0f);
    std::vector<float> shared(static_cast<size_t>(R * h));
    expertMlpForward(*kernels, m.swiglu, y2, W("moe.shared.up.weight"), W("moe.shared.up.bias"),
                     W("moe.shared.down.weight"), nullptr, R, h, sharedWidth, saved.sharedF.data(),
                     m.swiglu ? saved.sharedU.data() : nullptr, saved.sharedG.data(),
                     shared.data());
    for (size_t i = 0; i < shared.size(); ++i)
      partial[i] += shared[i];
  }
  return Status::success();
}

Status GptModel::moeBackward(int64_t layer, const float *weights, const float *expertWeights,
                             float *grads, float *expertGrads, UnitActivations &saved,
                             UnitCollectives &comm, const float *dout, std::vector<float> &dy2) {
  const GptShape &m = config.shape;
  const MoeShape &e = m.moe;
  const int64_t h = m.hidden, R = getRoutedRows(), t = config.tensorDegree;
  const int64_t E = e.experts, K = e.topK, ep = config.expertDegree, El = E / ep;
  const int64_t fl = getLocalExpertFfn(), fused = m.swiglu ? 2 : 1;
  const bool capacity = getExpertCapacity() > 0;
  if (!expertWeights || !expertGrads)
    return Status(StatusCode::InvalidArgument,
                  "layer " + std::to_string(layer) + " runs without its experts' weights");
  Offsets offsets(getTensors(UnitKind::Layer, layer));
  Offsets expertOffsets(getTensors(UnitKind::Experts, layer));
  auto W = [&](const char *name) { return offsets.at(weights, name); };
  auto G = [&](const char *name) { return offsets.at(grads, name); };
  auto X = [&](const char *name) { return expertOffsets.at(expertWeights, name); };
  auto DX = [&](const char *name) { return expertOffsets.at(expertGrads, name); };
  const float *y2 = saved.y2.data();
  std::fill(dy2.begin(), dy2.end(), 0.0f);

  // The combine weights' gradients: the output gradient against each choice's output, a partial
  // sum over the tensor ranks' pieces of the experts, summed over the tensor axes.
  std::vector<float> dw(static_cast<size_t>(R * K));
  for (int64_t i = 0; i < R * K; ++i) {
    const float *y = saved.moeCombined.data() + saved.moeSlot[static_cast<size_t>(i)] * h;
    const float *d = dout + (i / K) * h;
    double dot = 0;
    for (int64_t c = 0; c < h; ++c)
      dot += static_cast<double>(d[c]) * y[c];
    dw[static_cast<size_t>(i)] = static_cast<float>(dot);
  }
  // With top_k = 1 the renormalised weight is 1 whatever the scores: nothing flows back through
  // it, and the exchange is left out; folded experts' outputs are whole.
  if (t > 1 && K > 1 && !config.expertFold)
    PLACERT_TRY(comm.allReduce(dw.data(), R * K));

  // The choices' output gradients (weight · dout) to the experts, as the dispatch went.
  std::vector<float> dispatch(saved.moeCombined.size(), 0.0f);
  for (int64_t i = 0; i < R * K; ++i) {
    float weight = saved.moeWeights[static_cast<size_t>(i)];
    const float *d = dout + (i / K) * h;
    float *to = dispatch.data() + saved.moeSlot[static_cast<size_t>(i)] * h;
    for (int64_t c = 0; c < h; ++c)
      to[c] = weight * d[c];
  }
  std::vector<float> received(saved.moeInput.size());
  if (ep > 1)
    PLACERT_TRY(comm.expertAllToAll(dispatch.data(), saved.moeSendCounts, received.data(),
                                    saved.moeRecvCounts, capacity));
  else
    received = dispatch;
  std::vector<float> dy(received.size()), dx(received.size(), 0.0f);
  forEachExpertPiece(
      saved.moeExpertRows, ep, El, [&](int64_t, int64_t from, int64_t to, int64_t n) {
        std::copy(received.data() + from * h, received.data() + (from + n) * h, dy.data() + to * h);
      });
  std::vector<int64_t> expertRows(static_cast<size_t>(El), 0);
  for (int64_t s = 0; s < ep; ++s)
    for (int64_t i = 0; i < El; ++i)
      expertRows[static_cast<size_t>(i)] += saved.moeExpertRows[static_cast<size_t>(s * El + i)];
  float *dUpBias = DX("moe.experts.up.bias"), *dDownBias = DX("moe.experts.down.bias");
  for (int64_t i = 0, row = 0; i < El; row += expertRows[static_cast<size_t>(i)], ++i) {
    int64_t n = expertRows[static_cast<size_t>(i)];
    if (n == 0)
      continue;
    expertMlpBackward(
        *kernels, m.swiglu, saved.moeInput.data() + row * h,
        X("moe.experts.up.weight") + i * fused * fl * h, X("moe.experts.down.weight") + i * h * fl,
        saved.moeF.data() + row * fl, m.swiglu ? saved.moeU.data() + row * fl : nullptr,
        saved.moeG.data() + row * fl, dy.data() + row * h, n, h, fl,
        DX("moe.experts.up.weight") + i * fused * fl * h,
        dUpBias ? dUpBias + i * fused * fl : nullptr, DX("moe.experts.down.weight") + i * h * fl,
        dDownBias ? dDownBias + i * h : nullptr, dx.data() + row * h);
  }
  // The inputs' gradients (partial over the tensor ranks) back to their tokens.
  std::vector<float> back(received.size()), combined(dispatch.size());
  forEachExpertPiece(
      saved.moeExpertRows, ep, El, [&](int64_t, int64_t to, int64_t from, int64_t n) {
        std::copy(dx.data() + from * h, dx.data() + (from + n) * h, back.data() + to * h);
      });
  if (ep > 1)
    PLACERT_TRY(comm.expertAllToAll(back.data(), saved.moeRecvCounts, combined.data(),
                                    saved.moeSendCounts, capacity));
  else
    combined = back;
  for (int64_t i = 0; i < R * K; ++i) {
    const float *from = combined.data() + saved.moeSlot[static_cast<size_t>(i)] * h;
    float *to = dy2.data() + (i / K) * h;
    for (int64_t c = 0; c < h; ++c)
      to[c] += from[c];
  }

  // The shared experts, as a dense MLP.
  const int64_t sharedWidth = e.sharedExperts * e.sharedExpertFfn / t;
  if (sharedWidth > 0) {
    std::vector<float> dShared(static_cast<size_t>(R * h), 0.0f);
    expertMlpBackward(*kernels, m.swiglu, y2, W("moe.shared.up.weight"),
                      W("moe.shared.down.weight"), saved.sharedF.data(),
                      m.swiglu ? saved.sharedU.data() : nullptr, saved.sharedG.data(), dout, R, h,
                      sharedWidth, G("moe.shared.up.weight"), G("moe.shared.up.bias"),
                      G("moe.shared.down.weight"), nullptr, dShared.data());
    for (size_t i = 0; i < dShared.size(); ++i)
      dy2[i] += dShared[i];
  }

  // The router: through the renormalisation w_j = p_j / Σ p (dp_j = (dw_j − Σ_i dw_i w_i) / Σ p),
  // the load-balancing loss (d/dp_{t,e} = aux_loss · E · f_e / N per micro-batch), and the
  // softmax or the sigmoid; identical on every tensor rank.
  const double N =
      static_cast<double>(config.globalBatch * m.seq) / static_cast<double>(config.microbatches);
  const double auxScale =
      e.auxLoss * static_cast<double>(E) / (N * static_cast<double>(config.microbatches));
  std::vector<float> dlogits(static_cast<size_t>(R * E));
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t r = 0; r < R; ++r) {
    const float *p = saved.moeScores.data() + r * E;
    for (int64_t x = 0; x < E; ++x)
      dp[static_cast<size_t>(x)] =
          e.auxLoss > 0 ? auxScale * saved.moeFraction[static_cast<size_t>(x)] : 0.0;
    double selected = 0, dot = 0;
    for (int64_t j = 0; j < K; ++j) {
      selected += p[saved.moeExperts[static_cast<size_t>(r * K + j)]];
      dot += static_cast<double>(dw[static_cast<size_t>(r * K + j)]) *
             saved.moeWeights[static_cast<size_t>(r * K + j)];
    }
    for (int64_t j = 0; j < K; ++j)
      dp[static_cast<size_t>(saved.moeExperts[static_cast<size_t>(r * K + j)])] +=
          (dw[static_cast<size_t>(r * K + j)] - dot) / selected;
    float *dz = dlogits.data() + r * E;
    if (e.router == MoeRouter::Softmax) {
      double inner = 0;
      for (int64_t x = 0; x < E; ++x)
        inner += p[x] * dp[static_cast<size_t>(x)];
      for (int64_t x = 0; x < E; ++x)
        dz[x] = static_cast<float>(p[x] * (dp[static_cast<size_t>(x)] - inner));
    } else {
      for (int64_t x = 0; x < E; ++x)
        dz[x] = static_cast<float>(dp[static_cast<size_t>(x)] * p[x] * (1.0 - p[x]));
    }
  }
  kernels->linearWeightGrad(y2, dlogits.data(), G("moe.router.weight"), nullptr, R, h, E);
  if (config.expertFold || config.tensorIndex == 0) {
    // The input gradient joins the tensor ranks' partial sums once (folded, each rank's rows
    // are its own).
    std::vector<float> dRouter(static_cast<size_t>(R * h));
    kernels->linearInputGrad(dlogits.data(), W("moe.router.weight"), dRouter.data(), R, h, E);
    for (size_t i = 0; i < dRouter.size(); ++i)
      dy2[i] += dRouter[i];
  }
  return Status::success();
}

} // namespace gpt
} // namespace placert

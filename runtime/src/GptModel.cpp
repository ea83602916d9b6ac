// The GPT units' math on one device's tensor-parallel pieces (Megatron-LM's splits, Shoeybi et
// al. 2019 §3; sequence parallelism, Korthikanti et al. 2022 §4.2.2), shared by the trainer and
// the single-device reference.
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
    if (m.swiglu) {
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
  } else {
    add("final_norm.weight", h, 1, Split::Replicated, Init::NormWeight, 1);
    if (norm)
      add("final_norm.bias", h, 1, Split::Replicated, Init::Bias, h);
    if (!m.tiedEmbeddings)
      add("output.weight", m.vocab, h, Split::Vocabulary, Init::Weight, h);
  }
  int64_t t = config.tensorDegree, offset = 0;
  for (TensorInfo &tensor : tensors) {
    tensor.localRows = tensor.rows;
    tensor.localCols = tensor.cols;
    if (tensor.split == Split::Column || tensor.split == Split::Vocabulary) {
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
    total += tensor.rows * tensor.cols;
  return total;
}

int64_t GptModel::getQkvRows() const {
  const GptShape &m = config.shape;
  return (m.heads + 2 * m.getKvHeads()) * (m.hidden / m.heads);
}

int64_t GptModel::getLocalRows() const {
  int64_t rows = config.microBatch * config.shape.seq;
  return config.sequenceParallel ? rows / config.tensorDegree : rows;
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
  for (const TensorInfo &tensor : getTensors(kind, layer))
    if (tensor.split == Split::Replicated)
      ranges.emplace_back(tensor.localOffset, tensor.rows * tensor.cols);
  return ranges;
}

void GptModel::recomputeAttention(UnitActivations &saved) {
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

Status GptModel::reduceRows(TensorCollectives &comm, std::vector<float> &partial,
                            std::vector<float> &result) const {
  const int64_t h = config.shape.hidden, R = config.microBatch * config.shape.seq;
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
                         float *output, UnitActivations &saved, TensorCollectives &comm,
                         double &loss, bool recomputing) {
  const GptShape &m = config.shape;
  const int64_t h = m.hidden, s = m.seq, b = config.microBatch, R = b * s;
  const int64_t t = config.tensorDegree, Rl = getLocalRows();
  const bool sp = config.sequenceParallel, parallel = t > 1;
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
                     h, T[0].rowOffset, T[0].localRows);
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
    PLACERT_TRY(gather(y1l, saved.y1));
    std::vector<float> qkv(static_cast<size_t>(R * qkvl));
    kernels->linearForward(saved.y1.data(), W("attn.qkv.weight"), W("attn.qkv.bias"), qkv.data(), R,
                           h, qkvl);
    saved.q.resize(static_cast<size_t>(R * hl));
    saved.k.resize(static_cast<size_t>(R * kvl));
    saved.v.resize(static_cast<size_t>(R * kvl));
    splitQkv(qkv.data(), saved.q.data(), saved.k.data(), saved.v.data(), R, localKvHeads, false);
    if (m.rope) {
      ropeApply(saved.q.data(), R, s, localHeads, headDim, false);
      ropeApply(saved.k.data(), R, s, localKvHeads, headDim, false);
    }
    saved.attn.resize(static_cast<size_t>(R * hl));
    saved.probs.assign(static_cast<size_t>(b * localHeads * s * s), 0.0f);
    attentionForward(saved.q.data(), saved.k.data(), saved.v.data(), saved.attn.data(),
                     saved.probs.data(), b, s, localHeads, localKvHeads, headDim);
    std::vector<float> o(static_cast<size_t>(R * h)), oReduced;
    kernels->linearForward(saved.attn.data(), W("attn.proj.weight"), nullptr, o.data(), R, hl, h);
    PLACERT_TRY(reduce(o, oReduced));
    saved.x1.resize(static_cast<size_t>(Rl * h));
    residual(input, oReduced.data(), W("attn.proj.bias"), saved.x1.data());
    std::vector<float> y2l(static_cast<size_t>(Rl * h));
    normForward(saved.x1.data(), W("ln2.weight"), W("ln2.bias"), y2l.data(), saved.mean2,
                saved.rstd2, Rl);
    PLACERT_TRY(gather(y2l, saved.y2));
    saved.f.resize(static_cast<size_t>(R * fl));
    saved.g.resize(static_cast<size_t>(R * fl));
    const float *down;
    const float *downBias;
    if (m.swiglu) {
      saved.u.resize(static_cast<size_t>(R * fl));
      kernels->linearForward(saved.y2.data(), W("mlp.gate.weight"), W("mlp.gate.bias"),
                             saved.f.data(), R, h, fl);
      kernels->linearForward(saved.y2.data(), W("mlp.up.weight"), W("mlp.up.bias"), saved.u.data(),
                             R, h, fl);
      swigluForward(saved.f.data(), saved.u.data(), saved.g.data(), R * fl);
      down = W("mlp.down.weight");
      downBias = W("mlp.down.bias");
    } else {
      kernels->linearForward(saved.y2.data(), W("mlp.fc.weight"), W("mlp.fc.bias"), saved.f.data(),
                             R, h, fl);
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
  const float *table = m.tiedEmbeddings ? tiedTable : W("output.weight");
  std::vector<float> yl(static_cast<size_t>(Rl * h));
  normForward(input, W("final_norm.weight"), W("final_norm.bias"), yl.data(), saved.mean1,
              saved.rstd1, Rl);
  PLACERT_TRY(gather(yl, saved.y1));
  std::vector<float> logits(static_cast<size_t>(R * Vl));
  kernels->linearForward(saved.y1.data(), table, nullptr, logits.data(), R, h, Vl);
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
                          UnitActivations &saved, TensorCollectives &comm) {
  const GptShape &m = config.shape;
  const int64_t h = m.hidden, s = m.seq, b = config.microBatch, R = b * s;
  const int64_t t = config.tensorDegree, Rl = getLocalRows();
  const bool sp = config.sequenceParallel, parallel = t > 1;
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
                      T[0].rowOffset, T[0].localRows);
    return Status::success();
  }

  if (kind == UnitKind::Layer) {
    const int64_t localHeads = m.heads / t, localKvHeads = m.getKvHeads() / t;
    const int64_t headDim = h / m.heads, hl = h / t, kvl = localKvHeads * headDim, fl = m.ffn / t;
    const int64_t qkvl = getQkvRows() / t;
    const char *downName = m.swiglu ? "mlp.down.weight" : "mlp.proj.weight";
    addBiasGrad(outputGrad, G(m.swiglu ? "mlp.down.bias" : "mlp.proj.bias"));
    std::vector<float> dout;
    PLACERT_TRY(gather(outputGrad, dout));
    kernels->linearWeightGrad(saved.g.data(), dout.data(), G(downName), nullptr, R, fl, h);
    std::vector<float> dg(static_cast<size_t>(R * fl));
    kernels->linearInputGrad(dout.data(), W(downName), dg.data(), R, fl, h);
    std::vector<float> dy2(static_cast<size_t>(R * h)), dy2Reduced;
    if (m.swiglu) {
      std::vector<float> dgate(dg.size()), dup(dg.size()), dy2Up(dy2.size());
      swigluBackward(saved.f.data(), saved.u.data(), dg.data(), dgate.data(), dup.data(), R * fl);
      kernels->linearWeightGrad(saved.y2.data(), dgate.data(), G("mlp.gate.weight"),
                                G("mlp.gate.bias"), R, h, fl);
      kernels->linearWeightGrad(saved.y2.data(), dup.data(), G("mlp.up.weight"), G("mlp.up.bias"),
                                R, h, fl);
      kernels->linearInputGrad(dgate.data(), W("mlp.gate.weight"), dy2.data(), R, h, fl);
      kernels->linearInputGrad(dup.data(), W("mlp.up.weight"), dy2Up.data(), R, h, fl);
      for (size_t i = 0; i < dy2.size(); ++i)
        dy2[i] += dy2Up[i];
    } else {
      kernels->geluBackward(saved.f.data(), dg.data(), dg.data(), R * fl);
      kernels->linearWeightGrad(saved.y2.data(), dg.data(), G("mlp.fc.weight"), G("mlp.fc.bias"), R,
                                h, fl);
      kernels->linearInputGrad(dg.data(), W("mlp.fc.weight"), dy2.data(), R, h, fl);
    }
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
    attentionBackward(saved.q.data(), saved.k.data(), saved.v.data(), saved.probs.data(), da.data(),
                      dq.data(), dk.data(), dv.data(), b, s, localHeads, localKvHeads, headDim);
    if (m.rope) {
      ropeApply(dq.data(), R, s, localHeads, headDim, true);
      ropeApply(dk.data(), R, s, localKvHeads, headDim, true);
    }
    std::vector<float> dqkv(static_cast<size_t>(R * qkvl));
    splitQkv(dqkv.data(), dq.data(), dk.data(), dv.data(), R, localKvHeads, true);
    kernels->linearWeightGrad(saved.y1.data(), dqkv.data(), G("attn.qkv.weight"),
                              G("attn.qkv.bias"), R, h, qkvl);
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
  const float *table = m.tiedEmbeddings ? tiedTable : W("output.weight");
  float *tableGrad = m.tiedEmbeddings ? tiedGrads : G("output.weight");
  kernels->linearWeightGrad(saved.y1.data(), saved.dlogits.data(), tableGrad, nullptr, R, h, Vl);
  std::vector<float> dy(static_cast<size_t>(R * h)), dyReduced;
  kernels->linearInputGrad(saved.dlogits.data(), table, dy.data(), R, h, Vl);
  PLACERT_TRY(reduce(dy, dyReduced));
  normBackward(input, W("final_norm.weight"), saved.mean1, saved.rstd1, dyReduced.data(), inputGrad,
               G("final_norm.weight"), G("final_norm.bias"), Rl);
  return Status::success();
}

} // namespace gpt
} // namespace placert

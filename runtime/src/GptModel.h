// The GPT transformer's units as math over one device's tensor-parallel pieces and its part of
// each sequence (context parallelism): the parameter tensors of `embed`, `layer.i` and `head`
// with their splits, and each unit's forward, recompute and backward on a micro-batch, calling
// the tensor- and context-parallel collectives through an interface. The distributed trainer
// (GptTrainer.cpp) and the single-device reference (degree 1) both use it.
#ifndef PLACERT_SRC_GPTMODEL_H
#define PLACERT_SRC_GPTMODEL_H

#include "Kernels.h"
#include "placert/placert.h"

#include <string>
#include <vector>

namespace placert {
namespace gpt {

/// `Experts`: the routed experts of a mixture-of-experts layer, a unit of their own for the states
/// (placed over the expert-data-parallel axes) whose math is part of the layer's.
enum class UnitKind { Embed, Layer, Experts, Head };
/// `Whole`: the whole tensor on the rank that holds it, which alone owns it among the tensor
/// ranks (folded experts: each tensor rank holds other experts); `Replicated`: the same on every
/// tensor rank, owned by tensor rank 0.
enum class Split { Column, Row, Vocabulary, Replicated, Whole };

/// One parameter tensor: [rows, cols] (a vector has cols 1), as in docs/ir.md.
struct TensorInfo {
  std::string name;
  int64_t rows = 0, cols = 1;
  Split split = Split::Replicated;
  enum class Init { Weight, NormWeight, Bias } init = Init::Weight;
  int64_t fanIn = 1;
  /// Mixture of experts: the tensor is `blocks` blocks of rows, one per expert (1 otherwise),
  /// split over the expert-parallel ranks when `expertSplit`; each block's rows are `fused`
  /// segments (swiglu's gate and up projections: 2) that a column split cuts each in t pieces.
  int64_t blocks = 1, fused = 1;
  bool expertSplit = false;
  /// Another unit's tensor held here too (the head's copy of `embed.tokens`, same name, shape and
  /// initial values): a parameter of this unit, with its gradients and optimizer states, but not
  /// one of the model's (GptModel::getFullParams leaves it out and a checkpoint holds the
  /// original only, from which a load fills the copy).
  bool copy = false;
  /// The logical shape a checkpoint records ([experts, rows, cols]); empty: [rows] or [rows, cols].
  std::vector<int64_t> dims;
  // After the tensor- and expert-parallel splits.
  int64_t localRows = 0, localCols = 0, rowOffset = 0, colOffset = 0;
  int64_t localOffset = 0; ///< In the unit's local piece.
  /// Segmented rows (blocks or fused segments under a column split): local row j·segmentRows + i
  /// is global row (firstBlock + j / segments)·blockRows + (j % segments)·segmentStride +
  /// rowOffset + i. 0: local row r is global row rowOffset + r.
  int64_t segmentRows = 0, segments = 1, blockRows = 0, segmentStride = 0, firstBlock = 0;
  bool isVector() const { return cols == 1; }
  int64_t globalRow(int64_t localRow) const {
    if (segmentRows == 0)
      return rowOffset + localRow;
    int64_t j = localRow / segmentRows;
    return (firstBlock + j / segments) * blockRows + (j % segments) * segmentStride + rowOffset +
           localRow % segmentRows;
  }
  /// The row-major index in the whole tensor of element `k` of the local piece.
  int64_t logicalIndex(int64_t k) const {
    return globalRow(k / localCols) * cols + k % localCols + colOffset;
  }
};

/// The collectives inside a unit's computation as the math calls them: over the tensor axes
/// (only with tensor degree > 1) and, for context parallelism, over the sequence axes (only with
/// context degree > 1), where the group's rank is the context index.
class UnitCollectives {
public:
  virtual ~UnitCollectives() = default;
  virtual Status allReduce(float *buffer, int64_t elements) = 0;
  virtual Status allGather(const float *input, float *output, int64_t outputElements) = 0;
  virtual Status reduceScatter(const float *input, float *output, int64_t inputElements) = 0;
  /// Context parallelism, as Communicator::allToAll and Communicator::ringStep.
  virtual Status allToAll(const float *input, float *output, int64_t elements) = 0;
  virtual Status ringStep(const float *input, float *output, int64_t elements) = 0;
  /// Expert parallelism (only with expert degree > 1): Communicator::allToAllv over the expert
  /// axes, the group's rank being the expert index. `capacity`: the chunks have the sizes the
  /// capacity factor fixes (the plan's element count is exact); otherwise dropless routing's
  /// sizes, which depend on the routing.
  virtual Status expertAllToAll(const float *input, const std::vector<int64_t> &sendCounts,
                                float *output, const std::vector<int64_t> &recvCounts,
                                bool capacity) {
    (void)input, (void)sendCounts, (void)output, (void)recvCounts, (void)capacity;
    return Status(StatusCode::InvalidArgument, "an expert-parallel all-to-all without expert axes");
  }
  /// Dropless routing's row counts per expert, before the dispatch: as expertAllToAll, but not an
  /// op of the plan (its size is the experts', and the plan's dropless all-to-alls are
  /// expectations anyway); counted with the expert all-to-alls.
  virtual Status expertCounts(const float *input, const std::vector<int64_t> &sendCounts,
                              float *output, const std::vector<int64_t> &recvCounts) {
    (void)input, (void)sendCounts, (void)output, (void)recvCounts;
    return Status(StatusCode::InvalidArgument, "an expert-parallel all-to-all without expert axes");
  }
  /// The load-balancing loss's statistics summed over the batch-like axes (batch, sequence,
  /// expert; only when their degree is > 1).
  virtual Status batchAllReduce(float *buffer, int64_t elements) {
    (void)buffer, (void)elements;
    return Status(StatusCode::InvalidArgument, "a batch all-reduce without batch axes");
  }
};

/// What a unit keeps of one micro-batch between its forward and backward.
struct UnitActivations {
  /// q: [rows, heads/t · head dim], k and v: [rows, kv heads/t · head dim] (after RoPE); f: the
  /// gelu input or the swiglu gate; u: the swiglu up projection. Under all-to-all context
  /// parallelism q, k and v are the head-split ones ([batch, seq, heads/(t·cp) · head dim] and
  /// [batch, seq, kv heads/(t·cp) · head dim], rows in the order the all-to-all delivers them)
  /// and `headOut` is the attention output in that layout.
  std::vector<float> y1, mean1, rstd1, q, k, v, probs, attn, x1, y2, mean2, rstd2, f, u, g;
  std::vector<float> headOut;
  /// Context parallelism: the log-sum-exp of each query row's scores per head, from which the
  /// blockwise backward recomputes the probabilities (they are never kept whole).
  std::vector<double> lse;
  /// Mixture of experts: the router's scores [rows, experts] (softmax or sigmoid), each token's
  /// top_k experts and combine weights [rows, top_k], where each choice sits in the dispatch
  /// buffer, the fraction of the global micro-batch's choices each expert got, the chunk sizes
  /// of the all-to-alls, the experts' inputs and intermediate values on this rank, the combined
  /// expert outputs [dispatch rows, hidden], and the shared experts' intermediate values.
  std::vector<float> moeScores, moeWeights, moeFraction;
  std::vector<int64_t> moeExperts, moeSlot, moeSendCounts, moeRecvCounts, moeExpertRows;
  std::vector<float> moeInput, moeF, moeU, moeG, moeCombined, sharedF, sharedU, sharedG;
  /// The load-balancing loss of this micro-batch (already divided by the micro-batches).
  double auxLoss = 0;
  std::vector<float> dlogits;   ///< The head: the loss gradient of its logits.
  std::vector<float> lossStats; ///< The head: per row max, sum of exponentials, target.
  bool complete = false;        ///< Every tensor above present (else recompute first).
};

struct GptConfig {
  GptShape shape;
  int64_t microBatch = 1;
  int64_t globalBatch = 1; ///< The loss is the mean over globalBatch · seq tokens.
  int tensorDegree = 1, tensorIndex = 0;
  bool sequenceParallel = false;
  /// Under sequence parallelism, QKV, a dense MLP's input products and the output layer keep the
  /// sequence shard of their input and gather it again in the backward for the weight gradient
  /// (`sp_inputs = regather`), instead of keeping the gathered input.
  bool regatherInputs = false;
  Recompute recompute = Recompute::None;
  /// Context parallelism: `contextDegree` ranks share each sequence, this one is `contextIndex`
  /// and holds the tokens of contextPosition; the attention exchanges keys and values by
  /// `contextMethod`.
  int contextDegree = 1, contextIndex = 0;
  ContextMethod contextMethod = ContextMethod::Ring;
  /// Expert parallelism: this rank holds experts [expertIndex·E/expertDegree, …) of every
  /// mixture-of-experts layer. `batchLikeDegree` is the number of ranks whose tokens make the
  /// global micro-batch (batch × sequence × expert axes), over which the load-balancing loss's
  /// statistics are summed; `microbatches` the micro-batches of a step (the loss of each is
  /// divided by them).
  int expertDegree = 1, expertIndex = 0;
  int batchLikeDegree = 1;
  /// `expert_tensor = fold`: the expert group is the expert and tensor axes (expertDegree and
  /// expertIndex are the group's), its experts whole (Split::Whole), and an MoE layer routes
  /// this rank's own rows (getLocalRows) without the MLP block's tensor-parallel collectives;
  /// batchLikeDegree counts the tensor ranks too.
  bool expertFold = false;
  int64_t microbatches = 1;
  /// Tied embeddings with the head on another pipeline stage than the embedding: the head holds
  /// a copy of `embed.tokens`, the last of its tensors, which its output layer reads (Megatron-Core
  /// keeps the same copy: LanguageModule.setup_embeddings_and_output_layer).
  bool embeddingCopy = false;
};

/// The weights and gradients of a mixture-of-experts layer's routed experts (the `Experts` unit's
/// local piece), which the layer's forward and backward use.
struct ExpertTensors {
  const float *weights = nullptr;
  float *grads = nullptr;
};

/// Megatron-Core's load-balanced split of a sequence of `seq` tokens among `degree` context
/// ranks: the sequence is cut into 2 · degree chunks of seq / (2 · degree) tokens, and rank r
/// holds chunks r and 2 · degree − 1 − r, so every rank has as much causal attention to compute.
/// Returns the global position of the rank's `local`-th token (0 ≤ local < seq / degree).
int64_t contextPosition(int64_t seq, int64_t degree, int64_t index, int64_t local);

class GptModel {
public:
  explicit GptModel(GptConfig config);

  const GptConfig &getConfig() const { return config; }
  /// The unit's tensors with their local shapes and offsets; `layer` for layers.
  std::vector<TensorInfo> getTensors(UnitKind kind, int64_t layer) const;
  int64_t getLocalParams(UnitKind kind, int64_t layer) const;
  int64_t getFullParams(UnitKind kind, int64_t layer) const;
  /// Rows of the token matrix this rank holds between units: b·s/cp, or b·s/(cp·t) under
  /// sequence parallelism.
  int64_t getLocalRows() const;
  /// The rows an MoE layer routes: this rank's own (getLocalRows) when the experts fold the
  /// tensor axes, else the tensor group's whole b·s/cp.
  int64_t getRoutedRows() const;
  /// The width of each routed expert this rank holds: expert_ffn / t split over the tensor axes,
  /// the whole expert_ffn when the experts fold them.
  int64_t getLocalExpertFfn() const;
  /// The tokens of each sequence this rank holds: s/cp.
  int64_t getLocalSeq() const { return config.shape.seq / config.contextDegree; }
  /// The global position of this rank's `local`-th token of a sequence (contextPosition).
  int64_t getPosition(int64_t local) const;
  /// Rows of the whole `attn.qkv.weight`: (heads + 2 · kv heads) · head dim, 3·hidden for
  /// multi-head attention. They are ordered [kv head][the group's heads/kv query heads, k, v][head
  /// dim] (Megatron-Core's layout; [head][q, k, v][head dim] for multi-head attention), so the
  /// column split hands each tensor rank whole groups: kv heads/t of them.
  int64_t getQkvRows() const;
  /// The initial value of element `index` of a whole tensor.
  float initialValue(uint64_t seed, const TensorInfo &tensor, int64_t index) const;

  /// Forward of a unit on one micro-batch. `tokens` and `targets` are the micro-batch's b·s ids
  /// (embed and head); `input` is the unit's input (layers and head), `output` receives its output
  /// (embed and layers). `tiedTable` is the embedding table the head uses when embeddings are
  /// tied and it holds no copy of its own (GptConfig::embeddingCopy).
  /// Returns the head's loss contribution in `loss`.
  Status forward(UnitKind kind, int64_t layer, const float *weights, const float *tiedTable,
                 const int32_t *tokens, const int32_t *targets, const float *input, float *output,
                 UnitActivations &saved, UnitCollectives &collectives, double &loss,
                 bool recomputing, ExpertTensors experts = {});
  /// Backward: accumulates into `grads` (the unit's local piece; `tiedGrads` the embedding's for
  /// a tied head without a copy of its own) and writes the input gradient (layers and head) to
  /// `inputGrad`.
  Status backward(UnitKind kind, int64_t layer, const float *weights, const float *tiedTable,
                  const int32_t *tokens, const float *input, const float *outputGrad,
                  float *inputGrad, float *grads, float *tiedGrads, UnitActivations &saved,
                  UnitCollectives &collectives, ExpertTensors experts = {});
  /// Selective recomputation: the attention probabilities again from the saved q, k, v (nothing
  /// under context parallelism, whose backward recomputes them block by block).
  void recomputeAttention(UnitActivations &saved);
  /// The local indices of the tensors tensor parallelism replicates inside layers and the head
  /// (norms, row-parallel biases): what sequence parallelism all-reduces.
  std::vector<std::pair<int64_t, int64_t>> getReplicatedRanges(UnitKind kind, int64_t layer) const;

  /// Whether layer `layer` has a mixture-of-experts block instead of the dense MLP.
  bool isMoeLayer(int64_t layer) const { return config.shape.moe.isMoeLayer(layer); }
  /// The per-source-rank capacity of an expert, ceil(c · tokens · top_k / experts) for this
  /// rank's tokens; 0 for dropless routing.
  int64_t getExpertCapacity() const;

private:
  /// The mixture-of-experts block on the normed input saved.y2 [rows, hidden] (the rows of the
  /// whole micro-batch piece, identical on the tensor ranks): router, top-k, load-balancing
  /// loss, dispatch, experts, combine, shared experts; `partial` receives this tensor rank's
  /// partial output [rows, hidden] (before the tensor-parallel reduction).
  Status moeForward(int64_t layer, const float *weights, const float *expertWeights,
                    UnitActivations &saved, UnitCollectives &comm, std::vector<float> &partial);
  /// Its backward from the output gradient `dout` [rows, hidden] into this tensor rank's partial
  /// `dy2` [rows, hidden].
  Status moeBackward(int64_t layer, const float *weights, const float *expertWeights, float *grads,
                     float *expertGrads, UnitActivations &saved, UnitCollectives &comm,
                     const float *dout, std::vector<float> &dy2);
  /// The tensor-parallel reduction of a partial [rows, hidden] product into the local layout:
  /// reduce-scattered over the rows under sequence parallelism, all-reduced otherwise.
  Status reduceRows(UnitCollectives &comm, std::vector<float> &partial,
                    std::vector<float> &result) const;
  /// The global positions of the rows [batch, s/cp] of a micro-batch (`rows` of them).
  std::vector<int64_t> rowPositions(int64_t rows) const;
  /// Context-parallel attention of the local queries saved.q against the whole sequence's keys
  /// and values, into saved.attn [b · s/cp, heads/t · head dim] (and saved.lse): Ring
  /// Attention's cp − 1 ring steps of the K, V block (Liu et al. 2023), or Ulysses's all-to-all
  /// of q, k, v to head-split and of the output back (Jacobs et al. 2023).
  Status contextAttentionForward(UnitCollectives &comm, UnitActivations &saved);
  /// Its backward from the output gradient `dattn` (as saved.attn) into dq, dk, dv (as the local
  /// q, k, v): the ring passes K, V with their accumulating dK, dV cp − 1 times and sends the
  /// gradients home in one more step; Ulysses turns dattn to head-split and dq, dk, dv back.
  Status contextAttentionBackward(UnitCollectives &comm, UnitActivations &saved, const float *dattn,
                                  float *dq, float *dk, float *dv);
  /// The local qkv projection [rows, qkv rows/t] (this rank's `localKvHeads` groups in the
  /// layout of getQkvRows) split into q [rows, heads/t · head dim] and k, v [rows, kv heads/t ·
  /// head dim], or, with `merge`, q, k and v packed back into it (the gradient).
  void splitQkv(float *qkv, float *q, float *k, float *v, int64_t rows, int64_t localKvHeads,
                bool merge) const;
  /// LayerNorm or RMSNorm (then `bias` and `mean` are unused) over the hidden width.
  void normForward(const float *x, const float *weight, const float *bias, float *y,
                   std::vector<float> &mean, std::vector<float> &rstd, int64_t rows) const;
  void normBackward(const float *x, const float *weight, const std::vector<float> &mean,
                    const std::vector<float> &rstd, const float *dy, float *dx, float *dweight,
                    float *dbias, int64_t rows) const;

  GptConfig config;
  std::unique_ptr<Kernels> kernels;
};

/// Token `position` of global sample `sample` (positions 0 … seq, the last one only a target).
int32_t sampleToken(uint64_t seed, int64_t sample, int64_t position, int64_t vocab);

} // namespace gpt
} // namespace placert

#endif // PLACERT_SRC_GPTMODEL_H

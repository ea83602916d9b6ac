// The refusals placert's CPU and GPU trainers share (TrainerSupport.h).
#include "TrainerSupport.h"

using namespace llvm;

namespace placec::codegen {

SMLoc getFieldLoc(const ir::Run &run, StringRef field) {
  auto it = run.fieldLocs.find(field);
  return it != run.fieldLocs.end() ? it->second : run.loc;
}

void forEachCommonUnsupported(const ir::Run &run, StringRef trainer, RefuseFn refuse) {
  if (run.trainMetrics > 0)
    refuse(getFieldLoc(run, "train_metrics"), "train_metrics = " + Twine(run.trainMetrics),
           trainer + " computes the loss and no other metric from the logits (leave "
                     "train_metrics out)");
  if (run.gradAccumulation != ir::GradAccumulation::Fused)
    refuse(getFieldLoc(run, "grad_accumulation"),
           "grad_accumulation = " + ir::toString(run.gradAccumulation),
           trainer + " accumulates each micro-batch's weight gradients inside its products "
                     "(leave grad_accumulation out)");
  if (run.strategy && run.strategy->allReducesShardedOptimizer())
    refuse(run.strategy->gradReduceLoc, "grad_reduce = all_reduce",
           trainer + " reduce-scatters the gradients into the optimizer shard each rank updates "
                     "(write grad_reduce = reduce_scatter)");
  const ir::Model &model = *run.model;
  if (model.kind != ir::ModelKind::Transformer)
    return;
  const ir::TransformerConfig &config = model.transformer;
  auto at = [&](SMLoc loc) { return loc.isValid() ? loc : model.loc; };
  if (config.headDim > 0 && config.headDim * config.heads != config.hidden)
    refuse(model.loc, "head_dim = " + Twine(config.headDim),
           trainer + "'s attention heads are hidden/heads wide");
  if (config.qkNorm)
    refuse(model.loc, "qk_norm = true", trainer + " does not normalize queries and keys");
  if (config.sinks)
    refuse(at(config.sinksLoc), "sinks = true", trainer + "'s softmax has no sink logits");
  if (config.isLatentAttention())
    refuse(at(config.kvLoraRankLoc), "kv_lora_rank = " + Twine(config.kvLoraRank),
           trainer + "'s attention is multi-head or grouped-query, not latent");
  if (config.positions == ir::PositionKind::Alibi)
    refuse(at(config.positionsLoc), "positions = alibi",
           trainer + "'s attention adds no bias to its scores");
  if (config.embeddingNorm)
    refuse(at(config.embeddingNormLoc), "embedding_norm = true",
           trainer + "'s embedding has no norm");
  if (config.postNorm)
    refuse(at(config.postNormLoc), "post_norm = true",
           trainer + "'s layers have two norms, before the attention and the MLP");
  if (config.mtpLayers > 0)
    refuse(at(config.mtpLayersLoc), "mtp_layers = " + Twine(config.mtpLayers),
           trainer + " predicts the next token only, with no multi-token prediction modules");
  if (config.isWindowed())
    refuse(at(config.windowLoc),
           "window = " + Twine(config.window) + " < seq = " + Twine(config.seq),
           trainer + "'s attention attends the whole causal prefix; leave window out, or compile "
                     "a model whose window is at least its sequence");
  if (config.unpad)
    refuse(config.unpadLoc, "unpad = true",
           trainer + "'s attention reads the padded Q, K and V in place and keeps one copy of its "
                     "output; leave unpad out");
}

} // namespace placec::codegen

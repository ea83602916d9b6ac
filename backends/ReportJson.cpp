// The JSON report (docs/report-json.md): per run the configuration, memory per state on the
// device and the host, communication entries, time and diagnostics, written with llvm::json in a
// fixed key order so that the output is deterministic.
#include "ReportSupport.h"
#include "placec/Config.h"

#include "llvm/Support/JSON.h"

#include <cmath>

using namespace llvm;

namespace placec::report {

namespace {

/// Whole numbers (byte counts) as JSON integers, anything else as a double.
json::Value number(double value) {
  if (std::isfinite(value) && std::fabs(value) < 9.007199254740992e15 && value == std::round(value))
    return static_cast<int64_t>(value);
  if (!std::isfinite(value))
    return nullptr;
  return value;
}

json::Value optionalNumber(const std::optional<double> &value) {
  return value ? number(*value) : json::Value(nullptr);
}

json::Value orNull(StringRef text) {
  return text.empty() ? json::Value(nullptr) : json::Value(text);
}

StringRef modeName(ir::PlacementMode mode) { return ir::toString(mode); }

class JsonWriter {
public:
  JsonWriter(raw_ostream &os, const ReportOptions &options) : out(os, 2), options(options) {}

  void write(ArrayRef<RunReport> runs, ArrayRef<ReportDiagnostic> diagnostics) {
    out.object([&] {
      out.attribute("schema_version", kJsonSchemaVersion);
      out.attribute("generator", "placec " PLACEC_VERSION);
      out.attribute("file", options.inputName);
      out.attributeArray("runs", [&] {
        for (const RunReport &report : runs)
          writeRun(report);
      });
      writeDiagnostics("diagnostics", diagnostics);
    });
    out.flush();
  }

private:
  void writeRun(const RunReport &report);
  void writeModel(const ir::Model &model);
  void writeCluster(const ir::Cluster &cluster);
  void writeStrategy(const RunReport &report);
  void writeBreakdown(StringRef key, const analysis::MemoryBreakdown &memory,
                      bool activationsKnown);
  void writeMemory(const RunReport &report);
  void writeCommunication(const RunReport &report);
  void writeTime(const RunReport &report);
  void writeExplanation(const Explanation &explanation);
  void writeExplain(const RunReport &report);
  void writeDiagnostic(const ReportDiagnostic &diag);
  void writeDiagnostics(StringRef key, ArrayRef<ReportDiagnostic> diagnostics) {
    out.attributeArray(key, [&] {
      for (const ReportDiagnostic &diag : diagnostics)
        writeDiagnostic(diag);
    });
  }

  json::OStream out;
  const ReportOptions &options;
};

void JsonWriter::writeRun(const RunReport &report) {
  const ir::Run &run = *report.run;
  const ir::Mesh &mesh = run.strategy->mesh;
  out.object([&] {
    out.attribute("name", run.name);
    out.attributeObject("model", [&] { writeModel(*run.model); });
    out.attributeObject("cluster", [&] { writeCluster(*run.cluster); });
    out.attributeObject("strategy", [&] { writeStrategy(report); });
    out.attribute("devices", mesh.getNumDevices());
    out.attributeArray("mesh", [&] {
      for (unsigned i = 0; i < mesh.axes.size(); ++i)
        out.object([&] {
          out.attribute("name", mesh.axes[i].name);
          out.attribute("kind", ir::toString(mesh.axes[i].kind));
          out.attribute("size", mesh.axes[i].size);
          out.attribute("link", axisLink(run, i));
        });
    });
    out.attributeObject("batch", [&] {
      out.attribute("micro_batch", run.microBatch);
      out.attribute("global_batch", run.globalBatch);
      out.attribute("microbatches_per_step", report.plan->microbatches);
    });
    out.attribute("precision", describePrecision(run));
    out.attribute("optimizer", describeOptimizer(run));
    out.attribute("cross_entropy", ir::toString(run.crossEntropy));
    out.attribute("train_metrics", run.trainMetrics);
    out.attribute("kernels", ir::toString(run.kernels));
    out.attribute("param_gather", ir::toString(run.paramGather));
    out.attribute("context_merge", ir::toString(run.contextMerge));
    out.attribute("grad_accumulation", ir::toString(run.gradAccumulation));
    out.attributeObject("memory", [&] { writeMemory(report); });
    out.attributeArray("communication", [&] { writeCommunication(report); });
    out.attributeObject("time", [&] { writeTime(report); });
    writeDiagnostics("diagnostics", report.diagnostics);
    if (options.explain)
      out.attributeObject("explain", [&] { writeExplain(report); });
  });
}

void JsonWriter::writeModel(const ir::Model &model) {
  out.attribute("name", model.name);
  out.attribute("kind", ir::toString(model.kind));
  out.attribute("params", model.numParams);
  if (model.kind == ir::ModelKind::Transformer) {
    const ir::TransformerConfig &config = model.transformer;
    out.attribute("layers", config.layers);
    out.attribute("mtp_layers", config.mtpLayers);
    out.attribute("hidden", config.hidden);
    out.attribute("heads", config.heads);
    out.attribute("seq", config.seq);
    out.attribute("vocab", config.vocab);
    out.attribute("ffn", config.ffn);
    out.attribute("kv_heads", config.getKvHeads());
    out.attribute("kv_repeat", config.kvRepeat);
    out.attribute("rope_complex", config.ropeComplex);
    out.attribute("unpad", config.unpad);
    out.attribute("post_norm", config.postNorm);
    out.attribute("positions", ir::toString(config.positions));
    out.attribute("embedding_norm", config.embeddingNorm);
    out.attribute("sinks", config.sinks);
    out.attribute("projections", ir::toString(config.projections));
    out.attribute("attention", ir::toString(config.attention));
    if (config.window > 0)
      out.attribute("window", config.window);
    else
      out.attribute("window", nullptr);
    if (config.fullEvery > 0)
      out.attribute("full_every", config.fullEvery);
    else
      out.attribute("full_every", nullptr);
    // Multi-head latent attention: null for multi-head and grouped-query attention.
    if (config.isLatentAttention())
      out.attributeObject("latent_attention", [&] {
        out.attribute("kv_lora_rank", config.kvLoraRank);
        if (config.qLoraRank > 0)
          out.attribute("q_lora_rank", config.qLoraRank);
        else
          out.attribute("q_lora_rank", nullptr);
        out.attribute("head_dim", config.getHeadDim());
        out.attribute("rope_head_dim", config.ropeHeadDim);
        out.attribute("v_head_dim", config.getValueHeadDim());
      });
    else
      out.attribute("latent_attention", nullptr);
    if (model.isMoe()) {
      const ir::MoeConfig &moe = config.moe;
      out.attribute("active_params", model.getActiveParams());
      out.attribute("expert_params", model.getExpertParams());
      out.attributeObject("moe", [&] {
        out.attribute("experts", moe.experts);
        out.attribute("top_k", moe.topK);
        out.attribute("expert_ffn", moe.expertFfn);
        out.attribute("shared_experts", moe.sharedExperts);
        out.attribute("shared_expert_ffn", moe.sharedExpertFfn);
        out.attribute("moe_layers", moe.getNumMoeLayers(config.layers));
        out.attribute("router", ir::toString(moe.router));
        out.attribute("router_bias", moe.routerBias);
        if (moe.routerGroups > 0) {
          out.attribute("router_groups", moe.routerGroups);
          out.attribute("router_group_top_k", moe.routerGroupTopK);
        } else {
          out.attribute("router_groups", nullptr);
          out.attribute("router_group_top_k", nullptr);
        }
        if (moe.capacityFactor)
          out.attribute("capacity_factor", *moe.capacityFactor);
        else
          out.attribute("capacity_factor", nullptr);
        out.attribute("aux_loss", moe.auxLoss);
        out.attribute("aux_loss_scope", ir::toString(moe.auxLossScope));
        out.attribute("imbalance", moe.imbalance);
      });
    }
  } else if (model.kind == ir::ModelKind::Mlp) {
    out.attribute("layers", model.mlp.layers);
    out.attribute("width", model.mlp.width);
    out.attribute("input", model.mlp.input);
    out.attribute("output", model.mlp.output);
  }
}

void JsonWriter::writeCluster(const ir::Cluster &cluster) {
  out.attribute("name", cluster.name);
  out.attribute("nodes", cluster.nodes);
  out.attribute("devices_per_node", cluster.devicesPerNode);
  out.attribute("device_memory", number(cluster.deviceMemory));
  out.attribute("host_memory", optionalNumber(cluster.hostMemory));
  out.attribute("peak_flops", number(cluster.peakFlops));
  out.attribute("efficiency", number(cluster.efficiency));
  out.attribute("intra_bandwidth", number(cluster.intraBandwidth));
  out.attribute("inter_bandwidth", number(cluster.interBandwidth));
  out.attribute("host_bandwidth", optionalNumber(cluster.hostBandwidth));
  out.attribute("latency_s", number(cluster.latency));
}

void JsonWriter::writeStrategy(const RunReport &report) {
  const ir::Strategy &strategy = *report.run->strategy;
  out.attribute("name", strategy.name);
  out.attributeObject("placements", [&] {
    for (ir::State state : ir::kAllStates)
      out.attributeObject(ir::toString(state), [&] {
        const ir::StatePlacement &placement = strategy.getPlacement(state);
        out.attribute("text", describePlacement(strategy, state));
        out.attribute("tier", ir::toString(placement.tier));
        out.attributeArray("modes", [&] {
          for (unsigned i = 0; i < strategy.mesh.axes.size() && i < placement.axes.size(); ++i)
            out.object([&] {
              out.attribute("axis", strategy.mesh.axes[i].name);
              out.attribute("mode", modeName(placement.axes[i].mode));
              if (placement.axes[i].keepAfterForward)
                out.attribute("keep_after_forward", true);
            });
        });
      });
  });
  out.attribute("activations", describeActivations(strategy));
  out.attribute("sequence_parallel", strategy.sequenceParallel);
  std::string context = describeContext(strategy), async = describeAsyncTensorParallel(strategy);
  if (context.empty())
    out.attribute("context", nullptr);
  else
    out.attribute("context", context);
  if (async.empty())
    out.attribute("async_tp", nullptr);
  else
    out.attribute("async_tp", async);
  std::string inputs = describeSequenceParallelInputs(strategy);
  if (inputs.empty())
    out.attribute("sp_inputs", nullptr);
  else
    out.attribute("sp_inputs", inputs);
  std::string overlap = describeDataParallelOverlap(strategy);
  if (overlap.empty())
    out.attribute("dp_overlap", nullptr);
  else
    out.attribute("dp_overlap", overlap);
  std::string gradReduce = describeGradReduce(strategy);
  if (gradReduce.empty())
    out.attribute("grad_reduce", nullptr);
  else
    out.attribute("grad_reduce", gradReduce);
  if (describeExpertOverlap(strategy).empty())
    out.attribute("ep_overlap", nullptr);
  else
    out.attribute("ep_overlap", strategy.expertOverlap == ir::ExpertOverlap::On);
  std::string dispatcher = describeExpertDispatcher(strategy);
  if (dispatcher.empty())
    out.attribute("dispatcher", nullptr);
  else
    out.attribute("dispatcher", dispatcher);
  std::string expertTensor = describeExpertTensor(strategy);
  if (expertTensor.empty())
    out.attribute("expert_tensor", nullptr);
  else
    out.attribute("expert_tensor", expertTensor);
  std::string expertContext = describeExpertContext(strategy);
  if (expertContext.empty())
    out.attribute("expert_context", nullptr);
  else
    out.attribute("expert_context", expertContext);
  if (strategy.pipeline)
    out.attributeObject("pipeline", [&] {
      out.attribute("schedule", ir::toString(strategy.pipeline->schedule));
      out.attribute("microbatches", report.plan->microbatches);
      out.attribute("chunks", strategy.pipeline->chunks);
      // Interleaving's micro-batch group: the stages unless `group` says otherwise.
      if (strategy.pipeline->schedule == ir::Schedule::Interleaved && strategy.pipeline->chunks > 1)
        out.attribute("group", strategy.pipeline->group > 0
                                   ? strategy.pipeline->group
                                   : static_cast<int64_t>(report.plan->stages.size()));
      out.attribute("stages", static_cast<int64_t>(report.plan->stages.size()));
    });
  else
    out.attribute("pipeline", nullptr);
}

void JsonWriter::writeBreakdown(StringRef key, const analysis::MemoryBreakdown &memory,
                                bool activationsKnown) {
  out.attributeObject(key, [&] {
    out.attribute("params", number(memory.params));
    out.attribute("grads", number(memory.grads));
    out.attribute("optimizer", number(memory.optimizer));
    out.attribute("model_states", number(memory.getPersistent()));
    out.attribute("activations", activationsKnown ? number(memory.activations) : nullptr);
    out.attribute("transient", number(memory.transient));
    out.attribute("peak", number(memory.peak));
  });
}

void JsonWriter::writeMemory(const RunReport &report) {
  const analysis::MemoryReport &memory = report.analysis.memory;
  double devicesPerNode = static_cast<double>(report.run->cluster->devicesPerNode);
  writeBreakdown("device", memory.device, memory.activationsKnown);
  writeBreakdown("host", memory.host, memory.activationsKnown);
  out.attribute("host_per_node_peak", number(memory.host.peak * devicesPerNode));
  out.attribute("device_capacity", number(memory.deviceCapacity));
  out.attribute("host_capacity_per_node", optionalNumber(memory.hostCapacity));
  out.attribute("device_use",
                number(memory.deviceCapacity > 0 ? memory.device.peak / memory.deviceCapacity : 0));
  out.attribute("fits_device", memory.fitsDevice);
  out.attribute("fits_host", memory.fitsHost);
  out.attribute("activations_known", memory.activationsKnown);
  int reported = 0;
  for (const analysis::StageMemory &stage : memory.stages)
    if (stage.device.peak == memory.device.peak) {
      reported = stage.stage;
      break;
    }
  out.attribute("stage", reported);
  out.attributeArray("stages", [&] {
    for (const analysis::StageMemory &stage : memory.stages)
      out.object([&] {
        out.attribute("stage", stage.stage);
        writeBreakdown("device", stage.device, memory.activationsKnown);
        writeBreakdown("host", stage.host, memory.activationsKnown);
      });
  });
}

void JsonWriter::writeCommunication(const RunReport &report) {
  for (const analysis::CommEntry &entry : report.analysis.communication)
    out.object([&] {
      out.attribute("stage", entry.stage);
      out.attribute("axis", entry.axis);
      out.attribute("group_size", entry.groupSize);
      out.attribute("collective", plan::toString(entry.collective));
      out.attribute("state", ir::toString(entry.state));
      out.attribute("phase", plan::toString(entry.phase));
      out.attribute("count", entry.count);
      out.attribute("message_bytes", number(entry.messageBytes));
      out.attribute("total_bytes", number(entry.totalBytes));
      out.attribute("sent_bytes", number(entry.sentBytes));
      out.attribute("link", analysis::toString(entry.link));
      out.attribute("time_s", number(entry.timeSeconds));
    });
}

void JsonWriter::writeTime(const RunReport &report) {
  const analysis::TimeReport &time = report.analysis.time;
  auto known = [&](double value) { return time.known ? number(value) : json::Value(nullptr); };
  out.attribute("known", time.known);
  out.attribute("compute_s", known(time.computeSeconds));
  out.attribute("exposed_comm_s", number(time.exposedCommSeconds));
  out.attribute("bubble_s", number(time.bubbleSeconds));
  out.attribute("step_s", number(time.stepSeconds));
  out.attribute("mfu", known(time.mfu));
  out.attribute("tokens_per_s", known(time.tokensPerSecond));
  out.attribute("flops_per_step", known(time.flopsPerStep));
}

void JsonWriter::writeExplanation(const Explanation &explanation) {
  out.object([&] {
    out.attribute("figure", explanation.figure);
    out.attribute("formula", explanation.formula);
    out.attribute("value",
                  explanation.unit.empty() ? json::Value(nullptr) : number(explanation.value));
    out.attribute("unit", orNull(explanation.unit));
    out.attribute("text", formatExplanation(explanation));
  });
}

void JsonWriter::writeExplain(const RunReport &report) {
  RunExplanation explanation = explainRun(report);
  auto list = [&](StringRef key, ArrayRef<Explanation> lines) {
    out.attributeArray(key, [&] {
      for (const Explanation &line : lines)
        writeExplanation(line);
    });
  };
  out.attribute("stage", explanation.stage);
  list("device_memory", explanation.deviceMemory);
  list("host_memory", explanation.hostMemory);
  out.attributeArray("communication", [&] {
    for (const RunExplanation::Communication &entry : explanation.communication)
      out.object([&] {
        out.attribute("figure", entry.figure);
        out.attributeArray("lines", [&] {
          for (const Explanation &line : entry.lines)
            writeExplanation(line);
        });
      });
  });
  out.attributeArray("compute", [&] {
    for (const RunExplanation::Communication &entry : explanation.compute)
      out.object([&] {
        out.attribute("figure", entry.figure);
        out.attributeArray("lines", [&] {
          for (const Explanation &line : entry.lines)
            writeExplanation(line);
        });
      });
  });
  list("time", explanation.time);
}

void JsonWriter::writeDiagnostic(const ReportDiagnostic &diag) {
  out.object([&] {
    out.attribute("severity", toString(diag.severity));
    out.attribute("rule", orNull(diag.rule));
    out.attribute("message", diag.message);
    out.attribute("file", orNull(diag.file));
    out.attribute("line", diag.line);
    out.attribute("column", diag.column);
    if (!diag.notes.empty())
      writeDiagnostics("notes", diag.notes);
  });
}

} // namespace

void printJsonReport(ArrayRef<RunReport> runs, ArrayRef<ReportDiagnostic> diagnostics,
                     const ReportOptions &options, raw_ostream &os) {
  JsonWriter(os, options).write(runs, diagnostics);
  os << "\n";
}

void printReport(ArrayRef<RunReport> runs, ArrayRef<ReportDiagnostic> diagnostics,
                 const ReportOptions &options, raw_ostream &os) {
  switch (options.format) {
  case Format::Text:
    printTextReport(runs, diagnostics, options, os);
    return;
  case Format::Json:
    printJsonReport(runs, diagnostics, options, os);
    return;
  case Format::Markdown:
    printMarkdownReport(runs, diagnostics, options, os);
    return;
  case Format::Html:
    printHtmlReport(runs, diagnostics, options, os);
    return;
  }
}

} // namespace placec::report

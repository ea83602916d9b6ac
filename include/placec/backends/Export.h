// Bridges to other training frameworks: a verified run exported as a DeepSpeed JSON config,
// Megatron-LM command-line flags or a torchtitan TOML job config, and DeepSpeed configs and
// Megatron-LM flags imported back as Place strategies and runs (docs/bridges.md).
#ifndef PLACEC_BACKENDS_EXPORT_H
#define PLACEC_BACKENDS_EXPORT_H

#include "placec/ir/Diagnostics.h"
#include "placec/ir/IR.h"
#include "placec/passes/Search.h"

#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
}

namespace placec::bridge {

enum class Target { DeepSpeed, Megatron, Torchtitan };

/// `deepspeed`, `megatron`, `torchtitan`; nullopt for anything else.
std::optional<Target> parseTarget(llvm::StringRef name);
llvm::StringRef toString(Target target);

/// Writes the run's configuration for `target` to `os`. When the placement has no equivalent in
/// the target, reports an error (rule `export`) at the run's `strategy` field for each part that
/// cannot be expressed, writes nothing and returns false.
bool exportRun(const ir::Run &run, Target target, DiagnosticEngine &diags, llvm::raw_ostream &os);

/// What `exportRun` would refuse in the run for `target`, each part's reason as its error says
/// it after "cannot export run '…' to …: ", in the order the errors come; empty when the target
/// expresses the whole run. Nothing is reported or written.
std::vector<std::string> getExportRefusals(const ir::Run &run, Target target);

/// Each bridge's verdict on a plan, as `placec search` asks them (SearchCommandOptions::bridges):
/// Megatron-LM's, torchtitan's and DeepSpeed's, in that order, or only the one named `only` when
/// that is not empty; each with the first part of the plan it cannot express.
std::vector<search::BridgeVerdict> getBridgeVerdicts(const ir::Run &run, llvm::StringRef only);

/// What an import needs besides the configuration itself.
struct ImportOptions {
  std::string modelName;   ///< The run's model; empty for Megatron-LM (declared from its flags).
  std::string clusterName; ///< The run's cluster.
  /// `import "..."` written at the top of the output (the file declaring model and cluster).
  std::string fromPath;
  /// The device count (the cluster's, when known); 0 when unknown, then derived from the batch.
  int64_t devices = 0;
  /// The model's layer count, for interleaved pipelines; 0 when unknown.
  int64_t layers = 0;
  /// The names given to the strategy and the run (default: from the input file's name).
  std::string name;
  /// The input, for the header comment.
  std::string inputName;
  /// `--seq N`: the sequence length of a model declared from a Hugging Face config; 0 for the
  /// config's max_position_embeddings.
  int64_t seq = 0;
  /// The named model's sequence length, which a torchtitan job's seq_len must match; 0 if none.
  int64_t modelSeq = 0;
  /// The named model's routed experts (0 for a dense model or none named).
  int64_t modelExperts = 0;
  /// The named model's `attention` (`flash`, `flash3`, `cudnn`, `materialized`); empty if none.
  std::string modelAttention;
  /// The named model (--model), for the rules a strategy's settings are held to by it (its
  /// recomputed modules); null if none.
  const ir::Model *model = nullptr;
};

/// Reads a DeepSpeed JSON config from buffer `bufferId` of the diagnostic engine's source manager
/// and writes the equivalent Place strategy and run. Unknown keys are errors with the key's
/// location and the closest known key. Returns false after errors.
bool importDeepSpeed(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags,
                     llvm::raw_ostream &os);

/// Reads Megatron-LM command-line flags (whitespace separated, shell quotes and `#` comments
/// allowed) from buffer `bufferId` and writes the equivalent Place model, strategy and run.
bool importMegatron(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags,
                    llvm::raw_ostream &os);

/// Reads a torchtitan TOML job config from buffer `bufferId` and writes the equivalent Place
/// strategy and run, with the model declared from torchtitan's Llama 3 flavors unless
/// `options.modelName` names one. Errors carry the key path and its line.
bool importTorchtitan(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags,
                      llvm::raw_ostream &os);

/// True when `text` is a JSON object with a `model_type` key: a Hugging Face config.json.
bool isHuggingFaceConfig(llvm::StringRef text);

/// Reads a Hugging Face config.json from buffer `bufferId` and writes the equivalent Place
/// transformer declaration. Keys that change the parameter count or the FLOPs and that Place
/// cannot represent are errors naming the key and its value.
bool importHuggingFace(unsigned bufferId, const ImportOptions &options, DiagnosticEngine &diags,
                       llvm::raw_ostream &os);

} // namespace placec::bridge

#endif // PLACEC_BACKENDS_EXPORT_H

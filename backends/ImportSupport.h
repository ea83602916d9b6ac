// What the importers (backends/Import*.cpp) share: names, spelling suggestions, the positions of
// JSON keys, and the Place text of an imported strategy and run.
#ifndef PLACEC_BACKENDS_IMPORTSUPPORT_H
#define PLACEC_BACKENDS_IMPORTSUPPORT_H

#include "placec/backends/Export.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace placec::bridge::detail {

/// a × b, or INT64_MAX when that overflows (products of degrees and batch sizes read from
/// untrusted input; the checks that follow reject the saturated value).
inline int64_t saturatingMul(int64_t a, int64_t b) {
  int64_t product = 0;
  return llvm::MulOverflow(a, b, product) ? INT64_MAX : product;
}

/// The product of `factors`, or nothing when it does not fit in 64 bits (a batch of a micro-batch
/// size, accumulation steps and data-parallel ranks read from untrusted input, which the importer
/// then reports at the key rather than let wrap around).
inline std::optional<int64_t> checkedProduct(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t factor : factors)
    if (llvm::MulOverflow(product, factor, product))
      return std::nullopt;
  return product;
}

/// The names of the prelude's strategies, which no declaration may reuse.
bool isPreludeName(llvm::StringRef name);
/// A Place name from a file name or a user's choice.
std::string makeName(llvm::StringRef wanted, llvm::StringRef inputName, llvm::StringRef fallback);
/// The closest of `candidates` to `word`, when close enough to be a likely misspelling.
std::string closest(llvm::StringRef word, llvm::ArrayRef<llvm::StringRef> candidates,
                    unsigned maxDistance);

/// Parses a JSON document; on a syntax error, reports it at the line and column where the parser
/// stopped and returns nullopt.
std::optional<llvm::json::Value> parseJsonDocument(llvm::StringRef text, DiagnosticEngine &diags);

/// The torchtitan llama3 flavor ("8B", "70B", "405B") whose shape `config` is, or nullptr.
const char *findTorchtitanFlavor(const ir::TransformerConfig &config);

/// What an import found, written out as Place.
struct Imported {
  std::vector<std::pair<std::string, int64_t>> axes; ///< Mesh, outermost first (name: kind = size).
  std::vector<std::string> axisKinds;                ///< Written kind, or empty when implied.
  std::string params, grads, optimizer, activations; ///< Placement right-hand sides, or empty.
  /// Expert placements (`expert_params = …;`), or empty for the defaults.
  std::string expertParams, expertGrads, expertOptimizer;
  std::string pipeline;
  std::string context; ///< `context = …;` (with a sequence axis), or empty for the default.
  ir::AsyncTensorParallel asyncTp = ir::AsyncTensorParallel::Off;
  /// `sp_inputs = …;` (with sequence parallelism), or empty for the default (regather).
  std::string spInputs;
  /// `dp_overlap = …;`, written when it is not the default (grads).
  ir::DataParallelOverlap dpOverlap = ir::DataParallelOverlap::Grads;
  /// `grad_reduce = …;`, written when it is not the default (reduce_scatter).
  ir::GradReduce gradReduce = ir::GradReduce::ReduceScatter;
  /// `ep_overlap = true;` where the expert all-to-alls run beside another micro-batch's compute.
  ir::ExpertOverlap epOverlap = ir::ExpertOverlap::Off;
  /// `expert_tensor = fold;` where the routed experts are whole and the tensor axis joins their
  /// group (Megatron-Core's --expert-tensor-parallel-size 1).
  ir::ExpertTensor expertTensor = ir::ExpertTensor::Split;
  /// `expert_context = fold;` where the context axis joins the experts' group (Megatron-Core's
  /// expert group under context parallelism).
  ir::ExpertTensor expertContext = ir::ExpertTensor::Split;
  ir::ExpertDispatcher dispatcher = ir::ExpertDispatcher::AllToAll;
  int64_t microBatch = 0, globalBatch = 0;
  std::string precision = "mixed(bf16)";
  std::string optimizerKind = "adam";
  /// `cross_entropy = …;` of the run, or empty for the default (fused).
  std::string crossEntropy;
  /// `kernels = …;` of the run, or empty for the default (fused).
  std::string kernels;
  /// `param_gather`: empty for the default (in_place).
  std::string paramGather;
  /// `context_merge`: empty for the default (fused).
  std::string contextMerge;
  /// `grad_accumulation`: empty for the default (fused).
  std::string gradAccumulation;
};

/// Writes the header comment, the import of the model's file, `modelText` (a model declaration or
/// nothing), and the strategy and run named `name`.
void writePlace(const Imported &imported, const ImportOptions &options, llvm::StringRef source,
                llvm::StringRef name, llvm::StringRef modelText, llvm::StringRef modelName,
                llvm::raw_ostream &os);

/// A small scan of JSON text that records where each object key is, by its path (`a.b.c`).
/// llvm::json::parse checks the syntax and gives the values; it keeps no positions.
class KeyLocator {
public:
  explicit KeyLocator(llvm::StringRef text) : text(text) {
    std::vector<std::string> stack; // Object paths; arrays push their parent's path.
    std::vector<bool> isObject;
    std::string pendingKey;
    size_t i = 0;
    while (i < text.size()) {
      char c = text[i];
      if (c == '"') {
        size_t start = i++;
        std::string value;
        while (i < text.size() && text[i] != '"') {
          if (text[i] == '\\' && i + 1 < text.size())
            ++i;
          value += text[i++];
        }
        ++i;
        size_t after = i;
        while (after < text.size() && llvm::isSpace(text[after]))
          ++after;
        if (after < text.size() && text[after] == ':' && !isObject.empty() && isObject.back()) {
          std::string path = stack.back().empty() ? value : stack.back() + "." + value;
          locations.try_emplace(path, start);
          pendingKey = path;
        }
        continue;
      }
      if (c == '{' || c == '[') {
        std::string parent = stack.empty() ? "" : stack.back();
        stack.push_back(c == '{' && !pendingKey.empty() ? pendingKey : parent);
        isObject.push_back(c == '{');
        pendingKey.clear();
      } else if (c == '}' || c == ']') {
        if (!stack.empty()) {
          stack.pop_back();
          isObject.pop_back();
        }
      } else if (c == ',') {
        pendingKey.clear();
      }
      ++i;
    }
  }

  /// The key's offset in the text, or npos.
  size_t find(llvm::StringRef path) const {
    auto it = locations.find(path);
    return it == locations.end() ? llvm::StringRef::npos : it->second;
  }

private:
  llvm::StringRef text;
  llvm::StringMap<size_t> locations;
};

} // namespace placec::bridge::detail

#endif // PLACEC_BACKENDS_IMPORTSUPPORT_H

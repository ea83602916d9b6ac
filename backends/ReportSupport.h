// Shared pieces of the report backends (private to backends/): human units, tables that render
// as aligned text or GitHub Markdown, an indenting stream, and short descriptions of IR objects.
#ifndef PLACEC_BACKENDS_REPORTSUPPORT_H
#define PLACEC_BACKENDS_REPORTSUPPORT_H

#include "placec/backends/Report.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace placec::report {

//===----------------------------------------------------------------------===//
// Numbers and units
//===----------------------------------------------------------------------===//

/// A number with three significant digits (at least two decimals below 1), rounded half away
/// from zero: 120, 52.5, 41.3, 1.88, 0.47, 0.12, 0.00123.
std::string formatSignificant(double value);
/// Bytes in decimal units chosen by size: `512 B`, `48.7 MB`, `3.12 GB`, `1.20 TB`.
std::string formatBytes(double bytes);
/// Bytes in GB (10^9) for memory tables, comparable with published tables (below 10 MB, in the
/// size's own unit).
std::string formatGB(double bytes);
/// A capacity as written: `80 GiB` when a whole number of GiB, else in GB.
std::string formatCapacity(double bytes);
/// Seconds in s, ms or us chosen by size: `1.23 s`, `45.6 ms`, `7.20 us`.
std::string formatSeconds(double seconds);
/// Bandwidth in GB/s (or MB/s below 1 GB/s).
std::string formatBandwidth(double bytesPerSecond);
/// FLOP/s in TFLOPS or PFLOPS.
std::string formatFlopRate(double flops);
/// A count with no unit in scientific-ish form for big values: `1.56B`, `340M`, `12.3K`, `48`.
std::string formatCount(double value);
/// An exact integer as a plain number: `1557611200`.
std::string formatInteger(double value);
/// A fraction as a percentage: `45.2 %`.
std::string formatPercent(double fraction);
/// A signed difference with a formatter for its magnitude: `+1.23 GB`, `-467 MB`, `0`.
template <typename Formatter> std::string formatSigned(double delta, Formatter format) {
  if (delta == 0)
    return "0";
  return (llvm::Twine(delta > 0 ? "+" : "-") + format(delta > 0 ? delta : -delta)).str();
}
/// The ratio b / a: `×1.50`, `÷8.00` (b smaller), `=` (equal), `new` (a = 0), `gone` (b = 0).
std::string formatRatio(double a, double b);

//===----------------------------------------------------------------------===//
// Tables
//===----------------------------------------------------------------------===//

/// A table rendered as aligned text or as a GitHub Markdown table. The first column is a label
/// column (left-aligned); the others are right-aligned unless `leftColumns` says otherwise.
struct Table {
  std::string title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  /// Columns (by index) that are left-aligned; column 0 always is.
  std::vector<unsigned> leftColumns;
  /// Lines printed under the table.
  std::vector<std::string> notes;

  void addRow(std::vector<std::string> row) { rows.push_back(std::move(row)); }
};

/// The width of a UTF-8 string in columns (code points).
size_t displayWidth(llvm::StringRef text);
void renderText(const Table &table, llvm::raw_ostream &os);
void renderMarkdown(const Table &table, llvm::raw_ostream &os);

/// Lines under a heading, such as the explanation of one run.
struct Block {
  std::string heading;
  std::vector<std::string> lines;
  /// Nested blocks, rendered indented (text) or as a deeper list (Markdown).
  std::vector<Block> children;
};

/// A headed part of a report: tables, then blocks of lines.
struct Section {
  std::string heading;
  std::vector<std::string> intro;
  std::vector<Table> tables;
  std::vector<Block> blocks;
};

/// The sections of a report (shared by the text and Markdown renderers).
std::vector<Section> buildReportSections(llvm::ArrayRef<RunReport> runs,
                                         llvm::ArrayRef<ReportDiagnostic> diagnostics,
                                         const ReportOptions &options);
/// The sections of a diff.
std::vector<Section> buildDiffSections(const DiffSide &a, const DiffSide &b);

/// Renders sections as plain text or as GitHub Markdown, under a title.
void renderSectionsText(llvm::StringRef title, llvm::ArrayRef<Section> sections,
                        llvm::raw_ostream &os);
void renderSectionsMarkdown(llvm::StringRef title, llvm::ArrayRef<Section> sections,
                            llvm::raw_ostream &os);
/// Renders sections as one HTML page of tables (ReportHtml.cpp).
void renderSectionsHtml(llvm::StringRef title, llvm::ArrayRef<Section> sections,
                        llvm::raw_ostream &os);

/// Text with `&`, `<`, `>`, `"` and `'` escaped for HTML content and attribute values.
std::string escapeHtml(llvm::StringRef text);

/// `file:line:col: warning: message [rule]`.
std::string formatDiagnostic(const ReportDiagnostic &diag);

//===----------------------------------------------------------------------===//
// Indenting stream
//===----------------------------------------------------------------------===//

/// Writes lines at the current indentation; `Scope` indents for its lifetime.
class IndentedStream {
public:
  explicit IndentedStream(llvm::raw_ostream &os, unsigned step = 2) : os(os), step(step) {}

  /// Writes one line at the current indentation.
  IndentedStream &line(llvm::StringRef text) {
    os.indent(level * step) << text << "\n";
    return *this;
  }
  void blank() { os << "\n"; }
  llvm::raw_ostream &raw() { return os; }

  class Scope {
  public:
    explicit Scope(IndentedStream &stream) : stream(stream) { ++stream.level; }
    ~Scope() { --stream.level; }
    Scope(const Scope &) = delete;
    Scope &operator=(const Scope &) = delete;

  private:
    IndentedStream &stream;
  };

private:
  llvm::raw_ostream &os;
  unsigned step;
  unsigned level = 0;
};

//===----------------------------------------------------------------------===//
// Descriptions of IR objects and analysis results
//===----------------------------------------------------------------------===//

/// `[pp = 12, dp = 4, tp = 8]`.
std::string describeMesh(const ir::Mesh &mesh);
/// `intra` or `inter`: whether each group of the axis lies inside a node.
llvm::StringRef axisLink(const ir::Run &run, unsigned axis);
/// A state's placement as it would be written: `gather(dp), shard(tp) @ host`.
std::string describePlacement(const ir::Strategy &strategy, ir::State state);
/// `keep`, `recompute(selective), shard(tp)`.
std::string describeActivations(const ir::Strategy &strategy);
/// `1f1b(microbatches = 16)` or `none`.
std::string describePipeline(const ir::Strategy &strategy, int64_t microbatches);
/// The strategy's `context` and `async_tp` settings as written, or an empty string where the mesh
/// has no axis of more than one device for them to act on (a sequence axis, a tensor axis).
std::string describeContext(const ir::Strategy &strategy);
std::string describeAsyncTensorParallel(const ir::Strategy &strategy);
/// The strategy's `sp_inputs` setting, or an empty string without sequence parallelism over a
/// tensor axis.
std::string describeSequenceParallelInputs(const ir::Strategy &strategy);
/// The strategy's `dp_overlap` setting, or an empty string without a batch or sequence axis of
/// more than one device (nothing reduced or gathered over data parallelism).
std::string describeDataParallelOverlap(const ir::Strategy &strategy);
/// The strategy's `grad_reduce` setting, or an empty string without an axis that shards the
/// optimizer and not the gradients (nothing it acts on).
std::string describeGradReduce(const ir::Strategy &strategy);
/// The strategy's `ep_overlap` setting, or an empty string without an expert axis of more than
/// one device (no all-to-alls to overlap).
std::string describeExpertOverlap(const ir::Strategy &strategy);
/// `dispatcher`'s value with an expert axis, else empty.
std::string describeExpertDispatcher(const ir::Strategy &strategy);
/// The strategy's `expert_tensor` setting, or an empty string without both an expert axis and a
/// tensor axis of more than one device, where it says nothing.
std::string describeExpertTensor(const ir::Strategy &strategy);
/// The strategy's `expert_context` setting, or an empty string without both an expert axis and a
/// sequence axis of more than one device, where it says nothing.
std::string describeExpertContext(const ir::Strategy &strategy);
/// `mixed(bf16)`, `mixed(fp8, gather = fp8, grads = fp32)`.
std::string describePrecision(const ir::Run &run);
/// `adam`, `sgd(momentum = true)`.
std::string describeOptimizer(const ir::Run &run);
/// The model's size in one line: `1.56B params, 48 layers`.
std::string describeModel(const ir::Model &model);
/// `flash (FlashAttention-2)`: a transformer's attention kernel; `-` for other models.
std::string describeAttention(const ir::Model &model);
/// `8 × 8, 80 GiB`: nodes × devices per node, device memory.
std::string describeCluster(const ir::Cluster &cluster);
/// `4 × 64 × 2 = 512` (micro-batch × batch degree × micro-batches per step).
std::string describeBatch(const ir::Run &run);

/// The name of a communication entry's op kind in reports: `all-gather`, `send`, `host->device`.
std::string collectiveName(plan::OpKind kind);

/// Whether the reported memory differs between pipeline stages.
bool stagesDiffer(const analysis::MemoryReport &memory);

/// The run's file-level title used in headings: `report: FILE (3 runs)`.
std::string describeRunCount(size_t count);

} // namespace placec::report

#endif // PLACEC_BACKENDS_REPORTSUPPORT_H

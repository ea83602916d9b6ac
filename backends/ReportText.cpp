// The text report: each section's tables aligned in columns, explanations indented under their
// headings. The tables themselves are built in ReportTables.cpp.
#include "ReportSupport.h"

#include <fmt/format.h>

using namespace llvm;

namespace placec::report {

static void renderBlock(const Block &block, IndentedStream &out) {
  if (!block.heading.empty())
    out.line(block.heading + ":");
  IndentedStream::Scope scope(out);
  for (const std::string &line : block.lines)
    out.line(line);
  for (const Block &child : block.children)
    renderBlock(child, out);
}

void renderSectionsText(StringRef title, ArrayRef<Section> sections, raw_ostream &os) {
  os << title << "\n";
  for (const Section &section : sections) {
    os << "\n"
       << section.heading << "\n"
       << std::string(displayWidth(section.heading), '=') << "\n";
    for (const std::string &line : section.intro)
      os << line << "\n";
    for (const Table &table : section.tables) {
      os << "\n";
      renderText(table, os);
    }
    IndentedStream out(os);
    for (const Block &block : section.blocks) {
      os << "\n";
      if (block.heading.empty()) {
        for (const std::string &line : block.lines)
          out.line(line);
        continue;
      }
      renderBlock(block, out);
    }
  }
}

void printTextReport(ArrayRef<RunReport> runs, ArrayRef<ReportDiagnostic> diagnostics,
                     const ReportOptions &options, raw_ostream &os) {
  std::string title =
      fmt::format("placec report: {} ({})", options.inputName, describeRunCount(runs.size()));
  renderSectionsText(title, buildReportSections(runs, diagnostics, options), os);
}

} // namespace placec::report

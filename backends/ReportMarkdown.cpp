// The Markdown report: the text report's sections as GitHub Markdown, with `##` headings, pipe
// tables and the explanations as nested lists of code spans.
#include "ReportSupport.h"

#include <fmt/format.h>

using namespace llvm;

namespace placec::report {

/// A code span that survives any backticks in the text.
static std::string codeSpan(StringRef text) {
  std::string fence = text.contains('`') ? "``" : "`";
  return fence + (fence.size() > 1 ? " " : "") + text.str() + (fence.size() > 1 ? " " : "") + fence;
}

static void renderBlock(const Block &block, unsigned depth, raw_ostream &os) {
  std::string indent(2 * depth, ' ');
  os << indent << "- " << block.heading << "\n";
  for (const std::string &line : block.lines)
    os << indent << "  - " << codeSpan(line) << "\n";
  for (const Block &child : block.children)
    renderBlock(child, depth + 1, os);
}

void renderSectionsMarkdown(StringRef title, ArrayRef<Section> sections, raw_ostream &os) {
  os << "# " << title << "\n\n";
  for (const Section &section : sections) {
    os << "## " << section.heading << "\n\n";
    for (const std::string &line : section.intro)
      os << line << "\n\n";
    for (const Table &table : section.tables)
      renderMarkdown(table, os);
    for (const Block &block : section.blocks) {
      if (block.heading.empty()) {
        for (const std::string &line : block.lines)
          os << "- " << codeSpan(line) << "\n";
        os << "\n";
        continue;
      }
      os << "### " << block.heading << "\n\n";
      for (const std::string &line : block.lines)
        os << "- " << codeSpan(line) << "\n";
      for (const Block &child : block.children)
        renderBlock(child, 0, os);
      os << "\n";
    }
  }
}

void printMarkdownReport(ArrayRef<RunReport> runs, ArrayRef<ReportDiagnostic> diagnostics,
                         const ReportOptions &options, raw_ostream &os) {
  std::string title =
      fmt::format("placec report: {} ({})", options.inputName, describeRunCount(runs.size()));
  renderSectionsMarkdown(title, buildReportSections(runs, diagnostics, options), os);
}

} // namespace placec::report

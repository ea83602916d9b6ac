// The HTML report (docs/report-html.md): one self-contained page with inline SVG charts drawn
// here - memory by state on the device and the host against capacity, communication per axis and
// collective, the step-time breakdown, runs side by side - each followed by a table of its
// numbers, then the text report's tables; and the page of `placec search --format=html`, a
// scatter of the searched candidates (memory against step time) with the chosen plan marked.
#include "ReportSupport.h"
#include "placec/Config.h"
#include "placec/passes/Search.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <map>

using namespace llvm;

namespace placec::report {

std::string escapeHtml(StringRef text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    switch (c) {
    case '&':
      escaped += "&amp;";
      break;
    case '<':
      escaped += "&lt;";
      break;
    case '>':
      escaped += "&gt;";
      break;
    case '"':
      escaped += "&quot;";
      break;
    case '\'':
      escaped += "&#39;";
      break;
    default:
      escaped += c;
    }
  }
  return escaped;
}

namespace {

/// A coordinate with one decimal, so that the output does not depend on float printing.
std::string coord(double value) {
  double rounded = std::round(value * 10) / 10;
  return fmt::format("{:.1f}", rounded == 0 ? 0.0 : rounded);
}

/// The page's style: system fonts only, nothing fetched.
constexpr const char *kStyle =
    R"(body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; } h3 { font-size: 15px; }
div.chart-row { display: flex; flex-wrap: wrap; gap: 8px 32px; align-items: flex-start; }
figure.chart { margin: 8px 0; overflow-x: auto; max-width: 100%; }
div.chart-numbers { max-width: 620px; margin-top: 24px; }
svg text { font-family: sans-serif; fill: #222; }
table { border-collapse: collapse; margin: 8px 0 4px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
td:not(.left) { white-space: nowrap; }
th:first-child, td:first-child, td.left, th.left { text-align: left; }
th { background: #f2f2f2; }
caption { text-align: left; font-weight: bold; padding: 4px 0; }
p.note { font-size: 12px; color: #555; margin: 2px 0; }
pre, code { font-family: monospace; font-size: 12px; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; }
)";

void beginPage(StringRef title, raw_ostream &os) {
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
     << "<meta name=\"generator\" content=\"placec " PLACEC_VERSION "\">\n"
     << "<title>" << escapeHtml(title) << "</title>\n<style>\n"
     << kStyle << "</style>\n</head>\n<body>\n<h1>" << escapeHtml(title) << "</h1>\n";
}

void endPage(raw_ostream &os) { os << "</body>\n</html>\n"; }

void renderHtmlTable(const Table &table, raw_ostream &os, StringRef cssClass = "") {
  os << "<table" << (cssClass.empty() ? "" : " class=\"" + cssClass.str() + "\"") << ">\n";
  if (!table.title.empty())
    os << "<caption>" << escapeHtml(table.title) << "</caption>\n";
  auto isLeft = [&](unsigned column) {
    return column == 0 || llvm::is_contained(table.leftColumns, column);
  };
  if (llvm::any_of(table.header, [](const std::string &cell) { return !cell.empty(); })) {
    os << "<thead><tr>";
    for (unsigned i = 0; i < table.header.size(); ++i)
      os << (isLeft(i) ? "<th class=\"left\">" : "<th>") << escapeHtml(table.header[i]) << "</th>";
    os << "</tr></thead>\n";
  }
  os << "<tbody>\n";
  for (const std::vector<std::string> &row : table.rows) {
    os << "<tr>";
    for (unsigned i = 0; i < row.size(); ++i) {
      // Indented labels (`  size` under `model`) keep their indentation.
      StringRef cell = row[i];
      size_t indent = i == 0 ? cell.size() - cell.ltrim(' ').size() : 0;
      if (indent)
        os << "<td class=\"left\" style=\"padding-left: " << indent << "em\">";
      else
        os << (isLeft(i) ? "<td class=\"left\">" : "<td>");
      os << escapeHtml(cell.drop_front(indent)) << "</td>";
    }
    os << "</tr>\n";
  }
  os << "</tbody>\n</table>\n";
  for (const std::string &note : table.notes)
    os << "<p class=\"note\">" << escapeHtml(note) << "</p>\n";
}

void renderHtmlBlock(const Block &block, raw_ostream &os) {
  os << "<li>" << escapeHtml(block.heading);
  if (!block.lines.empty() || !block.children.empty()) {
    os << "\n<ul>\n";
    for (const std::string &line : block.lines)
      os << "<li><code>" << escapeHtml(line) << "</code></li>\n";
    for (const Block &child : block.children)
      renderHtmlBlock(child, os);
    os << "</ul>\n";
  }
  os << "</li>\n";
}

/// The text report's sections as HTML: headings, tables and lists.
void renderSectionsBody(ArrayRef<Section> sections, raw_ostream &os) {
  for (const Section &section : sections) {
    os << "<section class=\"details\">\n<h2>" << escapeHtml(section.heading) << "</h2>\n";
    for (const std::string &line : section.intro)
      os << "<p>" << escapeHtml(line) << "</p>\n";
    for (const Table &table : section.tables)
      renderHtmlTable(table, os);
    for (const Block &block : section.blocks) {
      if (!block.heading.empty())
        os << "<h3>" << escapeHtml(block.heading) << "</h3>\n";
      os << "<ul>\n";
      for (const std::string &line : block.lines)
        os << "<li><code>" << escapeHtml(line) << "</code></li>\n";
      for (const Block &child : block.children)
        renderHtmlBlock(child, os);
      os << "</ul>\n";
    }
    os << "</section>\n";
  }
}

//===----------------------------------------------------------------------===//
// Charts
//===----------------------------------------------------------------------===//

/// A colour-blind-safe palette (Tableau 10) for series without a colour of their own.
constexpr const char *kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

/// Approximate width of sans-serif text at `size` px: enough to lay out labels and legends.
double textWidth(StringRef text, double size) {
  return static_cast<double>(displayWidth(text)) * size * 0.55;
}

/// A round step for about `target` ticks up to `max`: 1, 2 or 5 times a power of ten.
double niceStep(double max, double target = 5) {
  if (!(max > 0))
    return 1;
  double raw = max / target;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0, 10.0})
    if (raw <= factor * power * 1.0000001)
      return factor * power;
  return 10 * power;
}

struct Series {
  std::string name;
  std::string cssClass;
  std::string color;
  /// Drawn hatched: memory that is not held for the whole step.
  bool hatched = false;
};

struct Bar {
  std::string label;
  std::vector<double> values; ///< One per series.
  std::optional<double> capacity;
  /// A level marked across the bar and written above it (memory: the peak).
  std::optional<double> marker;
};

struct BarChart {
  std::string id; ///< Unique in the page: names the chart and its patterns.
  std::string title;
  std::string axisLabel;
  std::function<std::string(double)> format;
  /// How capacities are written (memory: as declared, `80 GiB`); `format` when empty.
  std::function<std::string(double)> formatCapacity;
  std::vector<Series> series;
  std::vector<Bar> bars;
  std::string capacityName = "capacity";
  std::string markerName = "peak";
};

void legendItem(double x, double y, const std::string &swatch, StringRef name, raw_ostream &os) {
  os << "<g class=\"legend-item\" transform=\"translate(" << coord(x) << "," << coord(y) << ")\">"
     << swatch << "<text x=\"18\" y=\"10\" font-size=\"12\">" << escapeHtml(name)
     << "</text></g>\n";
}

void renderBarChart(const BarChart &chart, raw_ostream &os) {
  auto capacityText = [&](double bytes) {
    return chart.formatCapacity ? chart.formatCapacity(bytes) : chart.format(bytes);
  };
  size_t longest = 4;
  for (const Bar &bar : chart.bars)
    longest = std::max(longest, displayWidth(bar.label));
  double slot = std::clamp(textWidth(std::string(longest, 'x'), 12) + 16, 76.0, 180.0);
  // Few bars spread over a plot at least 380 px wide.
  slot = std::max(
      slot, std::min(200.0, 380.0 / static_cast<double>(std::max<size_t>(1, chart.bars.size()))));
  bool sharedCapacity = !chart.bars.empty() && llvm::all_of(chart.bars, [&](const Bar &bar) {
    return bar.capacity && *bar.capacity == *chart.bars.front().capacity;
  });
  // Many runs: narrow slots, with the names written at 45 degrees under the bars.
  bool rotated = slot * static_cast<double>(chart.bars.size()) > 1100;
  if (rotated)
    slot = 50;
  double barWidth = std::min(52.0, slot * 0.6);
  double labelDepth = rotated ? textWidth(std::string(longest, 'x'), 12) * 0.71 + 24 : 36;
  double plotLeft = 80, plotHeight = 260;
  double plotWidth = slot * static_cast<double>(chart.bars.size());
  // Room right of the plot for a shared capacity line's label.
  std::string sharedLabel =
      sharedCapacity ? chart.capacityName + " " + capacityText(*chart.bars.front().capacity)
                     : std::string();
  double width = std::max(
      plotLeft + plotWidth + (sharedCapacity ? textWidth(sharedLabel, 11) + 16 : 24), 560.0);

  // The legend: series, then the capacity line and the marker when some bar has them.
  struct LegendEntry {
    std::string swatch, name;
  };
  std::vector<LegendEntry> legend;
  for (const Series &series : chart.series) {
    std::string fill = series.hatched ? "url(#" + chart.id + "-" + series.cssClass + ")"
                                      : std::string(series.color);
    legend.push_back(
        {"<rect width=\"12\" height=\"12\" fill=\"" + fill + "\" stroke=\"" + series.color + "\"/>",
         series.name + (series.hatched ? " (transient)" : "")});
  }
  bool anyCapacity = llvm::any_of(chart.bars, [](const Bar &bar) { return bar.capacity; });
  bool anyMarker = llvm::any_of(chart.bars, [](const Bar &bar) { return bar.marker; });
  if (anyCapacity)
    legend.push_back({"<line x1=\"0\" y1=\"6\" x2=\"14\" y2=\"6\" stroke=\"#d62728\" "
                      "stroke-width=\"2\" stroke-dasharray=\"4 2\"/>",
                      chart.capacityName});
  if (anyMarker)
    legend.push_back(
        {"<line x1=\"0\" y1=\"6\" x2=\"14\" y2=\"6\" stroke=\"#000\" stroke-width=\"2\"/>",
         chart.markerName});
  std::vector<std::pair<double, double>> legendAt;
  double legendX = plotLeft, legendY = 34;
  for (const LegendEntry &entry : legend) {
    double itemWidth = 18 + textWidth(entry.name, 12) + 18;
    if (legendX + itemWidth > width - 8 && legendX > plotLeft) {
      legendX = plotLeft;
      legendY += 18;
    }
    legendAt.emplace_back(legendX, legendY);
    legendX += itemWidth;
  }
  double plotTop = legendY + 34;
  double height = plotTop + plotHeight + labelDepth;

  double top = 0;
  for (const Bar &bar : chart.bars) {
    double sum = 0;
    for (double value : bar.values)
      sum += std::max(0.0, value);
    top = std::max({top, sum, bar.capacity.value_or(0), bar.marker.value_or(0)});
  }
  double step = niceStep(top > 0 ? top * 1.08 : 1);
  double axisTop = std::max(1.0, std::ceil(top * 1.08 / step)) * step;
  auto y = [&](double value) { return plotTop + plotHeight - value / axisTop * plotHeight; };

  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"bar-chart\" id=\"" << chart.id
     << "\" width=\"" << coord(width) << "\" height=\"" << coord(height) << "\" viewBox=\"0 0 "
     << coord(width) << " " << coord(height) << "\" role=\"img\" aria-labelledby=\"" << chart.id
     << "-title\">\n";
  os << "<title id=\"" << chart.id << "-title\">" << escapeHtml(chart.title) << "</title>\n";
  os << "<defs>\n";
  for (const Series &series : chart.series)
    if (series.hatched)
      os << "<pattern id=\"" << chart.id << "-" << series.cssClass
         << "\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
            "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fff\"/>"
            "<rect width=\"3.5\" height=\"6\" fill=\""
         << series.color << "\"/></pattern>\n";
  os << "</defs>\n";
  os << "<text class=\"chart-title\" x=\"" << coord(plotLeft) << "\" y=\"20\" font-size=\"15\" "
     << "font-weight=\"bold\">" << escapeHtml(chart.title) << "</text>\n";
  for (size_t i = 0; i < legend.size(); ++i)
    legendItem(legendAt[i].first, legendAt[i].second, legend[i].swatch, legend[i].name, os);

  // Axis, grid lines and tick labels.
  os << "<g class=\"axis\">\n";
  for (double tick = 0; tick <= axisTop * 1.0000001; tick += step) {
    os << "<line x1=\"" << coord(plotLeft) << "\" y1=\"" << coord(y(tick)) << "\" x2=\""
       << coord(plotLeft + plotWidth) << "\" y2=\"" << coord(y(tick))
       << "\" stroke=\"#e3e3e3\"/>\n";
    os << "<text x=\"" << coord(plotLeft - 6) << "\" y=\"" << coord(y(tick) + 4)
       << "\" font-size=\"11\" text-anchor=\"end\">" << escapeHtml(chart.format(tick))
       << "</text>\n";
  }
  os << "<line x1=\"" << coord(plotLeft) << "\" y1=\"" << coord(plotTop) << "\" x2=\""
     << coord(plotLeft) << "\" y2=\"" << coord(plotTop + plotHeight) << "\" stroke=\"#888\"/>\n";
  os << "<line x1=\"" << coord(plotLeft) << "\" y1=\"" << coord(plotTop + plotHeight) << "\" x2=\""
     << coord(plotLeft + plotWidth) << "\" y2=\"" << coord(plotTop + plotHeight)
     << "\" stroke=\"#888\"/>\n";
  os << "<text x=\"16\" y=\"" << coord(plotTop + plotHeight / 2)
     << "\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 16 "
     << coord(plotTop + plotHeight / 2) << ")\">" << escapeHtml(chart.axisLabel) << "</text>\n";
  os << "</g>\n";

  for (size_t b = 0; b < chart.bars.size(); ++b) {
    const Bar &bar = chart.bars[b];
    double slotLeft = plotLeft + slot * static_cast<double>(b);
    double x = slotLeft + (slot - barWidth) / 2;
    os << "<g class=\"bar\" data-run=\"" << escapeHtml(bar.label) << "\">\n";
    double base = 0;
    for (size_t s = 0; s < chart.series.size() && s < bar.values.size(); ++s) {
      double value = bar.values[s];
      if (!(value > 0))
        continue;
      const Series &series = chart.series[s];
      std::string fill =
          series.hatched ? "url(#" + chart.id + "-" + series.cssClass + ")" : series.color;
      os << "<rect class=\"segment " << series.cssClass << "\" x=\"" << coord(x) << "\" y=\""
         << coord(y(base + value)) << "\" width=\"" << coord(barWidth) << "\" height=\""
         << coord(y(base) - y(base + value)) << "\" fill=\"" << fill << "\" stroke=\""
         << series.color << "\" stroke-width=\"0.5\"><title>" << escapeHtml(bar.label) << ": "
         << escapeHtml(series.name) << " " << escapeHtml(chart.format(value))
         << "</title></rect>\n";
      base += value;
    }
    double labelTop = base;
    if (bar.marker) {
      os << "<line class=\"marker\" x1=\"" << coord(x - 4) << "\" y1=\"" << coord(y(*bar.marker))
         << "\" x2=\"" << coord(x + barWidth + 4) << "\" y2=\"" << coord(y(*bar.marker))
         << "\" stroke=\"#000\" stroke-width=\"2\"><title>" << escapeHtml(bar.label) << ": "
         << escapeHtml(chart.markerName) << " " << escapeHtml(chart.format(*bar.marker))
         << "</title></line>\n";
      labelTop = std::max(labelTop, *bar.marker);
    }
    os << "<text class=\"total\" x=\"" << coord(x + barWidth / 2) << "\" y=\""
       << coord(y(labelTop) - 5) << "\" font-size=\"" << (rotated ? 9 : 11)
       << "\" text-anchor=\"middle\">"
       << escapeHtml(base > 0 ? chart.format(bar.marker.value_or(base)) : "none") << "</text>\n";
    if (bar.capacity && !sharedCapacity)
      os << "<line class=\"capacity\" x1=\"" << coord(slotLeft + 4) << "\" y1=\""
         << coord(y(*bar.capacity)) << "\" x2=\"" << coord(slotLeft + slot - 4) << "\" y2=\""
         << coord(y(*bar.capacity))
         << "\" stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"6 3\"><title>"
         << escapeHtml(bar.label) << ": " << escapeHtml(chart.capacityName) << " "
         << escapeHtml(capacityText(*bar.capacity)) << "</title></line>\n";
    // The run's name under its bar, shortened to the slot (the full name is in its title).
    std::string label = bar.label;
    size_t fits = static_cast<size_t>((slot - 4) / (12 * 0.58));
    if (!rotated && displayWidth(label) > fits && fits > 1)
      label = label.substr(0, fits - 1) + "\u2026";
    double labelX = slotLeft + slot / 2, labelY = plotTop + plotHeight + (rotated ? 12 : 18);
    os << "<text class=\"label\" x=\"" << coord(labelX) << "\" y=\"" << coord(labelY)
       << "\" font-size=\"12\" text-anchor=\"" << (rotated ? "end" : "middle") << "\"";
    if (rotated)
      os << " transform=\"rotate(-45 " << coord(labelX) << " " << coord(labelY) << ")\"";
    os << "><title>" << escapeHtml(bar.label) << "</title>" << escapeHtml(label) << "</text>\n";
    os << "</g>\n";
  }
  // One capacity for every bar: one line across the plot, labelled at its right end.
  if (sharedCapacity) {
    double level = y(*chart.bars.front().capacity);
    os << "<line class=\"capacity\" x1=\"" << coord(plotLeft) << "\" y1=\"" << coord(level)
       << "\" x2=\"" << coord(plotLeft + plotWidth) << "\" y2=\"" << coord(level)
       << "\" stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"6 3\"><title>"
       << escapeHtml(chart.capacityName) << " "
       << escapeHtml(capacityText(*chart.bars.front().capacity)) << "</title></line>\n";
    os << "<text class=\"capacity-label\" x=\"" << coord(plotLeft + plotWidth + 6) << "\" y=\""
       << coord(level + 4) << "\" font-size=\"11\" style=\"fill: #d62728\">"
       << escapeHtml(sharedLabel) << "</text>\n";
  }
  os << "</svg>\n";
}

/// The table under a bar chart: one row per bar, one column per series, the total, the capacity.
Table chartTable(const BarChart &chart, StringRef totalName) {
  auto capacityText = [&](double bytes) {
    return chart.formatCapacity ? chart.formatCapacity(bytes) : chart.format(bytes);
  };
  Table table;
  table.header.push_back("run");
  for (const Series &series : chart.series)
    table.header.push_back(series.name);
  table.header.push_back(totalName.str());
  bool anyCapacity = llvm::any_of(chart.bars, [](const Bar &bar) { return bar.capacity; });
  if (anyCapacity)
    table.header.push_back(chart.capacityName);
  for (const Bar &bar : chart.bars) {
    std::vector<std::string> row{bar.label};
    double sum = 0;
    for (double value : bar.values) {
      row.push_back(value == 0 ? "0" : chart.format(value));
      sum += value;
    }
    row.push_back(chart.format(bar.marker.value_or(sum)));
    if (anyCapacity)
      row.push_back(bar.capacity ? capacityText(*bar.capacity) : "-");
    table.addRow(std::move(row));
  }
  return table;
}

void renderChartSection(StringRef id, StringRef heading, const BarChart &chart, const Table &table,
                        ArrayRef<std::string> notes, raw_ostream &os) {
  os << "<section class=\"chart-section\" id=\"" << id << "\">\n<h2>" << escapeHtml(heading)
     << "</h2>\n<div class=\"chart-row\">\n<figure class=\"chart\">\n";
  renderBarChart(chart, os);
  os << "</figure>\n<div class=\"chart-numbers\">\n";
  renderHtmlTable(table, os, "chart-data");
  for (const std::string &note : notes)
    os << "<p class=\"note\">" << escapeHtml(note) << "</p>\n";
  os << "</div>\n</div>\n</section>\n";
}

std::vector<Series> memorySeries(bool withTransient) {
  std::vector<Series> series = {{"params", "params", "#4e79a7", false},
                                {"grads", "grads", "#f28e2b", false},
                                {"optimizer", "optimizer", "#59a14f", false},
                                {"activations", "activations", "#e15759", true}};
  if (withTransient)
    series.push_back({"buffers", "transient", "#b07aa1", true});
  return series;
}

bool usesHostMemory(const RunReport &report) {
  const analysis::MemoryBreakdown &host = report.analysis.memory.host;
  return host.peak > 0 || host.getPersistent() > 0 || host.activations > 0;
}

/// The stage whose devices send the most bytes (the communication table's total).
int busiestStage(const RunReport &report) {
  std::map<int, double> sent;
  for (const analysis::CommEntry &entry : report.analysis.communication)
    sent[entry.stage] += entry.sentBytes;
  int stage = 0;
  double most = -1;
  for (const auto &[candidate, bytes] : sent)
    if (bytes > most) {
      most = bytes;
      stage = candidate;
    }
  return stage;
}

void renderMemoryCharts(ArrayRef<RunReport> runs, raw_ostream &os) {
  BarChart device;
  device.id = "device-memory";
  device.title = "Device memory per device";
  device.axisLabel = "bytes per device";
  device.format = formatBytes;
  device.formatCapacity = formatCapacity;
  device.series = memorySeries(true);
  std::vector<std::string> notes = {
      "persistent: params, grads and optimizer states, held for the whole step; transient "
      "(hatched): activations kept for the backward and buffers (gathered params, unreduced "
      "gradients) around a use; with a pipeline, the stage with the highest peak"};
  bool unknownActivations = false;
  for (const RunReport &report : runs) {
    const analysis::MemoryReport &memory = report.analysis.memory;
    const analysis::MemoryBreakdown &m = memory.device;
    Bar bar{
        report.run->name,
        {m.params, m.grads, m.optimizer, memory.activationsKnown ? m.activations : 0, m.transient},
        memory.deviceCapacity > 0 ? std::optional<double>(memory.deviceCapacity) : std::nullopt,
        m.peak};
    unknownActivations |= !memory.activationsKnown;
    device.bars.push_back(std::move(bar));
  }
  if (unknownActivations)
    notes.push_back("activations are unknown for an abstract model (params = N) and left out");
  notes.push_back("peak: the most memory in use at any point of the step; GB = 10^9 bytes");
  renderChartSection("memory", "Device memory", device, chartTable(device, "peak"), notes, os);

  if (!llvm::any_of(runs, usesHostMemory))
    return;
  BarChart host;
  host.id = "host-memory";
  host.title = "Host memory per node";
  host.axisLabel = "bytes per node";
  host.format = formatBytes;
  host.formatCapacity = formatCapacity;
  host.series = memorySeries(true);
  host.capacityName = "capacity per node";
  for (const RunReport &report : runs) {
    const analysis::MemoryReport &memory = report.analysis.memory;
    const analysis::MemoryBreakdown &m = memory.host;
    double perNode = static_cast<double>(report.run->cluster->devicesPerNode);
    host.bars.push_back(
        {report.run->name,
         {m.params * perNode, m.grads * perNode, m.optimizer * perNode,
          (memory.activationsKnown ? m.activations : 0) * perNode, m.transient * perNode},
         memory.hostCapacity,
         m.peak * perNode});
  }
  renderChartSection("host", "Host memory", host, chartTable(host, "peak per node"),
                     {"what the devices of one node keep in host memory: devices_per_node times "
                      "each device's share"},
                     os);
}

void renderCommunicationChart(ArrayRef<RunReport> runs, raw_ostream &os) {
  // Series: each axis × collective any run uses, in order of first appearance.
  std::vector<std::string> keys;
  std::vector<std::map<std::string, std::pair<double, double>>> perRun; // key -> (sent, time)
  for (const RunReport &report : runs) {
    int stage = busiestStage(report);
    std::map<std::string, std::pair<double, double>> totals;
    for (const analysis::CommEntry &entry : report.analysis.communication) {
      if (entry.stage != stage || (plan::isCollective(entry.collective) && entry.groupSize == 1))
        continue;
      std::string key = (entry.axis.empty() ? std::string("-") : entry.axis) + " " +
                        collectiveName(entry.collective);
      if (!llvm::is_contained(keys, key))
        keys.push_back(key);
      totals[key].first += entry.sentBytes;
      totals[key].second += entry.timeSeconds;
    }
    perRun.push_back(std::move(totals));
  }
  BarChart chart;
  chart.id = "communication";
  chart.title = "Communication time per device per step, by axis and collective";
  chart.axisLabel = "seconds per step";
  chart.format = formatSeconds;
  for (size_t i = 0; i < keys.size(); ++i)
    chart.series.push_back(
        {keys[i], "comm-" + std::to_string(i), kPalette[i % std::size(kPalette)], false});
  Table table;
  table.header = {"run", "axis", "collective", "sent", "time"};
  table.leftColumns = {1, 2};
  for (size_t r = 0; r < runs.size(); ++r) {
    Bar bar;
    bar.label = runs[r].run->name;
    for (const std::string &key : keys) {
      auto it = perRun[r].find(key);
      bar.values.push_back(it == perRun[r].end() ? 0 : it->second.second);
      if (it != perRun[r].end()) {
        StringRef axis, collective;
        std::tie(axis, collective) = StringRef(key).split(' ');
        table.addRow({bar.label, axis.str(), collective.str(), formatBytes(it->second.first),
                      formatSeconds(it->second.second)});
      }
    }
    chart.bars.push_back(std::move(bar));
  }
  renderChartSection("communication-chart", "Communication", chart, table,
                     {"per device per step, every call of the axis and collective together, "
                      "alpha-beta time before overlap; with a pipeline, the stage that sends the "
                      "most; collectives over groups of one device move nothing and are left out"},
                     os);
}

void renderTimeChart(ArrayRef<RunReport> runs, raw_ostream &os) {
  BarChart chart;
  chart.id = "time";
  chart.title = "Step time";
  chart.axisLabel = "seconds per step";
  chart.format = formatSeconds;
  chart.series = {{"compute", "compute", "#4e79a7", false},
                  {"exposed communication", "exposed-comm", "#f28e2b", false},
                  {"pipeline bubble", "bubble", "#bab0ac", false}};
  std::vector<std::string> notes = {
      "compute at peak × efficiency; exposed communication: what compute does not hide"};
  for (const RunReport &report : runs) {
    const analysis::TimeReport &time = report.analysis.time;
    chart.bars.push_back(
        {report.run->name,
         {time.known ? time.computeSeconds : 0, time.exposedCommSeconds, time.bubbleSeconds},
         std::nullopt,
         std::nullopt});
    if (!time.known)
      notes.push_back("run " + report.run->name +
                      ": compute time unknown (an abstract model has no FLOPs)");
  }
  renderChartSection("time-chart", "Step time", chart, chartTable(chart, "step"), notes, os);
}

} // namespace

void renderSectionsHtml(StringRef title, ArrayRef<Section> sections, raw_ostream &os) {
  beginPage(title, os);
  renderSectionsBody(sections, os);
  endPage(os);
}

void printHtmlReport(ArrayRef<RunReport> runs, ArrayRef<ReportDiagnostic> diagnostics,
                     const ReportOptions &options, raw_ostream &os) {
  std::string title =
      fmt::format("placec report: {} ({})", options.inputName, describeRunCount(runs.size()));
  beginPage(title, os);
  if (!runs.empty()) {
    renderMemoryCharts(runs, os);
    renderCommunicationChart(runs, os);
    renderTimeChart(runs, os);
  }
  renderSectionsBody(buildReportSections(runs, diagnostics, options), os);
  endPage(os);
}

//===----------------------------------------------------------------------===//
// Search
//===----------------------------------------------------------------------===//

void CandidateSample::add(const search::Candidate &candidate) {
  if (seen++ % stride != 0)
    return;
  kept.push_back(candidate);
  if (kept.size() <= capacity)
    return;
  // Keep every other one and take half as many from now on: the kept candidates stay those whose
  // index is a multiple of the stride.
  std::vector<search::Candidate> thinned;
  for (size_t i = 0; i < kept.size(); i += 2)
    thinned.push_back(kept[i]);
  kept = std::move(thinned);
  stride *= 2;
}

namespace {

std::string describeCandidate(const search::Candidate &c) {
  return fmt::format("{}: step {}, memory {}", c.describe(), formatSeconds(c.stepSeconds),
                     formatBytes(c.peakBytes));
}

void renderScatter(const search::SearchResult &result, const CandidateSample &sample,
                   raw_ostream &os) {
  double budget = result.cluster->deviceMemory;
  std::vector<const search::Candidate *> all;
  for (const search::Candidate &c : sample.getCandidates())
    all.push_back(&c);
  for (const search::Candidate &c : result.top)
    all.push_back(&c);
  double minTime = 0, maxTime = 1, maxMemory = budget;
  if (!all.empty()) {
    minTime = maxTime = all.front()->stepSeconds;
    for (const search::Candidate *c : all) {
      minTime = std::min(minTime, c->stepSeconds);
      maxTime = std::max(maxTime, c->stepSeconds);
      maxMemory = std::max(maxMemory, c->peakBytes);
    }
  }
  // Step times spread over decades are shown on a logarithmic axis.
  bool logTime = minTime > 0 && maxTime / minTime > 20;
  std::vector<double> timeTicks;
  double timeLow, timeHigh;
  if (logTime) {
    timeLow = std::pow(10.0, std::floor(std::log10(minTime)));
    timeHigh = std::pow(10.0, std::ceil(std::log10(maxTime)));
    for (double decade = timeLow; decade < timeHigh * 1.001; decade *= 10)
      for (double factor : {1.0, 2.0, 5.0})
        if (decade * factor <= timeHigh * 1.001)
          timeTicks.push_back(decade * factor);
  } else {
    double timeStep = niceStep(std::max(maxTime - minTime, maxTime * 0.05));
    timeLow = std::floor(minTime / timeStep) * timeStep;
    timeHigh = std::max(timeLow + timeStep, std::ceil(maxTime / timeStep) * timeStep);
    for (double tick = timeLow; tick <= timeHigh + timeStep * 1e-6; tick += timeStep)
      timeTicks.push_back(tick);
  }
  double memoryStep = niceStep(maxMemory * 1.05);
  double memoryHigh = std::max(1.0, std::ceil(maxMemory * 1.05 / memoryStep)) * memoryStep;

  double left = 80, top = 56, plotWidth = 720, plotHeight = 360;
  double width = left + plotWidth + 30, height = top + plotHeight + 50;
  auto x = [&](double t) {
    if (logTime)
      return left + std::log(t / timeLow) / std::log(timeHigh / timeLow) * plotWidth;
    return left + (t - timeLow) / (timeHigh - timeLow) * plotWidth;
  };
  auto y = [&](double m) { return top + plotHeight - m / memoryHigh * plotHeight; };

  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"scatter\" id=\"candidates\" width=\""
     << coord(width) << "\" height=\"" << coord(height) << "\" viewBox=\"0 0 " << coord(width)
     << " " << coord(height) << "\" role=\"img\" aria-labelledby=\"candidates-title\">\n"
     << "<title id=\"candidates-title\">Candidates: device memory against step time</title>\n"
     << "<text class=\"chart-title\" x=\"" << coord(left)
     << "\" y=\"20\" font-size=\"15\" font-weight=\"bold\">Candidates: device memory against "
        "step time</text>\n";
  // Legend.
  legendItem(left, 30, "<circle cx=\"6\" cy=\"6\" r=\"3\" fill=\"#9aa5b1\" fill-opacity=\"0.6\"/>",
             "accepted (sample)", os);
  legendItem(left + 150, 30, "<circle cx=\"6\" cy=\"6\" r=\"4.5\" fill=\"#4e79a7\"/>", "fastest",
             os);
  legendItem(left + 240, 30, "<circle cx=\"6\" cy=\"6\" r=\"6\" fill=\"#e15759\" stroke=\"#000\"/>",
             "chosen", os);
  legendItem(left + 330, 30,
             "<line x1=\"0\" y1=\"6\" x2=\"14\" y2=\"6\" stroke=\"#d62728\" stroke-width=\"2\" "
             "stroke-dasharray=\"4 2\"/>",
             "memory budget", os);

  os << "<g class=\"axis\">\n";
  for (double tick = 0; tick <= memoryHigh * 1.0000001; tick += memoryStep)
    os << "<line x1=\"" << coord(left) << "\" y1=\"" << coord(y(tick)) << "\" x2=\""
       << coord(left + plotWidth) << "\" y2=\"" << coord(y(tick)) << "\" stroke=\"#e3e3e3\"/>"
       << "<text x=\"" << coord(left - 6) << "\" y=\"" << coord(y(tick) + 4)
       << "\" font-size=\"11\" text-anchor=\"end\">" << escapeHtml(formatBytes(tick))
       << "</text>\n";
  for (double tick : timeTicks)
    os << "<line x1=\"" << coord(x(tick)) << "\" y1=\"" << coord(top) << "\" x2=\""
       << coord(x(tick)) << "\" y2=\"" << coord(top + plotHeight) << "\" stroke=\"#eeeeee\"/>"
       << "<text x=\"" << coord(x(tick)) << "\" y=\"" << coord(top + plotHeight + 16)
       << "\" font-size=\"11\" text-anchor=\"middle\">" << escapeHtml(formatSeconds(tick))
       << "</text>\n";
  os << "<rect x=\"" << coord(left) << "\" y=\"" << coord(top) << "\" width=\"" << coord(plotWidth)
     << "\" height=\"" << coord(plotHeight) << "\" fill=\"none\" stroke=\"#888\"/>\n"
     << "<text x=\"" << coord(left + plotWidth / 2) << "\" y=\"" << coord(top + plotHeight + 38)
     << "\" font-size=\"12\" text-anchor=\"middle\">predicted step time"
     << (logTime ? " (logarithmic)" : "") << "</text>\n"
     << "<text x=\"16\" y=\"" << coord(top + plotHeight / 2)
     << "\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 16 "
     << coord(top + plotHeight / 2) << ")\">device memory peak</text>\n</g>\n";

  os << "<line class=\"capacity\" x1=\"" << coord(left) << "\" y1=\"" << coord(y(budget))
     << "\" x2=\"" << coord(left + plotWidth) << "\" y2=\"" << coord(y(budget))
     << "\" stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"6 3\"><title>memory budget "
     << escapeHtml(formatBytes(budget)) << "</title></line>\n";

  auto point = [&](const search::Candidate &c, StringRef cssClass, StringRef attributes,
                   StringRef prefix) {
    os << "<circle class=\"" << cssClass << "\" cx=\"" << coord(x(c.stepSeconds)) << "\" cy=\""
       << coord(y(c.peakBytes)) << "\" " << attributes << "><title>" << escapeHtml(prefix)
       << escapeHtml(describeCandidate(c)) << "</title></circle>\n";
  };
  os << "<g class=\"sample\">\n";
  for (const search::Candidate &c : sample.getCandidates())
    point(c, "candidate", "r=\"3\" fill=\"#9aa5b1\" fill-opacity=\"0.6\"", "");
  os << "</g>\n<g class=\"top\">\n";
  for (size_t i = result.top.size(); i-- > 1;)
    point(result.top[i], "top", "r=\"4.5\" fill=\"#4e79a7\"", fmt::format("#{} ", i + 1));
  os << "</g>\n";
  if (!result.top.empty()) {
    const search::Candidate &chosen = result.top.front();
    point(chosen, "chosen", "r=\"6\" fill=\"#e15759\" stroke=\"#000\" stroke-width=\"1.5\"",
          "chosen: ");
    double cx = x(chosen.stepSeconds), cy = y(chosen.peakBytes);
    bool right = cx < left + plotWidth - 120;
    os << "<text class=\"chosen-label\" x=\"" << coord(right ? cx + 10 : cx - 10) << "\" y=\""
       << coord(cy - 8) << "\" font-size=\"12\" font-weight=\"bold\" text-anchor=\""
       << (right ? "start" : "end") << "\">chosen: " << escapeHtml(chosen.formatMesh())
       << "</text>\n";
  }
  os << "</svg>\n";
}

} // namespace

void printSearchHtml(const ir::Run &run, const search::SearchResult &result,
                     const CandidateSample &sample, StringRef inputName, StringRef placeText,
                     raw_ostream &os) {
  std::string title = fmt::format("placec search: {}, run {}", inputName.str(), run.name);
  beginPage(title, os);
  const ir::Cluster &cluster = *result.cluster;

  Table summary;
  summary.header = {"", ""};
  summary.leftColumns = {1};
  summary.addRow({"model", run.model->name + " (" + describeModel(*run.model) + ")"});
  summary.addRow(
      {"cluster", cluster.name + ", " + std::to_string(cluster.getNumDevices()) + " devices"});
  summary.addRow({"memory budget", formatBytes(cluster.deviceMemory) + " per device"});
  summary.addRow({"space", std::to_string(result.spaceSize) + " candidates over " +
                               std::to_string(result.meshes) + " meshes"});
  summary.addRow({"accepted", std::to_string(result.accepted)});
  for (const auto &[rule, count] : result.rejectedByRule)
    summary.addRow({"rejected by " + rule, std::to_string(count)});
  summary.addRow({"shown", std::to_string(sample.getCandidates().size()) +
                               " accepted candidates (every " + std::to_string(sample.getStride()) +
                               "th in search order) and the " + std::to_string(result.top.size()) +
                               " fastest"});
  os << "<section id=\"search-summary\">\n<h2>Search</h2>\n";
  renderHtmlTable(summary, os);
  os << "</section>\n";

  os << "<section class=\"chart-section\" id=\"candidates-chart\">\n<h2>Candidates</h2>\n";
  // With nothing accepted there is nothing to plot: the table's notes say what comes closest.
  if (!result.top.empty()) {
    os << "<figure class=\"chart\">\n";
    renderScatter(result, sample, os);
    os << "</figure>\n";
  }
  Table top;
  top.header = {"rank", "mesh", "plan", "step", "memory", "MFU"};
  top.leftColumns = {1, 2};
  bool bridges = !result.topBridges.empty();
  if (bridges) {
    top.header.push_back("exports to");
    top.leftColumns.push_back(6);
  }
  for (size_t i = 0; i < result.top.size(); ++i) {
    const search::Candidate &c = result.top[i];
    std::vector<std::string> row = {std::to_string(i + 1) + (i == 0 ? " (chosen)" : ""),
                                    c.formatMesh(),
                                    c.describe(),
                                    formatSeconds(c.stepSeconds),
                                    formatBytes(c.peakBytes),
                                    formatPercent(result.topAnalyses[i].time.mfu)};
    if (bridges)
      row.push_back(search::formatExports(result.topBridges[i]));
    top.addRow(row);
  }
  if (result.top.empty() && result.bestRefused)
    top.notes.push_back("nothing that the bridge named by --target can express fits: the fastest "
                        "plan that fits, " +
                        result.bestRefused->describe() + ", is refused: " + result.bestRefusal);
  else if (result.top.empty()) {
    top.notes.push_back("nothing fits the memory budget");
    if (result.smallest)
      top.notes.push_back("the smallest per-device memory reachable is " +
                          formatBytes(result.smallest->peakBytes) + ", with " +
                          result.smallest->describe());
  }
  renderHtmlTable(top, os, "chart-data");
  os << "<p class=\"note\">step time and memory predicted by the search's closed form for the "
        "sample; the fastest plans re-checked by the verifier and the analyses</p>\n"
     << "</section>\n";
  if (!placeText.empty()) {
    os << "<section id=\"best-plan\">\n<h2>The best plan</h2>\n<pre>" << escapeHtml(placeText)
       << "</pre>\n";
    if (bridges) {
      os << "<p>In other frameworks (<code>placec compile --target=...</code>):</p>\n<ul>\n";
      for (const search::BridgeVerdict &verdict : result.topBridges.front())
        os << "<li><code>" << escapeHtml(verdict.target)
           << "</code>: " << escapeHtml(verdict.describe()) << "</li>\n";
      os << "</ul>\n";
    }
    os << "</section>\n";
  }
  endPage(os);
}

} // namespace placec::report

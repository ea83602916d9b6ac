// `placec diff`: what changes from one run to another — memory per state on the device and the
// host, communication per axis and per collective (bytes each device sends, time), and step
// time — with signed deltas and ratios, as text, Markdown or JSON.
#include "ReportSupport.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/JSON.h"

#include <cmath>
#include <fmt/format.h>
#include <functional>

using namespace llvm;

namespace placec::report {

namespace {

enum class Unit { Bytes, Seconds, Fraction, Rate, Count };

std::string formatIn(Unit unit, double value) {
  switch (unit) {
  case Unit::Bytes:
    return formatBytes(value);
  case Unit::Seconds:
    return formatSeconds(value);
  case Unit::Fraction:
    return formatPercent(value);
  case Unit::Rate:
    return formatCount(value) + "/s";
  case Unit::Count:
    return formatInteger(value);
  }
  return "";
}

/// One compared figure.
struct Row {
  std::string figure;
  double a = 0, b = 0;
  Unit unit = Unit::Bytes;
  bool known = true; ///< False when either side cannot say (an abstract model's activations).
};

/// A communication total for one key (an axis, or axis × collective × state × phase).
struct CommTotals {
  std::string key;
  double sentA = 0, sentB = 0, timeA = 0, timeB = 0, countA = 0, countB = 0;
};

/// The key of an entry for the per-collective comparison.
std::string collectiveKey(const analysis::CommEntry &entry) {
  return fmt::format("{} {} {} ({})", entry.axis.empty() ? "-" : entry.axis,
                     collectiveName(entry.collective), ir::toString(entry.state).str(),
                     plan::toString(entry.phase).str());
}

/// The link an entry crosses: `intra-node`, `inter-node`, `host`.
std::string linkKey(const analysis::CommEntry &entry) {
  switch (entry.link) {
  case analysis::LinkClass::IntraNode:
    return "intra-node";
  case analysis::LinkClass::InterNode:
    return "inter-node";
  case analysis::LinkClass::Host:
    return "host";
  }
  return "?";
}

/// Sums entries of both runs by key, keys in order of first appearance (a's first).
std::vector<CommTotals>
totalsBy(const RunReport &a, const RunReport &b,
         const std::function<std::string(const analysis::CommEntry &)> &keyOf) {
  std::vector<CommTotals> totals;
  auto find = [&](const std::string &key) -> CommTotals & {
    for (CommTotals &total : totals)
      if (total.key == key)
        return total;
    totals.push_back(CommTotals{key});
    return totals.back();
  };
  for (const analysis::CommEntry &entry : a.analysis.communication) {
    CommTotals &total = find(keyOf(entry));
    total.sentA += entry.sentBytes;
    total.timeA += entry.timeSeconds;
    total.countA += static_cast<double>(entry.count);
  }
  for (const analysis::CommEntry &entry : b.analysis.communication) {
    CommTotals &total = find(keyOf(entry));
    total.sentB += entry.sentBytes;
    total.timeB += entry.timeSeconds;
    total.countB += static_cast<double>(entry.count);
  }
  return totals;
}

std::vector<CommTotals> perAxis(const RunReport &a, const RunReport &b) {
  std::vector<CommTotals> totals = totalsBy(
      a, b, [](const analysis::CommEntry &entry) { return entry.axis.empty() ? "-" : entry.axis; });
  CommTotals all{"all axes"};
  for (const CommTotals &total : totals) {
    all.sentA += total.sentA;
    all.sentB += total.sentB;
    all.timeA += total.timeA;
    all.timeB += total.timeB;
    all.countA += total.countA;
    all.countB += total.countB;
  }
  totals.push_back(all);
  return totals;
}

std::vector<Row> memoryRows(const analysis::MemoryBreakdown &a, const analysis::MemoryBreakdown &b,
                            bool activationsKnown, bool withTransient) {
  std::vector<Row> rows = {
      {"params", a.params, b.params},
      {"grads", a.grads, b.grads},
      {"optimizer", a.optimizer, b.optimizer},
      {"model states", a.getPersistent(), b.getPersistent()},
      {"activations", a.activations, b.activations, Unit::Bytes, activationsKnown},
  };
  if (withTransient)
    rows.push_back({"transient", a.transient, b.transient});
  rows.push_back({"peak", a.peak, b.peak});
  return rows;
}

bool usesHost(const RunReport &report) {
  const analysis::MemoryBreakdown &host = report.analysis.memory.host;
  return host.peak > 0 || host.getPersistent() > 0;
}

std::vector<Row> timeRows(const RunReport &a, const RunReport &b) {
  const analysis::TimeReport &ta = a.analysis.time, &tb = b.analysis.time;
  bool known = ta.known && tb.known;
  return {
      {"compute", ta.computeSeconds, tb.computeSeconds, Unit::Seconds, known},
      {"exposed comm", ta.exposedCommSeconds, tb.exposedCommSeconds, Unit::Seconds},
      {"bubble", ta.bubbleSeconds, tb.bubbleSeconds, Unit::Seconds},
      {"step", ta.stepSeconds, tb.stepSeconds, Unit::Seconds, known},
      {"MFU", ta.mfu, tb.mfu, Unit::Fraction, known},
      {"tokens/s", ta.tokensPerSecond, tb.tokensPerSecond, Unit::Rate, known},
  };
}

Table rowTable(StringRef title, StringRef aName, StringRef bName, ArrayRef<Row> rows) {
  Table table;
  table.title = title.str();
  table.header = {"", aName.str(), bName.str(), "delta", "ratio"};
  for (const Row &row : rows) {
    if (!row.known) {
      table.addRow({row.figure, "unknown", "unknown", "-", "-"});
      continue;
    }
    Unit unit = row.unit;
    table.addRow({row.figure, formatIn(unit, row.a), formatIn(unit, row.b),
                  formatSigned(row.b - row.a, [&](double v) { return formatIn(unit, v); }),
                  formatRatio(row.a, row.b)});
  }
  return table;
}

Table commTable(StringRef title, StringRef aName, StringRef bName, ArrayRef<CommTotals> totals) {
  Table table;
  table.title = title.str();
  table.header = {
      "",      fmt::format("{} sent", aName.str()), fmt::format("{} sent", bName.str()), "delta",
      "ratio", fmt::format("{} time", aName.str()), fmt::format("{} time", bName.str()), "ratio"};
  for (const CommTotals &total : totals)
    table.addRow({total.key, formatBytes(total.sentA), formatBytes(total.sentB),
                  formatSigned(total.sentB - total.sentA, formatBytes),
                  formatRatio(total.sentA, total.sentB), formatSeconds(total.timeA),
                  formatSeconds(total.timeB), formatRatio(total.timeA, total.timeB)});
  return table;
}

std::string sideDescription(StringRef label, const DiffSide &side) {
  const ir::Run &run = *side.report->run;
  return fmt::format("{}: run {} in {}: {} on {} ({} devices), strategy {} {}", label.str(),
                     run.name, side.file, run.model->name, run.cluster->name,
                     run.cluster->getNumDevices(), run.strategy->name,
                     describeMesh(run.strategy->mesh));
}

/// The run names as column headings; `a` and `b` when the names are equal.
std::pair<std::string, std::string> columnNames(const DiffSide &a, const DiffSide &b) {
  std::string aName = a.report->run->name, bName = b.report->run->name;
  if (aName == bName)
    return {"a: " + aName, "b: " + bName};
  return {aName, bName};
}

json::Value number(double value) {
  if (!std::isfinite(value))
    return nullptr;
  if (std::fabs(value) < 9.007199254740992e15 && value == std::round(value))
    return static_cast<int64_t>(value);
  return value;
}

json::Value ratio(double a, double b) { return a == 0 ? json::Value(nullptr) : number(b / a); }

} // namespace

std::vector<Section> buildDiffSections(const DiffSide &a, const DiffSide &b) {
  const RunReport &ra = *a.report, &rb = *b.report;
  auto [aName, bName] = columnNames(a, b);
  bool activationsKnown =
      ra.analysis.memory.activationsKnown && rb.analysis.memory.activationsKnown;
  std::vector<Section> sections;

  Section overview;
  overview.heading = "Runs";
  overview.intro.push_back(sideDescription("a", a));
  overview.intro.push_back(sideDescription("b", b));
  const analysis::MemoryBreakdown &ma = ra.analysis.memory.device, &mb = rb.analysis.memory.device;
  std::vector<CommTotals> axes = perAxis(ra, rb);
  const CommTotals &all = axes.back();
  overview.intro.push_back(fmt::format(
      "b against a: model states per device {}, peak {}, communication sent per device {}, "
      "step time {}",
      formatRatio(ma.getPersistent(), mb.getPersistent()), formatRatio(ma.peak, mb.peak),
      formatRatio(all.sentA, all.sentB),
      ra.analysis.time.known && rb.analysis.time.known
          ? formatRatio(ra.analysis.time.stepSeconds, rb.analysis.time.stepSeconds)
          : std::string("unknown")));
  sections.push_back(std::move(overview));

  Section memory;
  memory.heading = "Memory";
  memory.tables.push_back(
      rowTable("Memory per device", aName, bName, memoryRows(ma, mb, activationsKnown, true)));
  if (usesHost(ra) || usesHost(rb))
    memory.tables.push_back(rowTable(
        "Host memory per device", aName, bName,
        memoryRows(ra.analysis.memory.host, rb.analysis.memory.host, activationsKnown, false)));
  sections.push_back(std::move(memory));

  Section communication;
  communication.heading = "Communication";
  communication.tables.push_back(commTable("Per axis", aName, bName, axes));
  communication.tables.push_back(commTable("Per link", aName, bName, totalsBy(ra, rb, linkKey)));
  communication.tables.push_back(
      commTable("Per collective", aName, bName, totalsBy(ra, rb, collectiveKey)));
  communication.tables.back().notes.push_back(
      "sent: bytes each device puts on the wire per step (ring algorithms); time: alpha-beta, "
      "before overlap with compute");
  sections.push_back(std::move(communication));

  Section time;
  time.heading = "Time";
  time.tables.push_back(rowTable("Time per step", aName, bName, timeRows(ra, rb)));
  sections.push_back(std::move(time));
  return sections;
}

static void printJsonDiff(const DiffSide &a, const DiffSide &b, raw_ostream &os) {
  const RunReport &ra = *a.report, &rb = *b.report;
  json::OStream out(os, 2);
  auto side = [&](StringRef key, const DiffSide &s) {
    out.attributeObject(key, [&] {
      out.attribute("name", s.report->run->name);
      out.attribute("file", s.file);
      out.attribute("strategy", s.report->run->strategy->name);
      out.attribute("devices", s.report->run->cluster->getNumDevices());
    });
  };
  auto rows = [&](StringRef key, ArrayRef<Row> list) {
    out.attributeObject(key, [&] {
      for (const Row &row : list)
        out.attributeObject(row.figure, [&] {
          out.attribute("a", row.known ? number(row.a) : nullptr);
          out.attribute("b", row.known ? number(row.b) : nullptr);
          out.attribute("delta", row.known ? number(row.b - row.a) : nullptr);
          out.attribute("ratio", row.known ? ratio(row.a, row.b) : nullptr);
        });
    });
  };
  auto comm = [&](StringRef key, ArrayRef<CommTotals> totals) {
    out.attributeArray(key, [&] {
      for (const CommTotals &total : totals)
        out.object([&] {
          out.attribute("key", total.key);
          out.attribute("a_count", number(total.countA));
          out.attribute("b_count", number(total.countB));
          out.attribute("a_sent_bytes", number(total.sentA));
          out.attribute("b_sent_bytes", number(total.sentB));
          out.attribute("delta_sent_bytes", number(total.sentB - total.sentA));
          out.attribute("sent_ratio", ratio(total.sentA, total.sentB));
          out.attribute("a_time_s", number(total.timeA));
          out.attribute("b_time_s", number(total.timeB));
          out.attribute("delta_time_s", number(total.timeB - total.timeA));
          out.attribute("time_ratio", ratio(total.timeA, total.timeB));
        });
    });
  };
  bool activationsKnown =
      ra.analysis.memory.activationsKnown && rb.analysis.memory.activationsKnown;
  out.object([&] {
    out.attribute("schema_version", kJsonSchemaVersion);
    out.attribute("kind", "diff");
    side("a", a);
    side("b", b);
    out.attributeObject("memory", [&] {
      rows("device", memoryRows(ra.analysis.memory.device, rb.analysis.memory.device,
                                activationsKnown, true));
      rows("host",
           memoryRows(ra.analysis.memory.host, rb.analysis.memory.host, activationsKnown, true));
    });
    out.attributeObject("communication", [&] {
      comm("per_axis", perAxis(ra, rb));
      comm("per_link", totalsBy(ra, rb, linkKey));
      comm("per_collective", totalsBy(ra, rb, collectiveKey));
    });
    rows("time", timeRows(ra, rb));
  });
  out.flush();
  os << "\n";
}

void printDiff(const DiffSide &a, const DiffSide &b, Format format, raw_ostream &os) {
  std::string title =
      fmt::format("placec diff: {} -> {}", a.report->run->name, b.report->run->name);
  switch (format) {
  case Format::Text:
    renderSectionsText(title, buildDiffSections(a, b), os);
    return;
  case Format::Markdown:
    renderSectionsMarkdown(title, buildDiffSections(a, b), os);
    return;
  case Format::Html:
    renderSectionsHtml(title, buildDiffSections(a, b), os);
    return;
  case Format::Json:
    printJsonDiff(a, b, os);
    return;
  }
}

} // namespace placec::report

// `placec fidelity`: every run that records a measured step time or peak memory, predicted
// against measured, with the mean and largest error of each set of runs (docs/fidelity.md).
#include "ReportSupport.h"
#include "placec/passes/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>

using namespace llvm;

namespace placec::report {

namespace {

/// The largest error of placec's accuracy goal, for the step time and for the peak memory
/// (docs/fidelity.md): each summary counts the rows beyond it.
constexpr double kGoalMaxError = 0.10;

/// Mean and largest absolute relative error over the rows with a value, the mean signed error
/// (how far a source's rows lean one way), and how many rows miss the goal's largest error.
struct ErrorSummary {
  unsigned count = 0, overGoal = 0;
  double sum = 0, signedSum = 0, max = 0;
  std::string worst;
  void add(double error, const std::string &name) {
    ++count;
    if (std::fabs(error) > kGoalMaxError)
      ++overGoal;
    sum += std::fabs(error);
    signedSum += error;
    if (std::fabs(error) >= max) {
      max = std::fabs(error);
      worst = name;
    }
  }
  double mean() const { return count ? sum / count : 0; }
  double signedMean() const { return count ? signedSum / count : 0; }
};

std::string signedPercent(double fraction) { return fmt::format("{:+.1f} %", 100 * fraction); }

} // namespace

double FidelityRow::getStepError() const {
  return measuredStep ? (predictedTime.stepSeconds - *measuredStep) / *measuredStep : 0;
}

double FidelityRow::getMemoryError() const {
  return measuredMemory ? (predictedMemory - *measuredMemory) / *measuredMemory : 0;
}

bool printFidelity(ArrayRef<FidelityRow> rows, const FidelityLimits &limits, bool json,
                   raw_ostream &os) {
  std::map<std::string, ErrorSummary> stepBySet, memoryBySet, stepByFile, stepByDevice, stepByModel;
  ErrorSummary step, memory;
  for (const FidelityRow &row : rows) {
    std::string name = row.file + ":" + row.run;
    if (row.measuredStep) {
      step.add(row.getStepError(), name);
      stepBySet[row.set].add(row.getStepError(), name);
      stepByFile[row.file].add(row.getStepError(), row.run);
      stepByDevice[row.device].add(row.getStepError(), name);
      stepByModel[row.modelKind].add(row.getStepError(), name);
    }
    if (row.measuredMemory) {
      memory.add(row.getMemoryError(), name);
      memoryBySet[row.set].add(row.getMemoryError(), name);
    }
  }
  bool stepOk = (!limits.maxMeanStepError || step.mean() <= *limits.maxMeanStepError) &&
                (!limits.maxStepError || step.max <= *limits.maxStepError);
  bool memoryOk = !limits.maxMemoryError || memory.max <= *limits.maxMemoryError;

  if (json) {
    json::OStream out(os, 2);
    auto summary = [&](StringRef key, const ErrorSummary &value) {
      out.attributeObject(key, [&] {
        out.attribute("rows", value.count);
        out.attribute("mean_abs_error", value.mean());
        out.attribute("mean_error", value.signedMean());
        out.attribute("max_abs_error", value.max);
        out.attribute("worst", value.worst);
        out.attribute("rows_over_10_percent", value.overGoal);
      });
    };
    out.object([&] {
      out.attributeArray("rows", [&] {
        for (const FidelityRow &row : rows)
          out.object([&] {
            out.attribute("set", row.set);
            out.attribute("file", row.file);
            out.attribute("run", row.run);
            out.attribute("devices", row.devices);
            out.attribute("device", row.device);
            out.attribute("model_kind", row.modelKind);
            const analysis::TimeReport &time = row.predictedTime;
            out.attribute("predicted_step_s", time.stepSeconds);
            out.attribute("predicted_compute_s", time.computeSeconds);
            out.attribute("predicted_optimizer_s", time.optimizerSeconds);
            out.attribute("predicted_exposed_comm_s", time.exposedCommSeconds);
            out.attribute("predicted_bubble_s", time.bubbleSeconds);
            if (row.measuredStep) {
              out.attribute("measured_step_s", *row.measuredStep);
              out.attribute("step_error", row.getStepError());
            }
            out.attribute("predicted_memory_bytes", row.predictedMemory);
            if (row.measuredMemory) {
              out.attribute("measured_memory_bytes", *row.measuredMemory);
              out.attribute("memory_error", row.getMemoryError());
            }
          });
      });
      summary("step", step);
      summary("memory", memory);
      out.attributeObject("step_by_set", [&] {
        for (const auto &[set, value] : stepBySet)
          summary(set, value);
      });
      out.attributeObject("step_by_file", [&] {
        for (const auto &[file, value] : stepByFile)
          summary(file, value);
      });
      out.attributeObject("step_by_device", [&] {
        for (const auto &[device, value] : stepByDevice)
          summary(device, value);
      });
      out.attributeObject("step_by_model", [&] {
        for (const auto &[kind, value] : stepByModel)
          summary(kind, value);
      });
      out.attribute("within_limits", stepOk && memoryOk);
    });
    os << "\n";
    return stepOk && memoryOk;
  }

  Table table;
  table.title = "Predicted against measured";
  table.header = {"set",      "file",  "run",    "devices",  "device", "step",
                  "measured", "error", "memory", "measured", "error"};
  table.leftColumns = {1, 2, 4};
  for (const FidelityRow &row : rows)
    table.addRow({row.set, row.file, row.run, formatInteger(static_cast<double>(row.devices)),
                  row.device, formatSeconds(row.predictedTime.stepSeconds),
                  row.measuredStep ? formatSeconds(*row.measuredStep) : "-",
                  row.measuredStep ? signedPercent(row.getStepError()) : "-",
                  formatBytes(row.predictedMemory),
                  row.measuredMemory ? formatBytes(*row.measuredMemory) : "-",
                  row.measuredMemory ? signedPercent(row.getMemoryError()) : "-"});
  table.notes.push_back("error = (predicted - measured) / measured; memory is the peak per device "
                        "of the fullest stage; GB = 10^9 bytes");
  renderText(table, os);
  os << "\n";
  // Each source's rows together: a source whose rows all lean one way (a framework, a software
  // era, a system) shows it in its mean signed error; each device's, for a device preset whose
  // constants lean one way; and each kind of model's, for what the model leaves out of one.
  auto byGroup = [&](const std::map<std::string, ErrorSummary> &groups, StringRef title,
                     StringRef what, StringRef note) {
    if (groups.size() < 2)
      return;
    Table table;
    table.title = title.str();
    table.header = {what.str(), "rows", "mean |error|", "mean error", "max |error|", "worst run"};
    table.leftColumns = {0, 5};
    for (const auto &[group, value] : groups)
      table.addRow({group, formatInteger(static_cast<double>(value.count)),
                    fmt::format("{:.1f} %", 100 * value.mean()), signedPercent(value.signedMean()),
                    fmt::format("{:.1f} %", 100 * value.max), value.worst});
    table.notes.push_back(note.str());
    renderText(table, os);
    os << "\n";
  };
  byGroup(stepByFile, "Step time by source", "file",
          "mean error: the mean of the signed errors; negative, the source's steps are predicted "
          "faster than measured");
  byGroup(stepByDevice, "Step time by device", "device",
          "mean error: the mean of the signed errors; negative, the device's steps are predicted "
          "faster than measured");
  byGroup(stepByModel, "Step time by model", "model",
          "mean error: the mean of the signed errors; negative, the steps of such models are "
          "predicted faster than measured");
  auto line = [&](StringRef what, const ErrorSummary &value) {
    if (value.count == 0)
      return;
    os << fmt::format("{}: {} rows, mean |error| {:.1f} %, max |error| {:.1f} % ({}), {} over "
                      "{:.0f} %\n",
                      what.str(), value.count, 100 * value.mean(), 100 * value.max, value.worst,
                      value.overGoal, 100 * kGoalMaxError);
  };
  for (const auto &[set, value] : stepBySet)
    line("step time, " + set, value);
  line("step time, all", step);
  for (const auto &[set, value] : memoryBySet)
    line("peak memory, " + set, value);
  line("peak memory, all", memory);
  if (limits.maxMeanStepError || limits.maxStepError || limits.maxMemoryError) {
    os << (stepOk && memoryOk ? "within the limits" : "OUTSIDE the limits");
    std::vector<std::string> parts;
    if (limits.maxMeanStepError)
      parts.push_back(fmt::format("mean step error {:.1f} %", 100 * *limits.maxMeanStepError));
    if (limits.maxStepError)
      parts.push_back(fmt::format("max step error {:.1f} %", 100 * *limits.maxStepError));
    if (limits.maxMemoryError)
      parts.push_back(fmt::format("max memory error {:.1f} %", 100 * *limits.maxMemoryError));
    os << " (" << llvm::join(parts, ", ") << ")\n";
  }
  return stepOk && memoryOk;
}

std::vector<FidelityFitPoint> getFidelityFitGrid() {
  // Integers over their steps, so that 0.85 is the same double as the code's constant.
  constexpr int kTileStep = 32, kTileMax = 512, kEfficiencyMin = 70, kEfficiencyMax = 100;
  std::vector<FidelityFitPoint> grid;
  for (int tile = 0; tile <= kTileMax; tile += kTileStep)
    for (int percent = kEfficiencyMin; percent <= kEfficiencyMax; ++percent) {
      FidelityFitPoint point;
      point.tileOverheadK = tile;
      point.kernelEfficiency = percent / 100.0;
      grid.push_back(point);
    }
  return grid;
}

/// The set whose rows the constants are fitted on (docs/fidelity.md); the other rows are held out.
constexpr StringRef kCalibrationSet = "calibration";

void scoreFidelityFit(FidelityFitPoint &point, ArrayRef<FidelityRow> rows) {
  bool calibrated = llvm::any_of(
      rows, [](const FidelityRow &row) { return row.measuredStep && row.set == kCalibrationSet; });
  ErrorSummary fitted, heldOut;
  for (const FidelityRow &row : rows)
    if (row.measuredStep)
      (!calibrated || row.set == kCalibrationSet ? fitted : heldOut)
          .add(row.getStepError(), row.file + ":" + row.run);
  auto errors = [](const ErrorSummary &summary) {
    return FidelityErrors{summary.count, summary.overGoal, summary.mean(), summary.max,
                          summary.worst};
  };
  point.fittedOn = calibrated ? kCalibrationSet.str() : "all";
  point.fitted = errors(fitted);
  point.heldOut = errors(heldOut);
}

void printFidelityFit(ArrayRef<FidelityFitPoint> points, bool json, raw_ostream &os) {
  auto better = [](const FidelityFitPoint &a, const FidelityFitPoint &b) {
    return a.fitted.meanError < b.fitted.meanError ||
           (a.fitted.meanError == b.fitted.meanError && a.fitted.maxError < b.fitted.maxError);
  };
  const FidelityFitPoint *best = nullptr, *code = nullptr;
  // Each tile overhead's best kernel efficiency, in the grid's order.
  std::vector<const FidelityFitPoint *> bestByTile;
  for (const FidelityFitPoint &point : points) {
    if (!best || better(point, *best))
      best = &point;
    if (point.tileOverheadK == cost::kGemmTileOverheadK &&
        point.kernelEfficiency == cost::kTrainingKernelEfficiency)
      code = &point;
    if (bestByTile.empty() || bestByTile.back()->tileOverheadK != point.tileOverheadK)
      bestByTile.push_back(&point);
    else if (better(point, *bestByTile.back()))
      bestByTile.back() = &point;
  }
  if (!best)
    return;
  bool heldOut = best->heldOut.rows > 0;

  if (json) {
    json::OStream out(os, 2);
    auto errors = [&](StringRef key, const FidelityErrors &value) {
      out.attributeObject(key, [&] {
        out.attribute("rows", value.rows);
        out.attribute("mean_abs_error", value.meanError);
        out.attribute("max_abs_error", value.maxError);
        out.attribute("worst", value.worst);
        out.attribute("rows_over_10_percent", value.overGoal);
      });
    };
    auto attributes = [&](const FidelityFitPoint &point) {
      out.attribute("tile_overhead_k", point.tileOverheadK);
      out.attribute("kernel_efficiency", point.kernelEfficiency);
      errors("fitted", point.fitted);
      if (heldOut)
        errors("held_out", point.heldOut);
    };
    out.object([&] {
      out.attribute("fitted_on", best->fittedOn);
      out.attributeArray("grid", [&] {
        for (const FidelityFitPoint &point : points)
          out.object([&] { attributes(point); });
      });
      out.attributeObject("best", [&] { attributes(*best); });
      if (code)
        out.attributeObject("code", [&] { attributes(*code); });
      out.attribute("code_is_best", code == best);
    });
    os << "\n";
    return;
  }

  auto cells = [&](const FidelityFitPoint &point) {
    std::vector<std::string> cells = {fmt::format("{:.2f} %", 100 * point.fitted.meanError),
                                      fmt::format("{:.1f} %", 100 * point.fitted.maxError),
                                      formatInteger(static_cast<double>(point.fitted.overGoal))};
    if (heldOut) {
      cells.push_back(fmt::format("{:.2f} %", 100 * point.heldOut.meanError));
      cells.push_back(fmt::format("{:.1f} %", 100 * point.heldOut.maxError));
      cells.push_back(formatInteger(static_cast<double>(point.heldOut.overGoal)));
    }
    return cells;
  };
  std::vector<std::string> errorHeader = {"mean |error|", "max |error|", "over 10 %"};
  if (heldOut)
    llvm::append_range(errorHeader, std::vector<std::string>{"held out: mean |error|",
                                                             "max |error|", "over 10 %"});
  os << fmt::format(
      "The cost model's two fitted constants over {} {}rows with a measured step{}: the tile "
      "overhead (kGemmTileOverheadK) from {} to {}, the kernel efficiency "
      "(kTrainingKernelEfficiency) from {:.2f} to {:.2f} in steps of 0.01; the code has {} and "
      "{:.2f}.\n\n",
      best->fitted.rows, best->fittedOn == kCalibrationSet ? "calibration " : "",
      heldOut ? fmt::format(", the {} held-out rows shown beside, not fitted", best->heldOut.rows)
              : std::string(),
      formatInteger(points.front().tileOverheadK), formatInteger(points.back().tileOverheadK),
      points.front().kernelEfficiency, points.back().kernelEfficiency,
      formatInteger(cost::kGemmTileOverheadK), cost::kTrainingKernelEfficiency);
  Table byTile;
  byTile.title = "The best kernel efficiency at each tile overhead";
  byTile.header = {"tile overhead", "kernel efficiency"};
  llvm::append_range(byTile.header, errorHeader);
  for (const FidelityFitPoint *point : bestByTile) {
    std::vector<std::string> row = {formatInteger(point->tileOverheadK),
                                    fmt::format("{:.2f}", point->kernelEfficiency)};
    llvm::append_range(row, cells(*point));
    byTile.addRow(row);
  }
  renderText(byTile, os);
  os << "\n";
  Table byEfficiency;
  byEfficiency.title = fmt::format("Each kernel efficiency at the code's tile overhead, {}",
                                   formatInteger(cost::kGemmTileOverheadK));
  byEfficiency.header = {"kernel efficiency"};
  llvm::append_range(byEfficiency.header, errorHeader);
  for (const FidelityFitPoint &point : points) {
    if (point.tileOverheadK != cost::kGemmTileOverheadK)
      continue;
    std::vector<std::string> row = {fmt::format("{:.2f}", point.kernelEfficiency)};
    llvm::append_range(row, cells(point));
    byEfficiency.addRow(row);
  }
  if (!byEfficiency.rows.empty()) {
    renderText(byEfficiency, os);
    os << "\n";
  }
  auto line = [&](StringRef what, const FidelityFitPoint &point) {
    os << fmt::format("{}: tile overhead {}, kernel efficiency {:.2f}: mean |error| {:.2f} %, max "
                      "|error| {:.1f} % ({}), {} over 10 %",
                      what.str(), formatInteger(point.tileOverheadK), point.kernelEfficiency,
                      100 * point.fitted.meanError, 100 * point.fitted.maxError, point.fitted.worst,
                      point.fitted.overGoal);
    if (heldOut)
      os << fmt::format("; held out {:.2f} %, max {:.1f} %, {} over 10 %",
                        100 * point.heldOut.meanError, 100 * point.heldOut.maxError,
                        point.heldOut.overGoal);
    os << "\n";
  };
  line("best of the grid", *best);
  if (code) {
    line("the code's constants", *code);
    os << (code == best ? "the code's constants are the best of the grid\n"
                        : "the code's constants are NOT the best of the grid\n");
  }
}

} // namespace placec::report

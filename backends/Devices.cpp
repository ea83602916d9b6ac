// `placec devices`: the device presets a cluster can name (`device = h100_sxm;`), with the
// datasheet figures each fills in and the calibration the cost model takes for it.
#include "placec/ir/Devices.h"

#include "ReportSupport.h"
#include "placec/backends/Report.h"
#include "placec/passes/CostModel.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

using namespace llvm;

namespace placec::report {

namespace {

/// A fraction of a peak, or `-` where the device has no such rate.
std::string formatEfficiency(double fraction) {
  return fraction > 0 ? fmt::format("{:.3f}", fraction) : "-";
}

json::Value jsonOrNull(double value) {
  return value > 0 ? json::Value(value) : json::Value(nullptr);
}

} // namespace

void printDevices(bool json, raw_ostream &os) {
  ArrayRef<ir::DevicePreset> presets = ir::getDevicePresets();
  if (json) {
    json::Array devices;
    for (const ir::DevicePreset &preset : presets) {
      cost::GemmEfficiency gemm = cost::getGemmEfficiency(preset);
      devices.push_back(json::Object{
          {"name", preset.name},
          {"description", preset.description},
          {"family", ir::toString(preset.family)},
          {"memory_bytes", preset.memory},
          {"peak_bf16_flops", preset.peakBf16},
          {"peak_tf32_flops", preset.peakTf32},
          {"peak_fp8_flops", jsonOrNull(preset.peakFp8)},
          {"peak_fp4_flops", jsonOrNull(preset.peakFp4)},
          {"hbm_bandwidth", preset.hbmBandwidth},
          {"intra_bandwidth", preset.intraBandwidth},
          {"inter_bandwidth", preset.interBandwidth},
          {"host_bandwidth", preset.hostBandwidth},
          {"host_memory_bandwidth_per_device", preset.hostMemoryBandwidthPerDevice},
          {"compute_units", preset.computeUnits},
          {"latency_s", preset.latency},
          {"gemm_efficiency_bf16", gemm.bf16},
          {"gemm_efficiency_fp8", preset.peakFp8 > 0 ? jsonOrNull(gemm.fp8) : nullptr},
          {"source", preset.source},
      });
    }
    os << formatv("{0:2}", json::Value(json::Object{{"devices", std::move(devices)}})) << "\n";
    return;
  }

  Table table;
  table.title = "Device presets";
  table.header = {"name", "device", "family",  "memory",  "BF16",      "FP8",     "FP4",
                  "HBM",  "NVLink", "network", "SMs/CUs", "GEMM BF16", "GEMM FP8"};
  table.leftColumns = {1, 2};
  for (const ir::DevicePreset &preset : presets) {
    cost::GemmEfficiency gemm = cost::getGemmEfficiency(preset);
    table.addRow({preset.name, preset.description, ir::toString(preset.family).str(),
                  formatCapacity(preset.memory), formatFlopRate(preset.peakBf16),
                  preset.peakFp8 > 0 ? formatFlopRate(preset.peakFp8) : "-",
                  preset.peakFp4 > 0 ? formatFlopRate(preset.peakFp4) : "-",
                  formatBandwidth(preset.hbmBandwidth), formatBandwidth(preset.intraBandwidth),
                  formatBandwidth(preset.interBandwidth), std::to_string(preset.computeUnits),
                  formatEfficiency(gemm.bf16),
                  preset.peakFp8 > 0 ? formatEfficiency(gemm.fp8) : "-"});
  }
  table.notes = {
      "per device: dense tensor-core peaks, HBM bandwidth, NVLink (or Infinity Fabric) and "
      "network bandwidth each way; a cluster's own fields override them (docs/language.md)",
      fmt::format("GEMM BF16 / FP8: the fraction of that peak a large GEMM reaches (MAMF), the "
                  "device's own measurement or its family's; the cost model multiplies it by the "
                  "training-kernel factor (docs/plan.md); NVFP4 products (mixed(fp4)) take {:.3f} "
                  "of the time of the same products in FP8, Transformer Engine's measurement on "
                  "a B300",
                  cost::kNvfp4GemmTimeRatio)};
  renderText(table, os);
  os << "\nSources\n";
  for (const ir::DevicePreset &preset : presets)
    os << "  " << preset.name << ": " << preset.source << "\n";
}

} // namespace placec::report

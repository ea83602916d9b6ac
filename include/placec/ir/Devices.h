// Device presets: the datasheet figures of the accelerators a cluster may name with
// `device = h100_sxm;`, and the families whose calibration constants the cost model keeps. A
// device is data, never a branch in a formula (docs/plan.md, "The cost model").
#ifndef PLACEC_IR_DEVICES_H
#define PLACEC_IR_DEVICES_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace placec::ir {

/// An architecture generation: the cost model's calibration constants (GEMM and attention
/// efficiency, achieved memory and link bandwidth) are kept per family.
enum class DeviceFamily { Ampere, Hopper, Blackwell, Cdna3, Cdna4 };
llvm::StringRef toString(DeviceFamily family);

/// One accelerator as its vendor's datasheet describes it. Rates are dense (no structured
/// sparsity); bandwidths are per device and per direction. The inter-node bandwidth is that of
/// the reference system's network (one NIC per GPU in DGX/HGX systems).
struct DevicePreset {
  const char *name;        ///< The name a cluster writes: `h100_sxm`.
  const char *description; ///< `NVIDIA H100 SXM5 80 GB`.
  DeviceFamily family;
  double memory;         ///< Bytes of device memory.
  double peakBf16;       ///< Dense BF16/FP16 tensor-core FLOP/s.
  double peakTf32;       ///< Dense TF32 tensor-core FLOP/s.
  double peakFp8;        ///< Dense FP8 tensor-core FLOP/s; 0 where the device has none.
  double hbmBandwidth;   ///< Bytes/s of device memory bandwidth.
  double intraBandwidth; ///< Bytes/s per direction to the other devices of a node.
  double interBandwidth; ///< Bytes/s per direction per device across nodes (typical system).
  double hostBandwidth;  ///< Bytes/s per direction over the host link (PCIe, NVLink-C2C).
  /// Bytes/s of host memory per device: the reference system's CPUs' DRAM bandwidth over its
  /// devices. A cluster's node gets this times its `devices_per_node`.
  double hostMemoryBandwidthPerDevice;
  int computeUnits;   ///< Streaming multiprocessors (NVIDIA) or compute units (AMD).
  double latency;     ///< Seconds per collective step (alpha) of the typical system.
  const char *source; ///< Where the figures come from.
  /// Dense FP4 (NVFP4) tensor-core FLOP/s; 0 where the device has none.
  double peakFp4 = 0;
};

/// Whether a family's FP8 tensor-core products take their operands in one layout only (Hopper's:
/// cuBLASLt's FP8 products on sm90 need A transposed and B not, "TN"), so that an FP8 copy of a
/// tensor that two products read along different dimensions keeps its transpose beside it:
/// Transformer Engine's Float8Tensor holds `_data` and `_transpose` there, and one buffer for both
/// usages on Blackwell (transformer_engine/pytorch/tensor/float8_tensor.py, inner_tensor_specs,
/// after is_non_tn_fp8_gemm_supported). AMD's CDNA products are not known to need it: false.
bool keepsFp8Transposes(DeviceFamily family);

/// Every preset, in a fixed order.
llvm::ArrayRef<DevicePreset> getDevicePresets();

/// The preset named `name`, or null.
const DevicePreset *findDevicePreset(llvm::StringRef name);

} // namespace placec::ir

#endif // PLACEC_IR_DEVICES_H

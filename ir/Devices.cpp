// The device presets a cluster names with `device = …;`: datasheet figures, each cited.
#include "placec/ir/Devices.h"

#include "llvm/ADT/STLExtras.h"

using namespace llvm;

namespace placec::ir {

bool keepsFp8Transposes(DeviceFamily family) { return family == DeviceFamily::Hopper; }

StringRef toString(DeviceFamily family) {
  switch (family) {
  case DeviceFamily::Ampere:
    return "ampere";
  case DeviceFamily::Hopper:
    return "hopper";
  case DeviceFamily::Blackwell:
    return "blackwell";
  case DeviceFamily::Cdna3:
    return "cdna3";
  case DeviceFamily::Cdna4:
    return "cdna4";
  }
  return "?";
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;
constexpr double kTFLOPS = 1e12;
constexpr double kUs = 1e-6;
// NCCL's latency of one ring step over the network, Simple protocol (src/graph/tuning.cc).
constexpr double kNetworkStep = 9.6 * kUs;

// Conventions. Memory is the datasheet's capacity read as GiB, which is what the devices report
// (an A100 80GB has 81920 MiB). Rates are the datasheets' dense figures (half the "with
// sparsity" ones). Link bandwidths are per direction: NVLink's "600 GB/s" on A100 and "900 GB/s"
// on H100/H200 are bidirectional totals, so 300 and 450 GB/s each way; PCIe Gen4/Gen5 x16 are
// 32/64 GB/s each way. Inter-node bandwidth is the reference system's: DGX A100 has one 200 Gb/s
// HDR InfiniBand NIC per GPU (25 GB/s), DGX H100/H200/B200 one 400 Gb/s NDR NIC per GPU (50 GB/s),
// DGX B300 and GB300 NVL72 one 800 Gb/s ConnectX-8 per GPU (100 GB/s).
// Host memory bandwidth is the reference system's over its devices: DGX A100 has two AMD EPYC 7742
// with eight DDR4-3200 channels each (409.6 GB/s for 8 GPUs), DGX H100/H200 two Xeon 8480C with
// eight DDR5-4800 channels each (614.4 GB/s), DGX B200 two Xeon 8570 with eight DDR5-5600 channels
// each (716.8 GB/s), DGX B300 two Xeon 6776P with eight DDR5-6400 channels each (819.2 GB/s); the
// MI300X platform two EPYC 9654 with twelve DDR5-4800 channels each
// (921.6 GB/s); GB200 NVL72 one Grace per two GPUs (LPDDR5X at up to 18.4 TB/s for 72 GPUs), GB300
// NVL72 the same (up to 14 TB/s for 72 GPUs).
//
// GB200 (GB300) is the Blackwell (Blackwell Ultra) GPU of a GB200 (GB300) NVL72 rack, whose 72 GPUs
// share one NVLink domain: a
// cluster of them writes the GPUs it uses per rack as `devices_per_node` (NVIDIA's datasheet gives
// the rack's totals; per GPU they are a 72nd, the rates' sparse figures halved).
// The collective step latency is NCCL's for a ring step over the network (9.6 us); a cluster may
// override it.
const DevicePreset kPresets[] = {
    {"a100_40gb", "NVIDIA A100 SXM4 40 GB", DeviceFamily::Ampere, 40 * kGiB, 312 * kTFLOPS,
     156 * kTFLOPS, 0, 1555 * kGB, 300 * kGB, 25 * kGB, 32 * kGB, 409.6 / 8 * kGB, 108,
     kNetworkStep,
     "NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS, TF32 156 TFLOPS, 40 GB "
     "HBM2 at 1,555 GB/s, NVLink 600 GB/s, PCIe Gen4 64 GB/s; 108 SMs (NVIDIA A100 architecture "
     "whitepaper); DGX A100 user guide: 8x 200 Gb/s HDR InfiniBand"},
    {"a100_80gb", "NVIDIA A100 SXM4 80 GB", DeviceFamily::Ampere, 80 * kGiB, 312 * kTFLOPS,
     156 * kTFLOPS, 0, 2039 * kGB, 300 * kGB, 25 * kGB, 32 * kGB, 409.6 / 8 * kGB, 108,
     kNetworkStep,
     "NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS, TF32 156 TFLOPS, 80 GB "
     "HBM2e at 2,039 GB/s, NVLink 600 GB/s, PCIe Gen4 64 GB/s; 108 SMs; DGX A100: 8x 200 Gb/s "
     "HDR InfiniBand"},
    {"h100_sxm", "NVIDIA H100 SXM5 80 GB", DeviceFamily::Hopper, 80 * kGiB, 989.4 * kTFLOPS,
     494.7 * kTFLOPS, 1978.9 * kTFLOPS, 3350 * kGB, 450 * kGB, 50 * kGB, 64 * kGB, 614.4 / 8 * kGB,
     132, kNetworkStep,
     "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM: BF16 1,979 / FP8 3,958 / TF32 989 "
     "TFLOPS with sparsity, 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s; 132 "
     "SMs (NVIDIA H100 architecture whitepaper); DGX H100: 8x 400 Gb/s ConnectX-7"},
    {"h100_pcie", "NVIDIA H100 PCIe 80 GB", DeviceFamily::Hopper, 80 * kGiB, 756 * kTFLOPS,
     378 * kTFLOPS, 1513 * kTFLOPS, 2000 * kGB, 64 * kGB, 25 * kGB, 64 * kGB, 614.4 / 8 * kGB, 114,
     kNetworkStep,
     "NVIDIA H100 Tensor Core GPU datasheet (2023), PCIe: BF16 1,513 / FP8 3,026 / TF32 756 "
     "TFLOPS with sparsity, 80 GB HBM2e at 2 TB/s, PCIe Gen5 128 GB/s (the devices of a node "
     "talk over PCIe; NVLink bridges join pairs only); 114 SMs; one 400 Gb/s NIC per two GPUs "
     "in NVIDIA's PCIe reference configuration"},
    {"h200", "NVIDIA H200 SXM 141 GB", DeviceFamily::Hopper, 141 * kGiB, 989.4 * kTFLOPS,
     494.7 * kTFLOPS, 1978.9 * kTFLOPS, 4800 * kGB, 450 * kGB, 50 * kGB, 64 * kGB, 614.4 / 8 * kGB,
     132, kNetworkStep,
     "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM: BF16 1,979 / FP8 3,958 / TF32 989 "
     "TFLOPS with sparsity, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s; 132 "
     "SMs; HGX H200: 8x 400 Gb/s ConnectX-7"},
    {"b200", "NVIDIA B200 180 GB", DeviceFamily::Blackwell, 180 * kGiB, 2250 * kTFLOPS,
     1125 * kTFLOPS, 4500 * kTFLOPS, 8000 * kGB, 900 * kGB, 50 * kGB, 64 * kGB, 716.8 / 8 * kGB,
     148, kNetworkStep,
     "NVIDIA DGX B200 / HGX B200 datasheets (2024), per system of 8 GPUs: FP16/BF16 36, TF32 "
     "18, FP8 72 PFLOPS with sparsity, 1,440 GB HBM3e at 64 TB/s, NVLink 5 at 1.8 TB/s per GPU, "
     "8x 400 Gb/s ConnectX-7; 148 SMs; FP4 9,000 TFLOPS dense (Bekman's \"Machine Learning "
     "Engineering\", compute/accelerator, commit 744d01e, its fp4 column)",
     9000 * kTFLOPS},
    {"gb200", "NVIDIA GB200 NVL72 (one Blackwell GPU)", DeviceFamily::Blackwell, 186 * kGiB,
     2500 * kTFLOPS, 1250 * kTFLOPS, 5000 * kTFLOPS, 8000 * kGB, 900 * kGB, 50 * kGB, 225 * kGB,
     18400.0 / 72 * kGB, 148, kNetworkStep,
     "NVIDIA GB200 NVL72 datasheet (2024), per rack of 72 GPUs: FP16/BF16 360, TF32 180, FP8 720 "
     "PFLOPS with sparsity, 13.4 TB HBM3e at 576 TB/s, NVLink 130 TB/s (1.8 TB/s per GPU), "
     "NVLink-C2C 900 GB/s (both directions) between each Grace and its two GPUs (225 GB/s each "
     "way per GPU), LPDDR5X at up to 18.4 TB/s; 72x 400 Gb/s ConnectX-7 for the compute fabric; "
     "the B200 GPU's 148 SMs; FP4 1,440 PFLOPS with sparsity (10,000 TFLOPS per GPU dense, as "
     "Bekman's table at commit 744d01e gives it)",
     10000 * kTFLOPS},
    {"b300", "NVIDIA B300 288 GB (Blackwell Ultra)", DeviceFamily::Blackwell, 288 * kGiB,
     2250 * kTFLOPS, 1125 * kTFLOPS, 4500 * kTFLOPS, 8000 * kGB, 900 * kGB, 100 * kGB, 64 * kGB,
     819.2 / 8 * kGB, 160, kNetworkStep,
     "NVIDIA DGX B300 datasheet (2025) as tabulated, dense, in Bekman's \"Machine Learning "
     "Engineering\" (compute/accelerator, commit 744d01e): BF16 2,250, TF32 1,125, FP8 4,500 "
     "TFLOPS, 288 GB HBM3e at 8 TB/s; NVLink 5 at 1.8 TB/s per GPU; 8x 800 Gb/s ConnectX-8; two "
     "Xeon 6776P (eight DDR5-6400 channels each, PCIe Gen5 to the host); 160 SMs; FP4 12,600 "
     "TFLOPS (the same table's fp4 column, which gives NVFP4 15,000 apart)",
     12600 * kTFLOPS},
    {"gb300", "NVIDIA GB300 NVL72 (one Blackwell Ultra GPU)", DeviceFamily::Blackwell, 288 * kGiB,
     2500 * kTFLOPS, 1250 * kTFLOPS, 5000 * kTFLOPS, 8000 * kGB, 900 * kGB, 100 * kGB, 225 * kGB,
     14000.0 / 72 * kGB, 160, kNetworkStep,
     "NVIDIA GB300 NVL72 specifications (2025), per rack of 72 GPUs: FP16/BF16 360, TF32 180, "
     "FP8 720 PFLOPS with sparsity (per GPU dense 2,500, 1,250 and 5,000 TFLOPS, as Bekman's "
     "\"Machine Learning Engineering\" tabulates them at commit 744d01e), HBM3e at 576 TB/s "
     "(the B300 GPU's 288 GB of 12-high stacks; the rack's total is rounded to 20 TB), NVLink 130 "
     "TB/s (1.8 TB/s per GPU), NVLink-C2C 900 GB/s (both directions) "
     "between each Grace and its two GPUs, LPDDR5X at up to 14 TB/s, 72x 800 Gb/s ConnectX-8; "
     "the B300's 160 SMs; FP4 15,000 TFLOPS dense (Blackwell Ultra's 1.5 times the GB200's; "
     "Bekman's fp4 column)",
     15000 * kTFLOPS},
    {"mi300x", "AMD Instinct MI300X 192 GB", DeviceFamily::Cdna3, 192 * kGiB, 1307.4 * kTFLOPS,
     653.7 * kTFLOPS, 2614.9 * kTFLOPS, 5300 * kGB, 448 * kGB, 50 * kGB, 64 * kGB, 921.6 / 8 * kGB,
     304, kNetworkStep,
     "AMD Instinct MI300X data sheet (2023): BF16 1,307.4, TF32 653.7, FP8 2,614.9 TFLOPS "
     "dense, 192 GB HBM3 at 5.3 TB/s, 304 CUs, Infinity Fabric 7 links of 128 GB/s (896 GB/s "
     "aggregate, both directions), PCIe Gen5 x16; 8x 400 Gb/s NICs per 8-GPU platform"},
    {"mi325x", "AMD Instinct MI325X 256 GB", DeviceFamily::Cdna3, 256 * kGiB, 1307.4 * kTFLOPS,
     653.7 * kTFLOPS, 2614.9 * kTFLOPS, 6000 * kGB, 448 * kGB, 50 * kGB, 64 * kGB, 1228.8 / 8 * kGB,
     304, kNetworkStep,
     "AMD Instinct MI325X data sheet (2024): the MI300X's compute (BF16 1,307.4, TF32 653.7, FP8 "
     "2,614.9 TFLOPS dense, 304 CUs) with 256 GB HBM3E at 6 TB/s; Infinity Fabric 7 links of 128 "
     "GB/s, PCIe Gen5 x16; 8x 400 Gb/s NICs per 8-GPU platform"},
    // MI350X and MI355X are one CDNA 4 die at two clocks (2,200 and 2,400 MHz: 1,024 matrix cores
    // of 512 BF16 FMAs a clock give 2,306.9 and 2,516.6 TFLOPS, which AMD rounds to 2.3 and 2.5
    // PFLOPS). CDNA 4 has no TF32: an fp32 run's products take the FP32 matrix rate. Their FP4 is
    // MXFP4, not the NVFP4 that Place's mixed(fp4) names, so the presets give no FP4 rate.
    {"mi350x", "AMD Instinct MI350X 288 GB", DeviceFamily::Cdna4, 288 * kGiB, 2306.9 * kTFLOPS,
     144.2 * kTFLOPS, 4613.7 * kTFLOPS, 8000 * kGB, 537.6 * kGB, 50 * kGB, 64 * kGB,
     1228.8 / 8 * kGB, 256, kNetworkStep,
     "AMD Instinct MI350X data sheet (2025): BF16 2.3, OCP-FP8 4.6 PFLOPS dense, FP32 matrix 144.2 "
     "TFLOPS, 288 GB HBM3E at 8 TB/s, 256 CUs at up to 2,200 MHz, Infinity Fabric 7 links of "
     "153.6 GB/s (1,075.2 GB/s aggregate, both directions), PCIe Gen5 x16; 8x 400 Gb/s NICs per "
     "8-GPU platform"},
    {"mi355x", "AMD Instinct MI355X 288 GB", DeviceFamily::Cdna4, 288 * kGiB, 2516.6 * kTFLOPS,
     157.3 * kTFLOPS, 5033.2 * kTFLOPS, 8000 * kGB, 537.6 * kGB, 50 * kGB, 64 * kGB,
     1228.8 / 8 * kGB, 256, kNetworkStep,
     "AMD Instinct MI355X data sheet (2025): BF16 2.5, OCP-FP8 5.0 PFLOPS dense (2,516.6 and "
     "5,033.2 TFLOPS at 2,400 MHz, as Bekman's \"Machine Learning Engineering\", compute/"
     "accelerator, commit 744d01e, derives them), FP32 matrix 157.3 TFLOPS, 288 GB HBM3E at 8 "
     "TB/s, 256 CUs, Infinity Fabric 7 links of 153.6 GB/s (1,075.2 GB/s aggregate, both "
     "directions), PCIe Gen5 x16; 8x 400 Gb/s NICs per 8-GPU platform"},
};

} // namespace

ArrayRef<DevicePreset> getDevicePresets() { return kPresets; }

const DevicePreset *findDevicePreset(StringRef name) {
  for (const DevicePreset &preset : kPresets)
    if (name == preset.name)
      return &preset;
  return nullptr;
}

} // namespace placec::ir

// The unit table of the Place language (docs/language.md, section 2).
#include "Units.h"

#include "llvm/ADT/StringSwitch.h"

using namespace llvm;

namespace placec {

StringRef describe(Dimension dimension) {
  switch (dimension) {
  case Dimension::None:
    return "a plain number";
  case Dimension::Bytes:
    return "a memory size";
  case Dimension::Bandwidth:
    return "a bandwidth";
  case Dimension::Rate:
    return "a compute rate";
  case Dimension::Time:
    return "a time";
  }
  return "a value";
}

StringRef example(Dimension dimension) {
  switch (dimension) {
  case Dimension::None:
    return "8";
  case Dimension::Bytes:
    return "80 GiB";
  case Dimension::Bandwidth:
    return "300 GB/s";
  case Dimension::Rate:
    return "312 TFLOPS";
  case Dimension::Time:
    return "5 us";
  }
  return "";
}

std::optional<UnitInfo> lookupUnit(StringRef unit) {
  constexpr double kKi = 1024.0;
  using Info = std::optional<UnitInfo>;
  return StringSwitch<Info>(unit)
      .Case("B", UnitInfo{Dimension::Bytes, 1})
      .Case("KB", UnitInfo{Dimension::Bytes, 1e3})
      .Case("MB", UnitInfo{Dimension::Bytes, 1e6})
      .Case("GB", UnitInfo{Dimension::Bytes, 1e9})
      .Case("TB", UnitInfo{Dimension::Bytes, 1e12})
      .Case("PB", UnitInfo{Dimension::Bytes, 1e15})
      .Case("KiB", UnitInfo{Dimension::Bytes, kKi})
      .Case("MiB", UnitInfo{Dimension::Bytes, kKi * kKi})
      .Case("GiB", UnitInfo{Dimension::Bytes, kKi * kKi * kKi})
      .Case("TiB", UnitInfo{Dimension::Bytes, kKi * kKi * kKi * kKi})
      .Case("PiB", UnitInfo{Dimension::Bytes, kKi * kKi * kKi * kKi * kKi})
      .Case("B/s", UnitInfo{Dimension::Bandwidth, 1})
      .Case("KB/s", UnitInfo{Dimension::Bandwidth, 1e3})
      .Case("MB/s", UnitInfo{Dimension::Bandwidth, 1e6})
      .Case("GB/s", UnitInfo{Dimension::Bandwidth, 1e9})
      .Case("TB/s", UnitInfo{Dimension::Bandwidth, 1e12})
      .Case("KiB/s", UnitInfo{Dimension::Bandwidth, kKi})
      .Case("MiB/s", UnitInfo{Dimension::Bandwidth, kKi * kKi})
      .Case("GiB/s", UnitInfo{Dimension::Bandwidth, kKi * kKi * kKi})
      .Case("Mbit/s", UnitInfo{Dimension::Bandwidth, 1e6 / 8})
      .Case("Gbit/s", UnitInfo{Dimension::Bandwidth, 1e9 / 8})
      .Case("Tbit/s", UnitInfo{Dimension::Bandwidth, 1e12 / 8})
      .Case("GFLOPS", UnitInfo{Dimension::Rate, 1e9})
      .Case("TFLOPS", UnitInfo{Dimension::Rate, 1e12})
      .Case("PFLOPS", UnitInfo{Dimension::Rate, 1e15})
      .Case("ns", UnitInfo{Dimension::Time, 1e-9})
      .Case("us", UnitInfo{Dimension::Time, 1e-6})
      .Case("ms", UnitInfo{Dimension::Time, 1e-3})
      .Case("s", UnitInfo{Dimension::Time, 1})
      .Default(std::nullopt);
}

} // namespace placec

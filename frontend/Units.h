// Units of the Place language: each unit word's dimension and its factor to the base unit.
#ifndef PLACEC_FRONTEND_UNITS_H
#define PLACEC_FRONTEND_UNITS_H

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace placec {

enum class Dimension { None, Bytes, Bandwidth, Rate, Time };

/// How the dimension is named in messages: "a memory size", "a bandwidth", …
llvm::StringRef describe(Dimension dimension);
/// An example quantity of the dimension, for messages: "80 GiB".
llvm::StringRef example(Dimension dimension);

struct UnitInfo {
  Dimension dimension;
  double factor; ///< To bytes, bytes/s, FLOP/s or seconds.
};

/// Looks up a unit word (`GiB`, `GB/s`, `Gbit/s`, `TFLOPS`, `us`); nullopt when unknown.
std::optional<UnitInfo> lookupUnit(llvm::StringRef unit);

} // namespace placec

#endif // PLACEC_FRONTEND_UNITS_H

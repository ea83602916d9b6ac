// `placec format`: prints a .place file in its canonical layout, keeping every comment
// (docs/format.md).
#ifndef PLACEC_FRONTEND_FORMATTER_H
#define PLACEC_FRONTEND_FORMATTER_H

#include "placec/ir/Diagnostics.h"

#include <optional>
#include <string>

namespace placec {

/// Formats buffer `bufferId` of the engine's source manager. Files with lexical or syntax errors
/// are reported and refused (nullopt). The result is a fixed point: formatting it again gives it
/// back unchanged.
std::optional<std::string> formatBuffer(unsigned bufferId, DiagnosticEngine &diags);

} // namespace placec

#endif // PLACEC_FRONTEND_FORMATTER_H

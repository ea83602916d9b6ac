// The source revision placec was built from; defined in <build>/tools/Revision.cpp, which
// cmake/Revision.cmake writes at every build that changes it.
#ifndef PLACEC_TOOLS_REVISION_H
#define PLACEC_TOOLS_REVISION_H

namespace placec {

/// `git describe --always --dirty` of the source tree when placec was built ("7e10739",
/// "v0.1.0-3-g7e10739-dirty"), or "unknown" for a build outside a git checkout.
const char *getRevision();

} // namespace placec

#endif // PLACEC_TOOLS_REVISION_H

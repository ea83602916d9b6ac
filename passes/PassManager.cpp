// The pass pipeline: runs passes in order and stops after the first failure.
#include "placec/passes/Passes.h"

#include "llvm/Support/raw_ostream.h"

namespace placec {

bool PassManager::run(ir::Program &program, DiagnosticEngine &diags) {
  for (const std::unique_ptr<Pass> &pass : passes) {
    bool ok = pass->run(program, diags);
    if (dump) {
      *dump << "// ----- IR after " << pass->getName() << (ok ? "" : " (failed)") << " -----\n";
      ir::printProgram(program, *dump);
    }
    if (!ok)
      return false;
  }
  return true;
}

} // namespace placec

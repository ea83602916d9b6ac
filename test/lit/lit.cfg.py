# lit configuration for placec's tests: .place and .test files, run with %placec and FileCheck.
import os

import lit.formats

config.name = "placec"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".place", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.placec_obj_root, "test", "lit")

config.environment["PATH"] = os.pathsep.join(
    [config.placec_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
for name in ["ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "HOME", "TMPDIR"]:
    if name in os.environ:
        config.environment[name] = os.environ[name]

# Braced names first: none of them may be rewritten by a shorter one such as %placec.
config.substitutions.append(("%{placec_version}", config.placec_version))
# Where this build's placec points generated projects for placert and placert_cuda.
config.substitutions.append(("%{placert_dir}", os.path.join(config.placec_obj_root, "runtime")))
config.substitutions.append(
    ("%{placert_cuda_dir}", os.path.join(config.placec_obj_root, "runtime", "cuda")))
config.substitutions.append(("%placec", os.path.join(config.placec_tools_dir, "placec")))
# The source tree is a git checkout (not a tarball): `placec --version` names its revision.
if os.path.exists(os.path.join(config.placec_src_root, ".git")):
    config.available_features.add("git-checkout")
config.substitutions.append(("%examples", os.path.join(config.placec_src_root, "examples")))
config.substitutions.append(("%srcroot", config.placec_src_root))

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

config.substitutions.append(("%placec", os.path.join(config.placec_tools_dir, "placec")))
config.substitutions.append(("%examples", os.path.join(config.placec_src_root, "examples")))
config.substitutions.append(("%srcroot", config.placec_src_root))

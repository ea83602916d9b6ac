#!/usr/bin/env python3
"""Tests of placec installed, used from where it was installed and from nothing else.

Modes:
  install  `cmake --install BUILD --prefix P`: the layout (placec, placert's library, header and
           CMake package, placert_cuda where it was built, the docs, the examples, the editor
           support), no path of the build machine in any installed file; the installed placec
           generates projects that find the installed placert by themselves and build, also
           after the installation has moved; -Dplacert_DIR still picks another placert
  package  the Debian packages `make package` builds (cpack): their fields (version,
           maintainer, description, Depends), no path of the build machine inside; extracted
           with `dpkg -x` into a scratch root and, with only that root's usr/bin on PATH,
           placec checks an example and compiles an mlp run whose project finds the extracted
           placert without -Dplacert_DIR, builds, and trains on 2 MPI ranks like one device
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from run_e2e import fail, mpi_env, run  # noqa: E402

# What generated programs need besides placec's own libraries (cmake/Packaging.cmake).
BUILD_DEPENDS = ["cmake", "g++", "libopenmpi-dev", "openmpi-bin", "libopenblas-dev"]


def found_placert(output):
    """The directory of the "-- Found placert V: DIR" line a generated project prints."""
    found = [line.split(": ", 1)[1].strip() for line in output.splitlines()
             if line.startswith("-- Found placert ")]
    if len(found) != 1:
        fail("configuring the generated project did not say which placert it found")
    return found[0]


def same_path(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


def version_of(placec, env=None):
    first = run([placec, "--version"], env=env, echo=False).stdout.splitlines()[0]
    return first.split()[-1]


def check_no_machine_paths(root, paths, binaries=True):
    """No file under `root` contains any of `paths` (the build and source folders). Without
    `binaries`, ELF files are not looked at: `cmake --install` keeps the debug information of a
    Debug or RelWithDebInfo build, which names the folders it was compiled in."""
    needles = [p.encode() for p in paths]
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            with open(path, "rb") as file:
                data = file.read()
            if not binaries and data.startswith(b"\x7fELF"):
                continue
            for needle in needles:
                if needle in data:
                    fail(f"{path} contains the path {needle.decode()} of the machine that built it")


def check_layout(prefix, source, cuda, libdir="lib"):
    expected = ["bin/placec", f"{libdir}/libplacert.so", "include/placert/placert.h",
                f"{libdir}/cmake/placert/placertConfig.cmake",
                f"{libdir}/cmake/placert/placertConfigVersion.cmake",
                f"{libdir}/cmake/placert/placertTargets.cmake",
                "share/doc/placec/README.md", "share/doc/placec/docs/building.md",
                "share/placec/editors/textmate/place.tmLanguage.json",
                "share/placec/editors/vscode/package.json"]
    expected += ["share/doc/placec/examples/" + os.path.basename(example)
                 for example in glob.glob(os.path.join(source, "examples", "*.place"))]
    if cuda:
        expected += [f"{libdir}/cmake/placert_cuda/placert_cudaConfig.cmake",
                     "include/placert/cuda.h"]
    missing = [path for path in expected if not os.path.exists(os.path.join(prefix, path))]
    if missing:
        fail(f"not installed in {prefix}: {', '.join(missing)}")
    if not glob.glob(os.path.join(prefix, libdir, "libplacert.so.*")):
        fail("libplacert.so has no versioned file")
    if cuda and not glob.glob(os.path.join(prefix, libdir, "libplacert_cuda.so*")):
        fail("libplacert_cuda.so is not installed")
    print(f"install: ok: {len(expected)} files in place under {prefix}")


def compile_and_configure(placec, place, run_name, work, env=None, placert_dir=None):
    """placec compile, then configure the project; returns (project build folder, placert found)."""
    source, build = os.path.join(work, "src"), os.path.join(work, "build")
    shutil.rmtree(work, ignore_errors=True)
    run([placec, "compile", place, "--run", run_name, "-o", source], env=env)
    flags = [f"-Dplacert_DIR={placert_dir}"] if placert_dir else []
    output = run(["cmake", "-S", source, "-B", build] + flags, env=env).stdout
    return build, found_placert(output)


def mode_install(args):
    prefix = os.path.join(args.work, "prefix")
    run(["cmake", "--install", args.build, "--prefix", prefix], echo=False)
    cuda = os.path.exists(os.path.join(args.build, "runtime", "cuda", "placert_cudaConfig.cmake"))
    check_layout(prefix, args.source, cuda)
    check_no_machine_paths(prefix, [args.build, args.source], binaries=False)
    print("install: ok: no installed file but the binaries names the build or the source folder")

    placec = os.path.join(prefix, "bin", "placec")
    if version_of(placec) != args.version:
        fail(f"the installed placec says version {version_of(placec)}, not {args.version}")
    example = os.path.join(prefix, "share", "doc", "placec", "examples", "mlp-zero3.place")
    # The installed placec: its project finds the installed placert, builds, and trains.
    build, found = compile_and_configure(placec, example, "mlp_zero3",
                                         os.path.join(args.work, "installed"))
    if not same_path(found, os.path.join(prefix, "lib", "cmake", "placert")):
        fail(f"the installed placec's project found placert in {found}, not in {prefix}")
    run(["cmake", "--build", build], echo=False)
    run([args.mpiexec, "--oversubscribe", "-np", "4", os.path.join(build, "mlp_zero3"),
         "--steps", "2", "--check", "--timeout", "20"], env=mpi_env())
    print("install: ok: the installed placec's project found the installed placert, built "
          "and trained")

    # --target=cuda: the project looks for the installed placert_cuda, and builds against it
    # where it was built (it is not run: no GPU is needed to build).
    gpt = os.path.join(args.source, "test", "lit", "codegen", "cuda-gpt.place")
    cuda_work = os.path.join(args.work, "cuda")
    run([placec, "compile", gpt, "--run", "small_zero3", "-o", os.path.join(cuda_work, "src"),
         "--target=cuda"], echo=False)
    with open(os.path.join(cuda_work, "src", "CMakeLists.txt")) as file:
        hint = os.path.join(prefix, "lib", "cmake", "placert_cuda")
        if f'HINTS "{hint}"' not in file.read():
            fail(f"the installed placec's CUDA project does not look in {hint}")
    if cuda:
        output = run(["cmake", "-S", os.path.join(cuda_work, "src"), "-B",
                      os.path.join(cuda_work, "build")], echo=False).stdout
        if f"-- Found placert_cuda {args.version}: {hint}" not in output:
            fail("the installed placec's CUDA project did not find the installed placert_cuda")
        run(["cmake", "--build", os.path.join(cuda_work, "build")], echo=False)
        print("install: ok: the installed placec's --target=cuda project found the installed "
              "placert_cuda and built")

    # The build tree's placec finds its own placert; -Dplacert_DIR picks the installed one.
    mine = os.path.join(args.build, "tools", "placec")
    _, found = compile_and_configure(mine, example, "mlp_zero3", os.path.join(args.work, "tree"))
    if not same_path(found, os.path.join(args.build, "runtime")):
        fail(f"the build tree's placec's project found placert in {found}")
    _, found = compile_and_configure(mine, example, "mlp_zero3",
                                     os.path.join(args.work, "override"),
                                     placert_dir=os.path.join(prefix, "lib", "cmake", "placert"))
    if not same_path(found, os.path.join(prefix, "lib", "cmake", "placert")):
        fail(f"-Dplacert_DIR was not used: the project found placert in {found}")
    print("install: ok: the build tree's placec points at its own placert, and -Dplacert_DIR "
          "overrides it")

    # The installation moved elsewhere still works: everything is relative to where it is.
    moved = os.path.join(args.work, "moved")
    shutil.move(prefix, moved)
    build, found = compile_and_configure(os.path.join(moved, "bin", "placec"),
                                         os.path.join(args.source, "examples", "mlp-zero3.place"),
                                         "mlp_zero3", os.path.join(args.work, "relocated"))
    if not same_path(found, os.path.join(moved, "lib", "cmake", "placert")):
        fail(f"after moving the installation, its placec's project found placert in {found}")
    run(["cmake", "--build", build], echo=False)
    print("install: ok: a moved installation finds its placert and builds")


def deb_field(deb, field):
    return run(["dpkg-deb", "--field", deb, field], echo=False).stdout.strip()


def mode_package(args):
    packages = os.path.join(args.work, "packages")
    run(["cpack", "--config", os.path.join(args.build, "CPackConfig.cmake"), "-B", packages])
    debs = sorted(glob.glob(os.path.join(packages, "*.deb")))
    main = [deb for deb in debs if os.path.basename(deb).startswith("placec_")]
    if len(main) != 1:
        fail(f"cpack made {[os.path.basename(d) for d in debs]}, no single placec_*.deb")
    deb = main[0]
    if deb_field(deb, "Package") != "placec" or deb_field(deb, "Version") != args.version:
        fail(f"{deb}: package {deb_field(deb, 'Package')} {deb_field(deb, 'Version')}")
    maintainer = deb_field(deb, "Maintainer")
    if "@" not in maintainer or "<" not in maintainer:
        fail(f"{deb}: the maintainer '{maintainer}' has no address")
    if "parallelism" not in deb_field(deb, "Description"):
        fail(f"{deb}: no description")
    depends = [item.split("(")[0].strip() for item in deb_field(deb, "Depends").split(",")]
    missing = [name for name in BUILD_DEPENDS if name not in depends]
    if shutil.which("dpkg-shlibdeps"):
        # dpkg-shlibdeps adds the libraries placec and libplacert link.
        missing += [name for name in ["libc6", "libstdc++6"] if name not in depends]
    if missing:
        fail(f"{deb}: Depends lacks {', '.join(missing)}: {deb_field(deb, 'Depends')}")
    print(f"package: ok: {os.path.basename(deb)}: Depends: {deb_field(deb, 'Depends')}")

    root = os.path.join(args.work, "root")
    listed = {}
    for package in debs:
        run(["dpkg", "-x", package, root], echo=False)
        files = run(["dpkg-deb", "--contents", package], echo=False).stdout
        names = {line.split()[-1] for line in files.splitlines() if not line.startswith("d")}
        for other, theirs in listed.items():
            if names & theirs:
                fail(f"{package} and {other} both hold {sorted(names & theirs)[:3]}")
        listed[package] = names
    cuda = [d for d in debs if os.path.basename(d).startswith("placec-cuda_")]
    if cuda and f"placec (= {args.version})" not in deb_field(cuda[0], "Depends"):
        fail(f"{cuda[0]} does not depend on placec {args.version}")
    usr = os.path.join(root, "usr")
    check_layout(usr, args.source, bool(cuda))
    check_no_machine_paths(root, [args.build, args.source])
    print(f"package: ok: {len(debs)} package(s) extracted into {root}, no path of the build "
          "machine inside")

    # From the extracted root alone: its placec first on PATH, nothing of the build tree.
    env = mpi_env()
    env["PATH"] = os.pathsep.join([os.path.join(usr, "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    env.pop("LD_LIBRARY_PATH", None)
    placec = shutil.which("placec", path=env["PATH"])
    if not placec or not same_path(placec, os.path.join(usr, "bin", "placec")):
        fail(f"placec on PATH is {placec}, not the extracted one")
    if version_of("placec", env) != args.version:
        fail("the packaged placec says another version")
    run(["placec", "check", os.path.join(usr, "share", "doc", "placec", "examples",
                                         "gpt2-xl.place")], env=env)
    build, found = compile_and_configure("placec", os.path.join(args.source, "test", "install",
                                                                "mlp-2ranks.place"),
                                         "mlp_zero3_2", os.path.join(args.work, "mlp"), env=env)
    if not same_path(found, os.path.join(usr, "lib", "cmake", "placert")):
        fail(f"the project found placert in {found}, not in the extracted package")
    run(["cmake", "--build", build], env=env, echo=False)
    program = os.path.join(build, "mlp_zero3_2")
    linked = run(["ldd", program], env=env, echo=False).stdout
    placert = [line for line in linked.splitlines() if "libplacert" in line]
    if not placert or usr not in placert[0]:
        fail(f"the program does not load libplacert from the extracted package: {placert}")
    metrics = os.path.join(args.work, "metrics.json")
    run([args.mpiexec, "--oversubscribe", "-np", "2", program, "--steps", "3", "--check",
         "--metrics", metrics, "--timeout", "20"], env=env)
    with open(metrics) as file:
        recorded = json.load(file)
    if not recorded["check"]["passed"] or len(recorded["per_rank"]) != 2:
        fail("the program trained from the package differs from one device")
    if recorded["placec_version"] != args.version:
        fail(f"the program records placec {recorded['placec_version']}")
    print("package: ok: from the extracted package alone, placec checked an example, compiled "
          "an mlp run whose project found the packaged placert (no -Dplacert_DIR), and it "
          "trained on 2 MPI ranks like one device")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True, choices=["install", "package"])
    parser.add_argument("--build", required=True, help="placec's build folder")
    parser.add_argument("--source", required=True, help="placec's source folder")
    parser.add_argument("--version", required=True, help="the version placec must say")
    parser.add_argument("--mpiexec", default="mpirun")
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    args.build, args.source = os.path.realpath(args.build), os.path.realpath(args.source)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    args.work = os.path.realpath(args.work)
    {"install": mode_install, "package": mode_package}[args.mode](args)


if __name__ == "__main__":
    main()

# `make package` (cpack in the build folder): Debian packages of what `cmake --install` installs.
#   placec       placec, placert (library, header, CMake package), docs, examples, editor support
#   placec-cuda  placert_cuda, where it was built (its CUDA, cuBLAS and NCCL come from NVIDIA, not
#                from Debian packages, so its dependencies on them cannot be declared)
# dpkg-shlibdeps (package dpkg-dev) finds the libraries the binaries link; the packages that
# generated programs need to build and run are declared by hand.
set(PLACEC_PACKAGE_MAINTAINER
    "placec maintainers <maintainers@users.noreply.a-seed-d2118d1f.example>"
    CACHE STRING "Maintainer field of the Debian packages")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME placec)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${PLACEC_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${PLACEC_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "compiler for the parallelism strategies of large-model training")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Release binaries carry no debug information; other build types are stripped, so that no path of
# the build machine is in the package.
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)

set(CPACK_DEBIAN_PLACEC_PACKAGE_NAME placec)
set(CPACK_DEBIAN_PLACEC_DESCRIPTION
    "${CPACK_PACKAGE_DESCRIPTION_SUMMARY}
 placec checks a strategy written as placements of the training states (parameters, gradients,
 optimizer state, activations) over a device mesh, predicts its memory, communication and step
 time, searches for the fastest one that fits, and compiles a run to a C++ program that trains it
 over its runtime, placert (MPI and OpenBLAS on CPUs). Includes placert's library, header and
 CMake package, the documentation, the examples and syntax highlighting for editors.")
# What `placec compile`'s programs need to configure, build and run with mpirun.
set(CPACK_DEBIAN_PLACEC_PACKAGE_DEPENDS
    "cmake (>= 3.20), g++, libopenmpi-dev, openmpi-bin, libopenblas-dev")
find_program(PLACEC_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(PLACEC_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PLACEC_PACKAGE_SHLIBDEPS ON)
else()
  message(STATUS "placec: dpkg-shlibdeps not found (package dpkg-dev): the Debian package will "
                 "declare only the build dependencies of generated programs")
endif()
set(CPACK_DEBIAN_PLACEC_PACKAGE_GENERATE_SHLIBS ON)

set(CPACK_COMPONENTS_ALL placec)
if(TARGET placert_cuda)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME placec-cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "placec (= ${PROJECT_VERSION})")
  set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_CUDA_DESCRIPTION
      "placert_cuda, the GPU runtime of placec's --target=cuda programs
 CUDA kernels, cuBLAS GEMMs, NCCL communicators and a GPT trainer, with its CMake package. Needs
 the CUDA runtime, cuBLAS and NCCL of NVIDIA's CUDA toolkit (not Debian packages).")
endif()

include(CPack)

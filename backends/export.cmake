# The bridges (`placec compile --target=deepspeed|megatron|torchtitan`, `placec import`):
# exports of a run to other frameworks' configurations and imports back (docs/bridges.md).
add_library(placec_export STATIC
  ${CMAKE_CURRENT_LIST_DIR}/Export.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Import.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ImportHuggingFace.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ImportTorchtitan.cpp)
placec_target_defaults(placec_export)
# placec_passes: the cost model's rules the exports refuse by (cost::repeatsKv).
target_link_libraries(placec_export PUBLIC placec_ir placec_passes ${PLACEC_LLVM_LIBS})
# toml++ (Debian libtomlplusplus-dev) reads torchtitan's job configs; it is used header-only, so
# placec does not link its shared library.
find_package(tomlplusplus 3 REQUIRED CONFIG)
get_target_property(PLACEC_TOMLPLUSPLUS_INCLUDE tomlplusplus::tomlplusplus
                    INTERFACE_INCLUDE_DIRECTORIES)
target_include_directories(placec_export SYSTEM PRIVATE ${PLACEC_TOMLPLUSPLUS_INCLUDE})

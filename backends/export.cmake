# The bridges (`placec compile --target=deepspeed|megatron|torchtitan`, `placec import`):
# exports of a run to other frameworks' configurations and imports back (docs/bridges.md).
add_library(placec_export STATIC
  ${CMAKE_CURRENT_LIST_DIR}/Export.cpp
  ${CMAKE_CURRENT_LIST_DIR}/Import.cpp)
placec_target_defaults(placec_export)
target_link_libraries(placec_export PUBLIC placec_ir ${PLACEC_LLVM_LIBS})

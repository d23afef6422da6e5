# The accuracy table (CPU only; no GPU, no qattn kernels): the float64 format simulation of
# reference/format_sim.hpp against exact attention.
add_executable(qattn_accuracy_table ${CMAKE_CURRENT_LIST_DIR}/accuracy_table.cpp)
target_link_libraries(qattn_accuracy_table PRIVATE qattn_format_sim qattn_cache)
set_target_properties(qattn_accuracy_table PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)

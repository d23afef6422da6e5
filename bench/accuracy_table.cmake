# The float64 quantization simulator and the accuracy table it writes (CPU only; no GPU, no qattn kernels).
# Included before the QATTN_BUILD_BENCH switch: tests/bench and tests/templates/quant link the simulator.
add_library(qattn_accuracy_sim STATIC ${CMAKE_CURRENT_LIST_DIR}/accuracy_sim.cpp)
target_include_directories(qattn_accuracy_sim PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/templates)
target_link_libraries(qattn_accuracy_sim PUBLIC qattn_reference)
add_executable(qattn_accuracy_table ${CMAKE_CURRENT_LIST_DIR}/accuracy_table.cpp)
target_link_libraries(qattn_accuracy_table PRIVATE qattn_accuracy_sim)
set_target_properties(qattn_accuracy_table PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)

# The cold-compile phase of the start-up benchmark and its CPU-only driver (NVRTC needs no GPU).
# Included before the QATTN_BUILD_BENCH switch: tests/bench drives the phase, and the per-variant
# measurement (bench/cold_compile.sh) runs on any machine with the CUDA toolkit's NVRTC.
add_library(qattn_cold_compile STATIC ${CMAKE_CURRENT_LIST_DIR}/cold_compile.cpp)
target_include_directories(qattn_cold_compile PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(qattn_cold_compile PUBLIC qattn_runtime)
add_executable(qattn_bench_cold_compile ${CMAKE_CURRENT_LIST_DIR}/cold_compile_main.cpp)
target_link_libraries(qattn_bench_cold_compile PRIVATE qattn_cold_compile nlohmann_json::nlohmann_json)
set_target_properties(qattn_bench_cold_compile PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin
  BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR}")

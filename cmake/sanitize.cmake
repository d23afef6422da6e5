# QATTN_SANITIZE: a comma-separated list of GCC/Clang sanitizers (address, undefined) that every target
# of the build is compiled and linked with: the library, the CLI, the tests, the examples and the
# benchmarks. Empty (the default) adds nothing. scripts/sanitize.sh configures a separate build-asan/
# with -DQATTN_SANITIZE=address,undefined and runs the CPU suite there (docs/testing.md#sanitizers).
set(QATTN_SANITIZE "" CACHE STRING "Sanitizers for every target, comma-separated: address, undefined (empty: none)")

if(QATTN_SANITIZE STREQUAL "")
  return()
endif()

string(REPLACE "," ";" qattn_sanitizers "${QATTN_SANITIZE}")
foreach(sanitizer ${qattn_sanitizers})
  if(NOT sanitizer MATCHES "^(address|undefined)$")
    message(FATAL_ERROR "QATTN_SANITIZE: '${sanitizer}' is not a supported sanitizer; "
                        "accepted: a comma-separated list of address, undefined (e.g. address,undefined)")
  endif()
endforeach()

# -fno-omit-frame-pointer: the sanitizers' stack traces unwind by frame pointers. -g1: file and line
# numbers in those traces without the compile time of full debug information.
# -fno-sanitize-recover: an undefined-behaviour report aborts the program, so the test that caused it fails
# instead of printing a line nobody reads.
set(qattn_sanitize_flags -fsanitize=${QATTN_SANITIZE} -fno-omit-frame-pointer -g1)
if("undefined" IN_LIST qattn_sanitizers)
  list(APPEND qattn_sanitize_flags -fno-sanitize-recover=undefined)
endif()
add_compile_options(${qattn_sanitize_flags})
# Debian's GCC links with --as-needed except when a sanitizer is on; without it every program that names
# the driver stub (CUDA::nvrtc brings it) would need libcuda.so.1, which a machine without a driver lacks.
add_link_options(-fsanitize=${QATTN_SANITIZE} LINKER:--as-needed)

# A program that was not linked with the sanitizers (python3 for the Python wrapper's tests) can load the
# sanitized libqattn.so only when the ASan runtime is loaded first, and libstdc++ with it: ASan intercepts
# C++ throws only in a libstdc++ present at start-up (a later one aborts at the first exception).
# tests/CMakeLists.txt preloads both.
if("address" IN_LIST qattn_sanitizers)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE QATTN_ASAN_RUNTIME OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE QATTN_STDCXX_RUNTIME OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
message(STATUS "qattn: sanitizers ${QATTN_SANITIZE} for every target")

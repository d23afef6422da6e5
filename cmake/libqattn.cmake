# libqattn.so: the component libraries (templates, generator, cache, tuner, runtime) in one shared
# library with the C API (include/qattn/qattn.h) and the public C++ API (include/qattn/*.hpp), for
# applications and the Python wrapper. It depends on libnvrtc
# and libsqlite3 only (libcuda is dlopen'ed); both are private, so its users need neither.
include(GNUInstallDirs)
# Public headers include "qattn/abi.h" (the host/device ABI, kept with the device code in templates/).
# A copy beside the public headers serves users without templates/ on their include path: in the build
# tree here, and installed as include/qattn/abi.h.
configure_file(${PROJECT_SOURCE_DIR}/templates/qattn/abi.h ${PROJECT_BINARY_DIR}/include/qattn/abi.h COPYONLY)
add_library(qattn SHARED ${CMAKE_CURRENT_LIST_DIR}/empty.cpp)
add_library(qattn::qattn ALIAS qattn)
# Whole archives: every public function is in the library, also those nothing inside it calls
# (e.g. tuner/pretune_grid.cpp's load_pretune_grid). The components reach the link through
# qattn_runtime's own dependencies too, hence the per-library override.
set(qattn_components qattn_templates qattn_generator qattn_cache qattn_tuner qattn_runtime)
target_link_libraries(qattn PRIVATE qattn_runtime)
foreach(component ${qattn_components})
  set_property(TARGET qattn PROPERTY LINK_LIBRARY_OVERRIDE_${component} WHOLE_ARCHIVE)
endforeach()
target_include_directories(qattn PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                        $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
                                        $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(qattn INTERFACE cxx_std_17)
# A public header that includes <nlohmann/...> makes nlohmann_json part of the interface (and of
# find_package(qattn)'s dependencies); nothing else of the library's dependencies is.
file(GLOB qattn_public_headers ${PROJECT_SOURCE_DIR}/include/qattn/*.hpp)
set(QATTN_PACKAGE_DEPENDENCIES "")
foreach(header ${qattn_public_headers})
  file(STRINGS ${header} uses_json REGEX "#include <nlohmann/")
  if(uses_json)
    target_link_libraries(qattn INTERFACE nlohmann_json::nlohmann_json)
    set(QATTN_PACKAGE_DEPENDENCIES "find_dependency(nlohmann_json 3)")
    break()
  endif()
endforeach()
# libqattn.so -> libqattn.so.0 (SONAME) -> libqattn.so.0.1.0; the SONAME changes with the major version.
# The installed library finds libnvrtc where it was built against (RUNPATH; packagers who place it
# elsewhere configure with -DCMAKE_SKIP_INSTALL_RPATH=ON).
set_target_properties(qattn PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib
                                       VERSION ${PROJECT_VERSION}
                                       SOVERSION ${PROJECT_VERSION_MAJOR}
                                       BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR}"
                                       INSTALL_RPATH "${CUDAToolkit_LIBRARY_DIR}")

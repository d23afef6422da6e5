# `cmake --install <build> --prefix <P>` lays out qattn for applications:
#   <P>/lib/libqattn.so{,.0,.0.1.0}          the library (SONAME libqattn.so.0); C API + public C++ API
#   <P>/include/qattn/*.hpp, qattn.h, export.h, abi.h   the public headers (abi.h from templates/)
#   <P>/bin/qattn                            the command-line tool
#   <P>/lib/cmake/qattn/                     find_package(qattn): target qattn::qattn
#   <P>/share/qattn/python/qattn/            the ctypes wrapper: PYTHONPATH=<P>/share/qattn/python
# (lib is CMAKE_INSTALL_LIBDIR, e.g. lib/x86_64-linux-gnu under /usr on Debian.)
include(CMakePackageConfigHelpers)

set(QATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/qattn)
set(QATTN_PYTHON_DIR ${CMAKE_INSTALL_DATADIR}/qattn/python)

install(TARGETS qattn EXPORT qattnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev)
# Everything left in include/qattn is public (internal headers live beside their code).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/qattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(FILES ${PROJECT_SOURCE_DIR}/templates/qattn/abi.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/qattn
        COMPONENT dev)

# The CLI links the static runtime (it uses internals); it needs libnvrtc from the same place.
set_target_properties(qattn_cli PROPERTIES INSTALL_RPATH "${CUDAToolkit_LIBRARY_DIR}")
install(TARGETS qattn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)

# The Python package, and where the installed library is relative to it (read by qattn/_library.py).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/qattn DESTINATION ${QATTN_PYTHON_DIR} COMPONENT python
        PATTERN "__pycache__" EXCLUDE PATTERN "*.pyc" EXCLUDE)
file(RELATIVE_PATH QATTN_LIBRARY_FROM_PYTHON /${QATTN_PYTHON_DIR}/qattn
     /${CMAKE_INSTALL_LIBDIR}/libqattn.so.${PROJECT_VERSION_MAJOR})
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_DATADIR}")
  set(QATTN_LIBRARY_FROM_PYTHON ${CMAKE_INSTALL_FULL_LIBDIR}/libqattn.so.${PROJECT_VERSION_MAJOR})
endif()
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/python/_installed.py CONTENT
"\"\"\"Written by cmake --install: where this installed package's libqattn is, relative to it, and its version.\"\"\"
LIBRARY = \"@QATTN_LIBRARY_FROM_PYTHON@\"
VERSION = \"@PROJECT_VERSION@\"
" @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/python/_installed.py DESTINATION ${QATTN_PYTHON_DIR}/qattn
        COMPONENT python)

# find_package(qattn): qattn::qattn and nothing else. Its interface is the include directory, C++17
# (and nlohmann_json while a public header includes it); nvrtc and sqlite stay private to the library.
install(EXPORT qattnTargets NAMESPACE qattn:: FILE qattnTargets.cmake DESTINATION ${QATTN_CMAKE_DIR}
        COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/qattnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/qattnConfig.cmake INSTALL_DESTINATION ${QATTN_CMAKE_DIR})
# Compatible within a major version, as the SONAME (libqattn.so.<major>) promises.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qattnConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qattnConfig.cmake ${PROJECT_BINARY_DIR}/qattnConfigVersion.cmake
        DESTINATION ${QATTN_CMAKE_DIR} COMPONENT dev)

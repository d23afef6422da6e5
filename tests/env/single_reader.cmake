# Fails when product code reads the environment anywhere but env/env.cpp (ctest env_single_reader).
# Tests may set and read variables of their own; the library reads every variable through qattn::env.
file(GLOB_RECURSE sources LIST_DIRECTORIES false
     ${ROOT}/cache/* ${ROOT}/cli/* ${ROOT}/generator/* ${ROOT}/runtime/* ${ROOT}/tuner/* ${ROOT}/include/*
     ${ROOT}/templates/* ${ROOT}/env/* ${ROOT}/bench/*.cpp ${ROOT}/examples/*.cpp ${ROOT}/examples/*.c)
set(offenders "")
foreach(f ${sources})
  if(NOT f MATCHES "\\.(c|cpp|cu|cuh|h|hpp)$" OR f STREQUAL "${ROOT}/env/env.cpp")
    continue()
  endif()
  file(STRINGS ${f} hits REGEX "(getenv|secure_getenv|environ)[ \t]*[(\\[]")
  if(hits)
    string(REPLACE "${ROOT}/" "" rel ${f})
    list(APPEND offenders "${rel}")
  endif()
endforeach()
if(offenders)
  list(JOIN offenders ", " text)
  message(FATAL_ERROR "the environment is read outside env/env.cpp in: ${text}; add the variable to "
                      "env/env.hpp and docs/environment.md and read it through qattn::env")
endif()

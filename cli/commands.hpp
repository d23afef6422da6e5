// The qattn verbs: each *_cmd.cpp file holds one verb's table (options, help, examples) and its code.
// A verb's run function returns the process exit code: 0 ok, 1 failure, 2 bad input, 3 no GPU (errors
// are thrown as qattn::Error and mapped in main.cpp).
#pragma once
#include <vector>

#include "cli/verb.hpp"

namespace qattn::cli {

const Verb& doctor_verb();      // doctor.cpp
const Verb& version_verb();     // version_cmd.cpp
const Verb& compile_verb();     // compile_cmd.cpp
const Verb& run_verb();         // gpu_cmds.cpp
const Verb& tune_verb();        // gpu_cmds.cpp
const Verb& pretune_verb();     // pretune_cmd.cpp
const Verb& report_verb();      // report_cmd.cpp
const Verb& calibrate_verb();   // calibrate_cmd.cpp
const Verb& cache_verb();       // cache_cmd.cpp: the overview; the actions below do the work
const std::vector<const Verb*>& cache_actions();
const Verb& help_verb();        // verbs.cpp

}  // namespace qattn::cli

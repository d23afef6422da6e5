// Every qattn verb and the top-level help. Each verb's table lives beside its code (the *_cmd.cpp files).
#pragma once
#include <string>
#include <vector>

#include "cli/verb.hpp"

namespace qattn::cli {

// The exit codes, documented once here (and in docs/cli.md): the table for `qattn --help`, the line for
// each verb's help.
inline constexpr const char* kExitCodes =
    "exit codes:\n"
    "  0  ok\n"
    "  1  failure: the command ran and did not succeed (a kernel failed to compile, an accuracy check failed,\n"
    "     a file could not be written, a cache row was damaged)\n"
    "  2  bad input: an unknown verb, option, value or file; the one-line message says what is accepted\n"
    "  3  a GPU is needed and there is none (run, tune, pretune, calibrate, after checking their arguments)\n";
inline constexpr const char* kExitCodesLine = "exit codes: 0 ok, 1 failure, 2 bad input, 3 no GPU (qattn --help)";

// The verbs in the order `qattn --help` lists them.
const std::vector<const Verb*>& all_verbs();
const Verb* find_verb(const std::string& name);

// A verb with actions (`qattn cache list`): the actions, each a Verb named "cache list"; empty otherwise.
const std::vector<const Verb*>& actions_of(const Verb& verb);

// Options several verbs share, described the same way everywhere.
Option db_option();
Option no_cache_option();
Option no_tune_option();
Option device_option();
Option json_option(const std::string& what);   // "--json: print <what> as one JSON document"

// `qattn --help`: every verb with one line, the conventions shared by all verbs, the exit codes.
std::string top_level_help();

}  // namespace qattn::cli

// The qattn subcommands. Each returns the process exit code: 0 ok, 1 failure, 2 bad input, 3 no GPU
// (errors are thrown as qattn::Error and mapped in main.cpp).
#pragma once

namespace qattn::cli {

int doctor(int argc, char** argv);
int compile(int argc, char** argv);
int run(int argc, char** argv);
int tune(int argc, char** argv);
int pretune(int argc, char** argv);   // pretune_cmd.cpp
int cache(int argc, char** argv);
int calibrate(int argc, char** argv);
int report(int argc, char** argv);

}  // namespace qattn::cli

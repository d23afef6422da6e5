// The check every refusal test makes: the call throws qattn::Error of kind bad_input, on one line, with
// `needle` (the rule or the offending value) in its message.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "qattn/error.hpp"

namespace qattn {
namespace test {

template <class F>
void expect_bad_input(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected bad_input mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

}  // namespace test
}  // namespace qattn

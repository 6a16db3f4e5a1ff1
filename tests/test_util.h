// Helpers shared by the CPU tests: a fixture with a fresh temporary directory, and checks on the
// message of an error.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <exception>
#include <filesystem>
#include <functional>
#include <string>

namespace skipsoftmax::test {

// dir_: a new directory under the system's temporary directory, removed after the test.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "skipsoftmax_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

// The what() of the exception f throws, or "" when it throws none.
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace skipsoftmax::test

// The statement throws, and the message contains text.
#define EXPECT_ERROR_HAS(statement, text)                                         \
  do {                                                                            \
    const std::string msg_ = ::skipsoftmax::test::message_of([&] { statement; }); \
    EXPECT_NE(msg_.find(text), std::string::npos) << "got: " << msg_;             \
  } while (0)

// The consumers' one assertion: report a failed check on stderr and count it for the exit code.
#pragma once

#include <cstdio>

inline int consumer_failures = 0;

inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++consumer_failures;
  }
}

#pragma once

#include <cstdio>
#include <cstdlib>

/// Always-on assertion for programmer errors: prints file:line and the failed
/// condition, then aborts. Operating errors are values, never this.
#define KVROOM_ASSERT(cond)                                                    \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: kvroom assertion failed: %s\n", __FILE__,   \
                   __LINE__, #cond);                                           \
      std::abort();                                                            \
    }                                                                          \
  } while (false)

#pragma once

#include <string>

namespace kvroom::test {

/// The backend hw_main was asked to test ("verbs" or "cuda").
extern std::string selected_backend;

} // namespace kvroom::test

#pragma once

#include <string>

namespace kvroom::test {

/// The transport conformance_main was asked to test (a row of the transport
/// table).
extern std::string selected_transport;

} // namespace kvroom::test

#pragma once

// The options every `kvroom` command that joins a deployment shares: the
// deployment secret, or an explicit --insecure.

#include <string>

#include "caf/expected.hpp"

#include "kvroom/transport/auth/secret.hpp"

namespace kvroom::cli {

/// The secret in `file`; without one, an error unless `insecure` (then an
/// empty secret, and one line on stderr saying what that means).
caf::expected<deployment_secret> load_secret(const std::string& command,
                                             const std::string& file, bool insecure);

} // namespace kvroom::cli

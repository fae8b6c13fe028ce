#pragma once

// The options every `kvroom` command that joins a deployment shares: the
// deployment secret (or an explicit --insecure) and control-plane TLS.

#include <string>

#include "caf/config_option_adder.hpp"
#include "caf/error.hpp"

#include "kvroom/actors/runtime.hpp"

namespace kvroom::cli {

struct join_options {
  std::string secret_file;
  bool insecure = false;
  std::string tls_certificate;
  std::string tls_key;
  std::string tls_cafile;

  /// Adds --secret-file, --insecure, --tls-certificate, --tls-key, --tls-cafile.
  void add_to(caf::config_option_adder& group);

  /// Loads the secret and checks the TLS files into `opts`; without a
  /// secret, an error unless --insecure (then one line on stderr saying
  /// what that means).
  caf::error apply(const std::string& command, runtime_options& opts) const;
};

} // namespace kvroom::cli

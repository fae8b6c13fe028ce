#pragma once

// The options every `kvroom` command that joins a deployment shares: the
// deployment secret (or an explicit --insecure), control-plane TLS, and
// CAF's failure detection (the same on every node).

#include <cstdint>
#include <string>

#include "caf/config_option_adder.hpp"
#include "caf/error.hpp"

#include "kvroom/api/runtime.hpp"

namespace kvroom::cli {

struct join_options {
  std::string secret_file;
  bool insecure = false;
  std::string tls_certificate;
  std::string tls_key;
  std::string tls_cafile;
  int64_t heartbeat_ms = 100;
  int64_t connection_timeout_ms = 1000;

  /// Adds --secret-file, --insecure, --tls-certificate, --tls-key,
  /// --tls-cafile, --heartbeat-ms, --connection-timeout-ms.
  void add_to(caf::config_option_adder& group);

  /// Loads the secret and checks the TLS files into `opts`, with the
  /// heartbeat and connection timeout; without a secret, an error unless
  /// --insecure (then one line on stderr saying what that means).
  caf::error apply(const std::string& command, runtime_options& opts) const;
};

/// Where the deployment's directory lives when it is not a registry
/// process: etcd, with etcd's own TLS and auth.
struct directory_cli_options {
  std::string directory;
  std::string prefix = "/kvroom/default";
  int64_t lease_ttl_ms = 5000;
  std::string etcd_cacert;
  std::string etcd_cert;
  std::string etcd_key;
  std::string etcd_user;
  std::string etcd_password_file;

  /// Adds --directory, --directory-prefix, --lease-ttl-ms, --etcd-cacert,
  /// --etcd-cert, --etcd-key, --etcd-user, --etcd-password-file.
  void add_to(caf::config_option_adder& group);

  bool on_etcd() const noexcept {
    return !directory.empty();
  }

  /// Points `rt` at etcd (parses the URL, reads the password file).
  caf::error apply(runtime& rt) const;
};

} // namespace kvroom::cli

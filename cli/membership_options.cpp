#include "membership_options.hpp"

#include <cstdio>

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "kvroom/api/errors.hpp"

namespace kvroom::cli {

void join_options::add_to(caf::config_option_adder& group) {
  group.add(secret_file, "secret-file", "the deployment secret (mode 0600), same everywhere")
    .add(insecure, "insecure", "run without a deployment secret")
    .add(tls_certificate, "tls-certificate", "control-plane TLS: this process's PEM certificate")
    .add(tls_key, "tls-key", "control-plane TLS: its PEM private key")
    .add(tls_cafile, "tls-cafile", "control-plane TLS: the CA every peer's certificate chains to")
    .add(heartbeat_ms, "heartbeat-ms", "CAF middleman heartbeat interval (the same on every node)")
    .add(connection_timeout_ms, "connection-timeout-ms", "a silent peer is lost after this");
}

caf::error join_options::apply(const std::string& command, runtime_options& opts) const {
  if (!secret_file.empty() && insecure)
    return make_error(errc::invalid_config, "--secret-file and --insecure exclude each other");
  // Checked before the casts: -1 would read as 49 days.
  for (auto [ms, flag] : {std::pair{heartbeat_ms, "--heartbeat-ms"},
                          std::pair{connection_timeout_ms, "--connection-timeout-ms"}})
    if (ms < 1 || ms > 3'600'000)
      return make_error(errc::invalid_config, std::string{flag} + " must be in [1, 3600000]");
  opts.heartbeat_ms = static_cast<uint32_t>(heartbeat_ms);
  opts.connection_timeout_ms = static_cast<uint32_t>(connection_timeout_ms);
  int tls = !tls_certificate.empty() + !tls_key.empty() + !tls_cafile.empty();
  if (tls != 0 && tls != 3)
    return make_error(errc::invalid_config,
                      "control-plane TLS needs --tls-certificate, --tls-key and --tls-cafile");
  for (auto* f : {&tls_certificate, &tls_key, &tls_cafile})
    if (!f->empty() && ::access(f->c_str(), R_OK) != 0)
      return make_error(errc::invalid_config, "cannot read " + *f);
  opts.tls_certificate = tls_certificate;
  opts.tls_key = tls_key;
  opts.tls_cafile = tls_cafile;
  if (!secret_file.empty()) {
    auto secret = deployment_secret::from_file(secret_file);
    if (!secret)
      return std::move(secret.error());
    opts.secret = std::move(*secret);
    return caf::none;
  }
  if (!insecure)
    return make_error(errc::invalid_config,
                      "no --secret-file: every rank and the registry of a deployment prove "
                      "membership with one shared secret (a file of 16 or more random bytes, "
                      "mode 0600); pass --insecure to run without authentication");
  std::fprintf(stderr,
               "kvroom %s: --insecure: no deployment secret; anyone who reaches this "
               "process's ports can join the deployment\n",
               command.c_str());
  opts.secret = deployment_secret{};
  return caf::none;
}

void directory_cli_options::add_to(caf::config_option_adder& group) {
  group.add(directory, "directory", "etcd://host:port[,host:port...] (etcds:// for TLS): the "
                                    "deployment's directory on etcd instead of a registry")
    .add(prefix, "directory-prefix", "the deployment's key prefix in etcd")
    .add(lease_ttl_ms, "lease-ttl-ms", "etcd: a process that stops renewing its lease is gone "
                                       "this long after (whole seconds, at least 2 s)")
    .add(etcd_cacert, "etcd-cacert", "etcd TLS: the CA of etcd's certificates")
    .add(etcd_cert, "etcd-cert", "etcd TLS: this client's certificate (if etcd asks)")
    .add(etcd_key, "etcd-key", "etcd TLS: its key")
    .add(etcd_user, "etcd-user", "etcd auth: user name")
    .add(etcd_password_file, "etcd-password-file", "etcd auth: a file holding the password");
}

caf::error directory_cli_options::apply(runtime& rt) const {
  std::string password;
  if (!etcd_user.empty()) {
    std::ifstream in{etcd_password_file};
    if (etcd_password_file.empty() || !in)
      return make_error(errc::invalid_config,
                        "--etcd-user needs a readable --etcd-password-file");
    std::getline(in, password);
  }
  if (lease_ttl_ms < 1 || lease_ttl_ms > 3'600'000)
    return make_error(errc::invalid_argument, "--lease-ttl-ms must be in [1, 3600000]");
  directory_options opts;
  opts.url = directory;
  opts.prefix = prefix;
  opts.lease_ttl_ms = static_cast<uint32_t>(lease_ttl_ms);
  opts.cacert = etcd_cacert;
  opts.cert = etcd_cert;
  opts.key = etcd_key;
  opts.user = etcd_user;
  opts.password = std::move(password);
  return rt.use_directory(opts);
}

} // namespace kvroom::cli

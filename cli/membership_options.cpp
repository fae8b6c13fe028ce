#include "membership_options.hpp"

#include <cstdio>

#include <unistd.h>

#include "kvroom/messages/error.hpp"

namespace kvroom::cli {

void join_options::add_to(caf::config_option_adder& group) {
  group.add(secret_file, "secret-file", "the deployment secret (mode 0600), same everywhere")
    .add(insecure, "insecure", "run without a deployment secret")
    .add(tls_certificate, "tls-certificate", "control-plane TLS: this process's PEM certificate")
    .add(tls_key, "tls-key", "control-plane TLS: its PEM private key")
    .add(tls_cafile, "tls-cafile", "control-plane TLS: the CA every peer's certificate chains to");
}

caf::error join_options::apply(const std::string& command, runtime_options& opts) const {
  if (!secret_file.empty() && insecure)
    return make_error(errc::invalid_config, "--secret-file and --insecure exclude each other");
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

} // namespace kvroom::cli

#include "membership_options.hpp"

#include <cstdio>

#include "kvroom/messages/error.hpp"

namespace kvroom::cli {

caf::expected<deployment_secret> load_secret(const std::string& command,
                                             const std::string& file, bool insecure) {
  if (!file.empty() && insecure)
    return make_error(errc::invalid_config, "--secret-file and --insecure exclude each other");
  if (!file.empty())
    return deployment_secret::from_file(file);
  if (!insecure)
    return make_error(errc::invalid_config,
                      "no --secret-file: every rank and the registry of a deployment prove "
                      "membership with one shared secret (a file of 16 or more random bytes, "
                      "mode 0600); pass --insecure to run without authentication");
  std::fprintf(stderr,
               "kvroom %s: --insecure: no deployment secret; anyone who reaches this "
               "process's ports can join the deployment\n",
               command.c_str());
  return deployment_secret{};
}

} // namespace kvroom::cli

#include "kvroom/actors/control/directory_stores.hpp"

#include "kvroom/actors/control/directory/directory_core.hpp"
#include "kvroom/actors/control/etcd/etcd_store.hpp"
#include "kvroom/api/errors.hpp"

namespace kvroom {

const std::vector<directory_store>& directory_stores() {
  static const std::vector<directory_store> rows{
    etcd_directory_store(),
  };
  return rows;
}

caf::expected<const directory_store*> directory_store_of(const std::string& url) {
  auto colon = url.find("://");
  auto scheme = colon == std::string::npos ? std::string{} : url.substr(0, colon);
  std::string known;
  for (auto& row : directory_stores())
    for (auto& s : row.schemes) {
      if (s == scheme)
        return &row;
      known += (known.empty() ? "" : ", ") + s + "://";
    }
  return make_error(errc::invalid_config,
                    "directory '" + url + "': no store serves "
                      + (scheme.empty() ? std::string{"a URL without a scheme"}
                                        : "'" + scheme + "://'")
                      + " (this build has " + known + ")");
}

caf::expected<caf::actor> spawn_store_directory(caf::actor_system& sys,
                                                const directory_store& store,
                                                const directory_options& opts,
                                                std::shared_ptr<const membership> members,
                                                uint32_t max_ranks, uint32_t timeout_ms) {
  auto reached = store.connect(opts);
  if (!reached)
    return reached.error();
  directory_core_options core;
  core.name = store.name;
  core.prefix = opts.prefix;
  core.lease_ttl_ms = opts.lease_ttl_ms;
  core.max_ranks = max_ranks;
  core.registration_timeout_ms = opts.registration_timeout_ms;
  core.request_timeout_ms = reached->request_timeout_ms;
  return spawn_directory(sys, std::move(core), std::move(reached->connect), std::move(members),
                         timeout_ms);
}

} // namespace kvroom

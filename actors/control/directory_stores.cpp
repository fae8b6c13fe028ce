#include "kvroom/actors/control/directory_stores.hpp"

#include "kvroom/actors/control/etcd/etcd_directory.hpp"
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

} // namespace kvroom

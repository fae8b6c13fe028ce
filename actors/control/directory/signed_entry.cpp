#include "kvroom/actors/control/directory/signed_entry.hpp"
#include "kvroom/actors/control/directory/base64.hpp"

#include <nlohmann/json.hpp>

#include "caf/binary_deserializer.hpp"
#include "caf/binary_serializer.hpp"

#include "kvroom/api/errors.hpp"

namespace kvroom {

namespace {

using json = nlohmann::json;

constexpr int format_version = 1;

/// Everything of an entry but its manager handle: an actor handle needs a
/// proxy registry to be read back, and peers reach a manager through its
/// control endpoint anyway.
template <class Inspector>
caf::error entry_fields(Inspector& f, rank_entry& x) {
  return f(x.rank, x.layout, x.endpoints, x.control_host, x.control_port, x.incarnation,
           x.has_parallel, x.parallel, x.integrity);
}

caf::error malformed(const std::string& key, const std::string& why) {
  return make_error(errc::unauthorized, "directory entry " + key + ": " + why);
}

} // namespace

signed_entry_codec::signed_entry_codec(caf::actor_system& sys, std::string prefix,
                                       std::shared_ptr<const membership> members)
  : sys_(sys), ranks_prefix_(std::move(prefix) + "/ranks/"), members_(std::move(members)) {
  // nop
}

std::string signed_entry_codec::encode(const rank_entry& entry, int64_t lease) const {
  auto stored = entry;
  std::vector<char> buf;
  caf::binary_serializer sink{sys_, buf};
  if (auto err = entry_fields(sink, stored))
    throw std::logic_error("serializing a rank entry: " + sys_.render(err));
  std::string bytes{buf.begin(), buf.end()};
  auto key = key_of(entry.rank.id);
  // The readable fields are for operators (etcdctl get): readers trust only
  // the signed bytes.
  json doc{{"kvroom", format_version},
           {"rank", to_string(entry.rank)},
           {"control", entry.control_host + ":" + std::to_string(entry.control_port)},
           {"lease", std::to_string(lease)},
           {"entry", base64_encode(bytes)},
           {"mac", base64_encode(members_->directory_proof(key, lease, bytes))}};
  return doc.dump();
}

caf::expected<rank_entry> signed_entry_codec::decode(const store_kv& kv) const {
  if (kv.key.compare(0, ranks_prefix_.size(), ranks_prefix_) != 0)
    return malformed(kv.key, "not under " + ranks_prefix_);
  auto id_text = kv.key.substr(ranks_prefix_.size());
  if (id_text.empty() || id_text.size() > 10
      || id_text.find_first_not_of("0123456789") != std::string::npos)
    return malformed(kv.key, "not a rank id");
  auto id = static_cast<rank_id>(std::stoll(id_text));
  auto doc = json::parse(kv.value, nullptr, false);
  if (!doc.is_object() || doc.value("kvroom", 0) != format_version
      || !doc.contains("entry") || !doc["entry"].is_string() || !doc.contains("mac")
      || !doc["mac"].is_string() || !doc.contains("lease") || !doc["lease"].is_string())
    return malformed(kv.key, "not a kvroom entry of format " + std::to_string(format_version));
  int64_t lease = 0;
  try {
    lease = std::stoll(doc["lease"].get<std::string>());
  } catch (const std::exception&) {
    return malformed(kv.key, "bad lease");
  }
  if (lease == 0 || lease != kv.lease)
    return malformed(kv.key, "signed for lease " + std::to_string(lease) + ", stored on "
                               + std::to_string(kv.lease));
  auto bytes = base64_decode(doc["entry"].get<std::string>());
  auto mac = base64_decode(doc["mac"].get<std::string>());
  if (!bytes || !mac)
    return malformed(kv.key, "bad base64");
  if (!membership::matches(*mac, members_->directory_proof(kv.key, lease, *bytes)))
    return malformed(kv.key, "its proof fails (written without this deployment's secret)");
  rank_entry out;
  caf::binary_deserializer source{sys_, bytes->data(), bytes->size()};
  if (auto err = entry_fields(source, out))
    return malformed(kv.key, "unreadable: " + sys_.render(err));
  if (source.remaining() != 0)
    return malformed(kv.key, "trailing bytes");
  if (out.rank.id != id)
    return malformed(kv.key, "names rank " + std::to_string(out.rank.id));
  return out;
}

} // namespace kvroom

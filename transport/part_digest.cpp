#include "kvroom/transport/part_digest.hpp"

#include <algorithm>
#include <memory>

#include <xxhash.h>

namespace kvroom {

std::string to_string(integrity_mode x) {
  return x == integrity_mode::xxh3 ? "xxh3" : "off";
}

bool from_string(const std::string& str, integrity_mode& x) {
  if (str == "off" || str.empty()) {
    x = integrity_mode::off;
    return true;
  }
  if (str == "xxh3") {
    x = integrity_mode::xxh3;
    return true;
  }
  return false;
}

namespace {

struct state_deleter {
  void operator()(XXH3_state_t* s) const noexcept {
    XXH3_freeState(s);
  }
};

/// XXH3-64 over the bytes at `ops[i].*which`, in the order of the ops'
/// destinations.
uint64_t digest(std::vector<write_op> ops, uint64_t write_op::*which) {
  std::sort(ops.begin(), ops.end(),
            [](const write_op& a, const write_op& b) { return a.dst_addr < b.dst_addr; });
  std::unique_ptr<XXH3_state_t, state_deleter> st{XXH3_createState()};
  if (!st)
    throw std::bad_alloc();
  XXH3_64bits_reset(st.get());
  for (auto& op : ops)
    XXH3_64bits_update(st.get(), reinterpret_cast<const void*>(op.*which), op.size_bytes);
  return XXH3_64bits_digest(st.get());
}

} // namespace

uint64_t digest_sources(std::vector<write_op> ops) {
  return digest(std::move(ops), &write_op::src_addr);
}

uint64_t digest_destinations(std::vector<write_op> ops) {
  return digest(std::move(ops), &write_op::dst_addr);
}

} // namespace kvroom

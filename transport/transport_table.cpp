#include "kvroom/transport/transport_table.hpp"

#include "kvroom/api/backend.hpp"

// Each row is defined in its backend's folder; the build lists them once.
#define KVROOM_TRANSPORT(x) namespace kvroom { const transport_row& x##_transport(); }
#include "transport_rows.inc"
#undef KVROOM_TRANSPORT

namespace kvroom {

const std::vector<const transport_row*>& transport_table() {
  static const std::vector<const transport_row*> rows = {
#define KVROOM_TRANSPORT(x) &x##_transport(),
#include "transport_rows.inc"
#undef KVROOM_TRANSPORT
  };
  return rows;
}

const transport_row* find_transport(const std::string& name) {
  for (auto* row : transport_table())
    if (name == row->name)
      return row;
  return nullptr;
}

int transport_position(const std::string& name) {
  auto& rows = transport_table();
  for (size_t i = 0; i < rows.size(); ++i)
    if (name == rows[i]->name)
      return static_cast<int>(i);
  return -1;
}

std::string transport_names_text() {
  std::string out;
  for (auto* row : transport_table())
    out += (out.empty() ? "" : ", ") + std::string{row->name};
  return out;
}

} // namespace kvroom

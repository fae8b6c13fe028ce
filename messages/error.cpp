#include "kvroom/messages/error.hpp"

#include "caf/message.hpp"

namespace kvroom {

std::string to_string(errc x) {
  switch (x) {
    case errc::none: return "none";
    case errc::invalid_argument: return "invalid_argument";
    case errc::invalid_config: return "invalid_config";
    case errc::unknown_room: return "unknown_room";
    case errc::duplicate_room: return "duplicate_room";
    case errc::room_concluded: return "room_concluded";
    case errc::room_cleared: return "room_cleared";
    case errc::not_initialized: return "not_initialized";
    case errc::already_initialized: return "already_initialized";
    case errc::too_many_indices: return "too_many_indices";
    case errc::out_of_range: return "out_of_range";
    case errc::not_registered: return "not_registered";
    case errc::limit_reached: return "limit_reached";
    case errc::transport_error: return "transport_error";
    case errc::timeout: return "timeout";
    case errc::unavailable: return "unavailable";
    case errc::unsupported: return "unsupported";
    case errc::unauthorized: return "unauthorized";
    case errc::incompatible: return "incompatible";
    case errc::injected_fault: return "injected_fault";
  }
  return "errc(" + std::to_string(static_cast<int>(x)) + ")";
}

caf::error make_error(errc code, std::string context) {
  return caf::error{static_cast<uint8_t>(code), kvroom_error_atom::value,
                    caf::make_message(std::move(context))};
}

caf::error make_error(errc code) {
  return caf::error{static_cast<uint8_t>(code), kvroom_error_atom::value};
}

bool is(const caf::error& err, errc code) noexcept {
  return err && err.category() == kvroom_error_atom::value
         && err.code() == static_cast<uint8_t>(code);
}

std::string describe(const caf::error& err) {
  if (!err)
    return "no error";
  if (err.category() == kvroom_error_atom::value) {
    auto out = to_string(static_cast<errc>(err.code()));
    auto& ctx = err.context();
    if (ctx.match_elements<std::string>()) {
      out += ": ";
      out += ctx.get_as<std::string>(0);
    }
    return out;
  }
  return caf::to_string(err);
}

} // namespace kvroom

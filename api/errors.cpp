#include "kvroom/api/errors.hpp"

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

namespace {

#define KVROOM_CAUSE_NAME(name) #name,
constexpr const char* names[] = {KVROOM_FAILURE_CAUSES(KVROOM_CAUSE_NAME)};
#undef KVROOM_CAUSE_NAME

static_assert(sizeof(names) / sizeof(names[0]) == failure_cause_count);

} // namespace

std::string to_string(failure_cause x) {
  auto i = static_cast<size_t>(x);
  return i < failure_cause_count ? names[i] : "other";
}

failure_cause failure_cause_named(const std::string& name) {
  for (size_t i = 0; i < failure_cause_count; ++i)
    if (name == names[i])
      return static_cast<failure_cause>(i);
  return failure_cause::other;
}

std::string to_string(const kv_transfer_error& x) {
  std::string out = "KVTransferError(bootstrap_room=";
  out += std::to_string(x.bootstrap_room);
  out += "): ";
  out += x.failure_reason;
  return out;
}

bool operator==(const kv_transfer_error& x,
                const kv_transfer_error& y) noexcept {
  return x.bootstrap_room == y.bootstrap_room
         && x.failure_reason == y.failure_reason
         && x.is_from_another_rank == y.is_from_another_rank
         && x.origin_rank == y.origin_rank && x.cause == y.cause;
}

} // namespace kvroom

#include "kvroom/messages/failure_cause.hpp"

namespace kvroom {

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

} // namespace kvroom

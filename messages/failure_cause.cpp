#include "kvroom/messages/failure_cause.hpp"

namespace kvroom {

namespace {

bool has(const std::string& text, const char* what) {
  return text.find(what) != std::string::npos;
}

} // namespace

std::string to_string(failure_cause x) {
  static const char* names[] = {"timeout_bootstrapping", "timeout_waiting", "timeout_transferring",
                                "peer_lost",             "transport",       "bad_input",
                                "abort",                 "fault",           "integrity",
                                "other"};
  auto i = static_cast<size_t>(x);
  return i < failure_cause_count ? names[i] : "other";
}

failure_cause classify(const kv_transfer_error& err) {
  auto& r = err.failure_reason;
  // First what the others may quote: an injected fault reads like a
  // transport failure, a timeout may carry the decider's silence.
  // A check that caught damage is the cause, whatever did the damage.
  if (has(r, "integrity check failed"))
    return failure_cause::integrity;
  if (has(r, "injected "))
    return failure_cause::fault;
  if (has(r, "timed out in Bootstrapping"))
    return failure_cause::timeout_bootstrapping;
  if (has(r, "timed out in WaitingForInput"))
    return failure_cause::timeout_waiting;
  if (has(r, "timed out in Transferring") || has(r, "no commit from the room's decider"))
    return failure_cause::timeout_transferring;
  if ((has(r, "rank ") && has(r, " lost: ")) || has(r, "was closed while the room was live"))
    return failure_cause::peer_lost;
  if (has(r, "aborted by"))
    return failure_cause::abort;
  // A plan refused (an index outside the memory) names its destination.
  if (has(r, "cannot plan") || has(r, "cannot map") || has(r, "bad receiver init")
      || has(r, "bad send"))
    return failure_cause::bad_input;
  if (has(r, "transfer to ") || has(r, "cannot reach") || has(r, "tcp ") || has(r, "shm ")
      || has(r, "verbs") || has(r, "cuda") || has(r, "grant table"))
    return failure_cause::transport;
  if (has(r, "bad receiver init") || has(r, "bad send") || has(r, "KV indices")
      || has(r, "send before init") || has(r, "last chunk") || has(r, "out of range")
      || has(r, "allocated") || has(r, "declared") || has(r, "state indices")
      || has(r, "chunks queued")
      || has(r, "unsupported") || has(r, "destination"))
    return failure_cause::bad_input;
  return failure_cause::other;
}

} // namespace kvroom

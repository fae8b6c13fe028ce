#include "stress_check.hpp"

#include <algorithm>

namespace kvroom::stress {

std::string to_string(fault_kind x) {
  switch (x) {
    case fault_kind::none: return "none";
    case fault_kind::transfer: return "transfer";
    case fault_kind::flip: return "flip";
    case fault_kind::abort: return "abort";
    case fault_kind::kill_room: return "kill_room";
    case fault_kind::outage: return "outage";
    case fault_kind::bad_indices_all: return "bad_indices_all";
    case fault_kind::stall_all: return "stall_all";
    case fault_kind::abort_both: return "abort_both";
    case fault_kind::late_write: return "late_write";
  }
  return "fault_kind(?)";
}

std::string to_string(const violation& x) {
  return "room " + std::to_string(x.room) + ", rank " + std::to_string(x.rank)
         + ": " + x.what;
}

std::vector<violation> check_room(const room_record& rec) {
  std::vector<violation> out;
  auto add = [&](rank_id rank, std::string what) {
    out.push_back(violation{rec.room, rank, std::move(what)});
  };
  for (auto& o : rec.outcomes)
    if (!is_terminal(o.state))
      add(o.rank.id, "stuck in " + to_string(o.state));
  if (!out.empty())
    return out;
  for (auto side : {role::prefill, role::decode}) {
    const rank_outcome* ok = nullptr;
    const rank_outcome* bad = nullptr;
    for (auto& o : rec.outcomes) {
      if (o.rank.side != side)
        continue;
      (o.state == kv_poll::success ? ok : bad) = &o;
    }
    if (ok && bad)
      add(bad->rank.id, "Failed while " + to_string(ok->rank)
                          + " of the same side is Success");
  }
  std::vector<const rank_outcome*> failed;
  for (auto& o : rec.outcomes)
    if (o.state == kv_poll::failed)
      failed.push_back(&o);
  if (failed.empty()) {
    auto decode_ok = std::any_of(rec.outcomes.begin(), rec.outcomes.end(),
                                 [](auto& o) {
                                   return o.rank.side == role::decode
                                          && o.state == kv_poll::success;
                                 });
    if (decode_ok && !rec.data_error.empty())
      add(-1, "Success over wrong data: " + rec.data_error);
    return out;
  }
  for (auto* o : failed)
    if (!o->error) {
      add(o->rank.id, "Failed without a failure record");
      return out;
    }
  auto& first = *failed.front()->error;
  if (!rec.concurrent_origins.empty()) {
    // Each independent fault may be some rank's first cause, and so may one
    // timeout that the outage provoked; nothing else.
    std::vector<std::string> causes;
    for (auto* o : failed) {
      auto& e = *o->error;
      bool hit = std::find(rec.concurrent_origins.begin(), rec.concurrent_origins.end(),
                           e.origin_rank)
                 != rec.concurrent_origins.end();
      if (!hit && e.failure_reason.find("timed out") == std::string::npos
          && e.failure_reason.find("no commit") == std::string::npos)
        add(o->rank.id, "root cause from rank " + std::to_string(e.origin_rank)
                          + ", which no fault hit: " + e.failure_reason);
      auto cause = std::to_string(e.origin_rank) + ":" + e.failure_reason;
      if (std::find(causes.begin(), causes.end(), cause) == causes.end())
        causes.push_back(cause);
    }
    if (causes.size() > rec.concurrent_origins.size() + 1)
      add(first.origin_rank, std::to_string(causes.size()) + " different root causes for "
                               + std::to_string(rec.concurrent_origins.size())
                               + " concurrent faults");
    return out;
  }
  int origins = 0;
  for (auto* o : failed) {
    auto& e = *o->error;
    if (!e.is_from_another_rank) {
      ++origins;
      if (e.origin_rank != o->rank.id)
        add(o->rank.id, "claims to be the origin but names rank "
                          + std::to_string(e.origin_rank));
    }
    if (e.origin_rank != first.origin_rank
        || e.failure_reason != first.failure_reason)
      add(o->rank.id, "root cause differs: '" + e.failure_reason
                        + "' from rank " + std::to_string(e.origin_rank)
                        + " vs '" + first.failure_reason + "' from rank "
                        + std::to_string(first.origin_rank));
  }
  auto origin_in_room = std::any_of(
    rec.outcomes.begin(), rec.outcomes.end(),
    [&](auto& o) { return o.rank.id == first.origin_rank; });
  if (origin_in_room && origins != 1)
    add(first.origin_rank, std::to_string(origins)
                             + " ranks report themselves as origin of '"
                             + first.failure_reason + "' (expected 1)");
  if (!origin_in_room && origins != 0)
    add(first.origin_rank, "origin outside the room, yet a rank claims it");
  if (!rec.fault.fired)
    add(first.origin_rank, "failed without an injected fault: "
                             + first.failure_reason);
  else if (rec.fault.kind == fault_kind::flip) {
    // Damage is found where it landed: the origin is a decode rank.
    auto found = std::any_of(rec.outcomes.begin(), rec.outcomes.end(), [&](auto& o) {
      return o.rank.id == first.origin_rank && o.rank.side == role::decode;
    });
    if (!found)
      add(first.origin_rank, "a flipped byte from rank " + std::to_string(rec.fault.rank)
                               + " has origin rank " + std::to_string(first.origin_rank)
                               + ", not a decode rank of the room: " + first.failure_reason);
  } else if (rec.fault.rank >= 0 && first.origin_rank != rec.fault.rank)
    add(first.origin_rank, "origin is rank " + std::to_string(first.origin_rank)
                             + " but the " + to_string(rec.fault.kind)
                             + " fault was injected on rank "
                             + std::to_string(rec.fault.rank) + ": "
                             + first.failure_reason);
  return out;
}

} // namespace kvroom::stress

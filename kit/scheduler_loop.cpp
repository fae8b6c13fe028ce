#include "kvroom/kit/scheduler_loop.hpp"

#include "kvroom/api/errors.hpp"

namespace kvroom {

std::vector<rank*> ranks_of(const std::vector<std::unique_ptr<rank>>& xs) {
  std::vector<rank*> out;
  for (auto& x : xs)
    out.push_back(x.get());
  return out;
}

scheduler_loop::scheduler_loop(std::vector<rank*> prefill, std::vector<rank*> decode,
                               int32_t prefill_dp, size_t concurrency,
                               room_id first_room, uint64_t rooms, loop_hooks hooks)
  : prefill_(std::move(prefill)),
    decode_(std::move(decode)),
    prefill_dp_(prefill_dp),
    hooks_(std::move(hooks)),
    next_(first_room),
    end_(first_room + rooms) {
  for (size_t s = concurrency; s-- > 0;)
    free_slots_.push_back(s);
  in_flight_.reserve(concurrency);
}

bool scheduler_loop::open_room() {
  loop_room r;
  r.id = next_;
  r.slot = free_slots_.back();
  r.opened = std::chrono::steady_clock::now();
  for (auto* d : decode_) {
    auto h = d->make_receiver(r.id, prefill_dp_);
    if (!h) {
      open_error_ = describe(h.error());
      return false;
    }
    r.receivers.push_back(*h);
  }
  for (auto* p : prefill_) {
    auto h = p->make_sender(r.id);
    if (!h) {
      open_error_ = describe(h.error());
      for (auto& x : r.receivers)
        (void) x.clear();
      return false;
    }
    r.senders.push_back(*h);
  }
  ++next_;
  free_slots_.pop_back();
  r.sender_started.assign(r.senders.size(), false);
  r.receiver_started.assign(r.receivers.size(), false);
  if (hooks_.opened)
    hooks_.opened(r);
  in_flight_.push_back(std::move(r));
  return true;
}

bool scheduler_loop::step() {
  bool progressed = false;
  open_error_.clear();
  while (next_ < end_ && !free_slots_.empty()
         && (!hooks_.may_open || hooks_.may_open())) {
    if (!open_room()) {
      // Refused (e.g. a full rank): skip that id rather than spin on it.
      ++next_;
      break;
    }
    progressed = true;
  }
  for (size_t i = 0; i < in_flight_.size();) {
    auto& r = in_flight_[i];
    if (hooks_.each)
      hooks_.each(r);
    bool all_done = true;
    // One side's handles: poll each once, start it when it waits for input.
    auto drive = [&](auto& handles, std::vector<bool>& started, auto& ready) {
      for (size_t t = 0; t < handles.size(); ++t) {
        auto st = handles[t].poll();
        if (!started[t] && st == kv_poll::waiting_for_input
            && ready(r, static_cast<int>(t))) {
          started[t] = true;
          progressed = true;
        }
        all_done = all_done && is_terminal(st);
      }
    };
    drive(r.receivers, r.receiver_started, hooks_.receiver_ready);
    drive(r.senders, r.sender_started, hooks_.sender_ready);
    if (!all_done && !(hooks_.give_up && hooks_.give_up(r))) {
      ++i;
      continue;
    }
    progressed = true;
    if (hooks_.concluded)
      hooks_.concluded(r);
    for (auto& s : r.senders)
      (void) s.clear();
    for (auto& x : r.receivers)
      (void) x.clear();
    free_slots_.push_back(r.slot);
    ++concluded_;
    // Order does not matter to a scheduler; swap-and-pop keeps this O(1).
    if (i + 1 != in_flight_.size())
      in_flight_[i] = std::move(in_flight_.back());
    in_flight_.pop_back();
  }
  return progressed;
}

} // namespace kvroom

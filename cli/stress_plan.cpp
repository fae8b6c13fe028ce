#include "stress_plan.hpp"

namespace kvroom::stress {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace {

/// A reproducible stream of draws for one room.
struct draws {
  uint64_t state;
  double unit() {
    state = mix(state);
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  }
  uint64_t below(uint64_t n) {
    state = mix(state);
    return state % n;
  }
};

} // namespace

room_plan plan_for(uint64_t seed, room_id room, const fault_odds& odds, int tp) {
  draws d{seed ^ mix(room)};
  room_plan p;
  auto u = d.unit();
  p.tp = static_cast<int>(d.below(static_cast<uint64_t>(tp)));
  p.side = d.below(2) == 0 ? role::prefill : role::decode;
  static constexpr kv_poll states[] = {kv_poll::bootstrapping, kv_poll::waiting_for_input,
                                       kv_poll::transferring};
  p.at = states[d.below(3)];
  static constexpr fault_point points[] = {fault_point::before_post, fault_point::after_post,
                                           fault_point::on_aux, fault_point::bad_completion,
                                           fault_point::stall};
  p.point = points[d.below(5)];
  if (u < odds.transfer) {
    p.kind = fault_kind::transfer;
    p.side = role::prefill;
  } else if (u < odds.transfer + odds.abort) {
    p.kind = fault_kind::abort;
  } else if (u < odds.transfer + odds.abort + odds.kill_room) {
    p.kind = fault_kind::kill_room;
  } else if (u < odds.transfer + odds.abort + odds.kill_room + odds.multi) {
    // Drawn after every earlier draw, so old seeds keep their schedules.
    static constexpr fault_kind multi[] = {fault_kind::bad_indices_all,
                                           fault_kind::stall_all,
                                           fault_kind::abort_both};
    p.kind = multi[d.below(3)];
    if (p.kind == fault_kind::stall_all)
      p.point = fault_point::stall;
  } else if (u < odds.transfer + odds.abort + odds.kill_room + odds.multi
                   + odds.late_write) {
    p.kind = fault_kind::late_write;
    p.side = role::decode;
    p.at = kv_poll::transferring;
    p.point = fault_point::slow;
  } else if (u < odds.transfer + odds.abort + odds.kill_room + odds.multi + odds.late_write
                   + odds.flip) {
    p.kind = fault_kind::flip;
    p.side = role::prefill;
    p.point = fault_point::flip;
  }
  return p;
}

fault_plan transfer_faults(uint64_t seed, const fault_odds& odds, int tp_size, int tp,
                           room_id first, uint64_t count) {
  fault_plan out;
  for (room_id r = first; r < first + count; ++r) {
    auto p = plan_for(seed, r, odds, tp_size);
    if (((p.kind == fault_kind::transfer || p.kind == fault_kind::flip) && p.tp == tp)
        || p.kind == fault_kind::stall_all || p.kind == fault_kind::late_write)
      out.targeted.push_back({r, p.point});
  }
  return out;
}

} // namespace kvroom::stress

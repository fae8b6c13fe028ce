#include "kvroom/transport/verbs/link_fsm.hpp"

#include <cstring>

#include "kvroom/api/errors.hpp"

namespace kvroom::verbs {

namespace {

constexpr char magic[4] = {'K', 'V', 'R', 'V'};
constexpr uint8_t wire_version = 1;
// magic, version, kind, epoch, qpn, psn, lid, gid, mtu, region count
constexpr size_t header_bytes = 4 + 1 + 1 + 8 + 4 + 4 + 2 + 16 + 1 + 4;
constexpr size_t region_bytes = 8 + 8 + 4;

template <class T>
void put(std::string& out, T x) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((static_cast<uint64_t>(x) >> (8 * i)) & 0xff));
}

template <class T>
T get(const std::string& in, size_t& pos) {
  uint64_t x = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    x |= static_cast<uint64_t>(static_cast<uint8_t>(in[pos + i])) << (8 * i);
  pos += sizeof(T);
  return static_cast<T>(x);
}

caf::error malformed(const std::string& why) {
  return make_error(errc::invalid_argument, "malformed verbs connection message: " + why);
}

} // namespace

std::string encode(const hello& x) {
  std::string out;
  out.reserve(header_bytes + x.regions.size() * region_bytes);
  out.append(magic, sizeof(magic));
  put<uint8_t>(out, wire_version);
  put<uint8_t>(out, static_cast<uint8_t>(x.what));
  put<uint64_t>(out, x.epoch);
  put<uint32_t>(out, x.qp.qpn);
  put<uint32_t>(out, x.qp.psn);
  put<uint16_t>(out, x.qp.lid);
  out.append(reinterpret_cast<const char*>(x.qp.gid.data()), x.qp.gid.size());
  put<uint8_t>(out, x.qp.mtu);
  put<uint32_t>(out, static_cast<uint32_t>(x.regions.size()));
  for (auto& r : x.regions) {
    put<uint64_t>(out, r.addr);
    put<uint64_t>(out, r.size_bytes);
    put<uint32_t>(out, r.rkey);
  }
  return out;
}

caf::expected<hello> decode(const std::string& in) {
  if (in.size() < header_bytes)
    return malformed(std::to_string(in.size()) + " bytes, header needs "
                     + std::to_string(header_bytes));
  if (std::memcmp(in.data(), magic, sizeof(magic)) != 0)
    return malformed("bad magic");
  size_t pos = sizeof(magic);
  auto version = get<uint8_t>(in, pos);
  if (version != wire_version)
    return malformed("version " + std::to_string(version) + ", this build speaks "
                     + std::to_string(wire_version));
  hello out;
  auto what = get<uint8_t>(in, pos);
  if (what != 1 && what != 2)
    return malformed("unknown kind " + std::to_string(what));
  out.what = static_cast<hello::kind>(what);
  out.epoch = get<uint64_t>(in, pos);
  out.qp.qpn = get<uint32_t>(in, pos);
  out.qp.psn = get<uint32_t>(in, pos);
  out.qp.lid = get<uint16_t>(in, pos);
  std::memcpy(out.qp.gid.data(), in.data() + pos, out.qp.gid.size());
  pos += out.qp.gid.size();
  out.qp.mtu = get<uint8_t>(in, pos);
  auto count = get<uint32_t>(in, pos);
  if (out.qp.qpn == 0 || out.qp.qpn > 0xffffff)
    return malformed("queue pair number " + std::to_string(out.qp.qpn));
  if (out.qp.psn > 0xffffff)
    return malformed("psn " + std::to_string(out.qp.psn) + " wider than 24 bits");
  if (out.qp.mtu < 1 || out.qp.mtu > 5)
    return malformed("mtu code " + std::to_string(out.qp.mtu));
  if (count > max_hello_regions)
    return malformed(std::to_string(count) + " regions (at most "
                     + std::to_string(max_hello_regions) + ")");
  if (in.size() != header_bytes + count * region_bytes)
    return malformed(std::to_string(in.size()) + " bytes for " + std::to_string(count)
                     + " regions");
  out.regions.resize(count);
  for (auto& r : out.regions) {
    r.addr = get<uint64_t>(in, pos);
    r.size_bytes = get<uint64_t>(in, pos);
    r.rkey = get<uint32_t>(in, pos);
    if (r.size_bytes == 0 || r.addr + r.size_bytes < r.addr)
      return malformed("empty or wrapping region");
  }
  return out;
}

std::string to_string(link_state x) {
  switch (x) {
    case link_state::idle: return "idle";
    case link_state::connecting: return "connecting";
    case link_state::ready: return "ready";
  }
  return "link_state(?)";
}

link_fsm::link_fsm(rank_id self, rank_id peer, uint32_t connect_timeout_ms)
  : self_(self), peer_(peer), connect_timeout_ms_(connect_timeout_ms) {
  // nop
}

link_fsm::result link_fsm::need(uint64_t now_ms) {
  using k = link_step::kind;
  result out;
  switch (state_) {
    case link_state::ready:
      out.verdict = link_verdict::go;
      break;
    case link_state::idle:
      state_ = link_state::connecting;
      deadline_ms_ = now_ms + connect_timeout_ms_;
      ++epoch_;
      out.steps = {{k::create_qp, {}, 0}, {k::send_request, {}, epoch_}};
      out.verdict = link_verdict::wait;
      break;
    case link_state::connecting:
      if (now_ms < deadline_ms_) {
        out.verdict = link_verdict::wait;
        break;
      }
      state_ = link_state::idle;
      last_error_ = "no verbs connection to rank " + std::to_string(peer_) + " within "
                    + std::to_string(connect_timeout_ms_)
                    + " ms (its backend did not answer the connection request)";
      out.steps = {{k::destroy_qp, {}, 0}};
      out.verdict = link_verdict::fail;
      out.reason = last_error_;
      break;
  }
  return out;
}

link_fsm::result link_fsm::on_hello(const hello& msg, uint64_t) {
  using k = link_step::kind;
  result out;
  out.verdict = state_ == link_state::ready ? link_verdict::go : link_verdict::wait;
  if (msg.what == hello::kind::reply) {
    // Only the answer to this end's current attempt connects; a late reply
    // to an attempt that timed out names a queue pair that is gone.
    if (state_ == link_state::connecting && msg.epoch == epoch_) {
      out.steps = {{k::connect_qp, msg.qp, 0}};
      state_ = link_state::ready;
      remote_qpn_ = msg.qp.qpn;
      out.verdict = link_verdict::go;
    }
    return out;
  }
  switch (state_) {
    case link_state::idle:
      out.steps = {{k::create_qp, {}, 0}, {k::connect_qp, msg.qp, 0},
                   {k::send_reply, {}, msg.epoch}};
      break;
    case link_state::connecting:
      // Both ends asked at once: the lower rank's request wins and the
      // higher rank answers it with the queue pair it already has.
      if (self_ < peer_)
        return out;
      out.steps = {{k::connect_qp, msg.qp, 0}, {k::send_reply, {}, msg.epoch}};
      break;
    case link_state::ready:
      if (msg.qp.qpn == remote_qpn_) {
        // A repeated request (its reply was lost or is in flight): answer again.
        out.steps = {{k::send_reply, {}, msg.epoch}};
        return out;
      }
      // The peer re-established with a new queue pair: ours points at one
      // that no longer exists.
      out.steps = {{k::destroy_qp, {}, 0}, {k::create_qp, {}, 0},
                   {k::connect_qp, msg.qp, 0}, {k::send_reply, {}, msg.epoch}};
      break;
  }
  state_ = link_state::ready;
  remote_qpn_ = msg.qp.qpn;
  out.verdict = link_verdict::go;
  return out;
}

link_fsm::result link_fsm::on_qp_error(const std::string& reason) {
  result out;
  last_error_ = reason;
  out.reason = reason;
  out.verdict = link_verdict::fail;
  if (state_ != link_state::idle)
    out.steps = {{link_step::kind::destroy_qp, {}, 0}};
  state_ = link_state::idle;
  remote_qpn_ = 0;
  return out;
}

} // namespace kvroom::verbs

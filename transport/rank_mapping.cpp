#include "kvroom/transport/rank_mapping.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "kvroom/api/errors.hpp"
#include "kvroom/transport/transfer_plan.hpp"

namespace kvroom {

namespace {

caf::error unmappable(const std::string& why) {
  return make_error(errc::incompatible, "layouts cannot be mapped: " + why);
}

/// The prefill group as a full TP x PP grid, its stages splitting the
/// model's layers in order; empty when it is one, else why not.
std::string check_group(const std::vector<parallel_layout>& group,
                        std::map<prefill_place, const parallel_layout*>& by_place,
                        int32_t& total_layers) {
  if (group.empty())
    return "no prefill rank";
  auto& first = group.front();
  for (auto& x : group) {
    if (auto why = check(x); !why.empty())
      return "prefill TP " + std::to_string(x.tp_rank) + " PP " + std::to_string(x.pp_rank)
             + ": " + why;
    if (x.tp_size != first.tp_size || x.pp_size != first.pp_size
        || x.total_kv_heads != first.total_kv_heads || x.head_dim != first.head_dim
        || x.bytes_per_element != first.bytes_per_element
        || x.tokens_per_page != first.tokens_per_page || x.order != first.order
        || x.mla != first.mla)
      return "the prefill ranks disagree on TP/PP size or the model's shape";
    if (!by_place.emplace(prefill_place{x.tp_rank, x.pp_rank}, &x).second)
      return "two prefill ranks at TP " + std::to_string(x.tp_rank) + " PP "
             + std::to_string(x.pp_rank);
  }
  if (by_place.size() != static_cast<size_t>(first.tp_size) * static_cast<size_t>(first.pp_size))
    return std::to_string(by_place.size()) + " prefill ranks for TP "
           + std::to_string(first.tp_size) + " x PP " + std::to_string(first.pp_size);
  // Stage s starts where stage s - 1 ends, the same on every TP rank.
  int32_t next = 0;
  for (int32_t s = 0; s < first.pp_size; ++s) {
    auto& stage = *by_place[prefill_place{0, s}];
    for (int32_t t = 1; t < first.tp_size; ++t) {
      auto& x = *by_place[prefill_place{t, s}];
      if (x.first_layer != stage.first_layer || x.layers != stage.layers)
        return "PP stage " + std::to_string(s) + " holds different layers on different TP ranks";
    }
    if (stage.first_layer != next)
      return "PP stage " + std::to_string(s) + " starts at layer "
             + std::to_string(stage.first_layer) + ", expected " + std::to_string(next);
    next += stage.layers;
  }
  total_layers = next;
  return {};
}

} // namespace

caf::expected<decode_mapping> map_decode_rank(const std::vector<parallel_layout>& prefill_group,
                                              const parallel_layout& decode) {
  std::map<prefill_place, const parallel_layout*> by_place;
  int32_t total_layers = 0;
  if (auto why = check_group(prefill_group, by_place, total_layers); !why.empty())
    return unmappable(why);
  if (auto why = check(decode); !why.empty())
    return unmappable("decode TP " + std::to_string(decode.tp_rank) + ": " + why);
  auto& p = prefill_group.front();
  if (decode.pp_size != 1)
    return unmappable("decode PP size " + std::to_string(decode.pp_size)
                      + " (a decode rank holds every layer)");
  if (decode.first_layer != 0 || decode.layers != total_layers)
    return unmappable("decode holds layers [" + std::to_string(decode.first_layer) + ", "
                      + std::to_string(decode.first_layer + decode.layers)
                      + "), prefill's stages hold [0, " + std::to_string(total_layers) + ")");
  if (decode.mla != p.mla)
    return unmappable(std::string{"MLA on "} + (p.mla ? "prefill" : "decode") + " only");
  if (!p.mla && decode.total_kv_heads != p.total_kv_heads)
    return unmappable(std::to_string(p.total_kv_heads) + " KV heads on prefill, "
                      + std::to_string(decode.total_kv_heads) + " on decode");
  if (decode.head_dim != p.head_dim || decode.bytes_per_element != p.bytes_per_element)
    return unmappable("head_dim x bytes per element " + std::to_string(p.head_dim) + " x "
                      + std::to_string(p.bytes_per_element) + " on prefill, "
                      + std::to_string(decode.head_dim) + " x "
                      + std::to_string(decode.bytes_per_element) + " on decode");
  if (decode.tokens_per_page != p.tokens_per_page)
    return unmappable(std::to_string(p.tokens_per_page) + " tokens per page on prefill, "
                      + std::to_string(decode.tokens_per_page) + " on decode");
  // Where each of this decode rank's heads comes from: the prefill TP rank
  // holding it (a replicated head: the copy matching this rank, to spread
  // the senders), and its place there.
  struct source {
    int32_t tp_rank;
    int32_t local_head;
  };
  std::vector<source> from;
  for (int32_t j = 0; j < decode.local_heads(); ++j) {
    if (p.mla) {
      from.push_back({decode.tp_rank % p.tp_size, 0});
      continue;
    }
    auto head = decode.first_head() + j;
    auto heads = p.total_kv_heads;
    if (p.tp_size <= heads) {
      auto per = heads / p.tp_size;
      from.push_back({head / per, head % per});
    } else {
      auto rep = p.tp_size / heads;
      from.push_back({head * rep + decode.tp_rank % rep, 0});
    }
  }
  decode_mapping out;
  auto hb = decode.head_bytes();
  for (int32_t layer = 0; layer < total_layers; ++layer) {
    // The stage holding the layer.
    int32_t stage = 0;
    while (!by_place[prefill_place{0, stage}]->holds_layer(layer))
      ++stage;
    auto per = static_cast<uint32_t>(decode.buffers_per_layer());
    for (uint32_t kv = 0; kv < per; ++kv) {
      auto dst_buffer = per * static_cast<uint32_t>(layer) + kv;
      auto add = [&](int32_t token, int32_t j) {
        prefill_place src{from[static_cast<size_t>(j)].tp_rank, stage};
        auto& sl = *by_place[src];
        slice_write w;
        w.src = src;
        w.layer = layer;
        w.src_buffer = per * static_cast<uint32_t>(layer - sl.first_layer) + kv;
        w.dst_buffer = dst_buffer;
        w.src_offset = sl.offset(token, from[static_cast<size_t>(j)].local_head);
        w.dst_offset = decode.offset(token, j);
        w.length = hb;
        if (!out.writes.empty()) {
          auto& last = out.writes.back();
          if (last.src == w.src && last.src_buffer == w.src_buffer
              && last.dst_buffer == w.dst_buffer && last.src_offset + last.length == w.src_offset
              && last.dst_offset + last.length == w.dst_offset) {
            last.length += w.length;
            return;
          }
        }
        out.writes.push_back(w);
      };
      // In the decode page's memory order, so neighbours in it meet.
      if (decode.order == page_order::nhd) {
        for (int32_t t = 0; t < decode.tokens_per_page; ++t)
          for (int32_t j = 0; j < decode.local_heads(); ++j)
            add(t, j);
      } else {
        for (int32_t j = 0; j < decode.local_heads(); ++j)
          for (int32_t t = 0; t < decode.tokens_per_page; ++t)
            add(t, j);
      }
    }
  }
  for (auto& w : out.writes)
    if (std::find(out.sources.begin(), out.sources.end(), w.src) == out.sources.end())
      out.sources.push_back(w.src);
  std::sort(out.sources.begin(), out.sources.end());
  out.aux_source = out.sources.front();
  return out;
}

namespace {

bool same(const parallel_layout& a, const parallel_layout& b) noexcept {
  return a.tp_size == b.tp_size && a.tp_rank == b.tp_rank && a.pp_size == b.pp_size
         && a.pp_rank == b.pp_rank && a.first_layer == b.first_layer && a.layers == b.layers
         && a.total_kv_heads == b.total_kv_heads && a.head_dim == b.head_dim
         && a.bytes_per_element == b.bytes_per_element && a.tokens_per_page == b.tokens_per_page
         && a.order == b.order && a.mla == b.mla;
}

/// The mappings computed so far, newest last. The mutex is held for a scan
/// of a few entries, never while a mapping is computed. Not published under
/// `grace_period`: its writers are room actors, and a grace period may wait
/// on a TCP receiver's open section, which an actor must not.
class mapping_cache {
public:
  struct entry {
    std::vector<parallel_layout> group;
    parallel_layout decode;
    std::shared_ptr<const decode_mapping> mapping;

    bool is(const std::vector<parallel_layout>& g, const parallel_layout& d) const noexcept {
      if (!same(decode, d) || group.size() != g.size())
        return false;
      for (size_t i = 0; i < g.size(); ++i)
        if (!same(group[i], g[i]))
          return false;
      return true;
    }
  };

  static mapping_cache& get() {
    static mapping_cache instance;
    return instance;
  }

  std::shared_ptr<const decode_mapping> find(const std::vector<parallel_layout>& group,
                                             const parallel_layout& decode) const {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& e : entries_)
      if (e.is(group, decode))
        return e.mapping;
    return nullptr;
  }

  void add(const std::vector<parallel_layout>& group, const parallel_layout& decode,
           std::shared_ptr<const decode_mapping> mapping) {
    std::lock_guard<std::mutex> guard{mtx_};
    for (auto& e : entries_)
      if (e.is(group, decode))
        return; // another room computed it meanwhile
    if (entries_.size() >= mapping_cache_entries)
      entries_.erase(entries_.begin());
    entries_.push_back(entry{group, decode, std::move(mapping)});
  }

private:
  mutable std::mutex mtx_;
  std::vector<entry> entries_;
};

} // namespace

caf::expected<std::shared_ptr<const decode_mapping>>
shared_decode_mapping(const std::vector<parallel_layout>& prefill_group,
                      const parallel_layout& decode) {
  auto& cache = mapping_cache::get();
  if (auto hit = cache.find(prefill_group, decode))
    return hit;
  auto m = map_decode_rank(prefill_group, decode);
  if (!m)
    return std::move(m.error());
  auto out = std::make_shared<const decode_mapping>(std::move(*m));
  cache.add(prefill_group, decode, out);
  return out;
}

caf::expected<room_mapping> map_room(const std::vector<parallel_layout>& prefill_group,
                                     const std::vector<parallel_layout>& decode_group) {
  room_mapping out;
  if (decode_group.empty())
    return unmappable("no decode rank");
  std::vector<bool> seen(static_cast<size_t>(std::max(decode_group.front().tp_size, 1)), false);
  out.decode.resize(seen.size());
  for (auto& d : decode_group) {
    if (d.tp_size != decode_group.front().tp_size || d.tp_rank < 0
        || d.tp_rank >= d.tp_size || seen[static_cast<size_t>(d.tp_rank)])
      return unmappable("the decode group is not one TP group of "
                        + std::to_string(decode_group.front().tp_size) + " ranks");
    seen[static_cast<size_t>(d.tp_rank)] = true;
    auto m = map_decode_rank(prefill_group, d);
    if (!m)
      return std::move(m.error());
    out.decode[static_cast<size_t>(d.tp_rank)] = std::move(*m);
  }
  if (std::find(seen.begin(), seen.end(), false) != seen.end())
    return unmappable("the decode group lacks a TP rank");
  for (auto& x : prefill_group)
    out.prefill.push_back(prefill_place{x.tp_rank, x.pp_rank});
  std::sort(out.prefill.begin(), out.prefill.end());
  out.targets.resize(out.prefill.size());
  for (size_t i = 0; i < out.prefill.size(); ++i)
    for (size_t d = 0; d < out.decode.size(); ++d) {
      auto& src = out.decode[d].sources;
      if (std::find(src.begin(), src.end(), out.prefill[i]) != src.end())
        out.targets[i].push_back(static_cast<int32_t>(d));
    }
  return out;
}

parallel_layout decode_layout_like(const parallel_layout& prefill, int32_t total_layers,
                                   int32_t tp_size, int32_t tp_rank) {
  auto x = prefill;
  x.tp_size = tp_size;
  x.tp_rank = tp_rank;
  x.pp_size = 1;
  x.pp_rank = 0;
  x.first_layer = 0;
  x.layers = total_layers;
  return x;
}

caf::expected<parallel_layout> implied_layout(const parallel_layout& declared, int32_t tp_size,
                                              int32_t tp_rank,
                                              const std::vector<paged_buffer>& kv) {
  auto x = decode_layout_like(declared, 1, tp_size, tp_rank);
  auto per_layer = static_cast<size_t>(x.buffers_per_layer());
  if (kv.empty() || kv.size() % per_layer != 0)
    return unmappable(std::to_string(kv.size()) + " KV buffers are not "
                      + (x.mla ? "latent buffers" : "K and V") + " of whole layers");
  x.layers = static_cast<int32_t>(kv.size() / per_layer);
  if (auto why = check(x); !why.empty())
    return unmappable("the model at TP " + std::to_string(tp_size) + ": " + why);
  for (size_t b = 0; b < kv.size(); ++b)
    if (kv[b].page_size_bytes != x.page_bytes())
      return unmappable("KV buffer " + std::to_string(b) + " has pages of "
                        + std::to_string(kv[b].page_size_bytes) + " B, the model's at TP "
                        + std::to_string(tp_size) + " are " + std::to_string(x.page_bytes())
                        + " B");
  return x;
}

caf::expected<std::vector<int32_t>> prefill_targets(const std::vector<parallel_layout>& group,
                                                    const parallel_layout& me, int32_t decode_tp) {
  if (decode_tp < 1 || decode_tp > 4096)
    return unmappable("decode TP size " + std::to_string(decode_tp));
  int32_t total_layers = 0;
  for (auto& x : group)
    total_layers = std::max(total_layers, x.first_layer + x.layers);
  prefill_place mine{me.tp_rank, me.pp_rank};
  std::vector<int32_t> out;
  for (int32_t t = 0; t < decode_tp; ++t) {
    // Shared: a prefill room asks this for every decode TP rank.
    auto m = shared_decode_mapping(group, decode_layout_like(me, total_layers, decode_tp, t));
    if (!m)
      return std::move(m.error());
    auto& sources = (*m)->sources;
    if (std::find(sources.begin(), sources.end(), mine) != sources.end())
      out.push_back(t);
  }
  return out;
}

std::string parallel_conflict(const parallel_layout& a, bool prefill_a, const parallel_layout& b,
                              bool prefill_b) {
  if (auto why = check(a); !why.empty())
    return why;
  if (auto why = check(b); !why.empty())
    return why;
  auto shape = [](const parallel_layout& x) {
    return std::to_string(x.mla ? 0 : x.total_kv_heads) + " KV heads x head_dim "
           + std::to_string(x.head_dim) + " x " + std::to_string(x.bytes_per_element)
           + " B, " + std::to_string(x.tokens_per_page) + " tokens per page"
           + (x.mla ? ", MLA" : "");
  };
  bool same_shape = a.head_dim == b.head_dim && a.bytes_per_element == b.bytes_per_element
                    && a.tokens_per_page == b.tokens_per_page && a.mla == b.mla
                    && (a.mla || a.total_kv_heads == b.total_kv_heads);
  if (!same_shape)
    return "the model's KV shape differs: " + shape(a) + " against " + shape(b);
  if (prefill_a == prefill_b) {
    if (a.tp_size != b.tp_size || a.pp_size != b.pp_size)
      return "TP x PP " + std::to_string(a.tp_size) + " x " + std::to_string(a.pp_size)
             + " against " + std::to_string(b.tp_size) + " x " + std::to_string(b.pp_size)
             + " on one side";
    if (a.order != b.order)
      return "page order " + to_string(a.order) + " against " + to_string(b.order) + " on one side";
    if (a.pp_rank == b.pp_rank && (a.first_layer != b.first_layer || a.layers != b.layers))
      return "PP stage " + std::to_string(a.pp_rank) + " holds different layers on two ranks";
    return {};
  }
  auto& p = prefill_a ? a : b;
  auto& d = prefill_a ? b : a;
  if (d.pp_size != 1)
    return "decode PP size " + std::to_string(d.pp_size) + " (a decode rank holds every layer)";
  if (d.first_layer != 0 || p.first_layer + p.layers > d.layers)
    return "prefill PP stage " + std::to_string(p.pp_rank) + " holds layers ["
           + std::to_string(p.first_layer) + ", " + std::to_string(p.first_layer + p.layers)
           + "), decode holds [" + std::to_string(d.first_layer) + ", "
           + std::to_string(d.first_layer + d.layers) + ")";
  return {};
}

namespace {

/// Empty when `mem` holds the K and V buffers `x` describes, else why not.
std::string check_memory(const parallel_layout& x, const memory_layout& mem, const char* side) {
  auto want = static_cast<size_t>(x.kv_buffers());
  if (mem.kv.size() != want)
    return std::string{side} + " has " + std::to_string(mem.kv.size()) + " KV buffers, its layout "
           + std::to_string(want) + (x.mla ? " (one latent buffer" : " (K and V")
           + " of each of " + std::to_string(x.layers) + " layers)";
  for (size_t b = 0; b < want; ++b)
    if (mem.kv[b].page_size_bytes != x.page_bytes())
      return std::string{side} + " buffer " + std::to_string(b) + " has pages of "
             + std::to_string(mem.kv[b].page_size_bytes) + " B, its layout "
             + std::to_string(x.page_bytes()) + " B";
  return {};
}

} // namespace

caf::expected<std::vector<write_op>>
plan_mapped_writes(const decode_mapping& m, const prefill_place& src,
                   const parallel_layout& src_layout, const parallel_layout& dst_layout,
                   const memory_layout& src_mem, const memory_layout& dst_mem,
                   const std::vector<int64_t>& src_pages, const std::vector<int64_t>& dst_pages,
                   std::vector<strided_write>* strided) {
  if (src_pages.size() != dst_pages.size())
    return make_error(errc::invalid_argument,
                      "chunk has " + std::to_string(src_pages.size()) + " source pages but "
                        + std::to_string(dst_pages.size()) + " destination pages");
  if (auto why = check_memory(src_layout, src_mem, "the source"); !why.empty())
    return make_error(errc::invalid_argument, why);
  if (auto why = check_memory(dst_layout, dst_mem, "the destination"); !why.empty())
    return make_error(errc::invalid_argument, why);
  auto in_range = [](int64_t idx, const paged_buffer& b) {
    return idx >= 0 && static_cast<uint64_t>(idx) < b.num_pages();
  };
  for (size_t i = 0; i < src_pages.size(); ++i)
    for (size_t b = 0; b < src_mem.kv.size() || b < dst_mem.kv.size(); ++b) {
      if (b < src_mem.kv.size() && !in_range(src_pages[i], src_mem.kv[b]))
        return make_error(errc::out_of_range, "source page index " + std::to_string(src_pages[i])
                                                + " out of range in buffer " + std::to_string(b));
      if (b < dst_mem.kv.size() && !in_range(dst_pages[i], dst_mem.kv[b]))
        return make_error(errc::out_of_range,
                          "destination page index " + std::to_string(dst_pages[i])
                            + " out of range in buffer " + std::to_string(b));
    }
  // Reserved: a head-sliced NHD part is 16 writes a page per buffer (16,384
  // for a realistic room), and growing the vector to that showed in profiles.
  size_t mine = 0;
  for (auto& w : m.writes)
    mine += w.src == src ? 1 : 0;
  // A few more for the tail's state and aux writes (plan_part appends them:
  // growing a 16,384-write vector by one copied all of it).
  std::vector<write_op> ops;
  // Writes planned in all, strided ones counted by their rows.
  size_t planned = 0;
  if (strided == nullptr)
    ops.reserve(std::min(mine * src_pages.size(), max_planned_writes) + 8);
  auto too_many = [] {
    return make_error(errc::limit_reached,
                      "chunk needs more than " + std::to_string(max_planned_writes) + " writes");
  };
  // A buffer's slices page by page: the writes of one page (an NHD page's
  // 16 tokens) follow each other, so the source is read in order, and the
  // batches of a chunk for the decode ranks sharing this page take their
  // slices of it at the same index (a copying backend interleaves them:
  // backend::post_group). Writes of one buffer are adjacent in `m.writes`
  // (in the decode page's order, layer by layer).
  std::vector<const slice_write*> group;
  auto& ws = m.writes;
  for (size_t first = 0; first < ws.size();) {
    auto last = first + 1;
    while (last < ws.size() && ws[last].src_buffer == ws[first].src_buffer
           && ws[last].dst_buffer == ws[first].dst_buffer)
      ++last;
    group.clear();
    for (auto k = first; k < last; ++k) {
      auto& w = ws[k];
      if (!(w.src == src))
        continue;
      if (w.src_buffer >= src_mem.kv.size() || w.dst_buffer >= dst_mem.kv.size()
          || w.src_offset + w.length > src_layout.page_bytes()
          || w.dst_offset + w.length > dst_layout.page_bytes())
        return make_error(errc::invalid_argument, "a mapping slice outside the page (buffer "
                                                    + std::to_string(w.src_buffer) + " -> "
                                                    + std::to_string(w.dst_buffer) + ")");
      group.push_back(&w);
    }
    first = last;
    if (group.empty())
      continue;
    auto& sb = src_mem.kv[group.front()->src_buffer];
    auto& db = dst_mem.kv[group.front()->dst_buffer];
    // Rows: the page's slices are of one length at fixed, rising strides.
    auto* g0 = group.front();
    bool rows = strided != nullptr && group.size() > 1 && group[1]->src_offset > g0->src_offset
                && group[1]->dst_offset > g0->dst_offset;
    uint64_t src_stride = rows ? group[1]->src_offset - g0->src_offset : 0;
    uint64_t dst_stride = rows ? group[1]->dst_offset - g0->dst_offset : 0;
    for (size_t k = 1; rows && k < group.size(); ++k)
      rows = group[k]->length == g0->length
             && group[k]->src_offset == g0->src_offset + k * src_stride
             && group[k]->dst_offset == g0->dst_offset + k * dst_stride;
    // Writes merge only within this buffer pair: buffers registered one by
    // one may lie back to back in memory (a caching allocator's), and a
    // write across two registrations is outside either.
    auto ops_here = ops.size();
    auto strided_here = strided ? strided->size() : 0;
    for (size_t i = 0; i < src_pages.size(); ++i) {
      auto src_page = sb.mem.addr + static_cast<uint64_t>(src_pages[i]) * sb.page_size_bytes;
      auto dst_page = db.mem.addr + static_cast<uint64_t>(dst_pages[i]) * db.page_size_bytes;
      if (rows) {
        if ((planned += group.size()) > max_planned_writes)
          return too_many();
        strided_write w{src_page + g0->src_offset, dst_page + g0->dst_offset, g0->length,
                        group.size(), src_stride, dst_stride};
        auto& ws = *strided;
        if (ws.size() > strided_here) {
          // The previous page's rows continue into this page's: one write.
          auto& prev = ws.back();
          if (prev.size_bytes == w.size_bytes && prev.src_stride == src_stride
              && prev.dst_stride == dst_stride
              && prev.src_addr + prev.count * src_stride == w.src_addr
              && prev.dst_addr + prev.count * dst_stride == w.dst_addr) {
            prev.count += w.count;
            continue;
          }
        }
        ws.push_back(w);
        continue;
      }
      for (auto* w : group) {
        write_op op{src_page + w->src_offset, dst_page + w->dst_offset, w->length};
        if (ops.size() > ops_here && ops.back().src_addr + ops.back().size_bytes == op.src_addr
            && ops.back().dst_addr + ops.back().size_bytes == op.dst_addr) {
          ops.back().size_bytes += op.size_bytes;
          continue;
        }
        if (++planned > max_planned_writes)
          return too_many();
        ops.push_back(op);
      }
    }
  }
  return ops;
}

caf::expected<std::vector<write_op>>
plan_part(const part_spec& part, const std::vector<int64_t>& src_pages,
          const std::vector<int64_t>& dst_pages, bool tail, int64_t src_aux, int64_t dst_aux,
          const std::vector<int64_t>& src_state, const std::vector<int64_t>& dst_state,
          uint32_t& aux_ops, std::vector<strided_write>* strided) {
  aux_ops = 0;
  if (strided != nullptr)
    strided->clear();
  auto& src = *part.src_mem;
  auto& dst = *part.dst_mem;
  auto ops = part.mapping ? plan_mapped_writes(*part.mapping, part.src_place, *part.src_parallel,
                                               *part.dst_parallel, src, dst, src_pages, dst_pages,
                                               strided)
                          : plan_writes(src, dst, src_pages, dst_pages);
  if (!ops && strided != nullptr)
    strided->clear(); // nothing is planned partially
  if (!ops || !tail || !part.sends_aux())
    return ops;
  // A hybrid model's state, then the aux slot, which stays last.
  if (!src.state.empty()) {
    auto state = plan_state_writes(src, dst, src_state, dst_state);
    if (!state)
      return make_error(errc::invalid_argument, "state: " + describe(state.error()));
    ops->insert(ops->end(), state->begin(), state->end());
  }
  if (!src.aux.empty()) {
    auto aux = plan_aux_writes(src, dst, src_aux, dst_aux);
    if (!aux)
      return make_error(errc::invalid_argument, "aux: " + describe(aux.error()));
    aux_ops = static_cast<uint32_t>(aux->size());
    ops->insert(ops->end(), aux->begin(), aux->end());
  }
  return ops;
}

} // namespace kvroom

#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <vector>

#include "kvroom/transport/rank_mapping.hpp"

using namespace kvroom;

namespace {

constexpr int32_t layers = 4;
constexpr int32_t head_dim = 2;
constexpr int32_t bpe = 2;
constexpr int32_t tokens = 3;

struct grid_point {
  int32_t ptp, dtp, heads, pp;
  page_order porder, dorder;
  bool mla;
};

std::string name(const grid_point& g) {
  return "prefill TP " + std::to_string(g.ptp) + " PP " + std::to_string(g.pp) + " "
         + to_string(g.porder) + ", decode TP " + std::to_string(g.dtp) + " "
         + to_string(g.dorder) + ", " + std::to_string(g.heads) + " KV heads"
         + (g.mla ? ", MLA" : "");
}

parallel_layout layout(int32_t tp_size, int32_t tp_rank, int32_t pp_size, int32_t pp_rank,
                       int32_t heads, page_order order, bool mla) {
  parallel_layout x;
  x.tp_size = tp_size;
  x.tp_rank = tp_rank;
  x.pp_size = pp_size;
  x.pp_rank = pp_rank;
  x.first_layer = pp_rank * (layers / pp_size);
  x.layers = layers / pp_size;
  x.total_kv_heads = heads;
  x.head_dim = head_dim;
  x.bytes_per_element = bpe;
  x.tokens_per_page = tokens;
  x.order = order;
  x.mla = mla;
  return x;
}

/// The byte every correct mapping puts at (layer, K/V, global head, token,
/// byte of the head).
uint8_t value(int32_t layer, uint32_t kv, int32_t head, int32_t token, uint64_t b) {
  auto h = static_cast<uint64_t>(layer) * 1000003u + kv * 7919u
           + static_cast<uint64_t>(head) * 104729u + static_cast<uint64_t>(token) * 31u + b;
  return static_cast<uint8_t>((h * 2654435761u) >> 13);
}

/// One page of every K and V buffer of a rank, filled (source) or expected
/// (destination) with `value`.
std::vector<std::vector<uint8_t>> pages(const parallel_layout& x) {
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(x.kv_buffers()));
  auto per = static_cast<uint32_t>(x.buffers_per_layer());
  for (int32_t l = 0; l < x.layers; ++l)
    for (uint32_t kv = 0; kv < per; ++kv) {
      auto& page = out[per * static_cast<size_t>(l) + kv];
      page.assign(x.page_bytes(), 0);
      for (int32_t h = 0; h < x.local_heads(); ++h)
        for (int32_t t = 0; t < x.tokens_per_page; ++t)
          for (uint64_t b = 0; b < x.head_bytes(); ++b)
            page[x.offset(t, h) + b] = value(x.first_layer + l, kv, x.first_head() + h, t, b);
    }
  return out;
}

std::vector<grid_point> grid() {
  std::vector<grid_point> out;
  for (int32_t ptp : {1, 2, 4, 8})
    for (int32_t dtp : {1, 2, 4, 8})
      for (int32_t heads : {1, 2, 8})
        for (int32_t pp : {1, 2, 4})
          for (auto order : {page_order::nhd, page_order::hnd})
            for (bool mla : {false, true})
              out.push_back({ptp, dtp, heads, pp, order, order, mla});
  // Different page orders on the two sides map too, element by element.
  out.push_back({2, 4, 8, 1, page_order::nhd, page_order::hnd, false});
  out.push_back({4, 2, 8, 2, page_order::hnd, page_order::nhd, false});
  return out;
}

} // namespace

TEST_CASE("rank mapping: every decode byte is written exactly once, by the right source") {
  size_t points = 0;
  for (auto& g : grid()) {
    INFO(name(g));
    std::vector<parallel_layout> prefill, decode;
    for (int32_t s = 0; s < g.pp; ++s)
      for (int32_t t = 0; t < g.ptp; ++t)
        prefill.push_back(layout(g.ptp, t, g.pp, s, g.heads, g.porder, g.mla));
    for (int32_t t = 0; t < g.dtp; ++t)
      decode.push_back(layout(g.dtp, t, 1, 0, g.heads, g.dorder, g.mla));
    auto room = map_room(prefill, decode);
    REQUIRE(room);
    std::map<prefill_place, std::vector<std::vector<uint8_t>>> src;
    for (auto& x : prefill)
      src[prefill_place{x.tp_rank, x.pp_rank}] = pages(x);
    for (auto& d : decode) {
      auto& m = room->decode[static_cast<size_t>(d.tp_rank)];
      auto expected = pages(d);
      std::vector<std::vector<uint8_t>> got(expected.size());
      std::vector<std::vector<int>> writes(expected.size());
      for (size_t b = 0; b < expected.size(); ++b) {
        got[b].assign(expected[b].size(), 0);
        writes[b].assign(expected[b].size(), 0);
      }
      for (auto& w : m.writes) {
        REQUIRE(src.count(w.src) == 1);
        auto& from = src[w.src][w.src_buffer];
        REQUIRE(w.dst_buffer < got.size());
        REQUIRE(w.src_offset + w.length <= from.size());
        REQUIRE(w.dst_offset + w.length <= got[w.dst_buffer].size());
        std::memcpy(got[w.dst_buffer].data() + w.dst_offset, from.data() + w.src_offset, w.length);
        for (uint64_t i = 0; i < w.length; ++i)
          ++writes[w.dst_buffer][w.dst_offset + i];
      }
      for (size_t b = 0; b < expected.size(); ++b) {
        CHECK(std::all_of(writes[b].begin(), writes[b].end(), [](int n) { return n == 1; }));
        CHECK(got[b] == expected[b]);
      }
      // The aux source is one of the sources; MLA sends from one rank per
      // stage; equal TP, one order, no MLA: one whole-page write per buffer.
      CHECK(std::find(m.sources.begin(), m.sources.end(), m.aux_source) != m.sources.end());
      if (g.mla)
        CHECK(m.sources.size() == static_cast<size_t>(g.pp));
      if (!g.mla && g.ptp == g.dtp && g.porder == g.dorder)
        CHECK(m.writes.size() == static_cast<size_t>(2 * layers));
      // MLA: one latent buffer per layer, one whole-page write each.
      if (g.mla)
        CHECK(m.writes.size() == static_cast<size_t>(layers));
      // HND on both sides: one write per run of heads from one source.
      if (g.porder == page_order::hnd && g.dorder == page_order::hnd)
        CHECK(m.writes.size() <= static_cast<size_t>(2 * layers * d.local_heads()));
    }
    // Members: every prefill rank is listed; a rank with no target moves no
    // byte (an MLA dummy) and still concludes with the room.
    REQUIRE(room->prefill.size() == prefill.size());
    size_t senders = 0;
    for (auto& t : room->targets)
      senders += t.empty() ? 0 : 1;
    // Dummies are replicas: MLA's every rank, or a head replicated over a
    // prefill TP larger than the heads; each stage sends every head.
    if (g.mla) {
      CHECK(senders == static_cast<size_t>(std::min(g.ptp, g.dtp) * g.pp));
    } else if (g.ptp <= g.heads) {
      CHECK(senders == prefill.size());
    } else {
      CHECK(senders >= static_cast<size_t>(g.heads * g.pp));
      CHECK(senders <= static_cast<size_t>(std::max(g.heads, g.dtp) * g.pp));
    }
    // What a prefill room works out alone, from its group and the decode
    // TP size only (decode_layout_like), is what the whole room's mapping
    // says: the same targets, dummies included.
    for (size_t i = 0; i < prefill.size(); ++i) {
      auto targets = prefill_targets(prefill, prefill[i], g.dtp);
      REQUIRE(targets);
      auto place = prefill_place{prefill[i].tp_rank, prefill[i].pp_rank};
      auto at = std::find(room->prefill.begin(), room->prefill.end(), place) - room->prefill.begin();
      CHECK(*targets == room->targets[static_cast<size_t>(at)]);
    }
    ++points;
  }
  CHECK(points == 4 * 4 * 3 * 3 * 2 * 2 + 2);
}

TEST_CASE("rank mapping: the decode TP beyond the KV heads case (sglang#23746) replicates heads") {
  // 2 KV heads, decode TP 8: ranks 0-3 hold head 0, ranks 4-7 head 1, each
  // from the prefill rank that holds it.
  std::vector<parallel_layout> prefill{layout(2, 0, 1, 0, 2, page_order::hnd, false),
                                       layout(2, 1, 1, 0, 2, page_order::hnd, false)};
  for (int32_t t = 0; t < 8; ++t) {
    auto m = map_decode_rank(prefill, layout(8, t, 1, 0, 2, page_order::hnd, false));
    REQUIRE(m);
    REQUIRE(m->sources.size() == 1);
    CHECK(m->sources[0].tp_rank == t / 4);
  }
}

TEST_CASE("rank mapping: layouts that cannot be mapped are refused with the reason") {
  auto p = layout(2, 0, 1, 0, 8, page_order::hnd, false);
  auto p1 = layout(2, 1, 1, 0, 8, page_order::hnd, false);
  auto d = layout(2, 0, 1, 0, 8, page_order::hnd, false);
  auto refused = [&](std::vector<parallel_layout> group, parallel_layout dec, const char* why) {
    auto m = map_decode_rank(group, dec);
    REQUIRE_FALSE(m);
    INFO(to_string(m.error()));
    CHECK(to_string(m.error()).find(why) != std::string::npos);
  };
  refused({p}, d, "prefill ranks for TP 2");
  refused({p, p}, d, "two prefill ranks");
  auto other = d;
  other.head_dim = 64;
  refused({p, p1}, other, "head_dim");
  other = d;
  other.tokens_per_page = 8;
  refused({p, p1}, other, "tokens per page");
  other = d;
  other.total_kv_heads = 4;
  refused({p, p1}, other, "KV heads");
  other = d;
  other.mla = true;
  refused({p, p1}, other, "MLA");
  other = d;
  other.pp_size = 2;
  other.pp_rank = 0;
  other.layers = 2;
  refused({p, p1}, other, "decode PP size");
  other = d;
  other.total_kv_heads = 6;
  other.tp_size = 4;
  refused({p, p1}, other, "do not split evenly");
  // Stages that skip a layer.
  auto s0 = layout(1, 0, 2, 0, 8, page_order::hnd, false);
  auto s1 = layout(1, 0, 2, 1, 8, page_order::hnd, false);
  s1.first_layer = 3;
  s1.layers = 1;
  refused({s0, s1}, layout(1, 0, 1, 0, 8, page_order::hnd, false), "starts at layer 3");
}

TEST_CASE("mapped writes move a chunk's pages between registered memories, coalesced") {
  struct point {
    int32_t ptp, dtp, heads, pp;
    page_order order;
    bool mla;
    const char* what;
  };
  const int64_t npages = 8;
  const std::vector<int64_t> src_pages{0, 1, 2, 5}, dst_pages{3, 4, 5, 0};
  for (auto& g : std::vector<point>{{2, 2, 8, 1, page_order::hnd, false, "equal TP"},
                                    {2, 4, 8, 1, page_order::hnd, false, "2P -> 4D HND"},
                                    {2, 4, 8, 1, page_order::nhd, false, "2P -> 4D NHD"},
                                    {4, 2, 8, 1, page_order::hnd, false, "4P -> 2D"},
                                    {4, 2, 8, 1, page_order::hnd, true, "MLA 4P -> 2D"},
                                    {2, 4, 8, 1, page_order::hnd, true, "MLA 2P -> 4D"},
                                    {1, 1, 8, 2, page_order::hnd, false, "PP 2 -> 1"}}) {
    INFO(g.what);
    std::vector<parallel_layout> prefill, decode;
    for (int32_t s = 0; s < g.pp; ++s)
      for (int32_t t = 0; t < g.ptp; ++t)
        prefill.push_back(layout(g.ptp, t, g.pp, s, g.heads, g.order, g.mla));
    for (int32_t t = 0; t < g.dtp; ++t)
      decode.push_back(layout(g.dtp, t, 1, 0, g.heads, g.order, g.mla));
    auto room = map_room(prefill, decode);
    REQUIRE(room);
    // Host memory: every buffer `npages` pages; page p of a prefill rank
    // holds the pattern of source page p (value() with the page mixed in).
    auto alloc = [&](const parallel_layout& x, std::vector<std::vector<uint8_t>>& store,
                     bool fill) {
      memory_layout mem;
      auto per = static_cast<uint32_t>(x.buffers_per_layer());
      store.assign(static_cast<size_t>(x.kv_buffers()), {});
      for (int32_t l = 0; l < x.layers; ++l)
        for (uint32_t kv = 0; kv < per; ++kv) {
          auto& buf = store[per * static_cast<size_t>(l) + kv];
          buf.assign(x.page_bytes() * npages, 0xEE);
          if (fill)
            for (int64_t p = 0; p < npages; ++p)
              for (int32_t h = 0; h < x.local_heads(); ++h)
                for (int32_t t = 0; t < x.tokens_per_page; ++t)
                  for (uint64_t b = 0; b < x.head_bytes(); ++b)
                    buf[static_cast<uint64_t>(p) * x.page_bytes() + x.offset(t, h) + b]
                      = value(x.first_layer + l, kv, x.first_head() + h,
                              t + 100 * static_cast<int32_t>(p), b);
          mem.kv.push_back(paged_buffer{mem_desc{reinterpret_cast<uint64_t>(buf.data()),
                                                 buf.size(), -1},
                                        x.page_bytes()});
        }
      return mem;
    };
    std::map<prefill_place, std::vector<std::vector<uint8_t>>> src_store;
    std::map<prefill_place, memory_layout> src_mem;
    for (auto& x : prefill) {
      prefill_place at{x.tp_rank, x.pp_rank};
      src_mem[at] = alloc(x, src_store[at], true);
    }
    for (auto& d : decode) {
      std::vector<std::vector<uint8_t>> dst_store;
      auto dst_mem = alloc(d, dst_store, false);
      auto& m = room->decode[static_cast<size_t>(d.tp_rank)];
      size_t total_ops = 0;
      for (auto& x : prefill) {
        prefill_place at{x.tp_rank, x.pp_rank};
        auto ops = plan_mapped_writes(m, at, x, d, src_mem[at], dst_mem, src_pages, dst_pages);
        REQUIRE(ops);
        total_ops += ops->size();
        for (auto& op : *ops)
          std::memcpy(reinterpret_cast<void*>(op.dst_addr),
                      reinterpret_cast<const void*>(op.src_addr), op.size_bytes);
      }
      // Destination page dst_pages[i] holds source page src_pages[i]; the
      // other pages are untouched.
      auto per = static_cast<uint32_t>(d.buffers_per_layer());
      for (int32_t l = 0; l < d.layers; ++l)
        for (uint32_t kv = 0; kv < per; ++kv) {
          auto& buf = dst_store[per * static_cast<size_t>(l) + kv];
          for (int64_t p = 0; p < npages; ++p) {
            auto i = std::find(dst_pages.begin(), dst_pages.end(), p) - dst_pages.begin();
            bool mapped = i < static_cast<long>(dst_pages.size());
            for (int32_t h = 0; h < d.local_heads(); ++h)
              for (int32_t t = 0; t < d.tokens_per_page; ++t)
                for (uint64_t b = 0; b < d.head_bytes(); ++b) {
                  auto got = buf[static_cast<uint64_t>(p) * d.page_bytes() + d.offset(t, h) + b];
                  auto want = mapped ? value(l, kv, d.first_head() + h,
                                             t + 100 * static_cast<int32_t>(src_pages[static_cast<size_t>(i)]),
                                             b)
                                     : uint8_t{0xEE};
                  REQUIRE(got == want);
                }
          }
        }
      // Equal TP: whole pages, consecutive pairs coalesced: 2 runs per buffer.
      if (!g.mla && g.ptp == g.dtp)
        CHECK(total_ops == static_cast<size_t>(2 * layers * 2));
    }
  }
  SECTION("bad indices and memories that do not fit the layout are refused, nothing planned") {
    std::vector<parallel_layout> prefill{layout(1, 0, 1, 0, 8, page_order::hnd, false)};
    auto d = layout(1, 0, 1, 0, 8, page_order::hnd, false);
    auto m = map_decode_rank(prefill, d);
    REQUIRE(m);
    std::vector<uint8_t> a(d.page_bytes() * 2), b(d.page_bytes() * 2);
    memory_layout sm, dm;
    for (int i = 0; i < 2 * layers; ++i) {
      sm.kv.push_back(paged_buffer{mem_desc{reinterpret_cast<uint64_t>(a.data()), a.size(), -1},
                                   d.page_bytes()});
      dm.kv.push_back(paged_buffer{mem_desc{reinterpret_cast<uint64_t>(b.data()), b.size(), -1},
                                   d.page_bytes()});
    }
    prefill_place at{0, 0};
    CHECK_FALSE(plan_mapped_writes(*m, at, prefill[0], d, sm, dm, {0}, {2}));
    CHECK_FALSE(plan_mapped_writes(*m, at, prefill[0], d, sm, dm, {0, 1}, {1}));
    auto wrong = dm;
    wrong.kv[3].page_size_bytes /= 2;
    auto res = plan_mapped_writes(*m, at, prefill[0], d, sm, wrong, {0}, {1});
    REQUIRE_FALSE(res);
    CHECK(to_string(res.error()).find("buffer 3 has pages of") != std::string::npos);
    CHECK(plan_mapped_writes(*m, at, prefill[0], d, sm, dm, {0, 1}, {1, 0}));
  }
}

TEST_CASE("parallel conflict: what one deployment's ranks must agree on") {
  auto p = layout(2, 0, 1, 0, 8, page_order::hnd, false);
  auto d = layout(4, 1, 1, 0, 8, page_order::nhd, false);
  CHECK(parallel_conflict(p, true, d, false).empty());                       // unequal TP, other order
  CHECK(parallel_conflict(p, true, layout(2, 1, 1, 0, 8, page_order::hnd, false), true).empty());
  CHECK(parallel_conflict(p, true, layout(4, 1, 1, 0, 8, page_order::hnd, false), true)
          .find("on one side") != std::string::npos);
  CHECK(parallel_conflict(p, true, layout(2, 1, 1, 0, 8, page_order::nhd, false), true)
          .find("page order") != std::string::npos);
  CHECK(parallel_conflict(p, true, layout(4, 1, 1, 0, 2, page_order::nhd, false), false)
          .find("KV shape differs") != std::string::npos);
  CHECK(parallel_conflict(p, true, layout(4, 1, 1, 0, 8, page_order::nhd, true), false)
          .find("MLA") != std::string::npos);
  CHECK(parallel_conflict(layout(2, 0, 2, 1, 8, page_order::hnd, false), true, d, false).empty());
  CHECK(parallel_conflict(p, true, layout(4, 1, 2, 0, 8, page_order::nhd, false), false)
          .find("decode PP size 2") != std::string::npos);
}

TEST_CASE("rank mapping: a shared mapping is computed once per layouts, bounded, refusals not kept") {
  std::vector<parallel_layout> prefill{layout(2, 0, 1, 0, 8, page_order::hnd, false),
                                       layout(2, 1, 1, 0, 8, page_order::hnd, false)};
  auto d0 = layout(4, 0, 1, 0, 8, page_order::nhd, false);
  auto d1 = layout(4, 1, 1, 0, 8, page_order::nhd, false);
  auto a = shared_decode_mapping(prefill, d0);
  auto b = shared_decode_mapping(prefill, d0);
  auto c = shared_decode_mapping(prefill, d1);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK(a->get() == b->get()); // the same layouts: one mapping, shared
  CHECK(a->get() != c->get());
  // What is shared is what map_decode_rank computes.
  auto direct = map_decode_rank(prefill, d0);
  REQUIRE(direct);
  REQUIRE((*a)->writes.size() == direct->writes.size());
  CHECK((*a)->sources.size() == direct->sources.size());
  // A refusal is the same refusal every time, and takes no entry.
  auto bad = d0;
  bad.head_dim = 64;
  CHECK_FALSE(shared_decode_mapping(prefill, bad));
  CHECK_FALSE(shared_decode_mapping(prefill, bad));
  // More distinct layouts than the cache keeps: the oldest is dropped (a
  // new mapping is made for it next time) and the one a room still holds
  // stays valid.
  auto keyed = [](int32_t k) {
    std::vector<parallel_layout> group{layout(2, 0, 1, 0, 4 * k, page_order::hnd, false),
                                       layout(2, 1, 1, 0, 4 * k, page_order::hnd, false)};
    auto dec = layout(4, 0, 1, 0, 4 * k, page_order::hnd, false);
    for (auto* x : {&group[0], &group[1], &dec})
      x->tokens_per_page = 5; // keys no other case uses
    return std::make_pair(group, dec);
  };
  auto [g1, d1st] = keyed(1);
  auto first = shared_decode_mapping(g1, d1st);
  REQUIRE(first);
  for (int32_t k = 2; k <= static_cast<int32_t>(mapping_cache_entries) + 1; ++k) {
    auto [g, d] = keyed(k);
    REQUIRE(shared_decode_mapping(g, d));
  }
  auto again = shared_decode_mapping(g1, d1st);
  REQUIRE(again);
  CHECK(again->get() != first->get());               // dropped, made anew
  CHECK((*first)->writes.size() == (*again)->writes.size()); // still valid where held
}

namespace {

/// Addresses only (nothing is copied): `x`'s KV buffers of `npages` pages
/// from `base`, 1 MiB apart, and with `aux` an aux buffer of 4 slots of 64 B.
memory_layout addresses_only(const parallel_layout& x, uint64_t base, int64_t npages,
                             bool aux = false) {
  memory_layout mem;
  for (int32_t b = 0; b < x.kv_buffers(); ++b)
    mem.kv.push_back(paged_buffer{
      mem_desc{base + static_cast<uint64_t>(b) * (1u << 20), x.page_bytes() * npages, -1},
      x.page_bytes()});
  if (aux)
    mem.aux.push_back(paged_buffer{mem_desc{base + (1u << 30), 64 * 4, -1}, 64});
  return mem;
}

} // namespace

TEST_CASE("mapped writes with strided rows stand for exactly the plain writes, in fewer "
          "descriptors") {
  // Byte by byte: destination address -> source address, from a plan.
  auto bytes_of = [](const std::vector<write_op>& ops, const std::vector<strided_write>& ws) {
    std::map<uint64_t, uint64_t> out;
    auto put = [&](uint64_t src, uint64_t dst, uint64_t len) {
      for (uint64_t b = 0; b < len; ++b)
        REQUIRE(out.emplace(dst + b, src + b).second); // nothing written twice
    };
    for (auto& op : ops)
      put(op.src_addr, op.dst_addr, op.size_bytes);
    for (auto& w : ws)
      for (uint64_t k = 0; k < w.count; ++k)
        put(w.src_addr + k * w.src_stride, w.dst_addr + k * w.dst_stride, w.size_bytes);
    return out;
  };
  struct point {
    int32_t ptp, dtp, heads;
    page_order sorder, dorder;
    bool mla;
    std::vector<int64_t> src_pages, dst_pages;
    bool rows; // some buffer's slices are token rows
  };
  const std::vector<int64_t> in_order{0, 1, 2, 3, 4}, permuted{4, 0, 3, 1, 2};
  const int64_t npages = 6;
  for (auto& g : std::vector<point>{
         {2, 4, 8, page_order::nhd, page_order::nhd, false, in_order, in_order, true},
         {2, 4, 8, page_order::nhd, page_order::nhd, false, permuted, in_order, true},
         {1, 8, 8, page_order::nhd, page_order::nhd, false, in_order, permuted, true},
         {4, 2, 8, page_order::nhd, page_order::nhd, false, in_order, {1, 2, 3, 4, 5}, true},
         {2, 4, 8, page_order::hnd, page_order::hnd, false, in_order, in_order, false},
         {2, 2, 8, page_order::nhd, page_order::nhd, false, in_order, in_order, false},
         {2, 4, 8, page_order::nhd, page_order::hnd, false, permuted, in_order, false},
         {2, 4, 8, page_order::nhd, page_order::nhd, true, in_order, in_order, false},
         {2, 16, 8, page_order::nhd, page_order::nhd, false, in_order, in_order, true}}) {
    INFO("prefill TP " << g.ptp << " " << to_string(g.sorder) << ", decode TP " << g.dtp << " "
                       << to_string(g.dorder) << (g.mla ? ", MLA" : ""));
    std::vector<parallel_layout> prefill, decode;
    for (int32_t t = 0; t < g.ptp; ++t)
      prefill.push_back(layout(g.ptp, t, 1, 0, g.heads, g.sorder, g.mla));
    for (int32_t t = 0; t < g.dtp; ++t)
      decode.push_back(layout(g.dtp, t, 1, 0, g.heads, g.dorder, g.mla));
    auto room = map_room(prefill, decode);
    REQUIRE(room);
    size_t with_rows = 0;
    for (auto& d : decode) {
      auto dst_mem = addresses_only(d, 1ull << 40, npages);
      auto& m = room->decode[static_cast<size_t>(d.tp_rank)];
      for (auto& x : prefill) {
        auto src_mem = addresses_only(x, (1ull << 32) * static_cast<uint64_t>(1 + x.tp_rank),
                                      npages);
        prefill_place at{x.tp_rank, x.pp_rank};
        auto plain = plan_mapped_writes(m, at, x, d, src_mem, dst_mem, g.src_pages, g.dst_pages);
        std::vector<strided_write> ws{strided_write{1, 2, 3, 4, 5, 6}}; // replaced
        auto ops = plan_mapped_writes(m, at, x, d, src_mem, dst_mem, g.src_pages, g.dst_pages,
                                      &ws);
        REQUIRE(plain);
        REQUIRE(ops);
        ws.erase(ws.begin()); // what was there before stays: plan_part clears it
        CHECK(bytes_of(*ops, ws) == bytes_of(*plain, {}));
        CHECK(ops->size() + ws.size() <= plain->size());
        for (auto& w : ws) {
          CHECK(w.count >= 2);
          CHECK(w.size_bytes > 0);
        }
        with_rows += ws.size();
      }
    }
    CHECK((with_rows > 0) == g.rows);
  }
  SECTION("buffers back to back in memory: no write or strided write spans two of them") {
    // Each buffer its own registration, as a caching allocator may place
    // them: a write that ran from one into the next is outside both.
    for (auto order : {page_order::nhd, page_order::hnd}) {
      for (int32_t dtp : {2, 4}) {
        INFO(to_string(order) << ", 2P -> " << dtp << "D");
        std::vector<parallel_layout> group{layout(2, 0, 1, 0, 8, order, false),
                                           layout(2, 1, 1, 0, 8, order, false)};
        auto d = layout(dtp, 0, 1, 0, 8, order, false);
        auto m = map_decode_rank(group, d);
        REQUIRE(m);
        auto packed = [&](const parallel_layout& x, uint64_t base) {
          memory_layout mem;
          for (int32_t b = 0; b < x.kv_buffers(); ++b)
            mem.kv.push_back(paged_buffer{
              mem_desc{base + static_cast<uint64_t>(b) * x.page_bytes() * npages,
                       x.page_bytes() * npages, -1},
              x.page_bytes()});
          return mem;
        };
        auto sm = packed(group[0], 1ull << 32);
        auto dm = packed(d, 1ull << 40);
        // Every page in order: buffer b's last page and buffer b + 1's
        // first page meet on both sides.
        std::vector<int64_t> tail;
        for (int64_t p = 0; p < npages; ++p)
          tail.push_back(p);
        auto inside = [](const memory_layout& mem, uint64_t addr, uint64_t len) {
          for (auto& b : mem.kv)
            if (b.mem.covers(addr, len, -1))
              return true;
          return false;
        };
        for (bool with_strided : {false, true}) {
          std::vector<strided_write> ws;
          auto ops = plan_mapped_writes(*m, prefill_place{0, 0}, group[0], d, sm, dm, tail, tail,
                                        with_strided ? &ws : nullptr);
          REQUIRE(ops);
          for (auto& op : *ops) {
            CHECK(inside(sm, op.src_addr, op.size_bytes));
            CHECK(inside(dm, op.dst_addr, op.size_bytes));
          }
          for (auto& w : ws) {
            uint64_t src_span = 0, dst_span = 0;
            REQUIRE(w.span(true, src_span));
            REQUIRE(w.span(false, dst_span));
            CHECK(inside(sm, w.src_addr, src_span));
            CHECK(inside(dm, w.dst_addr, dst_span));
          }
        }
      }
    }
  }
  SECTION("plan_part clears what it is given and keeps aux and state in the plain writes") {
    auto p = layout(2, 0, 1, 0, 8, page_order::nhd, false);
    auto d = layout(4, 0, 1, 0, 8, page_order::nhd, false);
    std::vector<parallel_layout> group{p, layout(2, 1, 1, 0, 8, page_order::nhd, false)};
    auto m = map_decode_rank(group, d);
    REQUIRE(m);
    auto sm = addresses_only(p, 1ull << 32, npages, true);
    auto dm = addresses_only(d, 1ull << 40, npages, true);
    part_spec part{&sm, &dm, &*m, prefill_place{0, 0}, &p, &d};
    std::vector<strided_write> ws{strided_write{1, 2, 3, 4, 5, 6}};
    uint32_t aux_ops = 0;
    auto ops = plan_part(part, in_order, in_order, true, 1, 2, {}, {}, aux_ops, &ws);
    REQUIRE(ops);
    REQUIRE(aux_ops == 1);
    CHECK(ops->back().src_addr == (1ull << 32) + (1u << 30) + 64);
    CHECK(ops->back().dst_addr == (1ull << 40) + (1u << 30) + 128);
    REQUIRE_FALSE(ws.empty());
    for (auto& w : ws)
      CHECK(w.count == static_cast<uint64_t>(tokens) * in_order.size()); // pages merged
    // A refused plan leaves nothing behind.
    auto bad = plan_part(part, {0, 99}, {0, 1}, true, 1, 2, {}, {}, aux_ops, &ws);
    CHECK_FALSE(bad);
    CHECK(ws.empty());
  }
}

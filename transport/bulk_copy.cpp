#include "kvroom/transport/bulk_copy.hpp"

#include <string>

#include "kvroom/api/errors.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define KVROOM_STREAMING_STORES 1
#endif

namespace kvroom::detail {

caf::error strided_spans(const strided_write& w, size_t i, uint64_t& src_span,
                         uint64_t& dst_span) {
  if (w.span(true, src_span) && w.span(false, dst_span))
    return caf::none;
  return make_error(errc::invalid_argument,
                    "strided write " + std::to_string(i) + " moves nothing, or its span overflows ("
                      + std::to_string(w.count) + " writes of " + std::to_string(w.size_bytes)
                      + " B)");
}

#ifdef KVROOM_STREAMING_STORES

// SSE2's 16-byte streaming stores, four to a line: every x86-64 CPU has
// them, and they measured the same as AVX-512's 64-byte ones here (the
// write-combining buffer fills a line either way), so there is no dispatch
// on the CPU's features.
void bulk_copier::stream(uint8_t* dst, const uint8_t* src, size_t n) noexcept {
  // A plain copy up to the destination's first 16-byte boundary.
  auto head = static_cast<size_t>(-reinterpret_cast<uintptr_t>(dst) & 15u);
  if (head > n)
    head = n;
  if (head != 0) { // a call saved per op: head-sliced ops are 512 B, aligned
    std::memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
  }
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    auto a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    auto b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    auto c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    auto d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
  if (n != 0)
    std::memcpy(dst, src, n);
}

void bulk_copier::fence() noexcept {
  _mm_sfence();
}

#else

// Elsewhere a streaming copy is memcpy (and ordered like one).
void bulk_copier::stream(uint8_t* dst, const uint8_t* src, size_t n) noexcept {
  std::memcpy(dst, src, n);
}

void bulk_copier::fence() noexcept {
  // nop
}

#endif

} // namespace kvroom::detail

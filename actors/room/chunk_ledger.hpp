#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvroom {

/// What a prefill room accepts of the chunks its scheduler sends: pages of
/// every KV buffer at once (SGLang's `send`), or pages of some buffers (a
/// layer's K and V: vLLM's `save_kv_layer`, sent as soon as the layer was
/// computed). Each buffer must receive exactly the declared pages, in
/// order; a chunk's buffers must stand at the same page (its pages go to
/// the same destination pages in each). Plain logic: no actor, no memory.
class chunk_ledger {
public:
  /// `buffers`: the rank's KV buffer count; `declared`: the room's pages.
  chunk_ledger(size_t buffers, uint64_t declared);

  struct admitted {
    /// Why the chunk is refused (empty: admitted).
    std::string error;
    /// Where its pages start among the room's (the destination offset).
    uint64_t offset = 0;
  };

  /// Admits `pages` pages of `buffers` (empty: every buffer), the last
  /// chunk when `is_last`: then every buffer must hold all declared pages.
  /// A refused chunk changes nothing.
  admitted admit(uint64_t pages, const std::vector<int32_t>& buffers, bool is_last);

  /// Pages every buffer received so far (the least of them).
  uint64_t complete_pages() const noexcept;

private:
  uint64_t declared_;
  size_t buffers_;
  /// While every chunk was of every buffer, they all stand at one page:
  /// `uniform_` (no allocation per room); then each buffer's own count.
  uint64_t uniform_ = 0;
  std::vector<uint64_t> received_;
};

} // namespace kvroom

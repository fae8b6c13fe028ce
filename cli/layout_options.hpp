#pragma once

// The options that declare what part of the model's KV cache a rank holds
// (`parallel_layout`), shared by every command that starts ranks: serve,
// stress and demo.

#include <optional>
#include <string>

#include "caf/config_option_adder.hpp"
#include "caf/expected.hpp"

#include "kvroom/api/parallel_layout.hpp"

namespace kvroom::cli {

struct layout_options {
  /// The model's KV heads; 0 and no --mla: no layout declared.
  int64_t kv_heads = 0;
  int64_t head_dim = 128;
  int64_t bytes_per_element = 2;
  int64_t tokens_per_page = 16;
  std::string page_order = "hnd";
  bool mla = false;
  /// Pipeline-parallel prefill: the group's stages and this rank's; each
  /// stage holds `layers` layers (stage s: [s * layers, (s + 1) * layers)).
  int64_t pp_size = 1;
  int64_t pp = 0;

  /// Adds --kv-heads, --head-dim, --bytes-per-element, --tokens-per-page,
  /// --page-order, --mla, --pp-size and --pp.
  void add_to(caf::config_option_adder& group);

  bool declared() const noexcept {
    return kv_heads > 0 || mla;
  }

  /// The layout of TP rank `tp_rank` of `tp_size` holding `layers` layers
  /// (of its stage), or nullopt when none is declared; an error names the
  /// bad option.
  caf::expected<std::optional<parallel_layout>> layout(int64_t tp_size, int64_t tp_rank,
                                                       int64_t layers) const;
};

} // namespace kvroom::cli

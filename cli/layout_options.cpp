#include "layout_options.hpp"

#include "caf/make_config_option.hpp"

#include "kvroom/api/errors.hpp"

namespace kvroom::cli {

void layout_options::add_to(caf::config_option_adder& group) {
  group.add(kv_heads, "kv-heads", "declare a parallel layout: the model's KV heads (0: none)")
    .add(head_dim, "head-dim", "declared layout: head dimension")
    .add(bytes_per_element, "bytes-per-element", "declared layout: bytes per element")
    .add(tokens_per_page, "tokens-per-page", "declared layout: tokens per page")
    .add(page_order, "page-order", "declared layout: hnd (head-major) or nhd (token-major)")
    .add(mla, "mla", "declare an MLA layout (one latent head, replicated on every TP rank)")
    .add(pp_size, "pp-size", "declared layout: pipeline stages of a prefill group")
    .add(pp, "pp", "declared layout: this prefill rank's stage (it holds --layers layers "
                   "from layer pp * layers on)");
}

caf::expected<std::optional<parallel_layout>>
layout_options::layout(int64_t tp_size, int64_t tp_rank, int64_t layers) const {
  if (!declared()) {
    if (pp_size != 1 || pp != 0)
      return make_error(errc::invalid_config,
                        "--pp-size and --pp need a declared layout (--kv-heads or --mla)");
    return std::optional<parallel_layout>{};
  }
  if (page_order != "hnd" && page_order != "nhd")
    return make_error(errc::invalid_config, "--page-order must be hnd or nhd");
  auto fits = [](int64_t x) { return x >= 0 && x <= (int64_t{1} << 30); };
  if (!fits(kv_heads) || !fits(head_dim) || !fits(bytes_per_element) || !fits(tokens_per_page)
      || !fits(tp_size) || !fits(tp_rank) || !fits(layers) || !fits(pp_size) || !fits(pp)
      || pp_size * layers > (int64_t{1} << 30))
    return make_error(errc::invalid_config, "declared layout: a size out of range");
  parallel_layout x;
  x.tp_size = static_cast<int32_t>(tp_size);
  x.tp_rank = static_cast<int32_t>(tp_rank);
  x.layers = static_cast<int32_t>(layers);
  x.pp_size = static_cast<int32_t>(pp_size);
  x.pp_rank = static_cast<int32_t>(pp);
  x.first_layer = static_cast<int32_t>(pp * layers);
  x.total_kv_heads = static_cast<int32_t>(std::max<int64_t>(kv_heads, 1));
  x.head_dim = static_cast<int32_t>(head_dim);
  x.bytes_per_element = static_cast<int32_t>(bytes_per_element);
  x.tokens_per_page = static_cast<int32_t>(tokens_per_page);
  x.mla = mla;
  x.order = page_order == "nhd" ? page_order::nhd : page_order::hnd;
  if (auto why = check(x); !why.empty())
    return make_error(errc::invalid_config, "declared layout: " + why);
  return std::optional<parallel_layout>{x};
}

} // namespace kvroom::cli

// kvroom's C++ API for Python (pybind11): the runtime, ranks, senders and
// receivers. The Python package (kvroom/__init__.py) wraps the runtime and
// ranks; senders and receivers are these types themselves, returning the
// package's KVPoll and KVTransferError (registered at its import).
//
// Threading: no Python runs on a CAF thread (nothing here calls back into
// Python); calls that wait (starting and stopping ranks) release the GIL;
// poll() does not, it costs nanoseconds. A rank's handles belong to one
// Python thread, as a scheduler loop's do.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kvroom/kvroom.hpp"

namespace py = pybind11;
using namespace kvroom;

namespace {

/// Raised for every refused call (kvroom.Error in Python).
PyObject* error_type = nullptr;

[[noreturn]] void raise(const caf::error& err) {
  PyErr_SetString(error_type, describe(err).c_str());
  throw py::error_already_set();
}

void check(const caf::error& err) {
  if (err)
    raise(err);
}

/// Page or slot indices from a numpy array (int32 or int64, one dimension)
/// or any sequence of ints. Anything else is a TypeError naming what came.
std::vector<int64_t> indices(const py::handle& x, const char* what) {
  if (py::isinstance<py::array>(x)) {
    auto a = py::reinterpret_borrow<py::array>(x);
    if (a.ndim() != 1)
      throw py::type_error(std::string{what} + " must be one-dimensional, got "
                           + std::to_string(a.ndim()) + " dimensions");
    auto kind = a.dtype().kind();
    if (kind != 'i' && kind != 'u')
      throw py::type_error(std::string{what} + " must be an integer array, got dtype "
                           + py::str(a.dtype()).cast<std::string>());
    std::vector<int64_t> out(static_cast<size_t>(a.size()));
    if (a.dtype().is(py::dtype::of<int64_t>())) {
      auto v = a.unchecked<int64_t, 1>();
      for (py::ssize_t i = 0; i < v.shape(0); ++i)
        out[static_cast<size_t>(i)] = v(i);
    } else if (a.dtype().is(py::dtype::of<int32_t>())) {
      auto v = a.unchecked<int32_t, 1>();
      for (py::ssize_t i = 0; i < v.shape(0); ++i)
        out[static_cast<size_t>(i)] = v(i);
    } else {
      auto c = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
      auto v = c.unchecked<1>();
      for (py::ssize_t i = 0; i < v.shape(0); ++i)
        out[static_cast<size_t>(i)] = v(i);
    }
    return out;
  }
  if (py::isinstance<py::str>(x) || !py::isinstance<py::sequence>(x))
    throw py::type_error(std::string{what} + " must be an integer array or a sequence of ints");
  std::vector<int64_t> out;
  for (auto item : py::reinterpret_borrow<py::sequence>(x)) {
    if (!py::isinstance<py::int_>(item))
      throw py::type_error(std::string{what} + " must hold ints, got "
                           + py::str(py::type::of(item)).cast<std::string>());
    out.push_back(item.cast<int64_t>());
  }
  return out;
}

/// The package's KVTransferError (registered once by `_set_error_class`):
/// `failure()` returns one, as SGLang's `failure_exception()` raises one.
/// Until it is registered, the fields as a tuple.
PyObject* error_class = nullptr;

py::object error_of(const kv_transfer_error& f) {
  auto fields = py::make_tuple(f.bootstrap_room, f.failure_reason, f.is_from_another_rank,
                               f.origin_rank, to_string(f.cause));
  if (!error_class)
    return std::move(fields);
  return py::reinterpret_borrow<py::object>(error_class)(*fields);
}

py::object failure_of(room_handle& h) {
  auto f = h.failure();
  if (!f)
    return py::none();
  return error_of(*f);
}

/// KV buffer indices (a layer's K and V): any iterable of ints.
std::vector<int32_t> buffers_of(const py::handle& x) {
  if (!py::isinstance<py::sequence>(x) && py::isinstance<py::iterable>(x))
    return buffers_of(py::list(py::reinterpret_borrow<py::iterable>(x)));
  auto all = indices(x, "kv_buffers");
  std::vector<int32_t> out;
  out.reserve(all.size());
  for (auto b : all) {
    if (b < std::numeric_limits<int32_t>::min() || b > std::numeric_limits<int32_t>::max())
      throw py::value_error("kv_buffers: " + std::to_string(b) + " is not a buffer index");
    out.push_back(static_cast<int32_t>(b));
  }
  return out;
}

// -- poll() without pybind11's dispatcher --------------------------------------
//
// A scheduler polls every request every iteration. Through pybind11 a poll
// cost 165 ns, 113 of them the dispatcher's (its argument loader, overload
// walk and result cast) around a read of a few nanoseconds. `poll` is
// instead a plain CPython method on the Sender and Receiver types: it reads
// the handle out of pybind11's instance and returns the package's KVPoll
// member (registered once by `_set_poll_values`; the int until then).

/// KVPoll's members by number, strong references for the module's life.
PyObject* poll_values[5] = {};

template <class Handle>
PyObject* fast_poll(PyObject* self, PyObject*) {
  // The method descriptor checked that `self` is an instance of the type
  // (or a subclass), so it is pybind11's instance layout.
  auto vh = reinterpret_cast<py::detail::instance*>(self)->get_value_and_holder();
  if (!vh.holder_constructed()) {
    PyErr_SetString(PyExc_TypeError, "poll() on a handle that was never made");
    return nullptr;
  }
  auto state = static_cast<int>(vh.value_ptr<Handle>()->poll());
  if (state >= 0 && state < 5 && poll_values[state]) {
    Py_INCREF(poll_values[state]);
    return poll_values[state];
  }
  return PyLong_FromLong(state);
}

template <class Handle>
void add_fast_poll(py::class_<Handle>& cls) {
  static PyMethodDef def{"poll", fast_poll<Handle>, METH_NOARGS,
                         "The room's state: KVPoll (an int before the package registered it)."};
  auto* descr = PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), &def);
  if (!descr)
    throw py::error_already_set();
  cls.attr("poll") = py::reinterpret_steal<py::object>(descr);
}

/// A registered buffer: its address, size and page (or aux item) size.
using buffer_spec = std::tuple<uint64_t, uint64_t, uint64_t>;

memory_layout layout_of(const std::vector<buffer_spec>& kv, const std::vector<buffer_spec>& aux,
                        const std::vector<buffer_spec>& state, int32_t device_id) {
  memory_layout out;
  for (auto& [addr, size, page] : kv)
    out.kv.push_back(paged_buffer{mem_desc{addr, size, device_id}, page});
  for (auto& [addr, size, item] : aux)
    out.aux.push_back(paged_buffer{mem_desc{addr, size, device_id}, item});
  for (auto& [addr, size, page] : state)
    out.state.push_back(paged_buffer{mem_desc{addr, size, device_id}, page});
  return out;
}

/// A room's deadlines from a dict of `bootstrap_ms`, `waiting_ms`,
/// `transferring_ms` (each optional, positive; kvroom's defaults otherwise).
room_timeouts timeouts_from(const py::object& x) {
  if (!py::isinstance<py::dict>(x))
    throw py::type_error("timeouts must be a dict or None");
  room_timeouts out;
  for (auto& kv : py::reinterpret_borrow<py::dict>(x)) {
    auto key = py::cast<std::string>(kv.first);
    auto ms = py::cast<int64_t>(kv.second);
    if (ms <= 0 || ms > std::numeric_limits<uint32_t>::max())
      throw py::value_error("timeouts['" + key + "'] must be a positive number of ms, got "
                            + std::to_string(ms));
    if (key == "bootstrap_ms")
      out.bootstrap_ms = static_cast<uint32_t>(ms);
    else if (key == "waiting_ms")
      out.waiting_ms = static_cast<uint32_t>(ms);
    else if (key == "transferring_ms")
      out.transferring_ms = static_cast<uint32_t>(ms);
    else
      throw py::value_error("unknown timeout '" + key
                            + "' (bootstrap_ms, waiting_ms, transferring_ms)");
  }
  return out;
}

/// A declared parallel layout from a dict (None: none declared): the keys of
/// `parallel_layout`, TP size and rank from the rank itself.
std::optional<parallel_layout> layout_from(const py::object& x, int32_t tp_size, int32_t tp_rank) {
  if (x.is_none())
    return std::nullopt;
  if (!py::isinstance<py::dict>(x))
    throw py::type_error("layout must be a dict or None");
  auto d = py::reinterpret_borrow<py::dict>(x);
  static const char* known[] = {"kv_heads",    "head_dim",   "bytes_per_element",
                                "tokens_per_page", "page_order", "mla",
                                "layers",      "first_layer", "pp_size",
                                "pp_rank"};
  for (auto item : d) {
    auto key = py::str(item.first).cast<std::string>();
    if (std::none_of(std::begin(known), std::end(known), [&](const char* k) { return key == k; }))
      throw py::value_error("layout: unknown key '" + key + "'");
  }
  auto get = [&](const char* key, int64_t dflt) {
    if (!d.contains(key))
      return dflt;
    return d[key].cast<int64_t>();
  };
  auto small = [](int64_t v, const char* key) {
    if (v < 0 || v > (int64_t{1} << 30))
      throw py::value_error(std::string{"layout: "} + key + " out of range");
    return static_cast<int32_t>(v);
  };
  parallel_layout out;
  out.tp_size = tp_size;
  out.tp_rank = tp_rank;
  out.total_kv_heads = small(get("kv_heads", 1), "kv_heads");
  out.head_dim = small(get("head_dim", 128), "head_dim");
  out.bytes_per_element = small(get("bytes_per_element", 2), "bytes_per_element");
  out.tokens_per_page = small(get("tokens_per_page", 16), "tokens_per_page");
  out.mla = d.contains("mla") && d["mla"].cast<bool>();
  out.layers = small(get("layers", 1), "layers");
  out.first_layer = small(get("first_layer", 0), "first_layer");
  out.pp_size = small(get("pp_size", 1), "pp_size");
  out.pp_rank = small(get("pp_rank", 0), "pp_rank");
  auto order = d.contains("page_order") ? d["page_order"].cast<std::string>() : "hnd";
  if (order != "hnd" && order != "nhd")
    throw py::value_error("layout: page_order must be 'hnd' or 'nhd', got '" + order + "'");
  out.order = order == "nhd" ? page_order::nhd : page_order::hnd;
  if (auto why = check(out); !why.empty())
    throw py::value_error("layout: " + why);
  return out;
}

/// Optional index lists (SGLang passes None for models without state).
std::vector<int64_t> optional_indices(const py::handle& x, const char* what) {
  if (x.is_none())
    return {};
  return indices(x, what);
}

/// Owns a rank; the Python objects of its handles keep it alive.
struct py_rank {
  std::unique_ptr<rank> impl;

  rank& get() {
    if (!impl)
      throw py::value_error("the rank was closed");
    return *impl;
  }

  void close() {
    py::gil_scoped_release nogil;
    impl.reset();
  }

  ~py_rank() {
    if (impl) {
      py::gil_scoped_release nogil;
      impl.reset();
    }
  }
};

} // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "kvroom's C++ engine (use the kvroom package, not this module)";
  static py::exception<std::runtime_error> err(m, "Error");
  error_type = err.ptr();
  m.def(
    "_set_poll_values",
    [](const py::tuple& values) {
      if (values.size() != 5)
        throw py::value_error("_set_poll_values takes KVPoll's 5 members by number");
      for (size_t i = 0; i < 5; ++i) {
        py::object v = values[i];
        if (v.cast<int>() != static_cast<int>(i))
          throw py::value_error("_set_poll_values: member " + std::to_string(i) + " is "
                                + py::str(v).cast<std::string>());
        Py_XDECREF(poll_values[i]);
        poll_values[i] = v.release().ptr();
      }
    },
    "What poll() returns, by number (the package's KVPoll members).");
  m.def(
    "_set_error_class",
    [](const py::object& cls) {
      if (!PyCallable_Check(cls.ptr()))
        throw py::type_error("_set_error_class takes the KVTransferError class");
      Py_XDECREF(error_class);
      error_class = cls.inc_ref().ptr();
    },
    "What failure() returns (the package's KVTransferError).");

  py::class_<runtime>(m, "Runtime")
    .def(py::init([](bool network, const std::string& secret_file, const std::string& log_level,
                     size_t threads) {
           runtime_options opts;
           opts.network = network;
           opts.log_level = log_level;
           opts.max_threads = threads;
           if (auto err = check_options(opts))
             throw py::value_error(describe(err));
           if (!secret_file.empty()) {
             auto s = deployment_secret::from_file(secret_file);
             if (!s)
               raise(s.error());
             opts.secret = std::move(*s);
           }
           py::gil_scoped_release nogil;
           return std::make_unique<runtime>(std::move(opts));
         }),
         py::arg("network") = false, py::arg("secret_file") = "", py::arg("log_level") = "warn",
         py::arg("threads") = 0)
    .def("publish_registry",
         [](runtime& rt, uint16_t port, const std::string& host) {
           py::gil_scoped_release nogil;
           auto res = rt.publish_registry(port, host);
           py::gil_scoped_acquire gil;
           if (!res)
             raise(res.error());
           return *res;
         },
         py::arg("port") = 0, py::arg("host") = "127.0.0.1")
    .def("connect_registry",
         [](runtime& rt, const std::string& host, uint16_t port, uint32_t timeout_ms) {
           caf::error e;
           {
             py::gil_scoped_release nogil;
             e = rt.connect_registry(host, port, timeout_ms);
           }
           check(e);
         },
         py::arg("host"), py::arg("port"), py::arg("timeout_ms") = 30000)
    .def("use_directory",
         [](runtime& rt, const std::string& url, const std::string& prefix,
            uint32_t lease_ttl_ms, uint32_t timeout_ms, const std::string& cacert,
            const std::string& cert, const std::string& key, const std::string& user,
            const std::string& password) {
           directory_options opts;
           opts.url = url;
           opts.prefix = prefix;
           opts.lease_ttl_ms = lease_ttl_ms;
           opts.cacert = cacert;
           opts.cert = cert;
           opts.key = key;
           opts.user = user;
           opts.password = password;
           caf::error e;
           {
             py::gil_scoped_release nogil;
             e = rt.use_directory(opts, timeout_ms);
           }
           check(e);
         },
         py::arg("url"), py::arg("prefix") = "/kvroom/default", py::arg("lease_ttl_ms") = 5000,
         py::arg("timeout_ms") = 30000, py::arg("cacert") = "", py::arg("cert") = "",
         py::arg("key") = "", py::arg("user") = "", py::arg("password") = "")
    .def("add_rank",
         [](runtime& rt, const std::string& side, int32_t tp_rank, int32_t tp_size,
            int32_t dp_rank, int64_t id, const std::vector<buffer_spec>& kv,
            const std::vector<buffer_spec>& aux, int32_t device_id, const std::string& transport,
            bool network, const std::string& host, const std::vector<uint64_t>& fail_rooms,
            const std::vector<buffer_spec>& state, const py::object& layout,
            const std::string& integrity, int32_t dp_size, const py::object& timeouts,
            bool pull) {
           rank_config cfg;
           if (side == "prefill")
             cfg.side = role::prefill;
           else if (side == "decode")
             cfg.side = role::decode;
           else
             throw py::value_error("side must be 'prefill' or 'decode', got '" + side + "'");
           cfg.tp_rank = tp_rank;
           cfg.tp_size = tp_size;
           cfg.dp_rank = dp_rank;
           cfg.dp_size = dp_size;
           cfg.id = static_cast<rank_id>(id);
           cfg.memory = layout_of(kv, aux, state, device_id);
           cfg.parallel = layout_from(layout, tp_size, tp_rank);
           cfg.transport = transport;
           cfg.network = network;
           cfg.pull = pull;
           if (!from_string(integrity, cfg.integrity))
             throw py::value_error("integrity must be 'off' or 'xxh3', got '" + integrity + "'");
           if (!timeouts.is_none())
             cfg.timeouts = timeouts_from(timeouts);
           cfg.tcp_host = host;
           // Several data paths: "10.0.0.1,10.0.1.1"; control on the first.
           auto hosts = split_hosts(host);
           cfg.control_host = hosts.empty() ? host : hosts.front();
           // Test-only: this rank's data plane fails these rooms' transfers.
           cfg.faults.rooms.assign(fail_rooms.begin(), fail_rooms.end());
           auto out = std::make_unique<py_rank>();
           caf::error e;
           {
             py::gil_scoped_release nogil;
             auto r = rt.add_rank(cfg);
             if (r)
               out->impl = std::move(*r);
             else
               e = r.error();
           }
           check(e);
           return out;
         },
         py::arg("side"), py::arg("tp_rank") = 0, py::arg("tp_size") = 1, py::arg("dp_rank") = 0,
         py::arg("id") = -1, py::arg("kv") = std::vector<buffer_spec>{},
         py::arg("aux") = std::vector<buffer_spec>{}, py::arg("device_id") = -1,
         py::arg("transport") = "local", py::arg("network") = false,
         py::arg("host") = "127.0.0.1", py::arg("fail_rooms") = std::vector<uint64_t>{},
         py::arg("state") = std::vector<buffer_spec>{}, py::arg("layout") = py::none(),
         py::arg("integrity") = "off", py::arg("dp_size") = 0, py::arg("timeouts") = py::none(),
         py::arg("pull") = false, py::keep_alive<0, 1>());

  py::class_<py_rank>(m, "Rank")
    .def_property_readonly("id", [](py_rank& r) { return r.get().ref().id; })
    .def_property_readonly("control_address", [](py_rank& r) { return r.get().control_address(); })
    .def("make_sender",
         [](py_rank& r, uint64_t room) {
           auto h = r.get().make_sender(room);
           if (!h)
             raise(h.error());
           return *h;
         },
         py::arg("room"), py::keep_alive<0, 1>(), "Opens the prefill side of a room: a Sender.")
    .def("make_receiver",
         [](py_rank& r, uint64_t room, int32_t prefill_dp_rank) {
           auto h = r.get().make_receiver(room, prefill_dp_rank);
           if (!h)
             raise(h.error());
           return *h;
         },
         py::arg("room"), py::arg("prefill_dp_rank") = 0, py::keep_alive<0, 1>(),
         "Opens the decode side of a room, fed by DP group ``prefill_dp_rank``: a Receiver.")
    .def("open_rooms", [](py_rank& r) { return r.get().open_rooms(); })
    .def_property_readonly("calls_after_conclusion",
                           [](py_rank& r) { return r.get().calls_after_conclusion(); })
    .def("stats",
         [](py_rank& r) {
           caf::expected<manager_stats> st{manager_stats{}};
           {
             py::gil_scoped_release nogil;
             st = r.get().stats();
           }
           if (!st)
             raise(st.error());
           py::dict out;
           out["live_rooms"] = st->live_rooms;
           out["failure_records"] = st->failure_records;
           out["origin_failures"] = st->origin_failures;
           out["propagated_failures"] = st->propagated_failures;
           out["stranger_messages"] = st->stranger_messages;
           out["calls_after_conclusion"] = r.get().calls_after_conclusion();
           return out;
         })
    .def("shape_of_side",
         [](py_rank& r, const std::string& side) {
           if (side != "prefill" && side != "decode")
             throw py::value_error("side must be 'prefill' or 'decode', got '" + side + "'");
           caf::expected<side_shape> x{side_shape{}};
           {
             py::gil_scoped_release nogil;
             x = r.get().shape_of_side(side == "prefill" ? role::prefill : role::decode);
           }
           if (!x)
             raise(x.error());
           py::dict out;
           out["ranks"] = x->ranks;
           out["dp_size"] = x->dp_size;
           out["tp_size"] = x->tp_size;
           out["pp_size"] = x->pp_size;
           out["tokens_per_page"] = x->tokens_per_page;
           out["complete"] = x->complete;
           return out;
         },
         py::arg("side"))
    .def("close", &py_rank::close);

  // Sender and Receiver are the package's handle types themselves: a
  // scheduler calls them for every request, and a Python class around them
  // cost a frame per call and an object per handle (python_loop.py: 7 % of
  // its rooms/s, 4 alternations).
  auto common = [](auto& cls) {
    using handle = typename std::decay_t<decltype(cls)>::type;
    add_fast_poll(cls);
    cls.def_property_readonly("room", [](handle& h) { return h.room(); },
                              "The bootstrap room's id.")
      .def("failure", [](handle& h) { return failure_of(h); },
           "The room's KVTransferError once ``poll()`` returned Failed, else None.")
      .def("group_failure", [](handle& h) { return error_of(h.group_failure()); },
           "The KVTransferError of a room the scheduler's group says failed (a MIN\n"
           "all-reduce over its ranks' polls): ``failure()`` once this rank knows,\n"
           "until then one marked ``is_from_another_rank`` with ``origin_rank`` -1\n"
           "(its root cause follows the fan-out; a later call gives it). Never\n"
           "claims this rank as the origin.")
      .def("abort", [](handle& h, const std::string& why) { check(h.abort(why)); },
           py::arg("reason") = "",
           "Fails the room here and, propagated, on every other rank of the room\n"
           "(a no-op once it concluded); its reason reads \"aborted by <side>\n"
           "scheduler[: reason]\".")
      .def("clear", [](handle& h) { check(h.clear()); },
           "Releases the room on this rank: its actor exits and its id is\n"
           "tombstoned, so no late message brings it back. The handle is dead\n"
           "afterwards; ``failure()`` is kept.");
  };
  py::class_<kv_sender> sender(m, "Sender", "Prefill side of one room (made by ``Rank.make_sender``).");
  common(sender);
  sender
    .def("init",
         [](kv_sender& s, uint64_t num_kv_indices, int64_t aux_index) {
           check(s.init(num_kv_indices, aux_index));
         },
         py::arg("num_kv_indices"), py::arg("aux_index") = 0,
         "Declares the pages the room will send and its aux slot.")
    .def("send",
         [](kv_sender& s, const py::handle& kv_indices, bool is_last,
            const py::handle& state_indices) {
           check(s.send(indices(kv_indices, "kv_indices"), is_last,
                        optional_indices(state_indices, "state_indices")));
         },
         py::arg("kv_indices"), py::arg("is_last"), py::arg("state_indices") = py::none(),
         "Sends a chunk of pages. ``state_indices`` (hybrid models): the\n"
         "request's state slots or window pages, with the last chunk only.")
    .def("send_buffers",
         [](kv_sender& s, const py::handle& kv_indices, const py::handle& kv_buffers,
            bool is_last, const py::handle& state_indices) {
           check(s.send_buffers(indices(kv_indices, "kv_indices"), buffers_of(kv_buffers),
                                is_last, optional_indices(state_indices, "state_indices")));
         },
         py::arg("kv_indices"), py::arg("kv_buffers"), py::arg("is_last"),
         py::arg("state_indices") = py::none(),
         "Pages of some KV buffers only (``kv_buffers``: indices into the\n"
         "rank's KV buffers, a layer's K and V), sent as soon as the forward\n"
         "pass computed that layer. Every buffer receives the declared pages\n"
         "in order; the last chunk leaves none unsent.")
    .def("decode_prefix_len", [](kv_sender& s) { return s.decode_prefix_len(); },
         "Tokens the decode side holds already (its radix cache), known from\n"
         "WaitingForInput on: send and declare only the pages after them.");
  py::class_<kv_receiver> receiver(m, "Receiver",
                                   "Decode side of one room (made by ``Rank.make_receiver``).");
  common(receiver);
  receiver
    .def("init",
         [](kv_receiver& r, const py::handle& kv_indices, int64_t aux_index,
            const py::handle& state_indices, int64_t decode_prefix_len) {
           check(r.init(indices(kv_indices, "kv_indices"), aux_index,
                        optional_indices(state_indices, "state_indices"), decode_prefix_len));
         },
         py::arg("kv_indices"), py::arg("aux_index") = 0, py::arg("state_indices") = py::none(),
         py::arg("decode_prefix_len") = 0,
         "Grants the room its destination pages and aux slot.\n"
         "``decode_prefix_len``: tokens this rank holds already (a radix cache\n"
         "hit); ``kv_indices`` are the pages after them.")
    .def("landed",
         [](kv_receiver& r, const py::handle& kv_buffers) {
           return r.landed(buffers_of(kv_buffers));
         },
         py::arg("kv_buffers"),
         "Whether every one of ``kv_buffers`` (indices into the rank's KV\n"
         "buffers: a layer's K and V) holds every byte this room puts there,\n"
         "so that layer may be computed while the rest still moves (vLLM's\n"
         "``wait_for_layer_load``). True for all once the room succeeded;\n"
         "buffer by buffer where the room's one source writes whole pages and\n"
         "the integrity check is off. A room that then reads Failed failed:\n"
         "its pages are recomputed whatever landed.");
}

#include "kvroom/actors/control/etcd/etcd_gateway.hpp"
#include "kvroom/actors/control/directory/base64.hpp"

#include <httplib.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include "kvroom/api/errors.hpp"

namespace kvroom {

namespace {

using json = nlohmann::json;

int64_t as_int(const json& j, const char* field) {
  // int64 fields come as strings; absent means 0 (proto3 omits defaults).
  auto i = j.find(field);
  if (i == j.end() || i->is_null())
    return 0;
  if (i->is_string())
    return std::stoll(i->get<std::string>());
  return i->get<int64_t>();
}

store_kv read_kv(const json& j) {
  store_kv out;
  out.key = base64_decode(j.value("key", std::string{})).value_or(std::string{});
  out.value = base64_decode(j.value("value", std::string{})).value_or(std::string{});
  out.create_revision = as_int(j, "create_revision");
  out.mod_revision = as_int(j, "mod_revision");
  out.lease = as_int(j, "lease");
  return out;
}

/// The `error` of a body: a string (unary calls) or an object (streams:
/// {"error": {"grpc_code": 14, "message": "etcdserver: no leader"}}).
const json* error_of(const json& j) {
  if (!j.is_object())
    return nullptr;
  auto i = j.find("error");
  return i == j.end() || i->is_null() ? nullptr : &*i;
}

int grpc_code_of(const json& j) {
  if (j.contains("code") && j["code"].is_number())
    return j["code"].get<int>();
  if (auto e = error_of(j); e && e->is_object() && e->contains("grpc_code")
                            && (*e)["grpc_code"].is_number())
    return (*e)["grpc_code"].get<int>();
  return 0;
}

/// A certificate that does not verify, or keys that do not load, do not get
/// better by asking again or elsewhere.
bool permanent(httplib::Error e) {
  return e == httplib::Error::SSLServerVerification || e == httplib::Error::SSLLoadingCerts
         || e == httplib::Error::SSLConnection;
}

/// OpenSSL writes to its socket with write(2), not send(MSG_NOSIGNAL): a
/// TLS connection the member closed (a close_notify on shutdown, a request
/// on a connection etcd dropped) raises SIGPIPE, whose default action ends
/// the whole process (seen: a `kvroom serve` of the TLS scenario exiting
/// 141 while its rank closed). Held around every call: SIGPIPE is blocked on
/// this thread, the write fails with EPIPE instead, and a SIGPIPE raised
/// meanwhile is taken before the mask is restored. The process's own
/// disposition is left alone (an embedder's choice).
class sigpipe_guard {
public:
  sigpipe_guard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    pending_before_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }

  ~sigpipe_guard() {
    if (!pending_before_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        timespec none{0, 0};
        sigtimedwait(&pipe_, nullptr, &none);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

private:
  sigset_t pipe_;
  sigset_t old_;
  bool pending_before_ = false;
};

} // namespace

std::string etcd_error_text(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (j.contains("message") && j["message"].is_string())
      return j["message"].get<std::string>();
    if (auto e = error_of(j)) {
      if (e->is_string())
        return e->get<std::string>();
      if (e->is_object() && e->contains("message") && (*e)["message"].is_string())
        return (*e)["message"].get<std::string>();
    }
  }
  return body.substr(0, 200);
}

etcd_answer classify_etcd_answer(int status, const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (status == 200 && !error_of(j))
    return j.is_object() ? etcd_answer::ok : etcd_answer::elsewhere;
  auto text = etcd_error_text(body);
  auto has = [&](const char* what) { return text.find(what) != std::string::npos; };
  if (status == 401 || has("invalid auth token") || has("user name is empty"))
    return etcd_answer::auth;
  // grpc unavailable (14) and deadline exceeded (4), and what a member says
  // around an election or when cut off ("no leader", "leader changed",
  // "request timed out", "too many requests").
  auto code = grpc_code_of(j);
  if (code == 14 || code == 4 || status == 503 || status == 504 || has("leader")
      || has("timed out") || has("too many requests") || !j.is_object())
    return etcd_answer::elsewhere;
  return etcd_answer::refused;
}

std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& c = prefix.back();
    if (static_cast<unsigned char>(c) < 0xff) {
      c = static_cast<char>(static_cast<unsigned char>(c) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0'); // every key
}

caf::expected<etcd_options> parse_etcd_url(const std::string& url) {
  etcd_options out;
  std::string rest;
  if (url.rfind("etcd://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("etcds://", 0) == 0) {
    out.tls = true;
    rest = url.substr(8);
  } else {
    return make_error(errc::invalid_argument,
                      "directory '" + url + "': expected etcd://host:port[,host:port...] "
                      "(or etcds:// for TLS)");
  }
  size_t from = 0;
  while (from <= rest.size()) {
    auto comma = rest.find(',', from);
    auto item = rest.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    auto colon = item.rfind(':');
    if (item.empty() || colon == std::string::npos || colon == 0 || colon + 1 == item.size())
      return make_error(errc::invalid_argument,
                        "directory '" + url + "': '" + item + "' is not host:port");
    auto port = item.substr(colon + 1);
    if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5
        || std::stoi(port) == 0 || std::stoi(port) > 65535)
      return make_error(errc::invalid_argument,
                        "directory '" + url + "': bad port in '" + item + "'");
    out.endpoints.push_back(item);
    if (comma == std::string::npos)
      break;
    from = comma + 1;
  }
  if (out.endpoints.size() > 16)
    return make_error(errc::invalid_argument, "directory '" + url + "': more than 16 members");
  return out;
}

caf::expected<etcd_options> etcd_options_of(const std::string& url, std::string cacert,
                                            std::string cert, std::string key,
                                            std::string user, std::string password) {
  auto out = parse_etcd_url(url);
  if (!out)
    return out;
  if (cert.empty() != key.empty())
    return make_error(errc::invalid_config, "etcd: a client certificate and its key go together");
  out->cacert = std::move(cacert);
  out->cert = std::move(cert);
  out->key = std::move(key);
  out->user = std::move(user);
  out->password = std::move(password);
  return out;
}

etcd_gateway::etcd_gateway(etcd_options opts) : opts_(std::move(opts)) {
  // nop
}

etcd_gateway::~etcd_gateway() {
  // The watch's client may be the last one to go, with its TLS session.
  sigpipe_guard guard;
  std::atomic_store(&watching_, std::shared_ptr<httplib::Client>{});
}

const std::string& etcd_gateway::current_endpoint() const {
  static const std::string none;
  return opts_.endpoints.empty() ? none : opts_.endpoints[current_ % opts_.endpoints.size()];
}

std::unique_ptr<httplib::Client> etcd_gateway::make_client(const std::string& endpoint,
                                                           uint32_t read_timeout_ms) const {
  auto url = (opts_.tls ? "https://" : "http://") + endpoint;
  auto cli = opts_.cert.empty() ? std::make_unique<httplib::Client>(url)
                                : std::make_unique<httplib::Client>(url, opts_.cert, opts_.key);
  if (opts_.tls) {
    if (!opts_.cacert.empty())
      cli->set_ca_cert_path(opts_.cacert);
    cli->enable_server_certificate_verification(true);
  }
  auto ms = std::chrono::milliseconds(opts_.request_timeout_ms);
  cli->set_connection_timeout(ms);
  cli->set_write_timeout(ms);
  cli->set_read_timeout(std::chrono::milliseconds(read_timeout_ms));
  return cli;
}

caf::error etcd_gateway::authenticate(httplib::Client& cli) {
  json body{{"name", opts_.user}, {"password", opts_.password}};
  auto res = cli.Post("/v3/auth/authenticate", body.dump(), "application/json");
  if (!res)
    return make_error(permanent(res.error()) ? errc::unauthorized : errc::unavailable,
                      "etcd " + current_endpoint() + ": authenticate: "
                        + httplib::to_string(res.error()));
  if (res->status != 200)
    return make_error(errc::unauthorized, "etcd " + current_endpoint() + ": authenticate as '"
                                            + opts_.user + "': " + etcd_error_text(res->body));
  auto j = json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("token"))
    return make_error(errc::unauthorized, "etcd " + current_endpoint() + ": no token");
  token_ = j["token"].get<std::string>();
  return caf::none;
}

caf::expected<std::string> etcd_gateway::post(const std::string& path,
                                              const std::string& body, uint32_t timeout_ms) {
  sigpipe_guard guard; // first: clients (and their TLS sessions) go before it
  auto wait_ms = timeout_ms != 0 ? timeout_ms : opts_.request_timeout_ms;
  if (opts_.endpoints.empty())
    return make_error(errc::invalid_config, "no etcd endpoint");
  std::string last;
  for (size_t attempt = 0; attempt < opts_.endpoints.size(); ++attempt) {
    if (cancelled_)
      return make_error(errc::unavailable, "etcd client cancelled");
    auto& endpoint = opts_.endpoints[current_ % opts_.endpoints.size()];
    auto cli = make_client(endpoint, wait_ms);
    bool fresh_token = false;
    if (!opts_.user.empty() && token_.empty()) {
      if (auto err = authenticate(*cli)) {
        last = describe(err);
        if (is(err, errc::unauthorized))
          return err;
        ++current_;
        continue;
      }
      fresh_token = true;
    }
    for (;;) {
      httplib::Headers headers;
      if (!token_.empty())
        headers.emplace("Authorization", token_);
      // A member without a leader refuses at once instead of holding the
      // call for etcd's own request timeout (7 s by default): the next
      // member is asked while an election runs or when this one is cut off.
      headers.emplace("Grpc-Metadata-hasleader", "true");
      auto res = cli->Post(path.c_str(), headers, body, "application/json");
      if (!res) {
        last = endpoint + ": " + httplib::to_string(res.error());
        if (permanent(res.error()))
          return make_error(errc::unauthorized, "etcd " + last);
        break;
      }
      auto answer = classify_etcd_answer(res->status, res->body);
      if (answer == etcd_answer::ok)
        return std::move(res->body);
      if (answer == etcd_answer::auth && !opts_.user.empty() && !fresh_token) {
        // Tokens expire: one more session, once.
        token_.clear();
        if (auto err = authenticate(*cli))
          return err;
        fresh_token = true;
        continue;
      }
      last = endpoint + ": " + etcd_error_text(res->body);
      if (answer != etcd_answer::elsewhere)
        return make_error(answer == etcd_answer::auth ? errc::unauthorized
                                                      : errc::invalid_argument,
                          "etcd " + last);
      break;
    }
    ++current_;
    token_.clear();
  }
  return make_error(errc::unavailable, "etcd unreachable (last: " + last + ")");
}

caf::expected<int64_t> etcd_gateway::grant(int64_t ttl_s) {
  auto res = post("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}.dump());
  if (!res)
    return res.error();
  auto j = json::parse(*res, nullptr, false);
  if (!j.is_object() || as_int(j, "ID") == 0)
    return make_error(errc::unavailable, "etcd: lease grant answered without an id");
  return as_int(j, "ID");
}

caf::expected<int64_t> etcd_gateway::keep_alive(int64_t lease, uint32_t timeout_ms) {
  auto res = post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump(), timeout_ms);
  if (!res)
    return res.error();
  // The stream's one answer: {"result": {"ID": ..., "TTL": ...}}; TTL is
  // left out (proto3's zero) when etcd does not have the lease. An answer
  // for another lease, or none, says nothing about ours.
  auto j = json::parse(*res, nullptr, false);
  if (!j.is_object() || !j.contains("result") || !j["result"].is_object()
      || as_int(j["result"], "ID") != lease)
    return make_error(errc::unavailable, "etcd: malformed keepalive answer: "
                                           + res->substr(0, 200));
  return as_int(j["result"], "TTL");
}

caf::expected<int64_t> etcd_gateway::time_to_live(int64_t lease, uint32_t timeout_ms) {
  auto res = post("/v3/lease/timetolive", json{{"ID", std::to_string(lease)}}.dump(), timeout_ms);
  if (!res)
    return res.error();
  auto j = json::parse(*res, nullptr, false);
  if (!j.is_object() || !j.contains("header"))
    return make_error(errc::unavailable, "etcd: malformed timetolive answer");
  // etcd answers TTL -1 for a lease it does not have; proto3 leaves out a 0.
  return as_int(j, "TTL");
}

caf::error etcd_gateway::revoke(int64_t lease) {
  auto res = post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  return res ? caf::none : res.error();
}

caf::expected<store_snapshot>
etcd_gateway::range_prefix(const std::string& prefix) {
  json body{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}};
  auto res = post("/v3/kv/range", body.dump());
  if (!res)
    return res.error();
  auto j = json::parse(*res, nullptr, false);
  if (!j.is_object())
    return make_error(errc::unavailable, "etcd: malformed range answer");
  store_snapshot out;
  out.revision = as_int(j.value("header", json::object()), "revision");
  // A store that answers has a revision (1 when empty): without one this is
  // not a read of the prefix, and "no keys" must not be concluded from it.
  if (out.revision <= 0)
    return make_error(errc::unavailable, "etcd: range answered without a revision");
  if (j.contains("kvs"))
    for (auto& kv : j["kvs"])
      out.kvs.push_back(read_kv(kv));
  return out;
}

caf::expected<bool> etcd_gateway::put_if_unchanged(const std::string& prefix, int64_t revision,
                                                   const std::string& key,
                                                   const std::string& value, int64_t lease) {
  // Every key under the prefix last changed at or before `revision`: MOD <
  // revision + 1 over the whole range. A key deleted since is no conflict.
  json body{
    {"compare", json::array({json{{"key", base64_encode(prefix)},
                                  {"range_end", base64_encode(prefix_end(prefix))},
                                  {"target", "MOD"},
                                  {"result", "LESS"},
                                  {"mod_revision", std::to_string(revision + 1)}}})},
    {"success", json::array({json{{"request_put", json{{"key", base64_encode(key)},
                                                      {"value", base64_encode(value)},
                                                      {"lease", std::to_string(lease)}}}}})}};
  auto res = post("/v3/kv/txn", body.dump());
  if (!res)
    return res.error();
  auto j = json::parse(*res, nullptr, false);
  if (!j.is_object())
    return make_error(errc::unavailable, "etcd: malformed txn answer");
  return j.value("succeeded", false);
}

caf::error etcd_gateway::delete_if_lease(const std::string& key, int64_t lease) {
  json body{
    {"compare", json::array({json{{"key", base64_encode(key)},
                                  {"target", "LEASE"},
                                  {"result", "EQUAL"},
                                  {"lease", std::to_string(lease)}}})},
    {"success", json::array({json{{"request_delete_range", json{{"key", base64_encode(key)}}}}})}};
  auto res = post("/v3/kv/txn", body.dump());
  return res ? caf::none : res.error();
}

caf::error etcd_gateway::put(const std::string& key, const std::string& value, int64_t lease) {
  json body{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0)
    body["lease"] = std::to_string(lease);
  auto res = post("/v3/kv/put", body.dump());
  return res ? caf::none : res.error();
}

caf::expected<int64_t>
etcd_gateway::watch(const std::string& prefix, int64_t start_revision, uint32_t idle_ms,
                    const std::function<void(std::vector<store_event>&)>& on_events) {
  sigpipe_guard guard;
  if (opts_.endpoints.empty())
    return make_error(errc::invalid_config, "no etcd endpoint");
  auto& endpoint = opts_.endpoints[current_ % opts_.endpoints.size()];
  std::shared_ptr<httplib::Client> cli = make_client(endpoint, idle_ms);
  if (!opts_.user.empty() && token_.empty())
    if (auto err = authenticate(*cli)) {
      ++current_;
      return err;
    }
  // Published before the check, so a cancel either sees this client or is
  // seen here.
  std::atomic_store(&watching_, cli);
  if (cancelled_) {
    std::atomic_store(&watching_, std::shared_ptr<httplib::Client>{});
    return make_error(errc::unavailable, "etcd client cancelled");
  }
  json create{{"key", base64_encode(prefix)},
              {"range_end", base64_encode(prefix_end(prefix))},
              {"prev_kv", true}};
  if (start_revision > 0)
    create["start_revision"] = std::to_string(start_revision);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.body = json{{"create_request", create}}.dump();
  req.set_header("Content-Type", "application/json");
  if (!token_.empty())
    req.set_header("Authorization", token_);
  // A member that loses its leader ends the stream ("no leader") instead of
  // keeping it open and silent while the others move on: the watch resumes
  // on a member that still hears the cluster.
  req.set_header("Grpc-Metadata-hasleader", "true");
  int64_t next = start_revision;
  std::string buf;
  caf::error failure;
  // The gateway writes one JSON object a line.
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t eol;
    while ((eol = buf.find('\n')) != std::string::npos) {
      auto line = buf.substr(0, eol);
      buf.erase(0, eol + 1);
      auto j = json::parse(line, nullptr, false);
      if (!j.is_object())
        continue;
      if (j.contains("error")) {
        failure = make_error(errc::unavailable, "etcd watch: " + etcd_error_text(line));
        return false;
      }
      auto& r = j["result"];
      if (!r.is_object())
        continue;
      if (as_int(r, "compact_revision") > 0) {
        failure = make_error(errc::unavailable, "etcd watch: start revision compacted");
        return false;
      }
      if (r.value("canceled", false)) {
        failure = make_error(errc::unavailable, "etcd watch canceled: "
                                                  + r.value("cancel_reason", std::string{}));
        return false;
      }
      auto rev = as_int(r.value("header", json::object()), "revision");
      std::vector<store_event> events;
      if (r.contains("events"))
        for (auto& e : r["events"]) {
          store_event ev;
          ev.deleted = e.value("type", std::string{"PUT"}) == "DELETE";
          ev.kv = read_kv(e.value("kv", json::object()));
          if (e.contains("prev_kv"))
            ev.prev = read_kv(e["prev_kv"]);
          next = std::max(next, ev.kv.mod_revision + 1);
          events.push_back(std::move(ev));
        }
      if (!events.empty())
        on_events(events);
      else if (!r.value("created", false) && rev > 0)
        next = std::max(next, rev + 1); // progress
    }
    return !cancelled_;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  cli->send(req, res, err);
  std::atomic_store(&watching_, std::shared_ptr<httplib::Client>{});
  if (failure) {
    // This member cannot serve the watch (no leader, canceled): the next
    // one is asked. A compacted revision is the same everywhere.
    if (describe(failure).find("compacted") == std::string::npos) {
      ++current_;
      token_.clear();
    }
    return failure;
  }
  if (cancelled_)
    return next;
  if (err != httplib::Error::Success && err != httplib::Error::Read) {
    // Could not reach this member: the next call asks another.
    ++current_;
    token_.clear();
    return make_error(errc::unavailable, "etcd watch at " + endpoint + ": "
                                           + httplib::to_string(err));
  }
  // A read that ended (idle, or the member went away mid-stream): resume
  // where it stopped; a member that is gone fails the next connect.
  return next;
}

void etcd_gateway::cancel() {
  sigpipe_guard guard; // stopping a TLS client writes its close_notify
  cancelled_ = true;
  if (auto cli = std::atomic_load(&watching_))
    cli->stop();
}

} // namespace kvroom

#include "metrics_http.hpp"

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <mutex>

#include "kvroom/api/errors.hpp"

namespace kvroom::cli {

namespace {

/// cpp-httplib's own pool queues every accepted connection, without bound,
/// on 8 or more threads: a client that opens connections faster than they
/// time out made a rank hold as many descriptors. This one runs `threads`
/// workers and queues at most `max_queued`; past that the accepting thread
/// serves the connection itself, so it accepts nothing more meanwhile and
/// further clients wait in the kernel's backlog, holding nothing of ours.
class bounded_pool : public httplib::TaskQueue {
public:
  bounded_pool(size_t threads, size_t max_queued) : max_queued_(max_queued) {
    for (size_t i = 0; i < threads; ++i)
      workers_.emplace_back([this] { work(); });
  }

  void enqueue(std::function<void()> fn) override {
    {
      std::unique_lock<std::mutex> guard{mtx_};
      if (jobs_.size() < max_queued_) {
        jobs_.push_back(std::move(fn));
        cv_.notify_one();
        return;
      }
    }
    fn();
  }

  void shutdown() override {
    {
      std::unique_lock<std::mutex> guard{mtx_};
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_)
      t.join();
  }

private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> guard{mtx_};
        cv_.wait(guard, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty())
          return; // stopping, and every queued connection served
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  size_t max_queued_;
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

} // namespace

caf::expected<std::unique_ptr<metrics_http>>
metrics_http::start(const std::string& host, uint16_t port, source ranks) {
  std::unique_ptr<metrics_http> out{new metrics_http};
  out->server_ = std::make_unique<httplib::Server>();
  auto& srv = *out->server_;
  // A scrape is small and quick, and sent as soon as its connection is up; a connection that
  // stays silent holds a worker for at most a second.
  srv.set_read_timeout(1, 0);
  srv.set_write_timeout(2, 0);
  srv.set_keep_alive_timeout(1);
  srv.set_keep_alive_max_count(16);
  // Two scrapers at once is plenty (Prometheus scrapes each target from one
  // connection); 8 more wait their turn.
  srv.new_task_queue = [] { return new bounded_pool(2, 8); };
  srv.Get("/metrics", [ranks](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(ranks(), process_refusals()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  srv.Get("/health", [ranks](const httplib::Request&, httplib::Response& res) {
    auto h = health_of(ranks());
    res.status = h.ready ? 200 : 503;
    res.set_content(h.body, "application/json");
  });
  int bound = port == 0 ? srv.bind_to_any_port(host) : (srv.bind_to_port(host, port) ? port : -1);
  if (bound <= 0)
    return make_error(errc::unavailable, "cannot listen for metrics on " + host + ":"
                                           + std::to_string(port));
  out->port_ = static_cast<uint16_t>(bound);
  out->thread_ = std::thread{[&srv] { srv.listen_after_bind(); }};
  return out;
}

metrics_http::~metrics_http() {
  if (server_)
    server_->stop();
  if (thread_.joinable())
    thread_.join();
}

} // namespace kvroom::cli

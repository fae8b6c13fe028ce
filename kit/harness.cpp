#include "kvroom/kit/harness.hpp"

#include <nlohmann/json.hpp>
#include "kvroom/api/secret.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kvroom::harness {

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

std::string slurp(const std::string& path) {
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

pid_t spawn(const std::string& exe, const std::vector<std::string>& args,
            const std::string& log) {
  pid_t pid = ::fork();
  if (pid != 0)
    return pid;
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, 1);
  ::dup2(fd, 2);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(exe.c_str(), argv.data());
  std::perror("execv");
  std::_Exit(127);
}

std::string self_exe() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n <= 0 ? std::string{} : std::string(buf, static_cast<size_t>(n));
}

void remove_segments(pid_t pid) {
  auto prefix = "kvroom-" + std::to_string(pid) + "-";
  if (auto* dir = ::opendir("/dev/shm")) {
    while (auto* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name.compare(0, prefix.size(), prefix) == 0)
        ::shm_unlink(("/" + name).c_str());
    }
    ::closedir(dir);
  }
}

std::string make_temp_dir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return {};
  return tmpl;
}

std::string write_secret(const std::string& dir) {
  auto path = dir + "/secret";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0)
    return {};
  static const char hex[] = "0123456789abcdef";
  std::string text;
  for (unsigned char c : make_nonce()) {
    text.push_back(hex[c >> 4]);
    text.push_back(hex[c & 15]);
  }
  text.push_back('\n');
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok ? "--secret-file=" + path : std::string{};
}

std::map<room_id, report_line> read_report(const std::string& path) {
  std::map<room_id, report_line> out;
  auto doc = nlohmann::json::parse(slurp(path), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("rooms") || !doc["rooms"].is_array())
    return out;
  for (auto& x : doc["rooms"]) {
    if (!x.is_object() || !x.contains("room"))
      continue;
    auto room = x.value("room", room_id{0});
    report_line r;
    kv_poll st;
    if (from_string(x.value("state", std::string{}), st))
      r.state = st;
    r.opened_ms = x.value("opened_ms", int64_t{0});
    r.at_ms = x.value("at_ms", int64_t{0});
    r.latency_us = x.value("latency_us", int64_t{0});
    r.data_error = x.value("data_error", std::string{});
    if (r.state == kv_poll::failed)
      r.error = kv_transfer_error{room, x.value("reason", std::string{}),
                                  x.value("from_another_rank", false),
                                  x.value("origin_rank", rank_id{-1}),
                                  failure_cause_named(x.value("cause", std::string{"other"}))};
    out[room] = std::move(r);
  }
  return out;
}

std::string event_line(const std::vector<std::pair<std::string, event_value>>& fields) {
  std::string out = "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    auto& [key, value] = fields[i];
    out += (i ? ", " : "") + nlohmann::json(key).dump() + ": ";
    if (auto* s = std::get_if<std::string>(&value))
      out += nlohmann::json(*s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    else
      out += std::to_string(std::get<int64_t>(value));
  }
  return out + "}";
}

std::string report_json(const std::string& rank, rank_id id,
                        const std::vector<std::pair<room_id, report_line>>& rooms) {
  // The layout is fixed (scripts grep `"key": value`); the values are the
  // library's, so escaping is never ours.
  auto str = [](const std::string& s) { return nlohmann::json(s).dump(); };
  size_t ok = 0;
  for (auto& [room, r] : rooms)
    ok += r.state == kv_poll::success && r.data_error.empty() ? 1 : 0;
  std::string out = "{\"rank\": " + str(rank) + ", \"rank_id\": " + std::to_string(id)
                    + ", \"succeeded\": " + std::to_string(ok)
                    + ", \"failed\": " + std::to_string(rooms.size() - ok) + ", \"rooms\": [";
  for (size_t i = 0; i < rooms.size(); ++i) {
    auto& [room, r] = rooms[i];
    out += (i ? ",\n  " : "\n  ");
    out += "{\"room\": " + std::to_string(room) + ", \"state\": " + str(to_string(r.state))
           + ", \"opened_ms\": " + std::to_string(r.opened_ms)
           + ", \"latency_us\": " + std::to_string(r.latency_us)
           + ", \"at_ms\": " + std::to_string(r.at_ms);
    if (r.error)
      out += ", \"origin_rank\": " + std::to_string(r.error->origin_rank)
             + ", \"from_another_rank\": " + (r.error->is_from_another_rank ? "true" : "false")
             + ", \"cause\": " + str(to_string(r.error->cause))
             + ", \"reason\": " + str(r.error->failure_reason);
    if (!r.data_error.empty())
      out += ", \"data_error\": " + str(r.data_error);
    out += "}";
  }
  out += "\n]}\n";
  return out;
}

uint64_t resident_bytes() {
  std::ifstream statm{"/proc/self/statm"};
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

int free_port(uint64_t seed) {
  constexpr int first = 20000, span = 12000;
  for (int i = 0; i < span; ++i) {
    int port = first + static_cast<int>((seed + static_cast<uint64_t>(i)) % span);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
      return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    // No SO_REUSEADDR: a port a closed connection still holds is skipped.
    bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    if (free)
      return port;
  }
  return 0;
}

} // namespace kvroom::harness

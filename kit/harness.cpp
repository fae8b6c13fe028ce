#include "kvroom/kit/harness.hpp"
#include "kvroom/transport/auth/secret.hpp"

#include <dirent.h>
#include <fcntl.h>
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

std::string field(const std::string& line, const std::string& key) {
  auto k = "\"" + key + "\": ";
  auto i = line.find(k);
  if (i == std::string::npos)
    return {};
  i += k.size();
  if (line[i] == '"') {
    std::string out;
    for (++i; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size())
        ++i;
      out += line[i];
    }
    return out;
  }
  auto j = line.find_first_of(",}", i);
  return line.substr(i, j - i);
}

std::map<room_id, report_line> read_report(const std::string& path) {
  std::map<room_id, report_line> out;
  std::istringstream in{slurp(path)};
  std::string line;
  while (std::getline(in, line)) {
    auto room = field(line, "room");
    if (room.empty())
      continue;
    report_line r;
    kv_poll st;
    if (from_string(field(line, "state"), st))
      r.state = st;
    r.opened_ms = std::atoll(field(line, "opened_ms").c_str());
    r.at_ms = std::atoll(field(line, "at_ms").c_str());
    r.latency_us = std::atoll(field(line, "latency_us").c_str());
    r.data_error = field(line, "data_error");
    if (r.state == kv_poll::failed)
      r.error = kv_transfer_error{std::strtoull(room.c_str(), nullptr, 10),
                                  field(line, "reason"),
                                  field(line, "from_another_rank") == "true",
                                  std::atoi(field(line, "origin_rank").c_str())};
    out[std::strtoull(room.c_str(), nullptr, 10)] = r;
  }
  return out;
}

} // namespace kvroom::harness

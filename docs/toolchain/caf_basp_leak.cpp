// The smallest program we have that shows LeakSanitizer's indirect leaks of
// CAF 0.17's BASP broker at exit (docs/TOOLCHAIN.md, "LeakSanitizer at
// exit"). No kvroom code. Three processes, as a small deployment:
//   - a directory publishes an actor that keeps the handles members put;
//   - two members each publish an echo actor, connect to the directory, put
//     their echo, read the other's handle from the directory (a proxy of a
//     node first known indirectly, through the directory's node), connect
//     to the other's port directly and ask it once;
//   - then all three end their actor systems at the same moment.
//
//   g++ -std=c++17 -g -fsanitize=address caf_basp_leak.cpp -lcaf_io -lcaf_core -pthread
//   ASAN_OPTIONS=detect_leaks=1 ./a.out
//
// SETTINGS=h|a|t|- picks which of kvroom's middleman settings apply
// (default: all of them).
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "caf/all.hpp"
#include "caf/io/all.hpp"

namespace {

using caf::get_atom;
using caf::put_atom;

/// What kvroom's runtime sets (actors/runtime.cpp), nothing else; SETTINGS
/// picks some of them: h heartbeat, a no automatic connections, t connection
/// timeout (default all three; "-" none).
void configure(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  auto* picked = std::getenv("SETTINGS");
  std::string settings = picked ? picked : "hat";
  if (settings.find('a') != std::string::npos)
    cfg.set("middleman.enable-automatic-connections", false);
  if (settings.find('h') != std::string::npos)
    cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(100)});
  if (settings.find('t') != std::string::npos)
    cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::milliseconds(1000)});
}

struct directory_state {
  std::vector<caf::actor> members;
};

caf::behavior directory(caf::stateful_actor<directory_state>* self) {
  return {
    [=](put_atom, const caf::actor& member) {
      self->state.members.push_back(member);
      return caf::unit;
    },
    [=](get_atom) { return self->state.members; },
  };
}

caf::behavior echo(caf::event_based_actor*) {
  return {[](int x) { return x + 1; }};
}

void tell(int fd, uint16_t x) {
  if (write(fd, &x, sizeof x) != sizeof x)
    std::exit(3);
}

uint16_t hear(int fd) {
  uint16_t x = 0;
  if (read(fd, &x, sizeof x) != sizeof x)
    return 0; // the other end closed: the signal to stop
  return x;
}

/// The directory: publishes, says its port, ends when told.
int run_directory(int fd) {
  caf::actor_system_config cfg;
  configure(cfg);
  caf::actor_system sys{cfg};
  auto dir = sys.spawn(directory);
  auto port = sys.middleman().publish(dir, 0, "127.0.0.1");
  if (!port)
    return 1;
  tell(fd, *port);
  hear(fd);
  sys.middleman().unpublish(dir, *port);
  caf::anon_send_exit(dir, caf::exit_reason::kill);
  return 0;
}

/// A member: gets the directory's port, publishes its echo, meets the other
/// member through the directory and directly, says it is done, ends when
/// told.
int run_member(int fd) {
  caf::actor_system_config cfg;
  configure(cfg);
  caf::actor_system sys{cfg};
  auto dir_port = hear(fd);
  auto mine = sys.spawn(echo);
  auto port = sys.middleman().publish(mine, 0, "127.0.0.1");
  auto dir = sys.middleman().remote_actor("127.0.0.1", dir_port);
  if (!port || !dir)
    return 1;
  caf::scoped_actor self{sys};
  self->request(*dir, std::chrono::seconds(5), put_atom::value, mine)
    .receive([] {}, [&](caf::error&) {});
  tell(fd, *port);
  auto other_port = hear(fd); // both members are in the directory now
  std::vector<caf::actor> members;
  self->request(*dir, std::chrono::seconds(5), get_atom::value)
    .receive([&](std::vector<caf::actor>& xs) { members = std::move(xs); },
             [&](caf::error&) {});
  int answers = 0;
  for (auto& m : members) // the other member's echo, known through the directory
    if (m != mine)
      self->request(m, std::chrono::seconds(5), 1)
        .receive([&](int) { ++answers; },
                 [&](caf::error& e) { std::cerr << "indirect: " << sys.render(e) << std::endl; });
  auto other = sys.middleman().remote_actor("127.0.0.1", other_port);
  if (other)
    self->request(*other, std::chrono::seconds(5), 2)
      .receive([&](int) { ++answers; },
               [&](caf::error& e) { std::cerr << "direct: " << sys.render(e) << std::endl; });
  tell(fd, answers == 2 ? 1 : 2);
  hear(fd);
  sys.middleman().unpublish(mine, *port);
  caf::anon_send_exit(mine, caf::exit_reason::kill);
  return answers == 2 ? 0 : 1;
}

pid_t start(int (*body)(int), int& parent_end) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0)
    std::exit(3);
  auto pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::exit(body(fds[1]));
  }
  close(fds[1]);
  parent_end = fds[0];
  return pid;
}

} // namespace

int main() {
  int d = -1, a = -1, b = -1;
  auto pd = start(run_directory, d);
  auto dir_port = hear(d);
  auto pa = start(run_member, a);
  auto pb = start(run_member, b);
  tell(a, dir_port);
  tell(b, dir_port);
  auto port_a = hear(a);
  auto port_b = hear(b);
  tell(a, port_b);
  tell(b, port_a);
  bool ok = hear(a) == 1 && hear(b) == 1;
  // Every process ends at the same moment.
  close(a);
  close(b);
  close(d);
  int failed = 0;
  for (auto pid : {pd, pa, pb}) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::cout << (ok ? "members met" : "members did not meet") << ", " << failed
            << " process(es) exited non-zero" << std::endl;
  return ok && failed == 0 ? 0 : 1;
}

// Shared host KV memory over segments a killed process left behind.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "kvroom/kit/host_kv_cache.hpp"

using namespace kvroom;

TEST_CASE("shared KV memory replaces stale segments that carry this process's id") {
  // In a fresh process, so the segment counter starts at 0: plant the names
  // a dead process with the same id would have left, then allocate.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (int i = 0; i < 4; ++i) {
      auto name = "/kvroom-" + std::to_string(::getpid()) + "-" + std::to_string(i);
      int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
      if (fd < 0)
        ::_exit(2);
      ::close(fd);
    }
    kv_shape shape;
    shape.num_buffers = 2;
    shape.num_pages = 4;
    shape.page_size_bytes = 256;
    shape.num_aux = 1;
    shape.aux_slots = 4;
    shape.aux_item_bytes = 64;
    {
      host_kv_cache cache{shape, true};
      cache.write_room(7, {0, 1}, 0);
      if (!cache.check_room(7, {0, 1}, 0, nullptr))
        ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  for (int i = 0; i < 4; ++i)
    ::shm_unlink(("/kvroom-" + std::to_string(pid) + "-" + std::to_string(i)).c_str());
}

TEST_CASE("the head pattern of a parallel layout checks heads, not just pages") {
  parallel_layout x;
  x.tp_size = 2;
  x.layers = 1;
  x.total_kv_heads = 4;
  x.head_dim = 8;
  x.bytes_per_element = 2;
  x.tokens_per_page = 2;
  kv_shape shape;
  shape.num_buffers = 2;
  shape.num_pages = 4;
  shape.page_size_bytes = x.page_bytes();
  shape.num_aux = 1;
  shape.aux_slots = 2;
  shape.aux_item_bytes = 16;
  host_kv_cache a{shape}, b{shape};
  auto y = x;
  y.tp_rank = 1;
  a.write_room(5, {1, 2}, 0, x);
  std::string why;
  CHECK(a.check_room(5, {1, 2}, 0, x, &why));
  // Other heads (TP rank 1), another room, another page order: all differ.
  CHECK_FALSE(a.check_room(5, {1, 2}, 0, y, &why));
  CHECK_FALSE(a.check_room(6, {1, 2}, 0, x, &why));
  auto z = x;
  z.order = page_order::nhd;
  CHECK_FALSE(a.check_room(5, {1, 2}, 0, z, &why));
  // The pages swapped: each page's place in the room is in its pattern.
  CHECK_FALSE(a.check_room(5, {2, 1}, 0, x, &why));
  // One head of one token copied from elsewhere is found.
  b.write_room(5, {1, 2}, 0, x);
  CHECK(b.check_room(5, {1, 2}, 0, x, &why));
  b.page(1, 2)[x.offset(1, 1)] ^= 1;
  CHECK_FALSE(b.check_room(5, {1, 2}, 0, x, &why));
  CHECK(why.find("page 2") != std::string::npos);
}

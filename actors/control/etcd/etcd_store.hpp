#pragma once

// etcd as a directory store: its row (`etcd://`, `etcds://`), whose
// clients are etcd_gateway.

#include "kvroom/actors/control/directory_stores.hpp"

namespace kvroom {

directory_store etcd_directory_store();

} // namespace kvroom

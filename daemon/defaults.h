// Defaults that more than one part of the runtime and its clients use, named once here.
// A light header (no includes beyond <cstdint>): config, IPC and server headers all take it.
#pragma once

#include <cstdint>

namespace clio {

// Data bytes of one shared-memory channel (runtime.shm_channel_size; a client asks for it and
// the runtime grants at most its configured size). A 1 MiB FUSE write with its arguments fits.
inline constexpr uint32_t kDefaultShmChannelBytes = 2u << 20;

// The most payload one frame carries (daemon/ipc.h): a bigger one closes its connection.
inline constexpr uint32_t kMaxPayload = 64u << 20;

// Payload bytes the runtime reads and runs at once, over all its connections
// (runtime.max_inflight): past it, frames wait unread and their clients block in send.
inline constexpr uint64_t kDefaultMaxInflightBytes = uint64_t{1} << 30;

}  // namespace clio

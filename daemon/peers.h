// Who is on the other end of a client connection (docs/security.md), fixed when it connects.
#pragma once

#include <memory>

#include "daemon/caller.h"

namespace clio {

// The peer of a Unix connection as the kernel saw it at connect(): its uid, gid, supplementary
// groups and pid (SO_PEERCRED, SO_PEERGROUPS). Root and the runtime's own user may call
// everything; anyone else who could open the socket (a member of its group) only reports, and
// so does a peer whose credentials cannot be read.
std::shared_ptr<const Peer> UnixPeer(int fd);

// A TCP client that presented the node's token: the token is the node's administration key.
std::shared_ptr<const Peer> TokenPeer();

}  // namespace clio

// The node's token (runtime.token_file): what TCP clients and the runtime prove to each other
// they know (TokenProof), and what HTTP actions present in their Authorization header. The
// runtime makes it (EnsureToken).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace clio {

// The node's token at `path` (runtime.token_file), for the runtime at start: read, or made once
// (32 random bytes in hex, mode 0600, written durably). A token file that is not a regular
// file, belongs to another user or is shorter than 16 characters is a config error; one others
// may read is set to 0600 with a warning.
Result<std::string> EnsureToken(const std::string& path);

// The file's first line, without trailing blanks. PermissionDenied when it cannot be read
// (naming the file), InvalidArgument when it is empty or no path is given.
Result<std::string> ReadTokenFile(const std::string& path);

// Whether a presented token is the node's, in time that depends only on the longer of the two:
// a wrong guess teaches nothing, not even the length.
bool TokensMatch(std::string_view given, std::string_view token);

// The TCP handshake (docs/ipc.md): each side proves it knows the token without sending it, over
// both sides' fresh nonces, so that neither a port squatter nor a recorded exchange learns or
// replays anything. HMAC-SHA256(token, role | 0 | first | second | binding), 32 bytes. Over TLS,
// `binding` is the session's exported keying material (TlsBinding): a proof made for one TLS
// session is worth nothing in another, so a peer in the middle that terminates TLS (a
// certificate check gone wrong) cannot relay the handshake. Empty without TLS.
inline constexpr size_t kNonceBytes = 32;
std::string TokenProof(std::string_view token, std::string_view role, std::string_view first, std::string_view second,
                       std::string_view binding = {});
// kNonceBytes random bytes.
std::string NewNonce();

}  // namespace clio

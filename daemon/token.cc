#include "daemon/token.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/durable_file.h"
#include "common/log.h"

namespace clio {

Result<std::string> ReadTokenFile(const std::string& path) {
  if (path.empty()) return InvalidArgument("no runtime.token_file to read the token from");
  std::ifstream in(path);
  if (!in)
    return Status(Code::kPermissionDenied, "cannot read the runtime's token " + path + ": " + std::strerror(errno) +
                                               " (root and the runtime's user can; TCP clients and HTTP actions need it)");
  std::string line;
  std::getline(in, line);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  if (line.empty()) return InvalidArgument("the runtime's token file " + path + " is empty");
  return line;
}

bool TokensMatch(std::string_view given, std::string_view token) {
  const size_t n = std::max(given.size(), token.size());
  unsigned char diff = given.size() == token.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    const unsigned char b = i < token.size() ? static_cast<unsigned char>(token[i]) : 0;
    diff |= static_cast<unsigned char>(a ^ b);
  }
  return diff == 0;
}

std::string TokenProof(std::string_view token, std::string_view role, std::string_view first, std::string_view second,
                       std::string_view binding) {
  std::string msg(role);
  msg += '\0';
  msg += first;
  msg += second;
  msg += binding;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  ::HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), reinterpret_cast<const unsigned char*>(msg.data()),
         msg.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string NewNonce() {
  std::string n(kNonceBytes, '\0');
  size_t got = 0;
  while (got < n.size()) {
    const ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return n;
}

// The node's token (runtime.token_file): read, or made once (32 random bytes in hex, mode
// 0600, written durably) so that TCP clients and the mutating HTTP API can be checked.
Result<std::string> EnsureToken(const std::string& path) {
  if (::access(path.c_str(), F_OK) == 0) {
    // The node's administration key: the runtime's own file, readable by nobody else.
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "runtime.token_file " + path);
    if (!S_ISREG(st.st_mode))
      return ConfigError(path + " (runtime.token_file) is not a regular file (a symbolic link?); remove it and the "
                                "runtime makes a new token");
    if (st.st_uid != ::geteuid())
      return ConfigError(path + " (runtime.token_file) belongs to uid " + std::to_string(st.st_uid) +
                         ", not the runtime's user (uid " + std::to_string(::geteuid()) +
                         "); remove it and the runtime makes a new token");
    if (st.st_mode & 077) {
      // Older releases told operators to let TCP clients read it: set it right, and say that
      // whoever could read it may hold the node's key.
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
      if (::chmod(path.c_str(), 0600) != 0) return Status::FromErrno(errno, "chmod 600 " + path);
      CLIO_LOG_WARN("{} (runtime.token_file) had mode {}: set to 0600. Users who could read it may hold the node's "
                    "token: remove the file and restart to make a new one", path, mode);
    }
    auto read = ReadTokenFile(path);
    if (!read.ok() && read.status().code() != Code::kInvalidArgument) return read.status();  // unreadable
    const std::string line = read.ok() ? *read : std::string();  // an empty file is a short token
    if (line.size() < 16)
      return ConfigError(path + ": the token (runtime.token_file) is shorter than 16 characters; remove the "
                                "file and the runtime makes a new one");
    return line;
  }
  unsigned char raw[32];
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (!urandom.read(reinterpret_cast<char*>(raw), sizeof raw)) return Status(Code::kIoError, "reading /dev/urandom");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : raw) token += {kHex[b >> 4], kHex[b & 15]};
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  CLIO_RETURN_IF_ERROR(ReplaceFileDurably(path, token + "\n").WithContext("making the token file (runtime.token_file)"));
  CLIO_LOG_INFO("made the node's token {}", path);
  return token;
}

}  // namespace clio

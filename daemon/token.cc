#include "daemon/token.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>

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

}  // namespace clio

#include "daemon/ipc.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/codec.h"

namespace clio {
namespace {

Status WriteAll(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Unavailable(std::string("runtime connection lost while sending: ") + std::strerror(errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status ReadAll(int fd, void* data, size_t len) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n == 0) return Unavailable("runtime closed the connection");
    if (n < 0) {
      if (errno == EINTR) continue;
      return Unavailable(std::string("runtime connection lost while receiving: ") + std::strerror(errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<int> ConnectOnce(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return InvalidArgument("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    ::close(fd);
    return Unavailable("the CLIO runtime is not running (cannot connect to " + path + ": " +
                       std::strerror(err) + "); start it with 'clio_run start'");
  }
  return fd;
}

}  // namespace

std::string EncodePoolList(const std::vector<PoolInfo>& pools) {
  Encoder e;
  e.Put<uint32_t>(static_cast<uint32_t>(pools.size()));
  for (const PoolInfo& p : pools) e.Put<uint32_t>(p.id).PutBytes(p.name).PutBytes(p.module).PutBytes(p.describe);
  return e.Take();
}

Result<std::vector<PoolInfo>> DecodePoolList(std::string_view bytes) {
  Decoder d(bytes);
  uint32_t n = 0;
  d.Get(&n);
  if (n > bytes.size()) return Corruption("pool list: impossible count");
  std::vector<PoolInfo> out;
  for (uint32_t i = 0; i < n && !d.failed(); ++i) {
    PoolInfo p;
    d.Get(&p.id);
    d.GetString(&p.name);
    d.GetString(&p.module);
    d.GetString(&p.describe);
    out.push_back(std::move(p));
  }
  CLIO_RETURN_IF_ERROR(d.Finish("pool list"));
  return out;
}

std::string EncodeRuntimeStats(const RuntimeStats& s) {
  Encoder e;
  e.Put(s.pid).Put(s.uptime_s).Put(s.worker_threads).Put(s.client_connections).Put(s.pools);
  return e.Take();
}

Result<RuntimeStats> DecodeRuntimeStats(std::string_view bytes) {
  Decoder d(bytes);
  RuntimeStats s;
  d.Get(&s.pid);
  d.Get(&s.uptime_s);
  d.Get(&s.worker_threads);
  d.Get(&s.client_connections);
  d.Get(&s.pools);
  CLIO_RETURN_IF_ERROR(d.Finish("runtime stats"));
  return s;
}

Status ValidateRequestHeader(const RequestHeader& h) {
  if (h.magic != kIpcMagic) return Corruption("bad frame magic");
  if (h.version != kIpcVersion)
    return Corruption("unsupported protocol version " + std::to_string(h.version) +
                      " (this runtime speaks " + std::to_string(kIpcVersion) + ")");
  if (h.payload_len > kMaxPayload)
    return Corruption("payload of " + std::to_string(h.payload_len) + " bytes exceeds the limit");
  return Status::Ok();
}

Status ValidateResponseHeader(const ResponseHeader& h) {
  if (h.magic != kIpcMagic) return Corruption("bad response magic");
  if (h.version != kIpcVersion) return Corruption("unsupported response version");
  if (h.payload_len > kMaxPayload) return Corruption("oversized response");
  if (h.code >= static_cast<uint16_t>(Code::kCount)) return Corruption("unknown status code in response");
  return Status::Ok();
}

Result<std::unique_ptr<RuntimeClient>> RuntimeClient::Connect(const Options& options) {
  std::unique_ptr<RuntimeClient> c(new RuntimeClient(options));
  CLIO_ASSIGN_OR_RETURN(int fd, c->TakeConnection());
  c->ReturnConnection(fd);
  return c;
}

RuntimeClient::~RuntimeClient() {
  MutexLock l(&mu_);
  for (int fd : idle_) ::close(fd);
}

Result<int> RuntimeClient::TakeConnection() {
  {
    MutexLock l(&mu_);
    while (!idle_.empty()) {
      int fd = idle_.back();
      idle_.pop_back();
      // The runtime never speaks first: a readable or hung-up idle socket belongs to a runtime
      // that went away (restart). Drop it rather than lose a request on it.
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) == 0) return fd;
      ::close(fd);
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.connect_wait_ms);
  while (true) {
    auto fd = ConnectOnce(options_.socket_path);
    if (fd.ok() || std::chrono::steady_clock::now() >= deadline) return fd;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // runtime restarting: poll
  }
}

void RuntimeClient::ReturnConnection(int fd) {
  MutexLock l(&mu_);
  idle_.push_back(fd);
}

Result<std::string> RuntimeClient::CallOn(int fd, uint32_t pool, uint32_t method,
                                          std::string_view payload) {
  RequestHeader h;
  h.pool = pool;
  h.method = method;
  h.payload_len = static_cast<uint32_t>(payload.size());
  {
    MutexLock l(&mu_);
    h.request_id = next_id_++;
  }
  if (payload.size() > kMaxPayload) return InvalidArgument("request too large");
  std::string frame(reinterpret_cast<const char*>(&h), sizeof h);
  frame.append(payload);
  CLIO_RETURN_IF_ERROR(WriteAll(fd, frame.data(), frame.size()));
  ResponseHeader r;
  CLIO_RETURN_IF_ERROR(ReadAll(fd, &r, sizeof r));
  CLIO_RETURN_IF_ERROR(ValidateResponseHeader(r));
  if (r.request_id != h.request_id) return Corruption("response for another request");
  std::string body(r.payload_len, '\0');
  CLIO_RETURN_IF_ERROR(ReadAll(fd, body.data(), body.size()));
  if (r.code != 0) return Status(static_cast<Code>(r.code), std::move(body));
  return body;
}

Result<std::string> RuntimeClient::Call(uint32_t pool, uint32_t method, std::string_view payload,
                                        bool idempotent) {
  for (int attempt = 0;; ++attempt) {
    CLIO_ASSIGN_OR_RETURN(int fd, TakeConnection());
    auto r = CallOn(fd, pool, method, payload);
    if (r.ok() || (r.status().code() != Code::kUnavailable && r.status().code() != Code::kCorruption)) {
      ReturnConnection(fd);
      return r;
    }
    ::close(fd);  // broken connection: never reuse it
    // A pooled connection may have died with an earlier runtime; retry on a fresh one.
    if (attempt >= 1 || !idempotent) return r;
  }
}

}  // namespace clio

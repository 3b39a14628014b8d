// libFuzzer target: what a client can send the runtime. The input is a stream of frames as a
// Unix or TCP client would write them: each request header is checked as the server checks
// it, and a valid frame is dispatched to a real Runtime (its admin pool and an echo pool); the
// same bytes are also posted in a shared-memory channel (a real memfd segment), as a client
// that writes the segment directly would, and taken out by the server's own code. Every frame
// must end in a reply, an error or a refusal of the connection, never a crash or a hang; the
// replies the client library decodes (pool lists, runtime stats) are decoded too.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "daemon/ipc.h"
#include "daemon/runtime.h"
#include "daemon/shm_channel.h"

namespace {

class EchoPool : public clio::Pool {
 public:
  clio::Result<std::string> Handle(uint32_t, std::string_view payload) override { return std::string(payload); }
};

struct World {
  std::string dir;
  std::unique_ptr<clio::Runtime> rt;
  clio::ShmSegment channel;
  World() {
    char tmpl[] = "/tmp/clio_fuzz_frames_XXXXXX";
    dir = mkdtemp(tmpl);
    auto cfg = clio::ParseRuntimeConfig("runtime:\n  state_dir: " + dir +
                                            "\n  http_port: 0\ncompose:\n  - mod_name: echo\n    pool_name: e\n    pool_id: \"7.0\"\n",
                                        "fuzz.yaml");
    if (!cfg.ok()) std::abort();
    rt = std::make_unique<clio::Runtime>(std::move(cfg).value());
    rt->RegisterModule("echo", [](const clio::ComposeEntry&, const std::string&, clio::PoolRegistry&)
                                   -> clio::Result<std::unique_ptr<clio::Pool>> { return std::unique_ptr<clio::Pool>(new EchoPool); });
    if (!rt->Compose().ok()) std::abort();
    channel = std::move(clio::ShmSegment::Create(clio::kMinShmChannelBytes)).value();
  }
  ~World() {
    (void)rt->StopPools();
    std::filesystem::remove_all(dir);
  }
};

World& TheWorld() {
  static World* w = new World;  // never destroyed: libFuzzer exits without unwinding
  return *w;
}

// The admin methods a fuzzer may run: all but Stop (it ends the runtime) and the pool-changing
// ones, whose documents the config fuzzer covers.
bool Allowed(const clio::RequestHeader& h) {
  if (h.pool != 0) return true;
  using clio::AdminMethod;
  switch (static_cast<AdminMethod>(h.method)) {
    case AdminMethod::kStop:
    case AdminMethod::kCreatePools:
    case AdminMethod::kDestroyPool:
    case AdminMethod::kComposeStop:
      return false;
    default:
      return true;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = TheWorld();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  while (in.size() >= sizeof(clio::RequestHeader)) {
    clio::RequestHeader h;
    std::memcpy(&h, in.data(), sizeof h);
    in.remove_prefix(sizeof h);
    // Small inputs: most frames should get past the magic and version checks.
    if (h.magic == 0) h.magic = clio::kIpcMagic;
    if (h.version == 0) h.version = clio::kIpcVersion;
    // Up to twice the channel: some requests must not fit it.
    h.payload_len = static_cast<uint32_t>(std::min<size_t>(h.payload_len % (2 * clio::kMinShmChannelBytes), in.size()));
    const std::string payload(in.substr(0, h.payload_len));
    in.remove_prefix(h.payload_len);

    // The same request posted in a channel, then taken out as the server does.
    clio::ShmChannelHeader* sh = w.channel.header();
    std::memcpy(w.channel.data(), payload.data(), std::min<size_t>(payload.size(), w.channel.capacity()));
    sh->request = h;
    sh->state.store(static_cast<uint32_t>(clio::ShmState::kRequest));
    std::string taken;
    auto from_channel = clio::TakeChannelRequest(w.channel, &taken);
    sh->state.store(static_cast<uint32_t>(clio::ShmState::kIdle));
    if (!clio::ValidateRequestHeader(h).ok()) {
      if (from_channel.ok()) std::abort();  // the channel must refuse what the socket refuses
      continue;  // the server closes the connection
    }
    if (from_channel.ok() && taken != payload) std::abort();
    if (h.payload_len > w.channel.capacity() && from_channel.ok()) std::abort();  // past the channel
    if (h.pool == 0 && h.method == static_cast<uint32_t>(clio::AdminMethod::kHello)) (void)clio::wire::Decode<clio::adminproto::Hello>(payload);
    if (h.pool == 0 && h.method == static_cast<uint32_t>(clio::AdminMethod::kProve)) (void)clio::wire::Decode<clio::adminproto::Prove>(payload);
    if (h.pool == 0 && h.method == static_cast<uint32_t>(clio::AdminMethod::kOpenChannel))
      (void)clio::wire::Decode<clio::adminproto::OpenChannel>(payload);
    if (!Allowed(h)) continue;
    // As the server does: a pool query travels at the front of the payload.
    std::string_view body = payload;
    clio::PoolQuery query;
    if (h.flags & clio::kRequestHasQuery) {
      auto q = clio::DecodePoolQuery(&body);
      if (!q.ok()) continue;  // answered with the error
      query = *q;
      if (body.size() + clio::kPoolQueryBytes != payload.size()) std::abort();  // exactly the query taken off
    }
    auto r = w.rt->Dispatch(h.pool, h.method, body, query);
    if (r.ok() && h.pool == 0 && h.method == static_cast<uint32_t>(clio::AdminMethod::kListPools)) {
      if (!clio::DecodePoolList(*r).ok()) std::abort();
    }
    if (r.ok() && h.pool == 0 && h.method == static_cast<uint32_t>(clio::AdminMethod::kRuntimeStats)) {
      if (!clio::DecodeRuntimeStats(*r).ok()) std::abort();
    }
    // A response header as the client checks it, from the same bytes.
    clio::ResponseHeader rh;
    std::memcpy(&rh, &h, sizeof rh);
    (void)clio::ValidateResponseHeader(rh);
    (void)clio::DecodePoolList(payload);
    (void)clio::DecodeRuntimeStats(payload);
  }
  return 0;
}

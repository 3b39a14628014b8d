// Pools made and destroyed on a running runtime: CreatePools, DestroyPool, compose stop, the
// pool log (restart: true) across restarts, and the uses that order destroys and stops.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/codec.h"
#include "daemon/ipc.h"
#include "daemon/runtime.h"
#include "daemon/test_serving.h"

using namespace clio;

namespace {

// What the test pools saw, shared by every pool of a test.
struct Journal {
  std::vector<std::string> stopped;  // pool names, in the order Stop() ran
  std::atomic<bool> hold{false};     // method 5 blocks while set
  std::atomic<bool> inside{false};   // a method-5 request is running
  std::atomic<bool> stop_seen_inside{false};
};

// Echoes its payload; method 5 blocks while journal.hold is set; method 6 looks up the pool
// named by the payload (as a safe-bdev's AddBdev does). An entry may name `uses: POOL`, which
// the factory looks up through its registry, as a CTE looks up its tiers.
class TestPool : public Pool {
 public:
  TestPool(Journal* j, std::string label, PoolRegistry* registry) : j_(j), label_(std::move(label)), registry_(registry) {}
  Result<std::string> Handle(uint32_t method, std::string_view payload) override {
    if (method == 6 && !registry_->FindByName(payload)) return NotFound("no pool " + std::string(payload));
    if (method == 7) {  // "ID": gives back the use of that pool; answers whether it lasts
      const uint32_t id = static_cast<uint32_t>(std::stoul(std::string(payload)));
      const bool lasting = registry_->Lasting(id);
      registry_->Release(id);
      return std::string(lasting ? "lasting" : "not lasting");
    }
    if (method == 5) {
      j_->inside = true;
      while (j_->hold) std::this_thread::yield();
      j_->stop_seen_inside = stopped_.load();
      j_->inside = false;
    }
    return label_ + ":" + std::string(payload);
  }
  Status Stop() override {
    stopped_ = true;
    j_->stopped.push_back(name());
    return Status::Ok();
  }
  std::string Describe() const override { return label_; }

 private:
  Journal* j_;
  std::string label_;
  PoolRegistry* registry_;
  std::atomic<bool> stopped_{false};
};

ModuleFactory TestModule(Journal* j) {
  return [j](const ComposeEntry& entry, const std::string& file, PoolRegistry& registry) -> Result<std::unique_ptr<Pool>> {
    ConfigReader r = ModuleKeys(entry, file);
    CLIO_ASSIGN_OR_RETURN(std::string label, r.String("label", "plain"));
    CLIO_ASSIGN_OR_RETURN(std::string uses, r.String("uses", ""));
    CLIO_RETURN_IF_ERROR(r.Finish());
    if (!uses.empty() && !registry.FindByName(uses)) return r.Error("uses", "no pool '" + uses + "'");
    return std::unique_ptr<Pool>(new TestPool(j, label, &registry));
  };
}

struct Node {
  std::string dir;
  Journal journal;
  std::unique_ptr<Runtime> rt;
  testing::ServingThread serve;

  Node() {
    char tmpl[] = "/tmp/clio_pools_XXXXXX";
    dir = mkdtemp(tmpl);
  }
  ~Node() {
    Down();
    std::filesystem::remove_all(dir);
  }
  // Starts a runtime on the node's state directory: the pools of the config (`base`, then
  // `more` entries), then the pool log.
  Status Up(const std::string& more = "") {
    auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir +
                                      "\n  http_port: 0\ncompose:\n  - mod_name: test\n    pool_name: base\n"
                                      "    pool_id: \"7.0\"\n" + more,
                                  "t.yaml");
    REQUIRE(cfg.ok());
    rt = std::make_unique<Runtime>(std::move(cfg).value());
    rt->RegisterModule("test", TestModule(&journal));
    Status s = rt->Compose();
    if (!s.ok()) {
      rt.reset();
      return s;
    }
    serve.Start(rt.get());
    return Status::Ok();
  }
  void Down() {
    if (!rt) return;
    serve.Stop();
    (void)rt->StopPools();
    rt.reset();
  }
  std::unique_ptr<RuntimeClient> Client() {
    RuntimeClient::Options o;
    o.socket_path = rt->config().socket_path;
    auto c = RuntimeClient::Connect(o);
    REQUIRE(c.ok());
    return std::move(c).value();
  }
  std::vector<std::string> Names() {
    auto c = Client();
    auto raw = c->Call(0, static_cast<uint32_t>(AdminMethod::kListPools), "");
    REQUIRE(raw.ok());
    auto pools = DecodePoolList(*raw);
    REQUIRE(pools.ok());
    std::vector<std::string> out;
    for (const PoolInfo& p : *pools) out.push_back(p.name + (p.describe.rfind("NOT RUNNING", 0) == 0 ? "!" : ""));
    return out;
  }
  std::string Log() const {
    std::ifstream in(dir + "/pools.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

std::string Document(const std::string& entries) { return "compose:\n" + entries; }
std::string Entry(const std::string& name, const std::string& id, const std::string& more = "") {
  return "  - mod_name: test\n    pool_name: " + name + "\n    pool_id: \"" + id + "\"\n" + more;
}

}  // namespace

TEST_CASE("a pool created at run time serves requests until it is destroyed") {
  Node n;
  REQUIRE(n.Up().ok());
  auto c = n.Client();
  Encoder req;
  req.PutBytes("compose.yaml").PutBytes(Document(Entry("extra", "1000.0", "    label: second\n")));
  auto made = c->Call(0, static_cast<uint32_t>(AdminMethod::kCreatePools), req.buffer(), RuntimeClient::Resend::kNever);
  REQUIRE(made.ok());
  auto info = DecodePoolList(*made);
  REQUIRE(info.ok());
  REQUIRE(info->size() == 1);
  CHECK(info->at(0).id == 1000);
  CHECK(info->at(0).describe == "second");
  auto r = c->Call(1000, 1, "hi");
  REQUIRE(r.ok());
  CHECK(*r == "second:hi");  // two pools of one module side by side, with their own settings
  CHECK(*c->Call(7, 1, "hi") == "plain:hi");
  CHECK(n.Names() == std::vector<std::string>{"base", "extra"});

  Encoder gone;
  gone.PutBytes("extra");
  REQUIRE(c->Call(0, static_cast<uint32_t>(AdminMethod::kDestroyPool), gone.buffer(), RuntimeClient::Resend::kNever).ok());
  CHECK(c->Call(1000, 1, "hi").status().code() == Code::kNotFound);
  CHECK(n.journal.stopped == std::vector<std::string>{"extra"});
  CHECK(n.Names() == std::vector<std::string>{"base"});
  CHECK(c->Call(0, static_cast<uint32_t>(AdminMethod::kDestroyPool), gone.buffer(), RuntimeClient::Resend::kNever).status().code() ==
        Code::kNotFound);
  // A truncated request is refused, never half applied.
  CHECK(c->Call(0, static_cast<uint32_t>(AdminMethod::kCreatePools), req.buffer().substr(0, 9), RuntimeClient::Resend::kNever)
            .status()
            .code() == Code::kCorruption);
  CHECK(n.Names() == std::vector<std::string>{"base"});
}

TEST_CASE("create refuses clashes and bad entries with the cause named; a failed create leaves nothing") {
  Node n;
  REQUIRE(n.Up().ok());
  Runtime& rt = *n.rt;
  auto dup_name = rt.CreatePools(Document(Entry("base", "1000.0")), "a.yaml");
  CHECK(dup_name.status().code() == Code::kAlreadyExists);
  CHECK(dup_name.status().message().find("a pool named 'base' is running") != std::string::npos);
  auto dup_id = rt.CreatePools(Document(Entry("other", "7.0")), "a.yaml");
  CHECK(dup_id.status().code() == Code::kAlreadyExists);
  CHECK(dup_id.status().message().find("taken by pool 'base'") != std::string::npos);
  auto unknown = rt.CreatePools("mod_name: nosuch\npool_name: x\npool_id: \"1001.0\"\n", "b.yaml");
  CHECK(unknown.status().code() == Code::kConfigError);
  CHECK(unknown.status().message().find("b.yaml:1: compose[0].mod_name: unknown module 'nosuch' (known: test; no libnosuch.so in runtime.module_dir") !=
        std::string::npos);
  auto bad_key = rt.CreatePools(Document(Entry("x", "1001.0", "    colour: red\n")), "c.yaml");
  CHECK(bad_key.status().code() == Code::kConfigError);
  CHECK(bad_key.status().message().find("c.yaml:5: compose[0].colour: unknown key") != std::string::npos);
  CHECK(rt.CreatePools("compose: [", "d.yaml").status().message().find("YAML syntax error") != std::string::npos);
  CHECK(rt.CreatePools("compose: []\n", "e.yaml").status().message().find("empty") != std::string::npos);
  CHECK(rt.CreatePools("runtime: {}\n", "f.yaml").status().code() == Code::kConfigError);

  // The second entry fails: the first, already serving, is destroyed again.
  auto half = rt.CreatePools(Document(Entry("one", "1001.0") + Entry("two", "1002.0", "    uses: nosuch\n")), "g.yaml");
  CHECK(half.status().code() == Code::kConfigError);
  CHECK(half.status().message().find("no pool 'nosuch'") != std::string::npos);
  CHECK(n.Names() == std::vector<std::string>{"base"});
  CHECK(n.journal.stopped == std::vector<std::string>{"one"});

  CHECK(rt.DestroyPool("base").code() == Code::kNotPermitted);
  CHECK(rt.DestroyPool("base").message().find("comes from the config (t.yaml)") != std::string::npos);
}

TEST_CASE("a pool another pool uses is destroyed after it, and stopped after it") {
  Node n;
  REQUIRE(n.Up().ok());
  Runtime& rt = *n.rt;
  REQUIRE(rt.CreatePools(Document(Entry("dev", "1000.0") + Entry("user", "1001.0", "    uses: dev\n")), "u.yaml").ok());
  Status busy = rt.DestroyPool("dev");
  CHECK(busy.code() == Code::kBusy);
  CHECK(busy.message() == "pool 'dev' is used by pool 'user'; destroy that one first");
  // compose stop goes in reverse order, so users go first.
  auto gone = rt.DestroyPools(Document(Entry("dev", "1000.0") + Entry("user", "1001.0", "    uses: dev\n")), "u.yaml");
  REQUIRE(gone.ok());
  REQUIRE(gone->size() == 2);
  CHECK(gone->at(0).name == "user");
  CHECK(gone->at(1).name == "dev");
  CHECK(n.journal.stopped == std::vector<std::string>{"user", "dev"});
  // Again: nothing of the file is running, nothing to do.
  auto again = rt.DestroyPools(Document(Entry("dev", "1000.0")), "u.yaml");
  REQUIRE(again.ok());
  CHECK(again->empty());

  // At shutdown a user is stopped before the pool it uses, even one made before it: "early"
  // looks up "late" while serving, so "late" is in use and outlives it.
  REQUIRE(rt.CreatePools(Document(Entry("early", "1003.0") + Entry("late", "1004.0")), "v.yaml").ok());
  REQUIRE(n.Client()->Call(1003, 6, "late").ok());
  CHECK(rt.DestroyPool("late").code() == Code::kBusy);
  n.journal.stopped.clear();
  n.Down();
  CHECK(n.journal.stopped == std::vector<std::string>{"early", "late", "base"});
}

TEST_CASE("destroy waits for the request in flight; new requests are refused at once") {
  Node n;
  REQUIRE(n.Up().ok());
  REQUIRE(n.rt->CreatePools(Document(Entry("slow", "1000.0")), "s.yaml").ok());
  n.journal.hold = true;
  auto busy_client = n.Client();
  std::thread request([&] { CHECK(busy_client->Call(1000, 5, "x").ok()); });
  while (!n.journal.inside) std::this_thread::yield();
  Status destroyed = Internal("not yet");
  std::thread destroy([&] { destroyed = n.rt->DestroyPool("slow"); });
  // The pool leaves the list first: a new request is refused while the old one still runs.
  // (Asked in process: a client's connection may share the busy request's worker thread.)
  while (n.rt->FindById(1000)) std::this_thread::yield();
  CHECK(n.rt->Dispatch(1000, 1, "y").status().code() == Code::kNotFound);
  CHECK(n.journal.inside);
  n.journal.hold = false;
  request.join();
  destroy.join();
  CHECK(destroyed.ok());
  CHECK_FALSE(n.journal.stop_seen_inside);  // Stop() ran after the request, never during it
  CHECK(n.journal.stopped == std::vector<std::string>{"slow"});
}

TEST_CASE("pools created with restart: true come back after a restart; the others do not") {
  Node n;
  REQUIRE(n.Up().ok());
  REQUIRE(n.rt->CreatePools(Document(Entry("keep", "1000.0", "    restart: true\n    label: kept\n") +
                                     Entry("temp", "1001.0")),
                            "k.yaml")
              .ok());
  CHECK(n.Log().find("\"pool_name\": \"keep\"") != std::string::npos);
  CHECK(n.Log().find("temp") == std::string::npos);
  n.Down();
  REQUIRE(n.Up().ok());
  CHECK(n.Names() == std::vector<std::string>{"base", "keep"});
  CHECK(*n.Client()->Call(1000, 1, "a") == "kept:a");  // its settings came back too

  // A logged pool that cannot be made at start: the runtime starts without it and says so.
  n.Down();
  {
    std::string log = n.Log();
    const size_t at = log.find("\"label\": \"kept\"");
    REQUIRE(at != std::string::npos);
    log.replace(at, std::string("\"label\": \"kept\"").size(), "\"uses\": \"gone\"");
    std::ofstream(n.dir + "/pools.json") << log;
  }
  REQUIRE(n.Up().ok());
  CHECK(n.Names() == std::vector<std::string>{"base", "keep!"});
  CHECK(n.rt->CreatePools(Document(Entry("keep", "1000.0")), "k.yaml").status().code() == Code::kAlreadyExists);
  REQUIRE(n.rt->DestroyPool("keep").ok());  // drops it from the log
  CHECK(n.Names() == std::vector<std::string>{"base"});
  CHECK_FALSE(std::filesystem::exists(n.dir + "/pools.json"));
  n.Down();
  REQUIRE(n.Up().ok());
  CHECK(n.Names() == std::vector<std::string>{"base"});
}

TEST_CASE("a pool of the config that uses a logged pool finds it at start; a released use lets it go") {
  Node n;
  REQUIRE(n.Up().ok());
  REQUIRE(n.rt->CreatePools(Document(Entry("dev", "1000.0", "    restart: true\n    label: dev\n") +
                                     Entry("temp", "1001.0")),
                            "d.yaml")
              .ok());
  // Only the config's pools and the logged ones come back by themselves.
  CHECK(*n.Client()->Call(7, 7, "7") == "lasting");
  CHECK(*n.Client()->Call(7, 7, "1000") == "lasting");
  CHECK(*n.Client()->Call(7, 7, "1001") == "not lasting");
  n.Down();
  // The config now holds a pool that uses `dev`, which only the pool log makes: it is created
  // when `user` looks it up, before `user`, and outlives it.
  REQUIRE(n.Up(Entry("user", "8.0", "    uses: dev\n")).ok());
  CHECK(n.Names() == std::vector<std::string>{"base", "dev", "user"});
  CHECK(*n.Client()->Call(1000, 1, "a") == "dev:a");
  Status busy = n.rt->DestroyPool("dev");
  CHECK(busy.code() == Code::kBusy);
  CHECK(busy.message() == "pool 'dev' is used by pool 'user'; destroy that one first");
  n.journal.stopped.clear();
  n.Down();
  CHECK(n.journal.stopped == std::vector<std::string>{"user", "dev", "base"});

  // Once `user` gives the use back, `dev` may go.
  REQUIRE(n.Up(Entry("user", "8.0", "    uses: dev\n")).ok());
  CHECK(*n.Client()->Call(8, 7, "1000") == "lasting");
  REQUIRE(n.rt->DestroyPool("dev").ok());
  CHECK(n.Names() == std::vector<std::string>{"base", "user"});
  n.Down();
  // And with `dev` gone from the log, the config's `user` cannot start: the start names why.
  Status s = n.Up(Entry("user", "8.0", "    uses: dev\n"));
  CHECK(s.code() == Code::kConfigError);
  CHECK_MESSAGE(s.message().find("no pool 'dev'") != std::string::npos, s.ToString());
}

TEST_CASE("destroying a logged pool drops it from the log; a broken log stops the start, naming the way out") {
  Node n;
  REQUIRE(n.Up().ok());
  REQUIRE(n.rt->CreatePools(Document(Entry("a", "1000.0", "    restart: true\n") +
                                     Entry("b", "1001.0", "    restart: yes\n")),
                            "k.yaml")
              .ok());
  REQUIRE(n.rt->DestroyPool("a").ok());
  n.Down();
  REQUIRE(n.Up().ok());
  CHECK(n.Names() == std::vector<std::string>{"base", "b"});
  n.Down();
  std::ofstream(n.dir + "/pools.json") << "{\"compose\": [ {\"mod_name\": \"test\"";
  Status s = n.Up();
  CHECK(s.code() == Code::kConfigError);
  CHECK(s.message().find(n.dir + "/pools.json") != std::string::npos);
  CHECK(s.message().find("--fresh") != std::string::npos);
  CHECK(n.journal.stopped.back() == "base");  // what it had made is stopped again
  // What --fresh does: the log goes, the config's pools stay.
  std::filesystem::remove(PoolLogPath(ParseRuntimeConfig("runtime:\n  state_dir: " + n.dir + "\n", "t").value()));
  REQUIRE(n.Up().ok());
  CHECK(n.Names() == std::vector<std::string>{"base"});
}

TEST_CASE("compose documents: a compose list, a bare list or one entry; restart is a runtime key") {
  auto list = ParseComposeDocument("- mod_name: m\n  pool_name: a\n  pool_id: 5\n- mod_name: m\n  pool_name: b\n  pool_id: 6\n",
                                   "l.yaml", "/s");
  REQUIRE(list.ok());
  REQUIRE(list->entries.size() == 2);
  CHECK(list->entries[1].pool_name == "b");
  auto one = ParseComposeDocument("mod_name: m\npool_name: ${CLIO_STATE_DIR}/x\npool_id: 5.1\nrestart: on\n", "o.yaml", "/s");
  REQUIRE(one.ok());
  REQUIRE(one->entries.size() == 1);
  CHECK(one->entries[0].pool_name == "/s/x");
  CHECK(one->entries[0].pool_minor == 1);
  CHECK(one->entries[0].restart);
  auto dup = ParseComposeDocument(Document(Entry("a", "5.0") + Entry("a", "6.0")), "d.yaml", "/s");
  CHECK(dup.status().message().find("duplicate pool_name 'a'") != std::string::npos);
  auto bad_restart = ParseComposeDocument(Document(Entry("a", "5.0", "    restart: maybe\n")), "r.yaml", "/s");
  CHECK(bad_restart.status().message().find("r.yaml:5: compose[0].restart: expected true or false") !=
        std::string::npos);
  CHECK(ParseComposeDocument("compose: {}\n", "m.yaml", "/s").status().message().find("expected a list") !=
        std::string::npos);
  CHECK(ParseComposeDocument("42\n", "n.yaml", "/s").status().code() == Code::kConfigError);
  // A client's document names no variable of the runtime's environment (it may hold secrets),
  // and the refusal does not show its value.
  ::setenv("CLIO_TEST_SECRET", "s3cr3t-value", 1);
  auto secret = ParseComposeDocument("mod_name: m\npool_name: ram::${CLIO_TEST_SECRET}\npool_id: 5\n", "c.yaml", "/s");
  ::unsetenv("CLIO_TEST_SECRET");
  REQUIRE_FALSE(secret.ok());
  CHECK(secret.status().code() == Code::kConfigError);
  CHECK_MESSAGE(secret.status().message().find("c.yaml:2: pool_name: ${CLIO_TEST_SECRET} is not expanded") !=
                    std::string::npos, secret.status().ToString());
  CHECK(secret.status().message().find("s3cr3t") == std::string::npos);
  // Nor ~ (the runtime's home): a name that expands to "~/..." reads back the same from the pool
  // log (found by fuzz_config: the log's copy came back as the runtime's home).
  auto tilde = ParseComposeDocument("mod_name: m\npool_name: \"~${CLIO_STATE_DIR}/x\"\npool_id: 5\n", "t.yaml", "/s");
  REQUIRE(tilde.ok());
  CHECK(tilde->entries[0].pool_name == "~/s/x");
  auto back = ParseComposeDocument(ComposeDocumentJson({tilde->entries[0].node}), "pools.json", "/s");
  REQUIRE(back.ok());
  CHECK(back->entries[0].pool_name == "~/s/x");
  // The log's JSON reads back as the same document.
  auto again = ParseComposeDocument(ComposeDocumentJson({one->entries[0].node}), "j.json", "/other");
  REQUIRE(again.ok());
  CHECK(again->entries[0].pool_name == "/s/x");
  CHECK(again->entries[0].restart);
  // A module reading its entry with ModuleKeys knows the runtime's keys and still names strangers.
  ConfigReader r = ModuleKeys(one->entries[0], "o.yaml");
  CHECK(r.Finish().ok());
  auto stranger = ParseComposeDocument(Document(Entry("a", "5.0", "    colour: red\n")), "s.yaml", "/s");
  REQUIRE(stranger.ok());
  Status unknown = ModuleKeys(stranger->entries[0], "s.yaml").Finish();
  CHECK(unknown.message().find("colour: unknown key (known keys here: mod_name, pool_name, pool_id, pool_query, restart)") !=
        std::string::npos);
}

TEST_CASE("a compose document that is not UTF-8 is refused: the pool log could not keep it") {
  auto bad = ParseComposeDocument("mod_name: m\npool_name: \"ram::\xff\"\npool_id: 5\n", "u.yaml", "/s");
  CHECK(bad.status().code() == Code::kConfigError);
  CHECK(bad.status().message().find("u.yaml:2: compose[0].pool_name: not UTF-8 text") != std::string::npos);
  CHECK(ParseComposeDocument("mod_name: m\npool_name: \"ram::\xc3\xa9t\xc3\xa9\"\npool_id: 5\n", "u.yaml", "/s").ok());
  CHECK_FALSE(ParseComposeDocument("mod_name: m\npool_name: \"\xc3\"\npool_id: 5\n", "u.yaml", "/s").ok());
  CHECK_FALSE(ParseComposeDocument("mod_name: m\npool_name: \"\xc0\xaf\"\npool_id: 5\n", "u.yaml", "/s").ok());
}

TEST_CASE("Dispatch runs a method only for a peer granted its caller class, and says who was refused") {
  Node n;
  REQUIRE(n.Up().ok());
  const uint32_t base = 7;
  auto as = [&](CallerClass granted, uint32_t pool, uint32_t method) {
    auto peer = std::make_shared<Peer>();
    peer->uid = 4242;
    peer->granted = granted;
    ScopedRequest scope({1, 1, false, peer.get()});
    return n.rt->Dispatch(pool, method, pool == 0 ? "" : "x", PoolQuery{});
  };
  // The test pool declares no class: its methods are the admin's.
  auto refused = as(CallerClass::kReader, base, 1);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(refused.status().message().find("uid 4242") != std::string::npos, refused.status().ToString());
  CHECK_MESSAGE(refused.status().message().find("pool 'base'") != std::string::npos, refused.status().ToString());
  CHECK(as(CallerClass::kMount, base, 1).status().code() == Code::kPermissionDenied);
  CHECK(as(CallerClass::kAdmin, base, 1).ok());
  // The admin pool: a report for a reader, a change only for the admin.
  CHECK(as(CallerClass::kReader, 0, static_cast<uint32_t>(AdminMethod::kListPools)).ok());
  auto destroy = as(CallerClass::kReader, 0, static_cast<uint32_t>(AdminMethod::kDestroyPool));
  CHECK(destroy.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(destroy.status().message().find("DestroyPool") != std::string::npos, destroy.status().ToString());
  CHECK(n.Names() == std::vector<std::string>{"base"});
  // An in-process caller (no peer: the HTTP API behind its token, a pool's subtask) may call anything.
  CHECK(n.rt->Dispatch(base, 1, "x", PoolQuery{}).ok());
}

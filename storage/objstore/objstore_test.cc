// The S3 and GCS stores against real HTTP servers on loopback: the signature-verifying
// stand-ins in tests/objstore (with fault injection), and s3rver (a third-party S3 server)
// when CLIO_OBJSTORE_SERVER=s3rver.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "storage/objstore/object_store.h"
#include "storage/objstore/test_servers.h"

using namespace clio;
using namespace clio::testing;

namespace {

ObjectStoreOptions FastRetries(int budget_ms = 20000, int timeout_ms = 5000) {
  ObjectStoreOptions o;
  o.request_timeout = std::chrono::milliseconds(timeout_ms);
  o.retry.budget = std::chrono::milliseconds(budget_ms);
  o.retry.base = std::chrono::milliseconds(5);
  o.retry.max = std::chrono::milliseconds(50);
  return o;
}

std::unique_ptr<ObjectStore> MustOpenS3(const S3Server& srv, const std::string& name,
                                        S3Settings s, ObjectStoreOptions o = FastRetries()) {
  auto loc = ParseObjectLocation(name, "s3");
  REQUIRE(loc.ok());
  auto store = OpenS3Store(*loc, s, o);
  REQUIRE(store.ok());
  return std::move(store).value();
}

}  // namespace

TEST_CASE("s3 store: round trip, ranges, delete") {
  S3Server srv;
  auto store = MustOpenS3(srv, "roundtrip/some/prefix", srv.Settings());
  REQUIRE(store->EnsureBucket(true).ok());
  for (size_t n : {size_t{1}, size_t{511}, size_t{4096}, size_t{65537}, size_t{1} << 20}) {
    CAPTURE(n);
    const std::string key = "some/prefix/obj_" + std::to_string(n);
    const std::string data = RandomBytes(n, static_cast<uint32_t>(n));
    REQUIRE(store->Put(key, data).ok());
    auto all = store->GetAll(key);
    REQUIRE(all.ok());
    REQUIRE(all->has_value());
    CHECK(**all == data);
    std::string part(n / 2 + 1, '\0');
    const uint64_t off = n - part.size();
    REQUIRE(store->Get(key, off, part.size(), part.data()).ok());
    CHECK(part == data.substr(off));
  }
  // Keys with characters that need encoding.
  const std::string odd = "some/prefix/a b+c=d~e%f";
  REQUIRE(store->Put(odd, "odd").ok());
  CHECK(store->GetAll(odd)->value() == "odd");
  REQUIRE(store->Delete(odd).ok());
  CHECK_FALSE(store->GetAll(odd)->has_value());
  char c;
  CHECK(store->Get(odd, 0, 1, &c).code() == Code::kNotFound);
  // Deleting a missing object is not an error.
  CHECK(store->Delete(odd).ok());
  // Reading past the end of an object is an error, not a short read.
  std::string past(10, '\0');
  Status s = store->Get("some/prefix/obj_1", 0, 10, past.data());
  CHECK(s.code() == Code::kIoError);
  CHECK(s.message().find("obj_1") != std::string::npos);
  // Keep-alive: all of that over very few connections.
  CHECK(store->Stats().connections <= 2);
  CHECK(store->Stats().requests >= 15);
  if (srv.standin) {
    // Counted by the server too: Poco could reconnect inside one session unseen by the client.
    auto stats = srv.proc->Admin("GET", "/_admin/stats");
    REQUIRE(stats.ok());
    const auto j = nlohmann::json::parse(stats->body);
    CHECK(j.at("api_connections").get<int>() <= 2);
    CHECK(j.at("requests").get<int>() >= 15);
  }
}

TEST_CASE("s3 store: bucket creation rules") {
  S3Server srv;
  S3Settings no_create = srv.Settings();
  no_create.allow_bucket_create = false;
  auto store = MustOpenS3(srv, "not-there-yet", no_create);
  Status s = store->EnsureBucket(false);
  CHECK(s.code() == Code::kNotFound);
  CHECK(s.message().find("S3_ALLOW_BUCKET_CREATE") != std::string::npos);
  CHECK(store->Put("k", "v").code() != Code::kOk);  // no bucket, nothing stored
  REQUIRE(store->EnsureBucket(true).ok());
  REQUIRE(store->EnsureBucket(false).ok());  // now it exists
  REQUIRE(store->EnsureBucket(true).ok());   // and creating again is fine
  REQUIRE(store->Put("k", "v").ok());
}

TEST_CASE("s3 store: credentials") {
  S3Server srv;
  SUBCASE("missing in the environment") {
    ScopedEnv env;
    env.Unset("AWS_ACCESS_KEY_ID").Set("AWS_SECRET_ACCESS_KEY", "x");
    auto r = S3SettingsFromEnv();
    CHECK(r.status().code() == Code::kPermissionDenied);
    CHECK(r.status().message().find("AWS_ACCESS_KEY_ID") != std::string::npos);
    env.Set("AWS_ACCESS_KEY_ID", "a").Unset("AWS_SECRET_ACCESS_KEY");
    CHECK(S3SettingsFromEnv().status().message().find("AWS_SECRET_ACCESS_KEY") != std::string::npos);
    env.Set("AWS_SECRET_ACCESS_KEY", "b").Set("AWS_DEFAULT_REGION", "eu-west-3")
        .Set("S3_ENDPOINT", "http://127.0.0.1:1").Set("S3_ALLOW_BUCKET_CREATE", "1")
        .Set("AWS_SESSION_TOKEN", "tok");
    auto ok = S3SettingsFromEnv();
    REQUIRE(ok.ok());
    CHECK(ok->region == "eu-west-3");
    CHECK(ok->allow_bucket_create);
    CHECK(ok->session_token == "tok");
    CHECK(ok->endpoint == "http://127.0.0.1:1");
  }
  SUBCASE("systemd credentials (files in $CREDENTIALS_DIRECTORY) come before the environment") {
    char tmpl[] = "/tmp/clio_creds_XXXXXX";
    const std::string dir = mkdtemp(tmpl);
    std::ofstream(dir + "/aws_access_key_id") << "from-file-key\n";
    std::ofstream(dir + "/aws_secret_access_key") << "from-file-secret\n";
    ScopedEnv env;
    env.Set("CREDENTIALS_DIRECTORY", dir).Set("AWS_ACCESS_KEY_ID", "env-key").Unset("AWS_SECRET_ACCESS_KEY");
    auto s = S3SettingsFromEnv();
    REQUIRE(s.ok());
    CHECK(s->access_key == "from-file-key");
    CHECK(s->secret_key == "from-file-secret");
    std::filesystem::remove(dir + "/aws_access_key_id");
    CHECK(S3SettingsFromEnv()->access_key == "env-key");  // no file: the environment
    std::filesystem::remove_all(dir);
  }
  SUBCASE("a wrong secret is refused with a clear error, not retried") {
    if (!srv.standin) {
      MESSAGE("SKIPPED: s3rver accepts any signature made with a known access key");
      return;
    }
    S3Settings bad = srv.Settings();
    bad.secret_key = "wrong-secret";
    auto store = MustOpenS3(srv, "credbucket", bad);
    Status s = store->EnsureBucket(true);
    CHECK(s.code() == Code::kPermissionDenied);
    CHECK(s.message().find("403") != std::string::npos);
    CHECK(s.message().find("credbucket") != std::string::npos);
    Status p = store->Put("k", "v");
    CHECK(p.code() == Code::kPermissionDenied);
    CHECK(p.message().find("'k'") != std::string::npos);
    CHECK(store->Stats().retries == 0);
  }
  SUBCASE("a wrong access key") {
    S3Settings bad = srv.Settings();
    bad.access_key = "NOSUCHKEY";
    auto store = MustOpenS3(srv, "credbucket", bad);
    CHECK(store->EnsureBucket(true).code() == Code::kPermissionDenied);
  }
}

TEST_CASE("s3 store: a bucket in another region is named in the error") {
  if (UseS3rver()) return;  // s3rver has no regions
  TempDir dir;
  auto srv = StartS3Standin(dir, "", {"--region", "eu-west-3"});
  REQUIRE(srv->running());
  S3Settings s;
  s.access_key = kTestAccessKey;
  s.secret_key = kTestSecretKey;
  s.endpoint = srv->url();
  s.allow_bucket_create = true;  // region us-east-1: the signature is scoped to it
  auto loc = ParseObjectLocation("elsewhere", "s3");
  REQUIRE(loc.ok());
  auto store = OpenS3Store(*loc, s, FastRetries());
  REQUIRE(store.ok());
  Status e = (*store)->EnsureBucket(true);
  CHECK_FALSE(e.ok());
  CHECK_MESSAGE(e.message().find("region eu-west-3") != std::string::npos, e.ToString());
  CHECK(e.message().find("AWS_DEFAULT_REGION") != std::string::npos);
  s.region = "eu-west-3";
  auto right = OpenS3Store(*loc, s, FastRetries());
  REQUIRE(right.ok());
  REQUIRE((*right)->EnsureBucket(true).ok());
}

TEST_CASE("s3 store: session token") {
  if (UseS3rver()) return;  // s3rver ignores session tokens
  S3Server srv("session-token-123");
  S3Settings s = srv.Settings();
  auto without = MustOpenS3(srv, "tokbucket", s);
  CHECK(without->EnsureBucket(true).code() == Code::kPermissionDenied);
  s.session_token = "session-token-123";
  auto with = MustOpenS3(srv, "tokbucket", s);
  REQUIRE(with->EnsureBucket(true).ok());
  REQUIRE(with->Put("k", "v").ok());
}

TEST_CASE("s3 store: retries on server errors and broken connections") {
  if (UseS3rver()) {
    MESSAGE("SKIPPED: fault injection needs the stand-in's admin API");
    return;
  }
  S3Server srv;
  auto store = MustOpenS3(srv, "faulty", srv.Settings());
  REQUIRE(store->EnsureBucket(true).ok());
  const std::string data = RandomBytes(100000, 7);
  for (std::string kind :
       {"500", "503", "429", "drop", "truncate", "bad_length", "non_xml", "request_timeout"}) {
    CAPTURE(kind);
    // A PUT answer has no body to cut short: truncation faults only apply to GETs.
    const bool body_fault = kind == "truncate" || kind == "bad_length";
    uint64_t before = store->Stats().retries;
    if (!body_fault) {
      srv.proc->Fault(kind, 2, "PUT");
      REQUIRE(store->Put("obj", data).ok());
      CHECK(store->Stats().retries - before == 2);
    } else {
      REQUIRE(store->Put("obj", data).ok());
    }
    before = store->Stats().retries;
    srv.proc->Fault(kind, 2, "GET");
    std::string back(data.size(), '\0');
    REQUIRE(store->Get("obj", 0, back.size(), back.data()).ok());
    CHECK(back == data);
    CHECK(store->Stats().retries - before == 2);
  }
  SUBCASE("a slow response times out and is retried") {
    auto quick = MustOpenS3(srv, "faulty", srv.Settings(), FastRetries(20000, 300));
    srv.proc->Fault("slow", 1, "GET", 3.0);
    std::string back(10, '\0');
    REQUIRE(quick->Get("obj", 5, 10, back.data()).ok());
    CHECK(back == data.substr(5, 10));
    CHECK(quick->Stats().retries == 1);
  }
  SUBCASE("a server trickling its answer cannot hold a call past the retry budget") {
    // 400 bytes at a byte every 0.2 s is 80 s; each byte comes well within the 1 s timeout of
    // one receive, so only the budget of the whole call can stop it.
    auto bounded = MustOpenS3(srv, "faulty", srv.Settings(), FastRetries(1500, 1000));
    srv.proc->Fault("trickle", 100, "GET", 0.2);
    std::string back(400, '\0');
    Status s = bounded->Get("obj", 0, back.size(), back.data());
    CHECK(s.code() == Code::kIoError);
    CHECK_MESSAGE(s.message().find("gave up") != std::string::npos, s.ToString());
    REQUIRE(srv.proc->Admin("POST", "/_admin/clear_faults").ok());
  }
  SUBCASE("the retry budget bounds the total time") {
    // Long enough that some attempt is answered even on a loaded machine; the last one may be
    // cut by the deadline, and the error still quotes what the server answered.
    auto bounded = MustOpenS3(srv, "faulty", srv.Settings(), FastRetries(2000));
    srv.proc->Fault("non_xml", 100000, "PUT");
    Status s = bounded->Put("obj2", "x");
    CHECK(s.code() == Code::kIoError);
    CHECK(s.message().find("gave up") != std::string::npos);
    CHECK(s.message().find("HTTP 500") != std::string::npos);
    CHECK(s.message().find("oops") != std::string::npos);  // the non-XML body, quoted
    CHECK(s.message().find("'obj2'") != std::string::npos);
  }
  SUBCASE("a 206 wider than the range asked for gives the part asked for") {
    srv.proc->Fault("wide_range", 1, "GET");
    const uint64_t before_retries = store->Stats().retries;
    std::string one(1, '\0');
    REQUIRE(store->Get("obj", 0, 1, one.data()).ok());
    CHECK(one == data.substr(0, 1));
    srv.proc->Fault("wide_range", 1, "GET");
    std::string mid(100, '\0');
    REQUIRE(store->Get("obj", 5000, 100, mid.data()).ok());
    CHECK(mid == data.substr(5000, 100));
    CHECK(store->Stats().retries == before_retries);
  }
  SUBCASE("403 is not retried") {
    srv.proc->Fault("403", 1, "GET");
    char c;
    Status s = store->Get("obj", 0, 1, &c);
    CHECK(s.code() == Code::kPermissionDenied);
    CHECK(s.message().find("AccessDenied") != std::string::npos);
  }
}

TEST_CASE("gcs store: bearer token, round trip, bucket rules") {
  if (UseS3rver()) return;
  TempDir dir;
  auto srv = StartGcsStandin(dir);
  REQUIRE(srv->running());
  GcsSettings s;
  s.token = kTestGcsToken;
  s.endpoint = srv->url();
  auto loc = ParseObjectLocation("gcs://gbucket/pre", "gcs");
  REQUIRE(loc.ok());
  auto store = OpenGcsStore(*loc, s, FastRetries());
  REQUIRE(store.ok());
  Status missing = (*store)->EnsureBucket(false);
  CHECK(missing.code() == Code::kNotFound);
  CHECK(missing.message().find("GCS_ALLOW_BUCKET_CREATE") != std::string::npos);
  REQUIRE((*store)->EnsureBucket(true).ok());
  const std::string data = RandomBytes(300000, 3);
  REQUIRE((*store)->Put("pre/block_0", data).ok());
  std::string part(1000, '\0');
  REQUIRE((*store)->Get("pre/block_0", 4096, part.size(), part.data()).ok());
  CHECK(part == data.substr(4096, 1000));
  REQUIRE((*store)->Delete("pre/block_0").ok());
  CHECK_FALSE((*store)->GetAll("pre/block_0")->has_value());
  CHECK((*store)->Delete("pre/block_0").ok());
  srv->Fault("503", 2, "GET");
  REQUIRE((*store)->Put("pre/x", "abc").ok());
  CHECK((*store)->GetAll("pre/x")->value() == "abc");
  CHECK((*store)->Stats().connections <= 2);
  auto gstats = srv->Admin("GET", "/_admin/stats");
  REQUIRE(gstats.ok());
  CHECK(nlohmann::json::parse(gstats->body).at("api_connections").get<int>() <= 2);

  s.token = "wrong";
  auto bad = OpenGcsStore(*loc, s, FastRetries());
  REQUIRE(bad.ok());
  Status denied = (*bad)->Put("pre/y", "v");
  CHECK(denied.code() == Code::kPermissionDenied);
  CHECK(denied.message().find("401") != std::string::npos);

  ScopedEnv env;
  env.Unset("GCS_ACCESS_TOKEN");
  CHECK(GcsSettingsFromEnv().status().message().find("GCS_ACCESS_TOKEN") != std::string::npos);
}

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <unistd.h>

#include "daemon/config.h"

using namespace clio;

TEST_CASE("the built-in default config parses and composes CTE and filesystem") {
  auto c = ParseRuntimeConfig(DefaultConfigYaml(), "(defaults)");
  REQUIRE(c.ok());
  REQUIRE(c->compose.size() == 2);
  CHECK(c->compose[0].mod_name == "clio_cte_core");
  CHECK(c->compose[0].pool_major == 512);
  CHECK(c->compose[1].mod_name == "clio_fs");
  CHECK(c->socket_path == c->state_dir + "/clio.sock");
  CHECK(c->metadata_path == c->state_dir + "/metadata");
  CHECK(c->commit_interval_ms == 2000);
  CHECK(c->http_address == "127.0.0.1");  // loopback only unless configured
  CHECK(c->http_port == kDefaultHttpPort);
  CHECK(c->max_inflight_bytes == kDefaultMaxInflightBytes);  // etc/clio.yaml says 1GiB
}

TEST_CASE("state_dir and environment variables expand") {
  setenv("CLIO_TEST_ROOT", "/tmp/xyz", 1);
  auto c = ParseRuntimeConfig(
      "runtime:\n  state_dir: ${CLIO_TEST_ROOT}/state\nmetadata:\n  path: ${CLIO_STATE_DIR}/md\n", "t.yaml");
  REQUIRE(c.ok());
  CHECK(c->state_dir == "/tmp/xyz/state");
  CHECK(c->metadata_path == "/tmp/xyz/state/md");
}

TEST_CASE("bad configs name the file, the line and the key") {
  struct Case {
    std::string yaml;
    const char* expect;
  } cases[] = {
      {"runtime:\n  num_threads: 4\n  bogus_key: 1\n", "t.yaml:3: runtime.bogus_key: unknown key"},
      {"runtime:\n  num_threads: many\n", "t.yaml:2: runtime.num_threads"},
      {"runtime:\n  num_threads: 0\n", "num_threads: must be between"},
      {"runtime:\n  node_id: 65536\n", "t.yaml:2: runtime.node_id: must be between 0 and 65535"},
      {"runtime:\n  node_id: -1\n", "t.yaml:2: runtime.node_id"},
      {"runtime:\n  http_port: 65536\n", "t.yaml:2: runtime.http_port: must be between 0 (no HTTP server) and 65535"},
      {"runtime:\n  http_port: web\n", "t.yaml:2: runtime.http_port"},
      {"runtime:\n  http_address: \"\"\n", "t.yaml:2: runtime.http_address: must not be empty"},
      {"runtime:\n  tcp_port: 70000\n", "t.yaml:2: runtime.tcp_port: must be between 0 (no TCP transport) and 65535"},
      {"runtime:\n  tcp_address: \"\"\n", "t.yaml:2: runtime.tcp_address: must not be empty"},
      {"runtime:\n  tcp_address: 0.0.0.0\n  tcp_port: 7000\n", "t.yaml:2: runtime.tcp_address: '0.0.0.0' is not a loopback address: TCP off this machine needs TLS"},
      {"runtime:\n  tcp_address: \"::\"\n  tcp_port: 7000\n", "is not a loopback address"},
      {"runtime:\n  tls_cert_file: /etc/c.pem\n", "t.yaml:2: runtime.tls_cert_file: set runtime.tls_cert_file and runtime.tls_key_file together"},
      {"runtime:\n  tls_server_name: node1\n", "t.yaml:2: runtime.tls_server_name: names what the runtime's certificate must carry, but this config trusts no certificate"},
      {"runtime:\n  tls_key_file: /etc/c.key\n", "t.yaml:2: runtime.tls_key_file: set runtime.tls_cert_file and runtime.tls_key_file together"},
      {"runtime:\n  shm_channel_size: 1k\n", "t.yaml:2: runtime.shm_channel_size: must be between 4KiB and 64MiB"},
      {"runtime:\n  shm_channel_size: 1GB\n", "t.yaml:2: runtime.shm_channel_size: must be between"},
      {"runtime:\n  shm_channel_size: lots\n", "t.yaml:2: runtime.shm_channel_size"},
      {"runtime:\n  max_inflight: 1MiB\n", "t.yaml:2: runtime.max_inflight: must be between 64MiB (one frame) and 1TiB"},
      {"runtime:\n  max_inflight: 2TiB\n", "t.yaml:2: runtime.max_inflight: must be between"},
      {"runtime:\n  client_reap_grace_s: 100000\n", "t.yaml:2: runtime.client_reap_grace_s: must be between 0 and 86400"},
      {"runtime:\n  slow_task_us: 0\n", "t.yaml:2: runtime.slow_task_us: must be between 1 and 60000000"},
      {"runtime:\n  stuck_task_ms: 0\n", "t.yaml:2: runtime.stuck_task_ms: must be between 1 and 3600000"},
      // An alias bomb: ten lines that name 10^9 values.
      {"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
       "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
       "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
       "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
       "i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]\n",
       "over 100000 values (aliases count once per use)"},
      {std::string(70, '[') + std::string(70, ']') + "\n", "levels deep"},
      {"runtime:\n  socket_path: /" + std::string(107, 's') + "\n",
       "t.yaml:2: runtime.socket_path: '/sss"},
      {"runtime:\n  state_dir: /" + std::string(100, 'd') + "\n", "is 111 bytes; a Unix socket path holds at most 107"},
      {"metadata:\n  backend: sqlite\n", "unknown metadata backend 'sqlite'"},
      {"surprise: 1\n", "t.yaml:1: surprise: unknown key"},
      {"compose:\n  - mod_name: x\n    pool_name: a\n    pool_id: \"nope\"\n", "t.yaml:4: compose[0].pool_id: bad pool_id 'nope'"},
      {"compose:\n  - mod_name: x\n    pool_name: a\n    pool_id: \"1.0\"\n  - mod_name: y\n    pool_name: a\n    pool_id: \"2.0\"\n",
       "duplicate pool_name 'a'"},
      {"metadata:\n  path: ${CLIO_SURELY_UNSET_VAR}/x\n", "t.yaml:2: metadata.path: environment variable ${CLIO_SURELY_UNSET_VAR} is not set"},
      {"runtime: [1, 2\n", "t.yaml:"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.yaml);
    auto r = ParseRuntimeConfig(c.yaml, "t.yaml");
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kConfigError);
    CHECK(r.status().message().find(c.expect) != std::string::npos);
  }
}

TEST_CASE("TCP off loopback parses with TLS: the runtime's certificate and key, or a client's CA") {
  auto server = ParseRuntimeConfig(
      "runtime:\n  tcp_address: 0.0.0.0\n  tcp_port: 7000\n  tls_cert_file: /etc/clio/tls.pem\n"
      "  tls_key_file: /etc/clio/tls.key\n",
      "t.yaml");
  REQUIRE_MESSAGE(server.ok(), server.status().ToString());
  CHECK(server->tls_cert_file == "/etc/clio/tls.pem");
  CHECK(server->tls_key_file == "/etc/clio/tls.key");
  CHECK(server->tls_client());
  auto client = ParseRuntimeConfig(
      "runtime:\n  tcp_address: node1.example\n  tcp_port: 7000\n  tls_ca_file: /etc/clio/ca.pem\n"
      "  tls_server_name: node1.example\n",
      "t.yaml");
  REQUIRE_MESSAGE(client.ok(), client.status().ToString());
  CHECK(client->tls_ca_file == "/etc/clio/ca.pem");
  CHECK(client->tls_server_name == "node1.example");
  auto plain = ParseRuntimeConfig("runtime:\n  tcp_port: 7000\n", "t.yaml");
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->tls_client());
}

TEST_CASE("ConfigReader validates sizes and unknown keys of a module entry") {
  auto c = ParseRuntimeConfig(
      "compose:\n  - mod_name: m\n    pool_name: p\n    pool_id: \"5.0\"\n    capacity: 12XB\n    extra: 1\n",
      "m.yaml");
  REQUIRE(c.ok());
  ConfigReader r(c->compose[0].node, "m.yaml");
  auto size = r.Size("capacity", 0);
  REQUIRE_FALSE(size.ok());
  CHECK(size.status().message().find("m.yaml:5: compose[0].capacity: bad size '12XB'") != std::string::npos);
  (void)r.String("mod_name", "");
  (void)r.String("pool_name", "");
  (void)r.String("pool_id", "");
  Status fin = r.Finish();
  CHECK(fin.message().find("m.yaml:6: compose[0].extra: unknown key") != std::string::npos);
}

TEST_CASE("a missing config file is an error naming it") {
  auto r = LoadRuntimeConfigFile("/nonexistent/clio.yaml");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kConfigError);
  CHECK(r.status().message().find("/nonexistent/clio.yaml") != std::string::npos);
}

TEST_CASE("CLIO_CONF selects the file") {
  char tmpl[] = "/tmp/clio_conf_XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(tmpl) << "runtime:\n  state_dir: /tmp/from_conf\n";
  setenv("CLIO_CONF", tmpl, 1);
  auto r = LoadRuntimeConfig();
  unsetenv("CLIO_CONF");
  unlink(tmpl);
  REQUIRE(r.ok());
  CHECK(r->state_dir == "/tmp/from_conf");
  CHECK(r->file == tmpl);
}

TEST_CASE("an empty state_dir: $STATE_DIRECTORY, then /var/lib/clio for the system config") {
  const std::string yaml = "runtime:\n  state_dir: \"\"\n";
  setenv("STATE_DIRECTORY", "/srv/clio-state:/srv/other", 1);
  auto cfg = ParseRuntimeConfig(yaml, "x.yaml");
  REQUIRE(cfg.ok());
  CHECK(cfg->state_dir == "/srv/clio-state");  // systemd joins several with ':'
  CHECK(cfg->socket_path == "/srv/clio-state/clio.sock");
  unsetenv("STATE_DIRECTORY");
  cfg = ParseRuntimeConfig(yaml, kSystemConfigFile);
  REQUIRE(cfg.ok());
  CHECK(cfg->state_dir == "/var/lib/clio");  // every user of the system config, not just root
  CHECK(DefaultStateDir("x.yaml") == (geteuid() == 0 ? "/var/lib/clio" : DefaultStateDir("")));
}

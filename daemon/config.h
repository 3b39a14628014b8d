// CLIO's configuration: YAML parsed into a small tree that remembers line numbers and which keys
// were read, so every module can validate its own keys and a bad config is refused with the
// file, line and key named. yaml-cpp stays inside config.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "daemon/defaults.h"

namespace clio {

struct ConfigValue {
  enum class Kind { kNull, kScalar, kMap, kList };
  Kind kind = Kind::kNull;
  std::string scalar;                                   // kScalar, ${VAR} already expanded
  std::vector<std::string> keys;                        // kMap, in file order
  std::vector<ConfigValue> values;                      // kMap, values[i] belongs to keys[i]
  std::vector<ConfigValue> list;                        // kList
  int line = 0;                                         // 1-based line in the file
  std::string path;                                     // "compose[1].storage[0]"
};

// Reads the keys of one map node. Every getter marks its key as known; Finish() reports the
// first key that no getter asked for. Errors read "FILE:LINE: PATH.KEY: what is wrong".
class ConfigReader {
 public:
  ConfigReader(const ConfigValue* node, std::string file);

  Result<std::string> String(std::string_view key, std::string def);
  Result<uint64_t> Size(std::string_view key, uint64_t def);
  Result<uint64_t> UInt(std::string_view key, uint64_t def);
  Result<double> Double(std::string_view key, double def);
  Result<bool> Bool(std::string_view key, bool def);
  // Child node (map or list), nullptr when absent.
  const ConfigValue* Child(std::string_view key);
  bool Has(std::string_view key) const;
  // Marks a key as known without reading it (a key another reader handles).
  void MarkKnown(std::string_view key) { known_.emplace_back(key); }
  // ConfigError naming the first unknown key, or Ok.
  Status Finish() const;
  // Formats an error located at `key` of this node (or the node itself when key is empty).
  Status Error(std::string_view key, std::string_view what) const;
  const std::string& file() const { return file_; }
  const ConfigValue* node() const { return node_; }

 private:
  const ConfigValue* Find(std::string_view key) const;
  const ConfigValue* node_;
  std::string file_;
  std::vector<std::string> known_;
};

struct ComposeEntry {
  std::string mod_name;
  std::string pool_name;
  uint32_t pool_major = 0;
  uint32_t pool_minor = 0;
  // `restart: true` on a pool created at run time (compose start, pool create) records it in
  // the node's pool log, so the next start recreates it. Pools of the config always come back.
  bool restart = false;
  const ConfigValue* node = nullptr;  // the whole entry, for the module's own keys
};

// A reader of a compose entry's module keys: the keys the runtime itself reads (mod_name,
// pool_name, pool_id, pool_query, restart) are known already, so a module reads only its own
// and Finish() still names any key nobody reads.
ConfigReader ModuleKeys(const ComposeEntry& entry, const std::string& file);

// Pools to create on a running runtime (`compose start FILE`, `pool create`): the document is
// a map with one key `compose:` (the config's format), a list of entries, or one entry.
// ${CLIO_STATE_DIR} expands to `state_dir` and no other ${VAR} does (the document comes from a
// client; the runtime's environment may hold secrets); errors name `file`, the line and the key.
struct ComposeDocument {
  std::vector<ComposeEntry> entries;
  std::shared_ptr<ConfigValue> root;  // owns the tree the entries point into
};
Result<ComposeDocument> ParseComposeDocument(std::string_view yaml, const std::string& file,
                                             const std::string& state_dir);
// The entries as a compose document in JSON (which is also YAML, so ParseComposeDocument reads
// it back): the node's pool log.
std::string ComposeDocumentJson(const std::vector<const ConfigValue*>& entries);

inline constexpr uint32_t kDefaultHttpPort = 8930;
// 127.0.0.0/8, or ::1 (also as ::ffff:127.x.y.z): an address, as a server binds it. The TCP
// transport without TLS and the HTTP actions serve only such an address.
bool IsLoopbackAddress(const std::string& address);

// The longest runtime.socket_path: sockaddr_un's sun_path (108 bytes) less its NUL.
inline constexpr size_t kMaxSocketPathLen = 107;

struct RuntimeConfig {
  std::string file;          // where it came from, or "(built-in defaults)"
  std::string state_dir;     // node state: metadata, file tiers
  std::string socket_path;   // Unix socket clients connect to
  std::string metadata_path; // RocksDB directory
  uint32_t commit_interval_ms = 2000;
  uint32_t num_threads = 4;
  // This node's number (runtime.node_id, 0..65535). Tier pool names end in "_node<N>", so
  // nodes that share a bucket (or, later, pool names) never share a tier.
  uint32_t node_id = 0;
  // HTTP (/metrics; runtime.http_address, runtime.http_port). Port 0: no HTTP server.
  std::string http_address = "127.0.0.1";
  uint32_t http_port = kDefaultHttpPort;
  // The TCP client transport (runtime.tcp_address, runtime.tcp_port): off (port 0) unless
  // configured; a TCP client presents the token of `token_file` first.
  std::string tcp_address = "127.0.0.1";
  uint32_t tcp_port = 0;
  // TLS on that transport (daemon/tls.h). The runtime serves TLS only when given its
  // certificate chain and key (runtime.tls_cert_file, runtime.tls_key_file: both or neither),
  // and must off loopback. A client speaks TLS when it has something to trust: the CA of
  // runtime.tls_ca_file, else the runtime's certificate itself; it checks the name
  // runtime.tls_server_name, default the tcp_address.
  std::string tls_cert_file, tls_key_file, tls_ca_file, tls_server_name;
  bool tls_client() const { return !tls_ca_file.empty() || !tls_cert_file.empty(); }
  // The node's secret (runtime.token_file, default ${CLIO_STATE_DIR}/token): made 0600 by the
  // runtime at start when missing. TCP clients present it in their Hello.
  std::string token_file;
  // Data bytes of one shared-memory channel (runtime.shm_channel_size, 4 KiB..64 MiB).
  uint32_t shm_channel_bytes = kDefaultShmChannelBytes;
  // Payload bytes read and run at once over every connection (runtime.max_inflight, 64 MiB..
  // 1 TiB): past it, frames wait unread. daemon/server.h.
  uint64_t max_inflight_bytes = kDefaultMaxInflightBytes;
  // A connection whose client process has exited (its socket kept open by a child it forked)
  // is closed and its channel unmapped after this many seconds (runtime.client_reap_grace_s).
  uint32_t client_reap_grace_s = 5;
  // Scheduling (daemon/README.md, "Workers"): a task whose observed mean run time is this long
  // or longer runs on the slow class instead of inline on an I/O worker (runtime.slow_task_us),
  // and the monitor adds a thread to an I/O worker stuck this long on one task
  // (runtime.stuck_task_ms).
  uint32_t slow_task_us = 2000;
  // Where external modules are loaded from (runtime.module_dir; daemon/module.h): a root-owned
  // directory holding lib<mod_name>.so.
  std::string module_dir = "/usr/lib/clio/modules";
  // Directories besides state_dir where a client's pool create, compose start or tier add may
  // make files (runtime.allowed_paths; daemon/confine.h): absolute paths.
  std::vector<std::string> allowed_paths;
  uint32_t stuck_task_ms = 100;
  std::vector<ComposeEntry> compose;
  std::shared_ptr<ConfigValue> root;  // owns the tree ComposeEntry::node points into
};

// Resolves the config: CLIO_CONF, else ~/.clio/clio.yaml, else /etc/clio/clio.yaml, else the
// built-in default (etc/clio.yaml, compiled in). A named file that is missing is an error.
Result<RuntimeConfig> LoadRuntimeConfig();
Result<RuntimeConfig> LoadRuntimeConfigFile(const std::string& path);
Result<RuntimeConfig> ParseRuntimeConfig(std::string_view yaml, std::string file);

// "MAJOR.MINOR" (minor defaults to 0, MAJOR > 0) -> (major, minor); InvalidArgument naming it.
Result<std::pair<uint32_t, uint32_t>> ParsePoolId(std::string_view s);

// The compiled-in default config text.
std::string_view DefaultConfigYaml();

// Gives a file the runtime makes for its clients (the socket, the mount lock) to group clio,
// mode 0660 whatever the umask: clients in that group may use it, others may not (DESIGN.md
// security defaults). A failed chown is a warning.
void ShareWithClioGroup(const std::string& path);
// Makes the directory of a file the runtime shares with its clients (the socket, the mount
// lock) when it is missing: mode 0755 whatever the umask (the runtime's is 077), so that
// clients reach the file inside, whose own mode decides.
void MakeClientDir(const std::string& dir);

// Where /etc/clio/clio.yaml lives: the node's system-wide config (the package's conffile).
inline constexpr const char* kSystemConfigFile = "/etc/clio/clio.yaml";

// Default state directory of a config read from `file` that leaves runtime.state_dir empty:
// $STATE_DIRECTORY (systemd's StateDirectory=; its first entry), else /var/lib/clio for the
// system config or for root, else $XDG_STATE_HOME/clio or ~/.local/state/clio. So the
// service (user clio) and every client of the system config (root or in group clio) meet at
// one socket.
std::string DefaultStateDir(const std::string& file = "");

}  // namespace clio

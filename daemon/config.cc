#include "daemon/config.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <yaml-cpp/yaml.h>

#include "common/log.h"
#include "common/size.h"
#include "daemon/default_config.h"  // generated from etc/clio.yaml: kDefaultConfigYaml

namespace clio {
namespace {

std::string HomeDir() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  if (const passwd* pw = getpwuid(getuid())) return pw->pw_dir;
  return "/";
}

// What one document may grow into: aliases let ten lines name a billion nodes (each alias is
// copied into the tree), so the copy counts its nodes and its depth.
constexpr size_t kMaxConfigNodes = 100000;
constexpr size_t kMaxConfigDepth = 64;


Status Convert(const YAML::Node& n, const std::string& path, ConfigValue* out, const std::string& file,
               size_t* nodes, size_t depth = 0) {
  if (++*nodes > kMaxConfigNodes || depth > kMaxConfigDepth)
    return ConfigError(file + ":" + std::to_string(n.Mark().line + 1) + ": " + (path.empty() ? "the document" : path) +
                       ": over " + std::to_string(*nodes > kMaxConfigNodes ? kMaxConfigNodes : kMaxConfigDepth) +
                       (*nodes > kMaxConfigNodes ? " values (aliases count once per use)" : " levels deep"));
  out->line = n.Mark().line + 1;
  out->path = path;
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out->kind = ConfigValue::Kind::kNull;
      return Status::Ok();
    case YAML::NodeType::Scalar:
      out->kind = ConfigValue::Kind::kScalar;
      out->scalar = n.Scalar();
      return Status::Ok();
    case YAML::NodeType::Sequence: {
      out->kind = ConfigValue::Kind::kList;
      size_t i = 0;
      for (const auto& item : n) {
        ConfigValue v;
        CLIO_RETURN_IF_ERROR(Convert(item, path + "[" + std::to_string(i++) + "]", &v, file, nodes, depth + 1));
        out->list.push_back(std::move(v));
      }
      return Status::Ok();
    }
    case YAML::NodeType::Map: {
      out->kind = ConfigValue::Kind::kMap;
      for (const auto& kv : n) {
        if (!kv.first.IsScalar())
          return ConfigError(file + ":" + std::to_string(kv.first.Mark().line + 1) + ": " +
                             path + ": map keys must be plain names");
        std::string key = kv.first.Scalar();
        for (const auto& k : out->keys)
          if (k == key)
            return ConfigError(file + ":" + std::to_string(kv.first.Mark().line + 1) + ": " +
                               (path.empty() ? key : path + "." + key) + ": duplicate key");
        ConfigValue v;
        CLIO_RETURN_IF_ERROR(Convert(kv.second, path.empty() ? key : path + "." + key, &v, file, nodes, depth + 1));
        v.line = kv.first.Mark().line + 1;
        out->keys.push_back(std::move(key));
        out->values.push_back(std::move(v));
      }
      return Status::Ok();
    }
  }
  return Status::Ok();
}

// Where ${VAR} comes from: the operator's config may name the runtime's environment; a client's
// document (a compose document, and the pool log made of them) only ${CLIO_STATE_DIR}: else
// `pool create clio_bdev 'ram::${AWS_SECRET_ACCESS_KEY}'` would show a secret in the pool's name.
enum class Vars { kEnvironment, kStateDirOnly };

// Expands ${VAR}; CLIO_STATE_DIR comes from `state_dir`, everything else from the environment
// when `vars` allows.
Result<std::string> Expand(std::string_view s, const std::string& state_dir, const std::string& where, Vars vars) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '{') {
      size_t end = s.find('}', i + 2);
      if (end == std::string_view::npos) return ConfigError(where + ": unterminated ${ in '" + std::string(s) + "'");
      std::string var(s.substr(i + 2, end - i - 2));
      if (var == "CLIO_STATE_DIR") {
        out += state_dir;
      } else if (vars == Vars::kStateDirOnly) {
        return ConfigError(where + ": ${" + var + "} is not expanded in a document sent to the runtime; only "
                           "${CLIO_STATE_DIR} is (the runtime's environment may hold secrets)");
      } else if (const char* v = std::getenv(var.c_str())) {
        out += v;
      } else {
        return ConfigError(where + ": environment variable ${" + var + "} is not set");
      }
      i = end;
    } else if (s[i] == '~' && i == 0 && (s.size() == 1 || s[1] == '/') && vars == Vars::kEnvironment) {
      out += HomeDir();
    } else {
      out += s[i];
    }
  }
  return out;
}

Status ExpandTree(ConfigValue* v, const std::string& state_dir, const std::string& file, Vars vars) {
  switch (v->kind) {
    case ConfigValue::Kind::kScalar: {
      CLIO_ASSIGN_OR_RETURN(v->scalar, Expand(v->scalar, state_dir,
                                              file + ":" + std::to_string(v->line) + ": " + v->path, vars));
      return Status::Ok();
    }
    case ConfigValue::Kind::kMap:
      for (auto& c : v->values) CLIO_RETURN_IF_ERROR(ExpandTree(&c, state_dir, file, vars));
      return Status::Ok();
    case ConfigValue::Kind::kList:
      for (auto& c : v->list) CLIO_RETURN_IF_ERROR(ExpandTree(&c, state_dir, file, vars));
      return Status::Ok();
    case ConfigValue::Kind::kNull:
      return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace

bool IsLoopbackAddress(const std::string& a) {
  in_addr v4{};
  if (::inet_pton(AF_INET, a.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, a.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

Result<std::pair<uint32_t, uint32_t>> ParsePoolId(std::string_view s) {
  uint32_t major = 0, minor = 0;
  size_t dot = s.find('.');
  std::string a(s.substr(0, dot)), b(dot == std::string_view::npos ? "0" : s.substr(dot + 1));
  char* end = nullptr;
  unsigned long ma = std::strtoul(a.c_str(), &end, 10);
  if (a.empty() || *end) return InvalidArgument("bad pool_id '" + std::string(s) + "' (expected MAJOR.MINOR, e.g. 512.0)");
  unsigned long mi = std::strtoul(b.c_str(), &end, 10);
  if (b.empty() || *end || ma == 0 || ma > 0xffffffffUL || mi > 0xffffffffUL)
    return InvalidArgument("bad pool_id '" + std::string(s) + "' (expected MAJOR.MINOR, MAJOR > 0)");
  major = static_cast<uint32_t>(ma);
  minor = static_cast<uint32_t>(mi);
  return std::make_pair(major, minor);
}


std::string_view DefaultConfigYaml() { return kDefaultConfigYaml; }

std::string DefaultStateDir(const std::string& file) {
  // systemd's StateDirectory=clio (the packaged unit runs the runtime as user clio); with
  // several directories systemd joins them with ':', and the first is ours.
  if (const char* s = std::getenv("STATE_DIRECTORY"); s && *s) {
    const std::string dirs(s);
    const std::string first = dirs.substr(0, dirs.find(':'));
    if (!first.empty()) return first;
  }
  if (file == kSystemConfigFile || geteuid() == 0) return "/var/lib/clio";
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return std::string(x) + "/clio";
  return HomeDir() + "/.local/state/clio";
}

ConfigReader::ConfigReader(const ConfigValue* node, std::string file)
    : node_(node), file_(std::move(file)) {}

const ConfigValue* ConfigReader::Find(std::string_view key) const {
  if (!node_ || node_->kind != ConfigValue::Kind::kMap) return nullptr;
  for (size_t i = 0; i < node_->keys.size(); ++i)
    if (node_->keys[i] == key) return &node_->values[i];
  return nullptr;
}

bool ConfigReader::Has(std::string_view key) const { return Find(key) != nullptr; }

Status ConfigReader::Error(std::string_view key, std::string_view what) const {
  const ConfigValue* v = key.empty() ? node_ : Find(key);
  int line = v ? v->line : (node_ ? node_->line : 0);
  std::string path = node_ ? node_->path : "";
  if (!key.empty()) path = path.empty() ? std::string(key) : path + "." + std::string(key);
  // A tree built from something other than a file (clioctl's arguments) has no lines.
  const std::string where = line > 0 ? file_ + ":" + std::to_string(line) : file_;
  return ConfigError(where + ": " + path + ": " + std::string(what));
}

Result<std::string> ConfigReader::String(std::string_view key, std::string def) {
  known_.emplace_back(key);
  const ConfigValue* v = Find(key);
  if (!v || v->kind == ConfigValue::Kind::kNull) return def;
  if (v->kind != ConfigValue::Kind::kScalar) return Error(key, "expected a single value");
  return v->scalar;
}

Result<uint64_t> ConfigReader::Size(std::string_view key, uint64_t def) {
  CLIO_ASSIGN_OR_RETURN(std::string s, String(key, ""));
  if (!Has(key) || s.empty()) return def;
  auto r = ParseSize(s);
  if (!r.ok()) return Error(key, r.status().message());
  return *r;
}

Result<uint64_t> ConfigReader::UInt(std::string_view key, uint64_t def) {
  CLIO_ASSIGN_OR_RETURN(std::string s, String(key, ""));
  if (!Has(key) || s.empty()) return def;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (*end || errno || s[0] == '-') return Error(key, "expected a non-negative integer, got '" + s + "'");
  return static_cast<uint64_t>(v);
}

Result<double> ConfigReader::Double(std::string_view key, double def) {
  CLIO_ASSIGN_OR_RETURN(std::string s, String(key, ""));
  if (!Has(key) || s.empty()) return def;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (*end || !std::isfinite(v)) return Error(key, "expected a number, got '" + s + "'");
  return v;
}

Result<bool> ConfigReader::Bool(std::string_view key, bool def) {
  CLIO_ASSIGN_OR_RETURN(std::string s, String(key, ""));
  if (!Has(key) || s.empty()) return def;
  if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
  if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  return Error(key, "expected true or false, got '" + s + "'");
}

const ConfigValue* ConfigReader::Child(std::string_view key) {
  known_.emplace_back(key);
  return Find(key);
}

Status ConfigReader::Finish() const {
  if (!node_ || node_->kind == ConfigValue::Kind::kNull) return Status::Ok();
  if (node_->kind != ConfigValue::Kind::kMap) return Error("", "expected a map of keys");
  for (const auto& k : node_->keys) {
    bool ok = false;
    for (const auto& kn : known_) ok |= kn == k;
    if (!ok) {
      std::string known;
      for (const auto& kn : known_) known += (known.empty() ? "" : ", ") + kn;
      return Error(k, "unknown key (known keys here: " + known + ")");
    }
  }
  return Status::Ok();
}

namespace {

// Reads the entries of a compose list (`list` is the value of `compose:` in `parent`, or null).
// Names and ids must be unique within the list and unlike those of `taken`.
Status ParseComposeList(const ConfigValue* list, const ConfigReader& parent,
                        const std::vector<ComposeEntry>& taken, std::vector<ComposeEntry>* out) {
  if (!list || list->kind == ConfigValue::Kind::kNull) return Status::Ok();
  if (list->kind != ConfigValue::Kind::kList) return parent.Error("compose", "expected a list of pools");
  for (const auto& item : list->list) {
    ConfigReader r(&item, parent.file());
    if (item.kind != ConfigValue::Kind::kMap) return r.Error("", "expected a map with mod_name, pool_name, pool_id");
    ComposeEntry e;
    CLIO_ASSIGN_OR_RETURN(e.mod_name, r.String("mod_name", ""));
    CLIO_ASSIGN_OR_RETURN(e.pool_name, r.String("pool_name", ""));
    CLIO_ASSIGN_OR_RETURN(std::string id, r.String("pool_id", ""));
    CLIO_ASSIGN_OR_RETURN(e.restart, r.Bool("restart", false));
    if (e.mod_name.empty()) return r.Error("", "missing mod_name");
    if (e.pool_name.empty()) return r.Error("", "missing pool_name");
    if (id.empty()) return r.Error("", "missing pool_id");
    auto pid = ParsePoolId(id);
    if (!pid.ok()) return r.Error("pool_id", pid.status().message());
    e.pool_major = pid->first;
    e.pool_minor = pid->second;
    for (const auto* group : {&taken, static_cast<const std::vector<ComposeEntry>*>(out)}) {
      for (const auto& other : *group) {
        if (other.pool_name == e.pool_name) return r.Error("pool_name", "duplicate pool_name '" + e.pool_name + "'");
        if (other.pool_major == e.pool_major) return r.Error("pool_id", "duplicate pool_id '" + id + "'");
      }
    }
    e.node = &item;
    out->push_back(std::move(e));
  }
  return Status::Ok();
}

Result<std::shared_ptr<ConfigValue>> ParseYamlTree(std::string_view yaml, const std::string& file) {
  YAML::Node doc;
  try {
    doc = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return ConfigError(file + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
  auto root = std::make_shared<ConfigValue>();
  size_t nodes = 0;
  CLIO_RETURN_IF_ERROR(Convert(doc, "", root.get(), file, &nodes));
  return root;
}

nlohmann::ordered_json ToJson(const ConfigValue& v) {
  switch (v.kind) {
    case ConfigValue::Kind::kNull:
      return nullptr;
    case ConfigValue::Kind::kScalar:
      return v.scalar;
    case ConfigValue::Kind::kList: {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      for (const auto& item : v.list) a.push_back(ToJson(item));
      return a;
    }
    case ConfigValue::Kind::kMap: {
      nlohmann::ordered_json m = nlohmann::ordered_json::object();
      for (size_t i = 0; i < v.keys.size(); ++i) m[v.keys[i]] = ToJson(v.values[i]);
      return m;
    }
  }
  return nullptr;
}

}  // namespace

namespace {

bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return false;  // control characters: not text
    const size_t n = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : 4;
    if (n == 4 || i + n >= s.size()) return false;  // a bad lead byte, or the text ends inside
    uint32_t cp = n == 0 ? c : n == 1 ? c & 0x1fu : n == 2 ? c & 0x0fu : c & 0x07u;
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) return false;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n + 1;
  }
  return true;
}

// Paths below `v` as if it sat at `path` ("compose[0]"), for errors that name where they are.
void Repath(ConfigValue* v, const std::string& path) {
  v->path = path;
  for (size_t i = 0; i < v->keys.size(); ++i) Repath(&v->values[i], path + "." + v->keys[i]);
  for (size_t i = 0; i < v->list.size(); ++i) Repath(&v->list[i], path + "[" + std::to_string(i) + "]");
}

// The pool log is JSON, which holds UTF-8 text only: anything else would come back changed.
Status CheckUtf8(const ConfigValue& v, const std::string& file) {
  const std::string where = file + ":" + std::to_string(v.line) + ": " + v.path;
  if (v.kind == ConfigValue::Kind::kScalar && !IsUtf8(v.scalar))
    return ConfigError(where + ": not UTF-8 text (or holds control characters)");
  for (size_t i = 0; i < v.keys.size(); ++i)
    if (!IsUtf8(v.keys[i])) return ConfigError(where + ": a key is not UTF-8 text (or holds control characters)");
  for (const auto& c : v.values) CLIO_RETURN_IF_ERROR(CheckUtf8(c, file));
  for (const auto& c : v.list) CLIO_RETURN_IF_ERROR(CheckUtf8(c, file));
  return Status::Ok();
}

}  // namespace

ConfigReader ModuleKeys(const ComposeEntry& entry, const std::string& file) {
  ConfigReader r(entry.node, file);
  for (const char* k : {"mod_name", "pool_name", "pool_id", "pool_query", "restart"}) r.MarkKnown(k);
  return r;
}

Result<ComposeDocument> ParseComposeDocument(std::string_view yaml, const std::string& file,
                                             const std::string& state_dir) {
  CLIO_ASSIGN_OR_RETURN(std::shared_ptr<ConfigValue> root, ParseYamlTree(yaml, file));
  CLIO_RETURN_IF_ERROR(ExpandTree(root.get(), state_dir, file, Vars::kStateDirOnly));
  ComposeDocument doc;
  doc.root = root;
  ConfigReader top(root.get(), file);
  ConfigValue* list = nullptr;
  if (root->kind == ConfigValue::Kind::kList) {
    list = root.get();
  } else if (root->kind == ConfigValue::Kind::kMap && top.Has("mod_name")) {
    // One entry: wrap it in a list.
    auto wrapped = std::make_shared<ConfigValue>();
    wrapped->kind = ConfigValue::Kind::kList;
    wrapped->line = root->line;
    wrapped->list.push_back(*root);
    doc.root = wrapped;
    list = wrapped.get();
  } else if (root->kind == ConfigValue::Kind::kMap) {
    list = const_cast<ConfigValue*>(top.Child("compose"));
    if (!list) return ConfigError(file + ": no pools: expected `compose:` with a list of pools, a list, or one pool entry");
    CLIO_RETURN_IF_ERROR(top.Finish());
  } else {
    return ConfigError(file + ": expected `compose:` with a list of pools, a list, or one pool entry");
  }
  // Every entry is named as in the config ("compose[1].capacity"), whatever the form.
  for (size_t i = 0; i < list->list.size(); ++i) Repath(&list->list[i], "compose[" + std::to_string(i) + "]");
  CLIO_RETURN_IF_ERROR(CheckUtf8(*list, file));
  CLIO_RETURN_IF_ERROR(ParseComposeList(list, top, {}, &doc.entries));
  if (doc.entries.empty()) return ConfigError(file + ": the compose list is empty");
  return doc;
}

std::string ComposeDocumentJson(const std::vector<const ConfigValue*>& entries) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ConfigValue* e : entries) list.push_back(ToJson(*e));
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  doc["compose"] = std::move(list);
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

Result<RuntimeConfig> ParseRuntimeConfig(std::string_view yaml, std::string file) {
  CLIO_ASSIGN_OR_RETURN(std::shared_ptr<ConfigValue> root, ParseYamlTree(yaml, file));
  if (root->kind == ConfigValue::Kind::kNull) root->kind = ConfigValue::Kind::kMap;
  if (root->kind != ConfigValue::Kind::kMap)
    return ConfigError(file + ":1: the config must be a map with runtime, metadata and compose");

  RuntimeConfig cfg;
  cfg.file = file;
  cfg.root = root;
  ConfigReader top(root.get(), file);

  // state_dir first: every other value may refer to it as ${CLIO_STATE_DIR}.
  const ConfigValue* rt_node = top.Child("runtime");
  if (rt_node) CLIO_RETURN_IF_ERROR(ExpandTree(const_cast<ConfigValue*>(rt_node), "${CLIO_STATE_DIR}", file, Vars::kEnvironment));
  ConfigReader rt(rt_node, file);
  CLIO_ASSIGN_OR_RETURN(cfg.state_dir, rt.String("state_dir", ""));
  if (cfg.state_dir.empty() || cfg.state_dir.find("${CLIO_STATE_DIR}") != std::string::npos)
    cfg.state_dir = DefaultStateDir(file);
  CLIO_RETURN_IF_ERROR(ExpandTree(root.get(), cfg.state_dir, file, Vars::kEnvironment));

  CLIO_ASSIGN_OR_RETURN(cfg.socket_path, rt.String("socket_path", ""));
  if (cfg.socket_path.empty()) cfg.socket_path = cfg.state_dir + "/clio.sock";
  // sockaddr_un holds 108 bytes with the NUL: a longer path cannot be bound or reached.
  if (cfg.socket_path.size() > kMaxSocketPathLen)
    return rt.Error("socket_path", "'" + cfg.socket_path + "' is " + std::to_string(cfg.socket_path.size()) +
                                       " bytes; a Unix socket path holds at most " + std::to_string(kMaxSocketPathLen) +
                                       " (set runtime.socket_path, or a shorter runtime.state_dir)");
  CLIO_ASSIGN_OR_RETURN(uint64_t threads, rt.UInt("num_threads", 4));
  if (threads == 0 || threads > 256) return rt.Error("num_threads", "must be between 1 and 256");
  cfg.num_threads = static_cast<uint32_t>(threads);
  CLIO_ASSIGN_OR_RETURN(uint64_t node_id, rt.UInt("node_id", 0));
  if (node_id > 65535) return rt.Error("node_id", "must be between 0 and 65535");
  cfg.node_id = static_cast<uint32_t>(node_id);
  CLIO_ASSIGN_OR_RETURN(cfg.http_address, rt.String("http_address", "127.0.0.1"));
  if (cfg.http_address.empty()) return rt.Error("http_address", "must not be empty (default 127.0.0.1)");
  CLIO_ASSIGN_OR_RETURN(uint64_t http_port, rt.UInt("http_port", kDefaultHttpPort));
  if (http_port > 65535) return rt.Error("http_port", "must be between 0 (no HTTP server) and 65535");
  cfg.http_port = static_cast<uint32_t>(http_port);
  CLIO_ASSIGN_OR_RETURN(cfg.tcp_address, rt.String("tcp_address", "127.0.0.1"));
  if (cfg.tcp_address.empty()) return rt.Error("tcp_address", "must not be empty (default 127.0.0.1)");
  CLIO_ASSIGN_OR_RETURN(uint64_t tcp_port, rt.UInt("tcp_port", 0));
  if (tcp_port > 65535) return rt.Error("tcp_port", "must be between 0 (no TCP transport) and 65535");
  cfg.tcp_port = static_cast<uint32_t>(tcp_port);
  CLIO_ASSIGN_OR_RETURN(cfg.tls_cert_file, rt.String("tls_cert_file", ""));
  CLIO_ASSIGN_OR_RETURN(cfg.tls_key_file, rt.String("tls_key_file", ""));
  CLIO_ASSIGN_OR_RETURN(cfg.tls_ca_file, rt.String("tls_ca_file", ""));
  CLIO_ASSIGN_OR_RETURN(cfg.tls_server_name, rt.String("tls_server_name", ""));
  if (cfg.tls_cert_file.empty() != cfg.tls_key_file.empty())
    return rt.Error(cfg.tls_cert_file.empty() ? "tls_key_file" : "tls_cert_file",
                    "set runtime.tls_cert_file and runtime.tls_key_file together: the runtime serves TLS with "
                    "the certificate chain of one and the private key of the other");
  if (!cfg.tls_server_name.empty() && !cfg.tls_client())
    return rt.Error("tls_server_name", "names what the runtime's certificate must carry, but this config trusts no "
                                       "certificate: set runtime.tls_ca_file (or, on the runtime's node, "
                                       "runtime.tls_cert_file and runtime.tls_key_file)");
  if (cfg.tcp_port != 0 && !IsLoopbackAddress(cfg.tcp_address) && !cfg.tls_client())
    return rt.Error("tcp_address", "'" + cfg.tcp_address +
                                       "' is not a loopback address: TCP off this machine needs TLS (the token "
                                       "handshake alone leaves the stream open to reading and injection); set "
                                       "runtime.tls_cert_file and runtime.tls_key_file on the runtime's node, "
                                       "runtime.tls_ca_file on a client's, or use 127.0.0.1");
  CLIO_ASSIGN_OR_RETURN(cfg.token_file, rt.String("token_file", ""));
  if (cfg.token_file.empty()) cfg.token_file = cfg.state_dir + "/token";
  CLIO_ASSIGN_OR_RETURN(uint64_t shm_bytes, rt.Size("shm_channel_size", kDefaultShmChannelBytes));
  if (shm_bytes < 4096 || shm_bytes > (64u << 20))
    return rt.Error("shm_channel_size", "must be between 4KiB and 64MiB");
  cfg.shm_channel_bytes = static_cast<uint32_t>(shm_bytes);
  CLIO_ASSIGN_OR_RETURN(cfg.max_inflight_bytes, rt.Size("max_inflight", kDefaultMaxInflightBytes));
  if (cfg.max_inflight_bytes < kMaxPayload || cfg.max_inflight_bytes > (uint64_t{1} << 40))
    return rt.Error("max_inflight", "must be between 64MiB (one frame) and 1TiB");
  CLIO_ASSIGN_OR_RETURN(uint64_t grace, rt.UInt("client_reap_grace_s", 5));
  if (grace > 86400) return rt.Error("client_reap_grace_s", "must be between 0 and 86400 seconds");
  cfg.client_reap_grace_s = static_cast<uint32_t>(grace);
  CLIO_ASSIGN_OR_RETURN(cfg.module_dir, rt.String("module_dir", "/usr/lib/clio/modules"));
  if (const ConfigValue* allowed = rt.Child("allowed_paths")) {
    if (allowed->kind != ConfigValue::Kind::kList)
      return rt.Error("allowed_paths", "expected a list of absolute directory paths");
    for (const ConfigValue& v : allowed->list) {
      if (v.kind != ConfigValue::Kind::kScalar || v.scalar.empty() || v.scalar.front() != '/')
        return ConfigError(file + ":" + std::to_string(v.line) + ": " + v.path +
                           ": expected an absolute directory path");
      cfg.allowed_paths.push_back(v.scalar);
    }
  }
  CLIO_ASSIGN_OR_RETURN(uint64_t slow_us, rt.UInt("slow_task_us", 2000));
  if (slow_us < 1 || slow_us > 60000000) return rt.Error("slow_task_us", "must be between 1 and 60000000 microseconds");
  cfg.slow_task_us = static_cast<uint32_t>(slow_us);
  CLIO_ASSIGN_OR_RETURN(uint64_t stuck_ms, rt.UInt("stuck_task_ms", 100));
  if (stuck_ms < 1 || stuck_ms > 3600000) return rt.Error("stuck_task_ms", "must be between 1 and 3600000 milliseconds");
  cfg.stuck_task_ms = static_cast<uint32_t>(stuck_ms);
  CLIO_RETURN_IF_ERROR(rt.Finish());

  ConfigReader md(top.Child("metadata"), file);
  CLIO_ASSIGN_OR_RETURN(std::string backend, md.String("backend", "rocksdb"));
  if (backend != "rocksdb")
    return md.Error("backend", "unknown metadata backend '" + backend + "' (supported: rocksdb)");
  CLIO_ASSIGN_OR_RETURN(cfg.metadata_path, md.String("path", cfg.state_dir + "/metadata"));
  CLIO_ASSIGN_OR_RETURN(uint64_t interval, md.UInt("commit_interval_ms", 2000));
  if (interval == 0 || interval > 60000) return md.Error("commit_interval_ms", "must be between 1 and 60000");
  cfg.commit_interval_ms = static_cast<uint32_t>(interval);
  CLIO_RETURN_IF_ERROR(md.Finish());

  CLIO_RETURN_IF_ERROR(ParseComposeList(top.Child("compose"), top, {}, &cfg.compose));
  CLIO_RETURN_IF_ERROR(top.Finish());
  return cfg;
}

void ShareWithClioGroup(const std::string& path) {
  if (const group* g = getgrnam("clio")) {
    if (::chown(path.c_str(), geteuid(), g->gr_gid) != 0)
      CLIO_LOG_WARN("cannot give {} to group clio: {}", path, std::strerror(errno));
  }
  ::chmod(path.c_str(), 0660);  // whatever the umask
}

void MakeClientDir(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) return;
  std::filesystem::create_directories(dir, ec);
  if (ec) return;  // the socket's bind or the lock's open says why
  ::chmod(dir.c_str(), 0755);
}

Result<RuntimeConfig> LoadRuntimeConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ConfigError(path + ": cannot open config file: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseRuntimeConfig(ss.str(), path);
}

Result<RuntimeConfig> LoadRuntimeConfig() {
  if (const char* c = std::getenv("CLIO_CONF"); c && *c) return LoadRuntimeConfigFile(c);
  std::string user = HomeDir() + "/.clio/clio.yaml";
  if (access(user.c_str(), F_OK) == 0) return LoadRuntimeConfigFile(user);
  if (access(kSystemConfigFile, F_OK) == 0) return LoadRuntimeConfigFile(kSystemConfigFile);
  return ParseRuntimeConfig(DefaultConfigYaml(), "(built-in defaults)");
}

}  // namespace clio

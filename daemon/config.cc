#include "daemon/config.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <yaml-cpp/yaml.h>

#include "common/size.h"
#include "daemon/default_config.h"  // generated from etc/clio.yaml: kDefaultConfigYaml

namespace clio {
namespace {

std::string HomeDir() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  if (const passwd* pw = getpwuid(getuid())) return pw->pw_dir;
  return "/";
}

Status Convert(const YAML::Node& n, const std::string& path, ConfigValue* out,
               const std::string& file) {
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
        CLIO_RETURN_IF_ERROR(Convert(item, path + "[" + std::to_string(i++) + "]", &v, file));
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
        CLIO_RETURN_IF_ERROR(Convert(kv.second, path.empty() ? key : path + "." + key, &v, file));
        v.line = kv.first.Mark().line + 1;
        out->keys.push_back(std::move(key));
        out->values.push_back(std::move(v));
      }
      return Status::Ok();
    }
  }
  return Status::Ok();
}

// Expands ${VAR}; CLIO_STATE_DIR comes from `state_dir`, everything else from the environment.
Result<std::string> Expand(std::string_view s, const std::string& state_dir, const std::string& where) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '{') {
      size_t end = s.find('}', i + 2);
      if (end == std::string_view::npos) return ConfigError(where + ": unterminated ${ in '" + std::string(s) + "'");
      std::string var(s.substr(i + 2, end - i - 2));
      if (var == "CLIO_STATE_DIR") {
        out += state_dir;
      } else if (const char* v = std::getenv(var.c_str())) {
        out += v;
      } else {
        return ConfigError(where + ": environment variable ${" + var + "} is not set");
      }
      i = end;
    } else if (s[i] == '~' && i == 0 && (s.size() == 1 || s[1] == '/')) {
      out += HomeDir();
    } else {
      out += s[i];
    }
  }
  return out;
}

Status ExpandTree(ConfigValue* v, const std::string& state_dir, const std::string& file) {
  switch (v->kind) {
    case ConfigValue::Kind::kScalar: {
      CLIO_ASSIGN_OR_RETURN(v->scalar, Expand(v->scalar, state_dir,
                                              file + ":" + std::to_string(v->line) + ": " + v->path));
      return Status::Ok();
    }
    case ConfigValue::Kind::kMap:
      for (auto& c : v->values) CLIO_RETURN_IF_ERROR(ExpandTree(&c, state_dir, file));
      return Status::Ok();
    case ConfigValue::Kind::kList:
      for (auto& c : v->list) CLIO_RETURN_IF_ERROR(ExpandTree(&c, state_dir, file));
      return Status::Ok();
    case ConfigValue::Kind::kNull:
      return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace

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

Result<RuntimeConfig> ParseRuntimeConfig(std::string_view yaml, std::string file) {
  YAML::Node doc;
  try {
    doc = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return ConfigError(file + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
  auto root = std::make_shared<ConfigValue>();
  CLIO_RETURN_IF_ERROR(Convert(doc, "", root.get(), file));
  if (root->kind == ConfigValue::Kind::kNull) root->kind = ConfigValue::Kind::kMap;
  if (root->kind != ConfigValue::Kind::kMap)
    return ConfigError(file + ":1: the config must be a map with runtime, metadata and compose");

  RuntimeConfig cfg;
  cfg.file = file;
  cfg.root = root;
  ConfigReader top(root.get(), file);

  // state_dir first: every other value may refer to it as ${CLIO_STATE_DIR}.
  const ConfigValue* rt_node = top.Child("runtime");
  if (rt_node) CLIO_RETURN_IF_ERROR(ExpandTree(const_cast<ConfigValue*>(rt_node), "${CLIO_STATE_DIR}", file));
  ConfigReader rt(rt_node, file);
  CLIO_ASSIGN_OR_RETURN(cfg.state_dir, rt.String("state_dir", ""));
  if (cfg.state_dir.empty() || cfg.state_dir.find("${CLIO_STATE_DIR}") != std::string::npos)
    cfg.state_dir = DefaultStateDir(file);
  CLIO_RETURN_IF_ERROR(ExpandTree(root.get(), cfg.state_dir, file));

  CLIO_ASSIGN_OR_RETURN(cfg.socket_path, rt.String("socket_path", ""));
  if (cfg.socket_path.empty()) cfg.socket_path = cfg.state_dir + "/clio.sock";
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

  const ConfigValue* compose = top.Child("compose");
  if (compose && compose->kind != ConfigValue::Kind::kList && compose->kind != ConfigValue::Kind::kNull)
    return top.Error("compose", "expected a list of pools");
  if (compose) {
    for (const auto& item : compose->list) {
      ConfigReader r(&item, file);
      if (item.kind != ConfigValue::Kind::kMap) return r.Error("", "expected a map with mod_name, pool_name, pool_id");
      ComposeEntry e;
      CLIO_ASSIGN_OR_RETURN(e.mod_name, r.String("mod_name", ""));
      CLIO_ASSIGN_OR_RETURN(e.pool_name, r.String("pool_name", ""));
      CLIO_ASSIGN_OR_RETURN(std::string id, r.String("pool_id", ""));
      if (e.mod_name.empty()) return r.Error("", "missing mod_name");
      if (e.pool_name.empty()) return r.Error("", "missing pool_name");
      if (id.empty()) return r.Error("", "missing pool_id");
      auto pid = ParsePoolId(id);
      if (!pid.ok()) return r.Error("pool_id", pid.status().message());
      e.pool_major = pid->first;
      e.pool_minor = pid->second;
      for (const auto& other : cfg.compose) {
        if (other.pool_name == e.pool_name) return r.Error("pool_name", "duplicate pool_name '" + e.pool_name + "'");
        if (other.pool_major == e.pool_major) return r.Error("pool_id", "duplicate pool_id '" + id + "'");
      }
      e.node = &item;
      cfg.compose.push_back(std::move(e));
    }
  }
  CLIO_RETURN_IF_ERROR(top.Finish());
  return cfg;
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

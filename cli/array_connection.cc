#include "cli/array_connection.h"

#include "common/codec.h"
#include "daemon/config.h"
#include "storage/bdev_protocol.h"

namespace clio {

Result<ArrayConnection> ArrayConnection::Open(const CommandContext& ctx, const std::string& array) {
  RuntimeClient::Options o = ctx.rpc;
  ArrayConnection c;
  c.name = array;
  CLIO_ASSIGN_OR_RETURN(c.client, RuntimeClient::Connect(o));
  if (auto id = ParsePoolId(array); id.ok()) {
    c.pool = id->first;
  } else {
    auto pool = c.client->FindPool(array);
    if (!pool.ok()) return pool.status().WithContext("no pool '" + array + "'");
    c.pool = *pool;
  }
  // Only a safe-bdev answers with its members.
  CLIO_ASSIGN_OR_RETURN(std::string json, c.Monitor());
  if (json.find("\"members\"") == std::string::npos)
    return InvalidArgument("pool '" + array + "' is not a clio_safe_bdev array");
  return c;
}

Result<std::string> ArrayConnection::Monitor() {
  Encoder q;
  q.PutBytes("stats");
  return client->Call(pool, static_cast<uint32_t>(BdevMethod::kMonitor), q.buffer());
}

}  // namespace clio

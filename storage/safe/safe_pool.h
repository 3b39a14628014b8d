// Runtime glue of the safe-bdev: compose entries with mod_name clio_safe_bdev become a
// SafeBdevPool. It serves the bdev task interface (storage/bdev_protocol.h) on the array, so a
// CTE tier attaches to it like to any bdev pool, plus the array's own methods (docs/ipc.md):
// AddBdev, RemoveBdev, RecoverBdev, and Monitor with the members' state.
//
//   - mod_name: clio_safe_bdev
//     pool_name: "safe::array0"
//     pool_id: "310.0"
//     members: ["301.0", "302.0", "303.0", "304.0"]   # clio_bdev pools composed earlier
//     spares: ["305.0"]
//     max_failures: 1
//     alloc_log: /var/lib/clio/safe0.alloc_log
#pragma once

#include <memory>
#include <string>

#include "daemon/pool.h"
#include "storage/bdev_pool.h"
#include "storage/safe/safe_bdev.h"
#include "storage/safe/safe_protocol.h"

namespace clio {

class SafeBdevPool : public BdevPool {
 public:
  SafeBdevPool(OpenedSafeBdev opened, PoolRegistry* registry)
      : BdevPool(std::move(opened.bdev)), array_(opened.array), registry_(registry) {}
  // The array's own methods, then the bdev task interface (BdevPool).
  Result<std::string> Handle(uint32_t method, std::string_view payload) override;
  CallerClass CallerOf(uint32_t method) const override;
  std::string MethodName(uint32_t method) const override;
  std::string Describe() const override;
  SafeArray* array() const { return array_; }
  std::string MonitorJson() const override;

 private:
  using Handlers = wire::Handlers<SafeBdevPool, safeproto::AllRequests>;
  friend Handlers;
  Result<wire::Empty> Run(const safeproto::AddBdev& r);
  Result<wire::Empty> Run(const safeproto::RemoveBdev& r);
  Result<wire::Empty> Run(const safeproto::RecoverBdev& r);
  Result<safeproto::VerifyReply> Run(const safeproto::Verify& r);
  Result<SafeMember> Resolve(const std::string& ref) const;

  SafeArray* const array_;
  PoolRegistry* const registry_;  // the runtime's: resolves pools named by AddBdev/RecoverBdev
};

// Parses a clio_safe_bdev compose entry (the members resolved through `registry`).
struct SafeBdevSpec {
  SafeBdevConfig config;
  std::vector<SafeMember> members;
  std::vector<SafeMember> spares;
};
Result<SafeBdevSpec> ParseSafeBdevComposeEntry(const ComposeEntry& entry, const std::string& file,
                                               PoolRegistry& registry);

ModuleFactory MakeSafeBdevModuleFactory();

}  // namespace clio

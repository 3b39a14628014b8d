// Runtime glue of the bdev module: compose entries with mod_name clio_bdev become a BdevPool
// serving the task interface of seeds/bdev-module.txt (messages in storage/bdev_protocol.h and
// docs/ipc.md). The pool name is the device location: a file path for file devices, any unique
// name (ram::NAME) for memory devices.
//
//   - mod_name: clio_bdev
//     pool_name: "ram::chi_default_bdev"
//     pool_id: "301.0"
//     bdev_type: ram
//     capacity: "1GB"          # and every other key of storage/bdev_config.h
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "daemon/pool.h"
#include "storage/bdev.h"
#include "storage/bdev_protocol.h"

namespace clio {

class BdevPool : public Pool {
 public:
  explicit BdevPool(std::unique_ptr<Bdev> bdev) : bdev_(std::move(bdev)) {}
  // Decodes one request and runs it on the bdev. A malformed request is an error reply
  // (InvalidArgument or Corruption) and touches nothing. Thread safety: as Bdev (any thread).
  Result<std::string> Handle(uint32_t method, std::string_view payload) override;
  // Stats are readers'; bytes, extents and settings of the device are the admin's (a client
  // of the device reaches every file's bytes on it).
  CallerClass CallerOf(uint32_t method) const override;
  std::string MethodName(uint32_t method) const override;
  // Makes the device's data and allocator log durable.
  Status Stop() override { return bdev_->Sync(); }
  std::string Describe() const override;
  // The device itself, for in-process callers (BdevClient runs allocate, free, read and write
  // inline on it). Owned by the pool.
  Bdev* bdev() const { return bdev_.get(); }
  std::string MonitorJson() const override;

 private:
  using Handlers = wire::Handlers<BdevPool, bdevproto::AllRequests>;
  friend Handlers;
  // One per request type.
  Result<wire::Raw> Run(const bdevproto::Monitor& r);
  Result<bdevproto::ExtentsReply> Run(const bdevproto::AllocateBlocks& r);
  Result<bdevproto::WriteReply> Run(const bdevproto::Write& r);
  Result<wire::Raw> Run(const bdevproto::Read& r);
  Result<wire::Empty> Run(const bdevproto::FreeBlocks& r);
  Result<bdevproto::StatsReply> Run(const bdevproto::GetStats& r);
  Result<wire::Empty> Run(const bdevproto::Sync& r);
  Result<wire::Empty> Run(const bdevproto::SetLifespan& r);
  Result<wire::Empty> Run(const bdevproto::FlushAllocLog& r);
  Result<bdevproto::GpuMemoryReply> Run(const bdevproto::Update& r);

  const std::unique_ptr<Bdev> bdev_;
};

// Parses a clio_bdev compose entry: pool_name as the device location, plus the bdev keys.
Result<BdevConfig> ParseBdevComposeEntry(const ComposeEntry& entry, const std::string& file);

// Factory for compose entries with mod_name clio_bdev. A device that cannot be created fails
// the compose with the entry's file, line and pool named.
ModuleFactory MakeBdevModuleFactory();

}  // namespace clio

// What CLIO knows of each storage medium, in one table (media.cc): its config word, its kind
// (which sets the persistence it may have, how a tier of it is named per node and what it
// leaves on the machine), its default performance figures and how to open it. The config
// parser, placement and the CLI ask here; none of them switches on BdevType. A new medium is a
// transport file and one row in media.cc (RegisterMedium adds one from elsewhere: tests).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "storage/bdev.h"

namespace clio {

enum class MediumKind : uint8_t {
  // Host or device memory: volatile only (the default), nothing left after a stop; the name is
  // any unique word ("ram::tier1").
  kMemory,
  // A local file, the location its path: temporary (the default) or long_term; the file stays
  // on disk when the tier is removed, and its presence says the tier existed before.
  kFile,
  // An object-store bucket, the location a URL (bucket[/prefix], s3://, gcs://): never volatile
  // (temporary by default); its allocator state is a local file (alloc_log, required).
  kObject,
};

struct Medium {
  BdevType type;          // the value on the wire and in the metadata
  std::string_view name;  // the config's bdev_type and the prefix of a memory tier's name
  MediumKind kind;
  PerfMetrics perf;  // default performance figures (configured, not measured)
  Result<std::unique_ptr<Bdev>> (*open)(const BdevConfig&);
};

// Null when no medium has that type or name (names compare without case).
const Medium* FindMedium(BdevType t);
const Medium* FindMedium(std::string_view name);
// Every medium, the table's first, in type order.
std::vector<const Medium*> AllMedia();
// Adds a medium defined outside the table. AlreadyExists for a type or name taken.
Status RegisterMedium(const Medium& m);

// The questions the layers above ask, answered from the medium's kind (false / defaults for an
// unknown type).
bool IsMemoryMedium(BdevType t);
bool IsObjectMedium(BdevType t);
bool IsFileMedium(BdevType t);
// A tier of this medium keeps a file on this machine when removed (its data file).
bool LeavesFile(BdevType t);
Persistence DefaultPersistence(BdevType t);
// The local file whose presence says a tier of this config existed before this start: a file
// tier's file, an object tier's alloc log; empty for memory tiers.
std::string LocalStateFile(const BdevConfig& c);
// The bdev pool name of a tier configured at `path` on node `node`: the path with "_node<N>"
// appended (seeds/bdev-module.txt). For an object store the suffix lands on the key prefix; a
// bare bucket gets the prefix "node<N>", since a bucket name may not hold an underscore.
std::string NodeTierName(const std::string& path, BdevType type, uint32_t node);

}  // namespace clio

// The bdev's configuration keys (seeds/bdev-module.txt), parsed in one place for both places
// a bdev is configured: a compose entry with mod_name clio_bdev (storage/bdev_pool.h) and an
// entry of the CTE's storage list (placement/cte_pool.cc).
//
// Keys, defaults and validators:
//   bdev_type          file | ram | hbm | pinned | noop | s3 | gcs               default file
//   capacity           size; the CTE spells it capacity_limit (one of the two)   default 0
//   alloc              auto | eager | lazy; anything else: auto, with a warning  default auto
//   io_depth           1..4096                                                   default 32
//   alignment          a power of two, 512 B .. 1 MiB; 0 = the type's default   default 4096
//   growth_unit        size > 0 (file)                                           default 1GB
//   populate_unit      size (ram; 0: commit per request)                         default 64MB
//   alloc_log          path (file: default <name>.alloc_log; s3, gcs: required, a local file)
//   persistence_level  volatile | temporary | long_term        default by type (see bdev.h;
//                      memory types only volatile, s3 and gcs never; default long_term)
//   request_timeout_ms 1..600000 (s3, gcs: one HTTP request)                 default 30000
//   retry_budget_ms    0..3600000 (s3, gcs: retrying one call, backoff+jitter) default 60000
//   perf_metrics       map of read_bandwidth_mbps, write_bandwidth_mbps, read_latency_us,
//                      write_latency_us, iops (numbers >= 0); overrides the type defaults
// For a file device the path's directory must exist or be creatable: a path below a file, or
// in a directory that is not writable, is refused here. For s3 and gcs the name must be a
// valid bucket[/prefix] (storage/objstore/object_store.h).
#pragma once

#include "common/status.h"
#include "daemon/config.h"
#include "storage/bdev.h"

namespace clio {

// Reads the bdev keys of the map node behind `r` into `config`. `config->name` (the device
// location) must already be set: errors read "FILE:LINE: PATH.KEY: bdev 'NAME': what is
// wrong" (ConfigError). Marks the keys as known on `r`; the caller reads its own keys (path,
// score, pool_name, ...) and then calls r.Finish() to refuse unknown ones.
Status ParseBdevKeys(ConfigReader& r, BdevConfig* config);

}  // namespace clio

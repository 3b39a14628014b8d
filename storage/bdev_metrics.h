// The metrics decorator: every device a tier or pool uses is wrapped by Instrument(), which
// derives the generic series from the Bdev calls themselves, so a new transport is charted the
// moment it exists, with no metric of its own (seeds/umbp-add-backend.txt). Series, all labelled
// tier="<device name>" and type="<file|ram|...|safe>":
//   clio_bdev_operations_total{op,outcome}    op: allocate, free, write, read, sync;
//                                             outcome: ok, io_error, no_space, ... (Code)
//   clio_bdev_bytes_total{op}                 bytes written, read, allocated, freed (ok only)
//   clio_bdev_operation_seconds{op}           latency histogram
// and, sampled at each scrape from GetStats() and SampleMetrics():
//   clio_bdev_capacity_bytes, clio_bdev_used_bytes, clio_bdev_remaining_bytes,
//   clio_bdev_committed_bytes, clio_bdev_lifespan_days, clio_bdev_healthy (1 or 0),
//   clio_bdev_info{persistence,backend} 1, and the device's own medium series.
#pragma once

#include <memory>
#include <string>

#include "storage/bdev.h"

namespace clio {

// Wraps `inner`; `type_label` replaces the type label (a redundant array says "safe").
// Calls go straight through; each adds two clock reads and three series updates.
std::unique_ptr<Bdev> Instrument(std::unique_ptr<Bdev> inner, std::string type_label = "");

}  // namespace clio

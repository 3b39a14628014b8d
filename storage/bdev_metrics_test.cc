// The metrics decorator: every device from Bdev::Open is measured from outside, with exact
// counts, bytes and outcomes, and its state is sampled at each scrape.
#include <doctest/doctest.h>

#include <fstream>
#include <optional>
#include <string>

#include "common/metrics.h"
#include "storage/test_util.h"

using namespace clio;
using namespace clio::testing;

namespace {

// The value of one series in a scrape, or nullopt when it is absent.
std::optional<double> Series(const std::string& text, const std::string& series) {
  const std::string key = "\n" + series + " ";
  const size_t at = text.find(key);
  if (at == std::string::npos) return std::nullopt;
  return std::stod(text.substr(at + key.size()));
}

std::string L(const std::string& tier, const std::string& type, const std::string& more = "") {
  return "tier=\"" + tier + "\",type=\"" + type + "\"" + (more.empty() ? "" : "," + more);
}

}  // namespace

TEST_CASE("every device from Bdev::Open counts its operations, bytes and outcomes exactly") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "dev.dat", 8u << 20);
  auto b = MustOpen(c);
  const std::string tier = c.name;
  const std::string l = L(tier, "file");

  ExtentList e = MustAllocate(b.get(), 64 * 1024);
  const std::string data = Pattern(40000, 3);
  REQUIRE(b->Write(e, 100, data).ok());
  std::string back(data.size(), '\0');
  REQUIRE(b->Read(e, 100, data.size(), back.data()).ok());
  CHECK(back == data);
  REQUIRE(b->Read(e, 0, 512, back.data()).ok());
  REQUIRE(b->Sync().ok());
  // Two failures: a write past the extents (out_of_range) and one while the device fails.
  CHECK(b->Write(e, 64 * 1024 - 10, std::string(20, 'x')).code() == Code::kOutOfRange);
  { std::ofstream(c.name + ".fail") << "x"; }
  CHECK(b->Write(e, 0, "abc").code() == Code::kIoError);
  std::filesystem::remove(c.name + ".fail");
  REQUIRE(b->Free(e).ok());

  const std::string text = metrics::Scrape();
  auto ops = [&](const char* op, const char* outcome) {
    return Series(text, std::string("clio_bdev_operations_total{op=\"") + op + "\",outcome=\"" +
                            outcome + "\"," + l + "}");
  };
  auto bytes = [&](const char* op) {
    return Series(text, std::string("clio_bdev_bytes_total{op=\"") + op + "\"," + l + "}");
  };
  CHECK(ops("allocate", "ok") == 1);
  CHECK(ops("write", "ok") == 1);
  CHECK(ops("write", "out_of_range") == 1);
  CHECK(ops("write", "io_error") == 1);
  CHECK(ops("read", "ok") == 2);
  CHECK(ops("sync", "ok") >= 1);
  CHECK(ops("free", "ok") == 1);
  CHECK(bytes("allocate") == 64 * 1024);
  CHECK(bytes("write") == 40000);  // failed writes move no bytes
  CHECK(bytes("read") == 40000 + 512);
  CHECK(bytes("free") == 64 * 1024);
  CHECK_FALSE(bytes("sync").has_value());
  CHECK(Series(text, "clio_bdev_operation_seconds_count{op=\"write\"," + l + "}") == 3);
  CHECK(Series(text, "clio_bdev_operation_seconds_count{op=\"read\"," + l + "}") == 2);

  const BdevStats st = b->GetStats();
  CHECK(Series(text, "clio_bdev_capacity_bytes{" + l + "}") == static_cast<double>(st.capacity));
  CHECK(Series(text, "clio_bdev_used_bytes{" + l + "}") == 0);
  CHECK(Series(text, "clio_bdev_healthy{" + l + "}") == 1);
  CHECK(Series(text, "clio_bdev_lifespan_days{" + l + "}") == 999999);
  CHECK(Series(text, "clio_bdev_info{backend=\"" + st.backend + "\",persistence=\"temporary\"," + l + "}") == 1);
}

TEST_CASE("sampled state and counters follow the device: a closed device leaves the scrape") {
  BdevConfig c;
  c.name = "ram::metrics_test_sampled";
  c.type = BdevType::kRam;
  c.capacity = 4u << 20;
  auto b = MustOpen(c);
  const std::string l = L(c.name, "ram");
  ExtentList e = MustAllocate(b.get(), 1u << 20);
  b->SetLifespan(3.5);
  std::string text = metrics::Scrape();
  CHECK(Series(text, "clio_bdev_used_bytes{" + l + "}") == 1u << 20);
  CHECK(Series(text, "clio_bdev_remaining_bytes{" + l + "}") == static_cast<double>(b->GetStats().remaining));
  CHECK(Series(text, "clio_bdev_lifespan_days{" + l + "}") == 3.5);
  CHECK(Series(text, "clio_bdev_info{backend=\"shm\",persistence=\"volatile\"," + l + "}") == 1);
  REQUIRE(b->Free(e).ok());
  CHECK(Series(metrics::Scrape(), "clio_bdev_used_bytes{" + l + "}") == 0);
  b.reset();
  text = metrics::Scrape();
  CHECK_FALSE(Series(text, "clio_bdev_used_bytes{" + l + "}").has_value());
  // Its counters leave the export with it (metrics::LabelHold) ...
  const std::string allocs = "clio_bdev_operations_total{op=\"allocate\",outcome=\"ok\"," + l + "}";
  CHECK_FALSE(Series(text, allocs).has_value());
  // ... and come back with their values when a device of that name opens again: monotonic for
  // the life of the process.
  b = MustOpen(c);
  CHECK(Series(metrics::Scrape(), allocs) == 1);
}

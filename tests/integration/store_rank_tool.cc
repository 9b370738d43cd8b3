// A worker for the store test: each rank publishes its rank through
// COHORT_STORE (the agent's proxy), reads every other rank's key, counts
// itself in with add, waits for the count key, and prints what it saw.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "collective/store/tcp_store.h"

int main() {
  const char* endpoint = std::getenv("COHORT_STORE");
  const char* rank_text = std::getenv("RANK");
  const char* world_text = std::getenv("WORLD_SIZE");
  if (!endpoint || !rank_text || !world_text) {
    std::fprintf(stderr, "COHORT_STORE, RANK or WORLD_SIZE missing\n");
    return 2;
  }
  int rank = std::atoi(rank_text);
  int world = std::atoi(world_text);
  std::string host;
  int port = 0;
  if (auto s = cohort::store::parse_tcp_address(endpoint, &host, &port); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  cohort::store::TcpStoreClientOptions options;
  if (const char* token = std::getenv("COHORT_STORE_TOKEN")) options.token = token;
  auto store = cohort::store::TcpStoreClient::connect(host, port, options);
  if (!store) {
    std::fprintf(stderr, "%s\n", store.status().message().c_str());
    return 3;
  }
  auto timeout = std::chrono::seconds(20);
  // A binary value (with a NUL and a high byte) must survive the trip.
  std::string value = "r" + std::to_string(rank) + std::string(1, '\0') + "\xff";
  if (auto s = (*store)->set("rank/" + std::to_string(rank), value); !s) return 4;
  long sum = 0;
  for (int r = 0; r < world; ++r) {
    auto v = (*store)->get("rank/" + std::to_string(r), timeout);
    if (!v || *v != "r" + std::to_string(r) + std::string(1, '\0') + "\xff") {
      std::fprintf(stderr, "rank %d: bad value for rank %d\n", rank, r);
      return 5;
    }
    sum += r;
  }
  auto count = (*store)->add("count", 1);
  if (!count) return 6;
  if (*count == world) (void)(*store)->set("all_in", "1");
  if (auto s = (*store)->wait({"all_in"}, timeout); !s) return 7;
  std::printf("store ok rank %d sum %ld\n", rank, sum);
  return 0;
}

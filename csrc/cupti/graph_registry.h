// Stable names for CUDA graphs: what a graph does, not the per-process id
// CUPTI numbers it with. When a graph is instantiated (API exit callback of
// cudaGraphInstantiate* / cuGraphInstantiate*, where driver calls are
// allowed) its nodes are walked with the driver's graph API and named
//
//   graph_<16 hex digits>_n<nodes>
//
// the hex being a 64-bit FNV-1a hash of the node types in the driver's
// node order and, for kernel nodes, the kernel's symbol (child graphs are
// walked in place). Re-captures of the same step (an engine captures anew
// when the batch shape changes) get the same name, and the same graph gets
// the same name in the next run. An executable updated in place
// (cudaGraphExecUpdate) keeps its name: an update cannot change the
// graph's topology.
//
// Every instantiation or update counts in cuda_graph_captures{graph=<name>}
// (a counter instrument in the ring), so the number of distinct captures
// behind a frame is visible. Graphs that cannot be walked (no callbacks, an
// old driver) keep CUPTI's id: graph_<id>.
//
// GRAPH_TRACE records carry an id that is the executable's
// (cuptiGetGraphExecId) on current CUPTI; the source graph's id
// (cuptiGetGraphId) is kept too, and the first id seen in only one of the
// two maps settles which one records carry.
#pragma once

#include <cuda.h>
#include <stdint.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>

#include "driver_api.h"
#include "ring_sink.h"

namespace graphsignal {
namespace cupti {

class GraphRegistry {
 public:
  static constexpr size_t kMaxIds = 1 << 16;  // per map; later graphs keep their CUPTI id names
  static constexpr size_t kMaxNodes = 1 << 20;
  static constexpr int kMaxDepth = 8;

  GraphRegistry(RingSink* sink, const DriverApi* driver) : sink_(sink), driver_(driver) {}

  // On a workload thread, at the exit of a successful instantiation or
  // update: the executable's and the source graph's CUPTI ids (the caller
  // asks CUPTI; this file calls only the driver, so tests can link it alone).
  void on_instantiate(uint32_t exec_id, uint32_t graph_id, CUgraph graph);
  void on_update(uint32_t exec_id, uint32_t graph_id, CUgraph graph);

  // Registers a name under an executable id and a source graph id (0: none)
  // and counts one capture of it.
  void add(uint32_t exec_id, uint32_t graph_id, const std::string& name);

  // A graph cloned from another (CUPTI's GRAPH_CLONED resource callback;
  // instantiation clones the source graph): records carrying the clone's
  // id take the original's name.
  void note_clone(uint32_t clone_id, uint32_t original_id);

  // The name for a GRAPH_TRACE record's graph id; false when unknown.
  bool name_for(uint32_t id, std::string* out);

  // Changes whenever a name is added: the translator's cache of name ids
  // is valid while this stays the same.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  // "graph_<hash>_n<nodes>", or "" when the driver cannot describe the graph.
  std::string describe(CUgraph graph) const;

 private:
  bool walk(CUgraph graph, int depth, uint64_t* hash, size_t* nodes) const;
  void count_capture(const std::string& name);  // under mu_

  RingSink* sink_;
  const DriverApi* driver_;
  std::mutex mu_;
  std::unordered_map<uint32_t, std::string> by_exec_, by_graph_;
  std::unordered_map<uint32_t, uint32_t> clones_;  // clone id -> original graph id
  std::unordered_map<std::string, uint32_t> capture_ids_;  // name -> counter instrument's name id
  int exec_votes_ = 0, graph_votes_ = 0;
  std::atomic<uint64_t> generation_{0};
};

}  // namespace cupti
}  // namespace graphsignal

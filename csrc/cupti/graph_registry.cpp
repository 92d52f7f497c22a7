#include "graph_registry.h"

#include <stdio.h>
#include <string.h>

#include <vector>

#include "log.h"

namespace graphsignal {
namespace cupti {

namespace {
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

void mix(uint64_t* h, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; i++) {
    *h ^= p[i];
    *h *= kFnvPrime;
  }
}

void mix_byte(uint64_t* h, unsigned char c) { mix(h, &c, 1); }
}  // namespace

bool GraphRegistry::walk(CUgraph graph, int depth, uint64_t* hash, size_t* nodes) const {
  if (depth > kMaxDepth) return false;
  size_t n = 0;
  if (driver_->graph_get_nodes(graph, nullptr, &n) != CUDA_SUCCESS) return false;
  if (n > kMaxNodes || *nodes + n > kMaxNodes) return false;
  std::vector<CUgraphNode> list(n);
  if (n && driver_->graph_get_nodes(graph, list.data(), &n) != CUDA_SUCCESS) return false;
  list.resize(n);
  for (CUgraphNode node : list) {
    CUgraphNodeType type;
    if (driver_->node_get_type(node, &type) != CUDA_SUCCESS) return false;
    mix_byte(hash, static_cast<unsigned char>(type));
    (*nodes)++;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      CUDA_KERNEL_NODE_PARAMS_v2 p;
      memset(&p, 0, sizeof p);
      if (driver_->kernel_node_get_params(node, &p) != CUDA_SUCCESS) return false;
      const char* name = nullptr;
      if (p.func && driver_->func_get_name) driver_->func_get_name(&name, p.func);
      if (!name && p.kern && driver_->kernel_get_name) driver_->kernel_get_name(&name, p.kern);
      if (!name) return false;  // an unnamed kernel would make unrelated graphs collide
      mix(hash, name, strlen(name) + 1);
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && driver_->child_graph) {
      CUgraph child = nullptr;
      if (driver_->child_graph(node, &child) != CUDA_SUCCESS || !child) return false;
      mix_byte(hash, '(');
      if (!walk(child, depth + 1, hash, nodes)) return false;
      mix_byte(hash, ')');
    }
  }
  return true;
}

std::string GraphRegistry::describe(CUgraph graph) const {
  if (!graph || !driver_ || !driver_->can_walk_graphs()) return std::string();
  uint64_t hash = kFnvOffset;
  size_t nodes = 0;
  if (!walk(graph, 0, &hash, &nodes)) return std::string();
  char name[64];
  snprintf(name, sizeof name, "graph_%016llx_n%zu", static_cast<unsigned long long>(hash), nodes);
  return std::string(name);
}

void GraphRegistry::on_instantiate(uint32_t exec_id, uint32_t graph_id, CUgraph graph) {
  std::string name = describe(graph);
  if (name.empty()) {
    GS_LOG_ONCE(Level::kInfo, "a CUDA graph could not be walked; it keeps its CUPTI id as its name (graph_<id>)");
    return;
  }
  log(Level::kDebug, "CUDA graph exec %u (graph %u) is %s", exec_id, graph_id, name.c_str());
  add(exec_id, graph_id, name);
}

void GraphRegistry::on_update(uint32_t exec_id, uint32_t graph_id, CUgraph graph) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = by_exec_.find(exec_id);
    if (it != by_exec_.end()) {
      std::string name = it->second;  // count_capture may grow the maps
      count_capture(name);
      return;
    }
  }
  on_instantiate(exec_id, graph_id, graph);  // an executable never named (instantiated before we could walk it)
}

void GraphRegistry::add(uint32_t exec_id, uint32_t graph_id, const std::string& name) {
  std::lock_guard<std::mutex> g(mu_);
  bool full = false;
  if (exec_id) {
    if (by_exec_.size() < kMaxIds || by_exec_.count(exec_id)) by_exec_[exec_id] = name;
    else full = true;
  }
  if (graph_id) {
    if (by_graph_.size() < kMaxIds || by_graph_.count(graph_id)) by_graph_[graph_id] = name;
    else full = true;
  }
  if (full) GS_LOG_ONCE(Level::kInfo, "more than %zu CUDA graphs; later ones keep their CUPTI ids", kMaxIds);
  count_capture(name);
  generation_.fetch_add(1, std::memory_order_acq_rel);
}

void GraphRegistry::count_capture(const std::string& name) {
  uint32_t& id = capture_ids_[name];
  if (!id) {
    if (capture_ids_.size() > kMaxIds) return;
    uint32_t nid = sink_->new_name_id();
    std::string text = std::string("counter\x1f") + "cuda_graph_captures" + "\x1f" + "graph" + "\x1e" + name;
    if (!nid || !sink_->send_name(nid, text.data(), text.size(), GRAPHSIGNAL_NAME_INSTRUMENT)) return;  // retried next time
    id = nid;
  }
  sink_->write(GRAPHSIGNAL_REC_COUNTER, 0, 0, id, 1, 0);
}

void GraphRegistry::note_clone(uint32_t clone_id, uint32_t original_id) {
  std::lock_guard<std::mutex> g(mu_);
  if (clone_id && original_id && clone_id != original_id && clones_.size() < kMaxIds) clones_[clone_id] = original_id;
}

bool GraphRegistry::name_for(uint32_t id, std::string* out) {
  std::lock_guard<std::mutex> g(mu_);
  auto e = by_exec_.find(id);
  auto s = by_graph_.find(id);
  bool in_exec = e != by_exec_.end(), in_graph = s != by_graph_.end();
  if (!in_exec && !in_graph) {
    // a clone of a named graph (follow a few links: clones of clones)
    uint32_t g_id = id;
    for (int i = 0; i < 4 && !in_graph; i++) {
      auto c = clones_.find(g_id);
      if (c == clones_.end()) break;
      g_id = c->second;
      s = by_graph_.find(g_id);
      in_graph = s != by_graph_.end();
    }
    if (in_graph) {
      GS_LOG_ONCE(Level::kDebug, "CUDA graph records carry the ids of graph clones");
      *out = s->second;
      return true;
    }
    GS_LOG_ONCE(Level::kDebug, "a CUDA graph record's id %u is no named graph's", id);
    return false;
  }
  if (in_exec && !in_graph) GS_LOG_ONCE(Level::kDebug, "CUDA graph records carry executable ids");
  if (in_graph && !in_exec) GS_LOG_ONCE(Level::kDebug, "CUDA graph records carry source graph ids");
  if (in_exec && !in_graph) exec_votes_++;
  if (in_graph && !in_exec) graph_votes_++;
  if (in_exec && (!in_graph || exec_votes_ >= graph_votes_)) {
    *out = e->second;
    return true;
  }
  if (in_graph) {
    *out = s->second;
    return true;
  }
  return false;
}

}  // namespace cupti
}  // namespace graphsignal

// What the generated entry points of seastar_layers._C share (csrc/generated/registration.cpp, written
// by seastar_layers/codegen/torch_entry.py): checking at::Tensor arguments, choosing the kernel variant
// of their options and dtype, binding the declared sizes, allocating buffers, and calling the kernels' plain-C entries
// (int seastar_<key>forward|backward(sizes, dims, graph, buffers, numels, num_threads, stream)); and the ops'
// autograd kernel, which records the backward op as the node of the results (with_autograd).
// The tables it reads are generated; this file holds everything that is the same for every op.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#ifdef SEASTAR_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "variants.h"

namespace seastar {

constexpr int64_t kSerialWork = 32768;  // elements: torch's grain size (at::internal::GRAIN_SIZE)

constexpr int kMaxOptions = 6;                     // what a family's resolved variants are indexed by:
constexpr int kResolvedSlots = 4 << kMaxOptions;  // 4 dtypes x its options (given or not)

struct Family {
  const char* op;  // "seastar_layers::<name>"
  const char* const* arguments;  // the op's tensor arguments after the graph, in schema order
  const bool* is_feature;        // else a parameter (0-d, in the compute type)
  int num_arguments;
  int first_optional;            // the arguments from here on are optional features
  const char* const* switches;   // the op's bool arguments after the tensors (options without a tensor)
  int num_switches;
  const Variant* cpu;
  int num_cpu;
  const Variant* cuda;
  int num_cuda;
  int seed;                      // the seed argument's index (not an option: it selects no variant), or -1
  int for_backward;              // the index of the switch for_backward among the switches, or -1
  // the variant each (device, dtype, options) resolved to, once found: the calls after the first index it
  // (variant_slot) instead of building and comparing its key; filled in at run time, null until then
  mutable std::array<std::atomic<const Variant*>, kResolvedSlots> resolved[2];
};

using Arguments = std::vector<const at::Tensor*>;  // null: an optional argument not given
using Switches = std::vector<bool>;

inline const at::Tensor* given(const std::optional<at::Tensor>& t) { return t.has_value() ? &*t : nullptr; }

// The feature dtypes the ops take, in torch_entry.py's order (DTYPE_NAMES); a dtype's place indexes Family::resolved.
constexpr at::ScalarType kDtypes[] = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
constexpr const char* kDtypeNames[] = {"float32", "float64", "float16", "bfloat16"};

inline int dtype_place(at::ScalarType t) {
  for (int k = 0; k < 4; ++k)
    if (kDtypes[k] == t) return k;
  return -1;
}

inline const char* dtype_name(at::ScalarType t) {
  const int place = dtype_place(t);
  return place >= 0 ? kDtypeNames[place] : nullptr;
}

// A variant's key: the features' dtype, the optional arguments given (the seed selects none) and the switches
// on, as base.py: variant_key spells it.
inline std::string variant_key(const Family& f, at::ScalarType dtype, const Arguments& args, const Switches& switches) {
  const char* name = dtype_name(dtype);
  std::string key = name != nullptr ? name : "";
  for (int i = f.first_optional; i < f.num_arguments; ++i)
    if (args[i] != nullptr && i != f.seed) key += std::string("|") + f.arguments[i];
  for (int i = 0; i < f.num_switches; ++i)
    if (switches[i]) key += std::string("|") + f.switches[i];
  return key;
}

// Family::resolved's index of a dtype and the options given: the dtype's place and one bit per option (the
// optional arguments but the seed, then the switches); -1 for another dtype or a family of more options.
inline int variant_slot(const Family& f, at::ScalarType dtype, const Arguments& args, const Switches& switches) {
  const int place = dtype_place(dtype);
  if (place < 0) return -1;
  int bits = 0, option = 0;
  for (int i = f.first_optional; i < f.num_arguments; ++i)
    if (i != f.seed) bits |= (args[i] != nullptr) << option++;
  for (int i = 0; i < f.num_switches; ++i) bits |= switches[i] << option++;
  return option <= kMaxOptions ? place << kMaxOptions | bits : -1;
}

// The variant these arguments select on CUDA or the CPU: one the extension was built with, else one added
// since (added_variant: with `build`, compiled now). Null where there is none, with `why` where building failed.
inline const Variant* find_variant(const Family& f, bool cuda, at::ScalarType dtype, const Arguments& args,
                                   const Switches& switches, bool build = false, std::string* why = nullptr) {
  const int slot = variant_slot(f, dtype, args, switches);
  if (slot >= 0)
    if (const Variant* found = f.resolved[cuda][slot].load(std::memory_order_acquire)) return found;
  const std::string key = variant_key(f, dtype, args, switches);
  const Variant* table = cuda ? f.cuda : f.cpu;
  const int count = cuda ? f.num_cuda : f.num_cpu;
  const Variant* found = nullptr;
  for (int v = 0; v < count && found == nullptr; ++v)
    if (key == table[v].key) found = &table[v];
  if (found == nullptr) found = added_variant(f.op, cuda, key, build, why);
  // both kinds live as long as the process, so the slot may keep pointing at it
  if (found != nullptr && slot >= 0) f.resolved[cuda][slot].store(found, std::memory_order_release);
  return found;
}

// as Python spells it, for messages
inline std::string torch_name(at::ScalarType t) {
  if (const char* name = dtype_name(t)) return std::string("torch.") + name;
  switch (t) {
    case at::kLong: return "torch.int64";
    case at::kInt: return "torch.int32";
    case at::kBool: return "torch.bool";
    default: return std::string("torch.") + c10::toString(t);
  }
}

inline at::ScalarType compute_dtype(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t;
}

// An index or count as text, without iostreams: GraphCheck builds its messages for CUDA tensors before
// any check fails, and a stream formats numbers through std::locale, which one process may hold twice
// (setup.py: check_one_libstdcxx)
inline std::string str(int64_t value) { return std::to_string(value); }

// The position of the first of n indices outside [0, bound), or -1. A branch-free parallel pass
// (memory speed) finds whether there is one; only then a second pass names it.
template <typename index_t>
int64_t first_outside(const index_t* p, int64_t n, int64_t bound) {
  const auto span = static_cast<uint64_t>(bound);  // negatives wrap high
  const bool outside = at::parallel_reduce(
      0, n, 1 << 16, false,
      [&](int64_t begin, int64_t end, bool found) {
        bool any = false;
        for (int64_t k = begin; k < end; ++k) any |= static_cast<uint64_t>(p[k]) >= span;
        return found || any;
      },
      [](bool a, bool b) { return a || b; });
  if (!outside) return -1;
  return std::find_if(p, p + n, [&](index_t v) { return static_cast<uint64_t>(v) >= span; }) - p;
}

// Every index a kernel reads must be in range: a wrong graph array raises instead of reading
// outside the tensors. On the CPU this is one parallel pass; on a GPU, asynchronous device
// asserts (as torch's own index ops), so the host never waits.
class GraphCheck {
 public:
  GraphCheck(const char* op, at::TensorList graph) : op_(op), graph_(graph) {}

  // indices in [0, hi)
  void in_range(int slot, int64_t hi) const {
    const at::Tensor& t = graph_[slot];
    if (t.numel() == 0) return;
    if (t.is_cpu()) {
      AT_DISPATCH_INDEX_TYPES(t.scalar_type(), "in_range", [&] {
        const index_t* p = t.const_data_ptr<index_t>();
        const int64_t bad = first_outside(p, t.numel(), hi);
        TORCH_CHECK_VALUE(bad < 0, op_, ": graph[", slot, "] (", kNames[slot], ") holds ", p[bad], " at position ",
                          bad, ", outside [0, ", hi, "); ", kFix);
      });
    } else {
      at::_assert_async(at::logical_and(t >= 0, t < hi).all(),
                        std::string(op_) + ": graph[" + str(slot) + "] (" + kNames[slot] + ") holds indices outside [0, " +
                            str(hi) + "); " + kFix);
    }
  }

  // indptr[0] == 0, non-decreasing, indptr[-1] == `last` (a graph may list fewer edges than its arrays hold)
  void row_pointers(int slot, int64_t max_edges) const {
    const at::Tensor& t = graph_[slot];
    if (t.is_cpu()) {
      AT_DISPATCH_INDEX_TYPES(t.scalar_type(), "row_pointers", [&] {
        const index_t* p = t.const_data_ptr<index_t>();
        const int64_t n = t.numel();
        auto bad = at::parallel_reduce(
            1, n, 1 << 16, int64_t(-1),
            [&](int64_t begin, int64_t end, int64_t found) {
              for (int64_t k = begin; k < end && found < 0; ++k)
                if (p[k] < p[k - 1]) found = k;
              return found;
            },
            [](int64_t a, int64_t b) { return a >= 0 ? a : b; });
        TORCH_CHECK_VALUE(p[0] == 0 && bad < 0 && p[n - 1] <= max_edges, op_, ": graph[", slot, "] (",
                          kNames[slot], ") must start at 0, never decrease and end at most at the number of edges ",
                          max_edges, "; it starts at ", p[0], bad < 0 ? "" : ", decreases at position " + str(bad),
                          " and ends at ", p[n - 1], "; ", kFix);
      });
    } else {
      std::string message = std::string(op_) + ": graph[" + str(slot) + "] (" + kNames[slot] +
                            ") must start at 0, never decrease and end at most at the number of edges; " + kFix;
      at::_assert_async(t[0] == 0, message);
      at::_assert_async(t[-1] <= max_edges, message);
      if (t.numel() > 1) at::_assert_async((t.slice(0, 1) >= t.slice(0, 0, -1)).all(), message);
    }
  }

  void same_last(int a, int b) const {
    const at::Tensor &x = graph_[a], &y = graph_[b];
    std::string message = std::string(op_) + ": the two layouts (graph[" + str(a) + "] and graph[" + str(b) +
                          "]) must list the same number of edges; " + kFix;
    if (x.is_cpu()) {
      AT_DISPATCH_INDEX_TYPES(x.scalar_type(), "same_last", [&] {  // one dtype: check_graph_arrays
        TORCH_CHECK_VALUE(x.const_data_ptr<index_t>()[x.numel() - 1] == y.const_data_ptr<index_t>()[y.numel() - 1],
                          message);
      });
    } else {
      at::_assert_async(x[-1] == y[-1], message);
    }
  }

  static constexpr const char* kNames[kGraphSlots] = {"in_indptr", "in_src", "in_eid", "out_indptr",
                                                       "out_dst", "out_eid", "dst_order", "src_order"};
  static constexpr const char* kFix = "pass the arrays of a seastar_layers.Graph (graph.tensors())";

 private:
  const char* op_;
  at::TensorList graph_;
};

// The graphs whose arrays passed GraphCheck, so that a training loop's calls on one graph (each
// forward, its backward, every epoch) check its arrays once, not one pass over them per call (a pass
// costs a large share of a sum's kernel). An entry names each
// array by its TensorImpl, held weakly (so a freed array's address is never mistaken for a new
// one's), its data pointer, size and version counter: an in-place torch op on an array bumps its
// version, and the next call checks it again. Writes behind torch's back (through .numpy() or
// .data) are not seen, as torch's own sparse tensors do not recheck their indices. Inference
// tensors have no version counter and are checked on every call.
class CheckedGraphs {
 public:
  static bool contains(at::TensorList graph) {
    auto& self = instance();
    std::lock_guard<std::mutex> lock(self.mutex_);
    for (auto it = self.entries_.begin(); it != self.entries_.end(); ++it) {
      if (!it->names(graph)) continue;
      self.entries_.splice(self.entries_.begin(), self.entries_, it);  // most recently used first
      return true;
    }
    return false;
  }

  static void add(at::TensorList graph) {
    for (const at::Tensor& t : graph)
      if (t.is_inference()) return;
    auto& self = instance();
    std::lock_guard<std::mutex> lock(self.mutex_);
    self.entries_.emplace_front(graph);
    if (self.entries_.size() > kCapacity) self.entries_.pop_back();
  }

 private:
  static constexpr size_t kCapacity = 16;

  struct Array {
    explicit Array(const at::Tensor& t)
        : impl(t.getIntrusivePtr()), data(t.const_data_ptr()), numel(t.numel()), version(t._version()) {}
    bool names(const at::Tensor& t) const {
      // the same TensorImpl: not an inference tensor either, as add() takes none
      return impl._unsafe_get_target() == t.unsafeGetTensorImpl() && !impl.expired() && t.const_data_ptr() == data &&
             t.numel() == numel && t._version() == version;
    }
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> impl;
    const void* data;
    int64_t numel, version;
  };

  struct Entry {
    explicit Entry(at::TensorList graph) : arrays(graph.begin(), graph.end()) {}
    bool names(at::TensorList graph) const {
      if (graph.size() != arrays.size()) return false;
      for (size_t k = 0; k < arrays.size(); ++k)
        if (!arrays[k].names(graph[k])) return false;
      return true;
    }
    std::vector<Array> arrays;
  };

  static CheckedGraphs& instance() {
    static CheckedGraphs graphs;
    return graphs;
  }

  std::mutex mutex_;
  std::list<Entry> entries_;
};

// (source vertices, destination vertices, edges, bytes per index) of a graph's arrays (Graph.tensors()),
// after checking everything a kernel relies on: their number, dtype, shape and device, and (once per
// graph, CheckedGraphs) every index in range. `op` names the caller in the messages.
using GraphSizes = std::array<int64_t, 4>;

inline GraphSizes check_graph_arrays(const char* op, at::TensorList graph) {
  GraphSizes sizes{};
  TORCH_CHECK_VALUE(graph.size() == kGraphArrays || graph.size() == kGraphSlots, op, ": 'graph' must hold the ",
                    kGraphArrays, " CSR arrays of a seastar_layers.Graph, or ", kGraphSlots,
                    " with its row orders (graph.tensors()); got ", graph.size(), " tensors");
  for (size_t k = 0; k < graph.size(); ++k) {
    const at::Tensor& t = graph[k];
    TORCH_CHECK_VALUE(t.defined(), op, ": graph[", k, "] (", GraphCheck::kNames[k], ") is undefined");
    TORCH_CHECK_TYPE(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt, op, ": graph[", k, "] (",
                     GraphCheck::kNames[k], ") must hold int32 or int64 indices, got ", torch_name(t.scalar_type()),
                     "; ", GraphCheck::kFix);
    TORCH_CHECK_TYPE(t.scalar_type() == graph[0].scalar_type(), op, ": graph[", k, "] (", GraphCheck::kNames[k],
                     ") holds ", torch_name(t.scalar_type()), " indices but graph[0] ",
                     torch_name(graph[0].scalar_type()), "; the arrays must share one index dtype; ",
                     GraphCheck::kFix);
    TORCH_CHECK_VALUE(t.dim() == 1 && t.is_contiguous(), op, ": graph[", k, "] (", GraphCheck::kNames[k],
                      ") must be a contiguous 1-d tensor, got shape ", t.sizes());
    TORCH_CHECK_VALUE(t.device() == graph[0].device(), op, ": graph[", k, "] (", GraphCheck::kNames[k], ") is on ",
                      t.device(), " but graph[0] is on ", graph[0].device(), "; move the graph to one device");
  }
  TORCH_CHECK_VALUE(graph[0].numel() >= 1 && graph[3].numel() >= 1, op,
                    ": graph[0] and graph[3] (the row pointers) need at least one entry");
  sizes[0] = graph[3].numel() - 1;  // source vertices
  sizes[1] = graph[0].numel() - 1;  // destination vertices
  sizes[2] = graph[1].numel();      // edges
  sizes[3] = graph[0].element_size();
  for (int k : {2, 4, 5})
    TORCH_CHECK_VALUE(graph[k].numel() == sizes[2], op, ": graph[", k, "] (", GraphCheck::kNames[k],
                      ") must have one entry per edge (", sizes[2], ", the length of graph[1]), got ",
                      graph[k].numel());
  if (graph.size() == kGraphSlots) {
    TORCH_CHECK_VALUE(graph[6].numel() == sizes[1] && graph[7].numel() == sizes[0], op,
                      ": graph[6] and graph[7] must order the ", sizes[1], " destination and ", sizes[0],
                      " source rows, got ", graph[6].numel(), " and ", graph[7].numel(), " entries");
  }
  if (CheckedGraphs::contains(graph)) return sizes;
  GraphCheck check(op, graph);
  check.row_pointers(0, sizes[2]);
  check.row_pointers(3, sizes[2]);
  check.same_last(0, 3);
  check.in_range(1, sizes[0]);
  check.in_range(2, sizes[2]);
  check.in_range(4, sizes[1]);
  check.in_range(5, sizes[2]);
  if (graph.size() == kGraphSlots) {
    check.in_range(6, sizes[1]);
    check.in_range(7, sizes[0]);
  }
  CheckedGraphs::add(graph);
  return sizes;
}

// The family of the op named `op` ("seastar_layers::<name>") among those the extension was built with, or null
// (csrc/generated/registration.cpp).
const Family* family_named(const char* op);

// One call of an op: its checked graph and arguments, the variant they select, and running it.
class Call {
 public:
  Call(const Family& family, at::TensorList graph, Arguments args, Switches switches)
      : Call(family, graph, check_graph_arrays(family.op, graph), std::move(args), std::move(switches)) {}

  // On a graph already checked (check_graph_arrays gave its sizes): a composite op's call (layer_ops.cpp), which
  // records the autograd node itself.
  Call(const Family& family, at::TensorList graph, const GraphSizes& sizes, Arguments args, Switches switches)
      : f_(family), graph_(graph), args_(std::move(args)), switches_(std::move(switches)) {
    std::copy(sizes.begin(), sizes.end(), sizes_);
    check_arguments();
    select_variant();
    bind_dims(variant_->forward);
    bind_dims(variant_->backward);
  }

  std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>> forward() {
    std::vector<at::Tensor> results(variant_->num_results), saved(variant_->num_saved);
    std::vector<at::Tensor> buffers = run(variant_->forward, {}, {});
    for (int k = 0; k < variant_->forward.num_buffers; ++k) {
      const Buffer& b = variant_->forward.buffers[k];
      if (b.from == From::kResult) results[b.index] = buffers[k];
      if (b.from == From::kSavedOut) saved[b.index] = buffers[k];
    }
    return {std::move(results), std::move(saved)};
  }

  // One gradient per argument given, in schema order.
  std::vector<at::Tensor> backward(at::TensorList saved, at::TensorList grads) {
    TORCH_CHECK_VALUE(variant_->backward.run != nullptr, f_.op, "_backward: the variant ", variant_->key,
                      " computes no backward (its forward is for calls autograd does not record); pass "
                      "for_backward=True, as the op's autograd kernel does where it records");
    TORCH_CHECK_VALUE(static_cast<int>(saved.size()) == variant_->num_saved, f_.op, "_backward: 'saved' must hold the ",
                      variant_->num_saved, " tensors the forward returned second, got ", saved.size());
    TORCH_CHECK_VALUE(static_cast<int>(grads.size()) == variant_->num_results, f_.op, "_backward: 'grads' must hold ",
                      variant_->num_results, " gradients (one per result), got ", grads.size());
    std::vector<at::Tensor> buffers = run(variant_->backward, saved, grads);
    std::vector<at::Tensor> gradients(f_.num_arguments);
    for (int k = 0; k < variant_->backward.num_buffers; ++k) {
      const Buffer& b = variant_->backward.buffers[k];
      if (b.from != From::kGradient) continue;
      const at::Tensor& arg = *args_[b.index];
      // a parameter's gradient arrives as per-row partial sums (one buffer per kind of row)
      at::Tensor part = f_.is_feature[b.index] ? buffers[k] : buffers[k].sum(0).reshape(arg.sizes()).to(arg.dtype());
      gradients[b.index] = gradients[b.index].defined() ? gradients[b.index] + part : part;
    }
    std::vector<at::Tensor> out;
    for (int i = 0; i < f_.num_arguments; ++i)
      if (args_[i] != nullptr) out.push_back(gradients[i].defined() ? gradients[i] : at::zeros_like(*args_[i]));
    return out;
  }

 private:
  void check_arguments() {
    TORCH_CHECK_VALUE(static_cast<int>(args_.size()) == f_.num_arguments &&
                          static_cast<int>(switches_.size()) == f_.num_switches,
                      "internal: ", f_.op, " got ", args_.size(), " tensors and ", switches_.size(), " switches");
    const at::Tensor* first = nullptr;
    for (int i = 0; i < f_.num_arguments; ++i) {
      const at::Tensor* t = args_[i];
      if (t == nullptr) continue;
      const char* name = f_.arguments[i];
      TORCH_CHECK_VALUE(t->defined(), f_.op, ": '", name, "' is an undefined tensor");
      TORCH_CHECK_VALUE(t->device() == graph_[0].device(), f_.op, ": '", name, "' is on ", t->device(),
                        " but the graph is on ", graph_[0].device(), "; move them to one device");
      if (!f_.is_feature[i]) continue;
      TORCH_CHECK_VALUE(t->dim() >= 1, f_.op, ": '", name, "' must have one row per vertex or edge, got a 0-d tensor");
      if (first == nullptr) {
        first = t;
        first_name_ = name;
      }
      TORCH_CHECK_TYPE(t->scalar_type() == first->scalar_type(), f_.op, ": all features must share one dtype: '",
                       first_name_, "' is ", torch_name(first->scalar_type()), ", '", name, "' is ",
                       torch_name(t->scalar_type()));
    }
    dtype_ = first->scalar_type();
  }

  void select_variant() {
    const bool cuda = graph_[0].is_cuda();
    TORCH_CHECK_VALUE(graph_[0].is_cpu() || cuda, f_.op, " runs on CPU and CUDA tensors, not on ", graph_[0].device());
    TORCH_CHECK_TYPE(dtype_name(dtype_) != nullptr, f_.op, ": no kernel for '", first_name_, "' of dtype ",
                     torch_name(dtype_), "; convert the features to float32, float64, float16 or bfloat16");
    std::string why;
    variant_ = find_variant(f_, cuda, dtype_, args_, switches_, /*build=*/true, &why);
    TORCH_CHECK(variant_ != nullptr, f_.op, ": seastar_layers._C holds no ", cuda ? "CUDA" : "CPU", " kernel for ",
                variant_key(f_, dtype_, args_, switches_), " and could not compile it on first use: ", why);
    dims_.assign(variant_->num_dims, -1);
    dim_sources_.assign(variant_->num_dims, "");
  }

  // The declared shape of a feature's buffer, as "(rows, heads, 1)" or per row "(heads, 1)", for messages.
  std::string declared(const Buffer& b, bool with_rows) const {
    std::vector<std::string> sizes;
    if (with_rows) sizes.push_back("rows");
    for (int d = 0; d < b.rank; ++d)
      sizes.push_back(b.shape[d] >= 0 ? str(b.shape[d]) : std::string(variant_->dims[-1 - b.shape[d]]));
    std::string out = "(";
    for (size_t d = 0; d < sizes.size(); ++d) out += (d ? ", " : "") + sizes[d];
    return out + (sizes.size() == 1 ? ",)" : ")");
  }

  // The run-time sizes from the features the program reads: each declared size takes its value from
  // the first feature that has it, and every other feature must agree.
  void bind_dims(const Program& program) {
    for (int k = 0; k < program.num_buffers; ++k) {
      const Buffer& b = program.buffers[k];
      if (b.from != From::kArgument || !f_.is_feature[b.index]) continue;
      const at::Tensor& t = *args_[b.index];
      const char* name = f_.arguments[b.index];
      TORCH_CHECK_VALUE(t.dim() == b.rank + 1, f_.op, ": '", name, "' must have shape ", declared(b, true),
                        ", one row per vertex or edge; got shape ", t.sizes());
      for (int d = 0; d < b.rank; ++d) {
        const int64_t got = t.size(d + 1);
        if (b.shape[d] >= 0) {
          TORCH_CHECK_VALUE(got == b.shape[d], f_.op, ": '", name, "' must have per-row shape ", declared(b, false),
                            ", got ", t.sizes().slice(1));
          continue;
        }
        const int s = -1 - b.shape[d];
        if (dims_[s] < 0) {
          dims_[s] = got;
          dim_sources_[s] = name;
        }
        TORCH_CHECK_VALUE(dims_[s] == got, f_.op, ": '", name, "' has ", variant_->dims[s], " = ", got, " (axis ",
                          d + 1, " of shape ", t.sizes(), ") but '", dim_sources_[s], "' has ", variant_->dims[s],
                          " = ", dims_[s], "; they must agree");
      }
    }
  }

  int64_t rows(Rows r) const {
    switch (r) {
      case Rows::kSrc: return sizes_[0];
      case Rows::kDst: return sizes_[1];
      case Rows::kEdge: return sizes_[2];
      default: return -1;
    }
  }

  using Shape = c10::SmallVector<int64_t, kMaxRank + 1>;

  Shape shape_of(const Buffer& b) const {
    Shape shape;
    if (b.rows != Rows::kParam) shape.push_back(rows(b.rows));
    for (int d = 0; d < b.rank; ++d) shape.push_back(b.shape[d] >= 0 ? b.shape[d] : dims_[-1 - b.shape[d]]);
    return shape;
  }

  // An argument as the buffer `b`: its rows (bind_dims checked its other sizes) and, for a
  // parameter, its dtype and shape.
  void check_argument(const Buffer& b) const {
    static const char* kRowNames[] = {"source vertex", "destination vertex", "edge"};
    const at::Tensor& t = *args_[b.index];
    const char* name = f_.arguments[b.index];
    // here, not in check_arguments: an argument the backward does not read reaches it as a stride-0 stand-in
    TORCH_CHECK_VALUE(t.is_contiguous(), f_.op, ": '", name, "' must be contiguous; pass ", name, ".contiguous()");
    const Shape want = shape_of(b);
    if (b.rows != Rows::kParam) {
      TORCH_CHECK_VALUE(t.size(0) == want[0], f_.op, ": '", name, "' must have one row per ",
                        kRowNames[static_cast<int>(b.rows)], " of the graph (", want[0], "), got ", t.size(0));
      return;
    }
    const at::ScalarType dtype = b.compute_type ? compute_dtype(dtype_) : dtype_;
    TORCH_CHECK_TYPE(t.scalar_type() == dtype, f_.op, ": parameter '", name, "' must be ", torch_name(dtype),
                     " (the features are ", torch_name(dtype_), "), got ", torch_name(t.scalar_type()));
    TORCH_CHECK_VALUE(t.sizes() == at::IntArrayRef(want), f_.op, ": parameter '", name, "' must have shape ",
                      at::IntArrayRef(want), ", got ", t.sizes());
  }

  std::vector<at::Tensor> run(const Program& program, at::TensorList saved, at::TensorList grads) {
    const at::Device device = graph_[0].device();
    c10::DeviceGuard guard(device);
    std::vector<at::Tensor> buffers;
    buffers.reserve(program.num_buffers);
    for (int k = 0; k < program.num_buffers; ++k) {
      const Buffer& b = program.buffers[k];
      const at::TensorOptions options =
          at::TensorOptions().device(device).dtype(b.compute_type ? compute_dtype(dtype_) : dtype_);
      switch (b.from) {
        case From::kArgument:
          check_argument(b);
          buffers.push_back(*args_[b.index]);
          break;
        case From::kSeed: {
          const at::Tensor* seed = args_[b.index];
          TORCH_CHECK_VALUE(seed != nullptr, f_.op, ": this variant draws random numbers and needs 'seed', a 0-d int64 "
                            "tensor (seastar_layers draws one from torch's generator per call)");
          TORCH_CHECK_TYPE(seed->scalar_type() == at::kLong && seed->dim() == 0, f_.op,
                           ": 'seed' must be a 0-d int64 tensor, got ", torch_name(seed->scalar_type()), " of shape ",
                           seed->sizes());
          buffers.push_back(*seed);
          break;
        }
        case From::kDegree:
          buffers.push_back(in_degrees(c10::typeMetaToScalarType(options.dtype())));
          break;
        case From::kSaved:
          buffers.push_back(checked_input(saved[b.index], b, "saved", b.index));
          break;
        case From::kAdjoint:
          buffers.push_back(checked_input(grads[b.index], b, "grads", b.index));
          break;
        default:
          // edge rows the graph does not list are never visited: their values are zero
          if (b.filled)
            buffers.push_back(at::full(shape_of(b), b.fill, options));
          else if (b.rows == Rows::kEdge)
            buffers.push_back(at::zeros(shape_of(b), options));
          else
            buffers.push_back(at::empty(shape_of(b), options));
      }
    }
    const void* graph_pointers[kGraphSlots] = {};
    for (size_t k = 0; k < graph_.size(); ++k) graph_pointers[k] = graph_[k].const_data_ptr();
    c10::SmallVector<void*, 24> pointers(buffers.size() + 1);
    c10::SmallVector<int64_t, 24> numels(buffers.size() + 1);
    for (size_t k = 0; k < buffers.size(); ++k) {
      pointers[k] = buffers[k].data_ptr();
      numels[k] = buffers[k].numel();
    }
    c10::SmallVector<int64_t, 8> dims(dims_.begin(), dims_.end());
    dims.push_back(0);
    const int rc = program.run(sizes_, dims.data(), graph_pointers, pointers.data(), numels.data(),
                               threads(numels), stream(device));
    TORCH_CHECK(rc <= 0, "internal: ", f_.op, "'s kernel entry refused buffer ", rc - 1, " with ",
                numels[std::max(rc - 1, 0)], " elements");
    TORCH_CHECK_WITH(OutOfMemoryError, rc != -1, f_.op, " kernel failed: ", program.last_error());
    TORCH_CHECK(rc == 0, f_.op, " kernel failed: ", program.last_error());
    return buffers;
  }

  // Every destination's in-degree (graph[0]'s row lengths) as `dtype`. On the CPU in one pass: the
  // four ATen ops (two slices, a difference, a cast) cost more than a small graph's kernel.
  at::Tensor in_degrees(at::ScalarType dtype) const {
    const at::Tensor& indptr = graph_[0];
    if (!indptr.is_cpu()) return (indptr.slice(0, 1) - indptr.slice(0, 0, -1)).to(dtype);
    const int64_t rows = indptr.numel() - 1;
    at::Tensor degrees = at::empty({rows}, indptr.options().dtype(dtype));
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "in_degrees", [&] {
      AT_DISPATCH_INDEX_TYPES(indptr.scalar_type(), "in_degrees", [&] {
        const index_t* p = indptr.const_data_ptr<index_t>();
        scalar_t* d = degrees.mutable_data_ptr<scalar_t>();
        at::parallel_for(0, rows, 1 << 16, [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) d[k] = c10::convert<scalar_t>(p[k + 1] - p[k]);
        });
      });
    });
    return degrees;
  }

  at::Tensor checked_input(const at::Tensor& t, const Buffer& b, const char* list, int index) const {
    const Shape want = shape_of(b);
    TORCH_CHECK_VALUE(t.defined(), f_.op, "_backward: '", list, "'[", index, "] is an undefined tensor");
    TORCH_CHECK_VALUE(t.sizes() == at::IntArrayRef(want), f_.op, "_backward: '", list, "'[", index,
                      "] must have shape ", at::IntArrayRef(want), ", got ", t.sizes());
    const at::ScalarType dtype = b.compute_type ? compute_dtype(dtype_) : dtype_;
    TORCH_CHECK_TYPE(t.scalar_type() == dtype, f_.op, "_backward: '", list, "'[", index, "] must be ",
                     torch_name(dtype), ", got ", torch_name(t.scalar_type()));
    TORCH_CHECK_VALUE(t.device() == graph_[0].device(), f_.op, "_backward: '", list, "'[", index, "] is on ",
                      t.device(), " but the graph is on ", graph_[0].device());
    return t.contiguous();
  }

  // Threads for a CPU kernel: one where the work is less than torch gives a thread (its grain
  // size): a parallel region costs more than a small graph's kernel, and on a busy machine far more
  // (as runtime/executor.py: threads_for).
  int threads(at::ArrayRef<int64_t> numels) const {
    int64_t work = sizes_[2];
    for (int64_t n : numels) work += n;
    return work < kSerialWork ? 1 : at::get_num_threads();
  }

  static void* stream(const at::Device& device) {
#ifdef SEASTAR_WITH_CUDA
    if (device.is_cuda()) return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#endif
    return nullptr;
  }

  const Family& f_;
  at::TensorList graph_;
  Arguments args_;
  Switches switches_;
  int64_t sizes_[4] = {};
  at::ScalarType dtype_ = at::kFloat;
  const char* first_name_ = "";
  std::vector<int64_t> dims_;                // the run-time sizes s0, s1, ...
  std::vector<const char*> dim_sources_;     // the argument each was bound from
  const Variant* variant_ = nullptr;
};

// -- autograd ---------------------------------------------------------------------------------------
// The ops' Autograd kernel, in C++ rather than torch.library.register_autograd: the Python one
// flattens the arguments and runs setup_context and backward in Python, which cost more than a
// small graph's kernels. It runs the op below autograd (through the dispatcher, so every backend's
// kernel, the Python fake and the JIT on CUDA included, is reached as before) and makes the
// results the outputs of one node whose backward calls <op>_backward. Under torch.compile,
// AOTAutograd traces through it as through any C++ autograd kernel.

using OptionalTensors = std::vector<std::optional<at::Tensor>>;
using OpResults = std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>>;
// The op and its backward called through the dispatcher with the arguments in schema order
// (generated per family: their typed signatures differ).
using ForwardCall = OpResults (*)(at::TensorList graph, const OptionalTensors& args, const Switches& switches);
using BackwardCall = std::vector<at::Tensor> (*)(at::TensorList graph, const OptionalTensors& args,
                                                 const Switches& switches, at::TensorList saved, at::TensorList grads);

// Autograd nodes are held by std::shared_ptr up to torch 2.12 and by c10::intrusive_ptr after.
template <typename N, typename... Args>
auto make_node(Args&&... args) {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, N>)
    return c10::make_intrusive<N>(std::forward<Args>(args)...);
  else
    return std::make_shared<N>(std::forward<Args>(args)...);
}

// The gradients a node returns have no gradient of their own: a backward through them (create_graph=True) raises,
// naming the op, instead of silently treating them as constants.
inline void refuse_double_backward(const std::string& op, const std::vector<at::Tensor>& gradients,
                                   const torch::autograd::variable_list& grads, const std::vector<at::Tensor>& inputs) {
  if (!torch::autograd::compute_requires_grad(grads, inputs)) return;
  auto error = make_node<torch::autograd::Error>(
      op + " has no double backward: its gradients cannot be differentiated again (create_graph=True through a "
      "seastar_layers layer); compute higher-order gradients with the stock PyG or DGL layer",
      torch::autograd::collect_next_edges(grads, inputs));
  for (const at::Tensor& g : gradients)
    if (g.defined() && torch::autograd::isDifferentiableType(g.scalar_type())) torch::autograd::set_history(g, error);
}

class OpBackward : public torch::autograd::Node {
 public:
  // read[i]: whether the backward reads argument i. One it does not read is kept as a stride-0 stand-in of its
  // shape and dtype, which is all the backward needs of it (a sum's backward reads none of its features: APPNP's
  // K steps would otherwise keep K feature-sized tensors until the backward).
  OpBackward(const Family& family, BackwardCall backward, at::TensorList graph, const OptionalTensors& args,
             Switches switches, const std::vector<at::Tensor>& saved, const std::vector<bool>& read)
      : family_(family), backward_(backward), switches_(std::move(switches)) {
    for (const at::Tensor& t : graph) graph_.emplace_back(t, false);
    for (size_t i = 0; i < args.size(); ++i) {
      given_.push_back(args[i].has_value());
      if (!args[i].has_value()) continue;
      const at::Tensor& t = *args[i];
      args_.emplace_back(read[i] ? t : at::empty({}, t.options()).expand_symint(t.sym_sizes()), false);
    }
    for (const at::Tensor& t : saved) saved_.emplace_back(t, false);
  }

  std::string name() const override { return std::string(family_.op) + "_backward"; }

  // One gradient per argument given (the next edges, in schema order); none for those that take none (the seed).
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    std::vector<at::Tensor> graph = unpack(graph_), given = unpack(args_), saved = unpack(saved_);
    OptionalTensors args;
    auto next = given.begin();
    for (bool g : given_) args.push_back(g ? std::optional<at::Tensor>(*next++) : std::nullopt);
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) grads[i] = input_metadata(i).zeros_like();  // a result the loss does not use
    std::vector<at::Tensor> gradients;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      gradients = backward_(graph, args, switches_, saved, grads);
    }
    for (size_t i = 0; i < gradients.size(); ++i)
      if (!should_compute_output(i)) gradients[i] = at::Tensor();
    if (at::GradMode::is_enabled()) refuse_double_backward(family_.op, gradients, grads, given);  // create_graph
    return gradients;
  }

 protected:
  // after a backward without retain_graph: a second one raises torch's "backward through the graph a second time"
  void release_variables() override {
    for (auto* list : {&graph_, &args_, &saved_})
      for (auto& v : *list) v.reset_data();
  }

 private:
  static std::vector<at::Tensor> unpack(const std::vector<torch::autograd::SavedVariable>& vars) {
    std::vector<at::Tensor> out;
    out.reserve(vars.size());
    for (const auto& v : vars) out.push_back(v.unpack());
    return out;
  }

  const Family& family_;
  BackwardCall backward_;
  Switches switches_;
  std::vector<bool> given_;
  std::vector<torch::autograd::SavedVariable> graph_, args_, saved_;
};

// Which arguments the backward of the variant these arguments select reads (all, where no variant is found:
// the forward has run, so another kernel served it, whose backward may read any).
inline std::vector<bool> read_by_backward(const Family& family, at::TensorList graph, const OptionalTensors& args,
                                          const Switches& switches) {
  Arguments given_args;
  std::optional<at::ScalarType> dtype;
  for (int i = 0; i < family.num_arguments; ++i) {
    given_args.push_back(given(args[i]));
    if (args[i].has_value() && family.is_feature[i] && !dtype.has_value()) dtype = args[i]->scalar_type();
  }
  const Variant* variant = dtype.has_value() ? find_variant(family, graph[0].is_cuda(), *dtype, given_args, switches)
                                             : nullptr;
  std::vector<bool> read(family.num_arguments, variant == nullptr);
  if (variant == nullptr) return read;
  for (int k = 0; k < variant->backward.num_buffers; ++k) {
    const Buffer& b = variant->backward.buffers[k];
    if (b.from == From::kArgument || b.from == From::kSeed) read[b.index] = true;
  }
  return read;
}

// Forward-mode AD (torch.autograd.forward_ad) has no rule here: a dual argument's tangent would be dropped without a
// word, so the op refuses it, naming the argument.
inline void refuse_forward_ad(const Family& family, const OptionalTensors& args) {
  for (int i = 0; i < family.num_arguments; ++i)
    TORCH_CHECK_NOT_IMPLEMENTED(!args[i].has_value() || !args[i]->_fw_grad(/*level=*/0).defined(), family.op, ": '",
                                family.arguments[i], "' is a dual tensor (torch.autograd.forward_ad), and the op has "
                                "no forward-mode derivative; differentiate with backward() (reverse mode), or use the "
                                "stock PyG or DGL layer for forward-mode AD");
}

// A family with the switch for_backward has variants whose forward also computes what their backward
// would sweep the edges for (passes/precompute.py). This kernel knows whether it records a backward
// and turns the switch on where it does; a caller that calls <op>_backward itself passes it.
inline OpResults with_autograd(const Family& family, ForwardCall forward, BackwardCall backward, at::TensorList graph,
                               const OptionalTensors& args, Switches switches) {
  refuse_forward_ad(family, args);
  const bool recorded = torch::autograd::compute_requires_grad(args);
  if (recorded && family.for_backward >= 0) switches[family.for_backward] = true;
  OpResults out;
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    out = forward(graph, args, switches);
  }
  if (!recorded) return out;
  auto& [results, saved] = out;
  auto node = make_node<OpBackward>(family, backward, graph, args, switches, saved,
                                    read_by_backward(family, graph, args, switches));
  std::vector<at::Tensor> given;  // one edge per argument given: the backward returns a gradient for each
  for (const auto& t : args)
    if (t.has_value()) given.push_back(*t);
  node->set_next_edges(torch::autograd::collect_next_edges(given));
  for (at::Tensor& result : results) torch::autograd::set_history(result, node);
  return out;
}

}  // namespace seastar

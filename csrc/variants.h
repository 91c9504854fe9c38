// The kernel variants of seastar_layers._C's ops: what each kernel buffer is and the plain-C entries that run
// a variant. Torch-free, so that module.cpp (Python's side of the extension) shares it with the ops
// (seastar_ops.h): the variants the extension was built with are generated tables
// (csrc/generated/registration.cpp); any other is compiled on first use by the package's JIT and added
// here (built_variant).
#pragma once

#include <cstdint>
#include <string>

namespace seastar {

// sizes: (source vertices, destination vertices, edges, bytes per graph index: 4 or 8); graph: its arrays,
// all int32 or all int64 (graph.py: index_dtype)
using KernelEntry = int (*)(const int64_t* sizes, const int64_t* dims, const void* const* graph,
                            void* const* buffers, const int64_t* numels, int num_threads, void* stream);
using ErrorEntry = const char* (*)();

constexpr int kGraphArrays = 6;  // in-CSR (indptr, sources, edge ids), out-CSR (indptr, destinations, edge ids)
constexpr int kGraphSlots = 8;   // and the destination and source rows heaviest first (GPU kernels; optional)
constexpr int kMaxRank = 6;

enum class Rows : int8_t { kSrc, kDst, kEdge, kParam };
constexpr const char* kRowsNames[] = {"kSrc", "kDst", "kEdge", "kParam"};  // as the enumerators: add_variant reads them

// Where a kernel buffer comes from, or what it becomes.
enum class From : int8_t {
  kArgument,  // the op's argument `index` (a feature or a parameter)
  kDegree,    // the in-degree of every destination, from the graph
  kAdjoint,   // backward: the gradient arriving at result `index`
  kSaved,     // backward: the forward's saved value `index`
  kResult,    // forward: result `index` of the op
  kSavedOut,  // forward: saved value `index`, returned for the backward
  kGradient,  // backward: (part of) the gradient of argument `index`
  kTemp,      // passed between the kernels of one program
  kSeed,      // the op's argument `index`: the seed of the program's random draws (0-d int64)
};
constexpr const char* kFromNames[] = {"kArgument", "kDegree",   "kAdjoint", "kSaved", "kResult",
                                      "kSavedOut", "kGradient", "kTemp",    "kSeed"};

struct Buffer {
  From from;
  int index;
  Rows rows;
  int rank;
  int64_t shape[kMaxRank];  // each a size, or -1 - k for the run-time size s<k>
  bool compute_type;        // in the compute type (float for half features) rather than the features' dtype
  bool filled;              // a constant output the kernels do not write: `fill` everywhere
  double fill;
};

struct Program {
  KernelEntry run;
  ErrorEntry last_error;
  const Buffer* buffers;
  int num_buffers;
};

// One specialisation: its key is the features' dtype and the options given (base.py: variant_key).
struct Variant {
  const char* key;
  Program forward, backward;  // backward.run null: a forward no backward follows (the switch for_backward off)
  int num_results, num_saved;
  const char* const* dims;  // the declared names of the run-time sizes s0, s1, ...
  int num_dims;
};

// A variant the extension was not built with: compiled on first use by the package's JIT
// (runtime/library.py: build_variant, called through Python) and kept for the process. Null, with `why`,
// where it cannot be built (no compiler, SEASTAR_NO_JIT=1, no Python); `build` false only looks it up.
const Variant* added_variant(const char* op, bool cuda, const std::string& key, bool build, std::string* why);

}  // namespace seastar

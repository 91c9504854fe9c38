// seastar_layers._C: the layers' kernels, compiled at install time from the sources the compiler
// generates (csrc/generated/*.cpp, *.cu), and the torch ops that run them (csrc/generated/
// registration.cpp, registered with TORCH_LIBRARY when this library is loaded). This module object
// exists so that the extension installs and imports like any other, and holds what needs Python: the
// variants compiled after install (added_variant, add_variant) and the one helper the graph cache
// needs at memory speed (graph.py: _fingerprint).
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "variants.h"

namespace {

constexpr size_t kBlock = 4096;  // 32-bit words per block

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Weights {
  uint32_t word[kBlock];  // odd: a word's weight is invertible mod 2**64
  Weights() {
    for (size_t i = 0; i < kBlock; ++i) word[i] = static_cast<uint32_t>(splitmix64(i)) | 1u;
  }
};

// Sum of word * weight over one block, mod 2**64. A 32 x 32 -> 64-bit product is one SSE2
// instruction (pmuludq), so this vectorises on the baseline CPU the extension is built for; the
// AVX2 clone does four at a time, near torch's own sum's memory speed (docs/design.md: graphs).
#if defined(__x86_64__) && !defined(__AVX2__) && defined(__GNUC__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
uint64_t block_sum(const uint32_t* words, size_t n, const uint32_t* weights) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<uint64_t>(words[i]) * weights[i];
  return sum;
}

// A 64-bit hash of `length` bytes, read once, on `threads` threads (torch's: the caller passes
// torch.get_num_threads(), so torch.set_num_threads(1), as in a forked DataLoader worker, keeps this
// single-threaded too), without the GIL. Each 32-bit word is multiplied by an odd weight (by its place
// in its block), each block's sum by an odd 64-bit weight (by the block), all mod 2**64: changing any one
// word changes a block's sum by delta * odd, which is never 0 mod 2**64 for a delta below 2**32, so the
// hash changes; edits of several words cancel out only by chance. Trailing bytes make a last,
// zero-padded word.
uint64_t hash_bytes(const unsigned char* bytes, size_t length, int threads) {
  static const Weights weights;
  const size_t words = length / 4, blocks = (words + kBlock - 1) / kBlock;
  uint64_t hash = splitmix64(length);
  Py_BEGIN_ALLOW_THREADS
#pragma omp parallel for reduction(+ : hash) schedule(static) num_threads(threads) if (threads > 1 && blocks > 16)
  for (size_t b = 0; b < blocks; ++b) {
    const size_t first = b * kBlock, n = std::min(kBlock, words - first);
    const unsigned char* start = bytes + 4 * first;
    uint32_t copy[kBlock];  // a buffer need not be 4-byte aligned (a view at an odd offset)
    if (reinterpret_cast<uintptr_t>(start) % alignof(uint32_t) != 0) start = static_cast<unsigned char*>(
        std::memcpy(copy, start, 4 * n));
    hash += block_sum(reinterpret_cast<const uint32_t*>(start), n, weights.word) * (splitmix64(kBlock + b) | 1u);
  }
  Py_END_ALLOW_THREADS
  if (length % 4 != 0) {
    uint32_t last = 0;
    std::memcpy(&last, bytes + 4 * words, length % 4);
    hash += (static_cast<uint64_t>(last) + 1) * (splitmix64(~uint64_t{0}) | 1u);
  }
  return hash;
}

// fingerprint_memory(address, length, threads) -> int: hash_bytes of the `length` bytes at `address`, a
// contiguous tensor's data_ptr() and nbytes, which its caller keeps alive: on a small edge_index, a
// NumPy view for the buffer protocol cost more than the hash (graph.py: _fingerprint)
PyObject* fingerprint_memory(PyObject*, PyObject* args) {
  unsigned long long address = 0;
  Py_ssize_t length = 0;
  int threads = 1;
  if (!PyArg_ParseTuple(args, "Kni", &address, &length, &threads)) return nullptr;
  if (length < 0 || (address == 0 && length > 0)) {
    PyErr_SetString(PyExc_ValueError, "fingerprint_memory: a null address or a negative length");
    return nullptr;
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(static_cast<uintptr_t>(address));
  return PyLong_FromUnsignedLongLong(hash_bytes(bytes, static_cast<size_t>(length), threads));
}

// -- variants compiled after install --------------------------------------------------------------
// One variant's tables, owned here; `variant` points into them.
struct AddedVariant {
  std::string key;
  std::vector<seastar::Buffer> forward, backward;
  std::deque<std::string> dim_names;
  std::vector<const char*> dims;
  seastar::Variant variant;
};

std::mutex added_mutex;
std::map<std::string, std::unique_ptr<AddedVariant>> added;  // by op, device and key: never removed

std::string added_name(const char* op, bool cuda, const std::string& key) {
  return std::string(op) + (cuda ? "@cuda:" : "@cpu:") + key;
}

const seastar::Variant* find_added(const std::string& name) {
  std::lock_guard<std::mutex> lock(added_mutex);
  auto it = added.find(name);
  return it == added.end() ? nullptr : &it->second->variant;
}

// The Python exception being raised, as text, cleared.
std::string fetch_error() {
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  std::string text = "an unknown error";
  if (PyObject* str = value != nullptr ? PyObject_Str(value) : nullptr) {
    if (const char* utf8 = PyUnicode_AsUTF8(str)) text = utf8;
    Py_DECREF(str);
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return text;
}

// runtime/library.py: build_variant(op, cuda, key), which compiles the variant and calls add_variant
bool build_in_python(const char* op, bool cuda, const std::string& key, std::string* why) {
  if (!Py_IsInitialized()) {
    *why = "its kernels are compiled by the seastar_layers package, and this process runs no Python";
    return false;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  bool ok = false;
  if (PyObject* module = PyImport_ImportModule("seastar_layers.runtime.library")) {
    PyObject* result = PyObject_CallMethod(module, "build_variant", "sOs", op, cuda ? Py_True : Py_False, key.c_str());
    ok = result != nullptr;
    Py_XDECREF(result);
    Py_DECREF(module);
  }
  if (!ok) *why = fetch_error();
  PyGILState_Release(gil);
  return ok;
}

// One buffer from (from, index, rows, shape, compute_type, filled, fill), the enumerators by name.
bool parse_buffer(PyObject* item, seastar::Buffer* b) {
  const char *from = nullptr, *rows = nullptr;
  PyObject* shape = nullptr;
  int compute_type = 0, filled = 0;
  if (!PyArg_ParseTuple(item, "sisOppd", &from, &b->index, &rows, &shape, &compute_type, &filled, &b->fill))
    return false;
  auto find = [](const char* name, const auto& names) {
    for (size_t k = 0; k < std::size(names); ++k)
      if (std::strcmp(name, names[k]) == 0) return static_cast<int>(k);
    return -1;
  };
  const int f = find(from, seastar::kFromNames), r = find(rows, seastar::kRowsNames);
  const Py_ssize_t rank = PySequence_Check(shape) ? PySequence_Size(shape) : -1;
  if (f < 0 || r < 0 || rank < 0 || rank > seastar::kMaxRank) {
    PyErr_Format(PyExc_ValueError, "add_variant: a buffer with from=%s, rows=%s and a shape of rank %zd", from, rows,
                 rank);
    return false;
  }
  b->from = static_cast<seastar::From>(f);
  b->rows = static_cast<seastar::Rows>(r);
  b->rank = static_cast<int>(rank);
  b->compute_type = compute_type != 0;
  b->filled = filled != 0;
  for (Py_ssize_t d = 0; d < rank; ++d) {
    PyObject* size = PySequence_GetItem(shape, d);
    b->shape[d] = size != nullptr ? PyLong_AsLongLong(size) : -1;
    Py_XDECREF(size);
    if (PyErr_Occurred()) return false;
  }
  return true;
}

bool parse_buffers(PyObject* list, std::vector<seastar::Buffer>* out) {
  if (!PyList_Check(list)) {
    PyErr_SetString(PyExc_TypeError, "add_variant: buffers must be a list of tuples");
    return false;
  }
  out->resize(PyList_Size(list));
  for (Py_ssize_t k = 0; k < PyList_Size(list); ++k)
    if (!parse_buffer(PyList_GetItem(list, k), &(*out)[k])) return false;
  return true;
}

// add_variant(op, cuda, key, forward, backward, last_error, forward_buffers, backward_buffers, num_results,
// num_saved, dims): a compiled variant's entries (addresses of its plain-C functions, from the library the
// JIT loaded, which stays loaded) and tables, as torch_entry.py renders them for the built ones
PyObject* add_variant(PyObject*, PyObject* args) {
  const char *op = nullptr, *key = nullptr;
  int cuda = 0, num_results = 0, num_saved = 0;
  unsigned long long forward = 0, backward = 0, last_error = 0;
  PyObject *forward_buffers = nullptr, *backward_buffers = nullptr, *dims = nullptr;
  if (!PyArg_ParseTuple(args, "spsKKKOOiiO", &op, &cuda, &key, &forward, &backward, &last_error, &forward_buffers,
                        &backward_buffers, &num_results, &num_saved, &dims))
    return nullptr;
  if (forward == 0 || last_error == 0) {  // backward 0: a forward no backward follows (for_backward off)
    PyErr_SetString(PyExc_ValueError, "add_variant: a null forward or last_error entry point");
    return nullptr;
  }
  auto v = std::make_unique<AddedVariant>();
  v->key = key;
  if (!parse_buffers(forward_buffers, &v->forward) || !parse_buffers(backward_buffers, &v->backward)) return nullptr;
  if (!PyList_Check(dims)) {
    PyErr_SetString(PyExc_TypeError, "add_variant: dims must be a list of str");
    return nullptr;
  }
  for (Py_ssize_t k = 0; k < PyList_Size(dims); ++k) {
    const char* name = PyUnicode_AsUTF8(PyList_GetItem(dims, k));
    if (name == nullptr) return nullptr;
    v->dims.push_back(v->dim_names.emplace_back(name).c_str());
  }
  auto run = [](unsigned long long address) { return reinterpret_cast<seastar::KernelEntry>(address); };
  auto error = reinterpret_cast<seastar::ErrorEntry>(last_error);
  v->variant = {v->key.c_str(),
                {run(forward), error, v->forward.data(), static_cast<int>(v->forward.size())},
                {backward != 0 ? run(backward) : nullptr, backward != 0 ? error : nullptr, v->backward.data(),
                 static_cast<int>(v->backward.size())},
                num_results,
                num_saved,
                v->dims.data(),
                static_cast<int>(v->dims.size())};
  std::lock_guard<std::mutex> lock(added_mutex);
  added.emplace(added_name(op, cuda != 0, key), std::move(v));  // a second build of one variant keeps the first
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"add_variant", add_variant, METH_VARARGS,
     "add_variant(op, cuda, key, forward, backward, last_error, forward_buffers, backward_buffers, num_results, "
     "num_saved, dims): makes a variant compiled after install available to the op (runtime/library.py)."},
    {"fingerprint_memory", fingerprint_memory, METH_VARARGS,
     "fingerprint_memory(address, length, threads) -> int: a 64-bit hash of the length bytes at address, a "
     "contiguous tensor's data_ptr() and nbytes, at memory speed (graph.py)."},
    {nullptr, nullptr, 0, nullptr},
};

struct PyModuleDef seastar_module = {
    PyModuleDef_HEAD_INIT, "_C",
    "Prebuilt seastar_layers kernels and the torch.ops.seastar_layers ops that run them.", -1, methods,
};

}  // namespace

namespace seastar {

const Variant* added_variant(const char* op, bool cuda, const std::string& key, bool build, std::string* why) {
  const std::string name = added_name(op, cuda, key);
  if (const Variant* found = find_added(name)) return found;
  std::string reason;
  if (!build || !build_in_python(op, cuda, key, &reason)) {
    if (why != nullptr) *why = build ? reason : "not built";
    return nullptr;
  }
  if (const Variant* found = find_added(name)) return found;
  if (why != nullptr) *why = "internal: runtime/library.py: build_variant returned without adding it";
  return nullptr;
}

}  // namespace seastar

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&seastar_module); }

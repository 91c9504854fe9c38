// seastar_layers._C: the layers' kernels, compiled at install time from the sources the compiler
// generates (csrc/generated/*.cpp, *.cu), and the torch ops that run them (csrc/generated/
// registration.cpp, registered with TORCH_LIBRARY when this library is loaded). This module object
// exists so that the extension installs and imports like any other, and holds the one helper the
// graph cache needs at memory speed (graph.py: _fingerprint).
#include <Python.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

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
// AVX2 clone does four at a time: a (2, 14.3M) int64 edge_index (229 MB) hashes in 14 ms on 2
// threads instead of 19.5, where torch's sum reads it in 11 (an AVX-512 clone took 16).
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

PyMethodDef methods[] = {
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

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&seastar_module); }

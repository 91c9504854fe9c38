// seastar_layers::csr_layouts: both CSR layouts of an edge list, by a stable counting sort (written
// by hand, as layer_ops.cpp; the layers' kernel ops are generated: registration.cpp).
//
// graph.py builds a graph's layouts in eager mode on the CPU with it; traced and scripted models,
// and GPUs, build them with torch ops (graph.csr_layouts: a stable argsort, then searchsorted),
// which give the same arrays. The counting sort reads each edge twice per layout and allocates only
// its results: on 14.3M edges the argsort took seconds and several edge-sized temporaries. The
// self-loop slots PyG's layers append (nn/edges.py: with_self_loops) are appended here too, by
// count, so the edge list is never copied to append them, and with unlist_self_loops the edges that
// are loops are left out of the rows here, where Python would build a mask of three ATen ops
// (nn/edges.py: listed_with_self_loops; a tenth of a layer's call on a new small graph). With
// by_neighbour each row's edges are sorted by their other end (graph.py decides where: large graphs).
#include "seastar_ops.h"  // first_outside

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace seastar {
namespace {

// Indices of `name` outside [0, bound) raise, naming the first.
void check_indices(const at::Tensor& t, const char* name, int64_t bound) {
  const int64_t* p = t.const_data_ptr<int64_t>();
  const int64_t bad = first_outside(p, t.numel(), bound);
  TORCH_CHECK_VALUE(bad < 0, "seastar_layers::csr_layouts: '", name, "' holds ", bad < 0 ? 0 : p[bad], " at edge ", bad,
                    ", outside [0, ", bound, ")");
}

// A row's edges by neighbour, then by slot (a row is filled in slot order, so sorting (neighbour,
// position) keeps ties in it): a sweep that takes the neighbours in chunks whose rows fit the cache
// (codegen/cstyle.py: render_source_chunks) finds each row's edges into a chunk one after another.
// Rows already sorted (PyG's coalesced edge_index) are checked and left; the rest cost more than the
// fill: both layouts of the 1/8 Reddit-scale graph's 14.3M random-order edges in 0.35 s unsorted,
// 0.85 s sorted (2 threads).
template <typename index_t>
void sort_rows(const index_t* indptr, index_t* neighbours, index_t* eids, int64_t rows, int64_t neighbour_bound) {
  std::vector<uint64_t> keys;  // (neighbour, position in the row): one integer compare per step
  std::vector<index_t> ids;
  std::vector<std::pair<index_t, index_t>> pairs;  // where a neighbour needs more than 32 bits
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t begin = indptr[r], end = indptr[r + 1];
    if (std::is_sorted(neighbours + begin, neighbours + end)) continue;
    const int64_t degree = end - begin;
    if (degree <= 16) {  // insertion sort, stable
      for (int64_t j = begin + 1; j < end; ++j) {
        const index_t n = neighbours[j], e = eids[j];
        int64_t k = j;
        for (; k > begin && neighbours[k - 1] > n; --k) {
          neighbours[k] = neighbours[k - 1];
          eids[k] = eids[k - 1];
        }
        neighbours[k] = n;
        eids[k] = e;
      }
      continue;
    }
    if (neighbour_bound > (int64_t{1} << 32) || degree > (int64_t{1} << 32)) {
      pairs.clear();
      for (int64_t j = begin; j < end; ++j) pairs.emplace_back(neighbours[j], eids[j]);
      std::sort(pairs.begin(), pairs.end());  // eids rise along a row: ties stay in slot order
      for (int64_t j = begin; j < end; ++j) std::tie(neighbours[j], eids[j]) = pairs[j - begin];
      continue;
    }
    keys.resize(degree);
    ids.assign(eids + begin, eids + end);
    for (int64_t j = 0; j < degree; ++j) keys[j] = (uint64_t)neighbours[begin + j] << 32 | (uint64_t)j;
    std::sort(keys.begin(), keys.end());
    for (int64_t j = 0; j < degree; ++j) {
      neighbours[begin + j] = (index_t)(keys[j] >> 32);
      eids[begin + j] = ids[keys[j] & 0xffffffffu];
    }
  }
}

// One layout: row r holds the edge slots k with key r in slot order (by_neighbour: by (other end, k)),
// each as (other end, k): the
// edges k < num_edges (keys[k], others[k]), then `loops` self-loops num_edges + i = (i, i). Slots
// not listed (by `listed`, or as an edge that is a self-loop with unlist_self_loops) follow every
// row, in slot order, in no row. The arrays hold index_t (graph.py: index_dtype).
template <typename index_t>
void fill_layout(const int64_t* keys, const int64_t* others, const bool* listed, bool unlist_self_loops,
                 int64_t num_edges, int64_t loops, int64_t rows, int64_t other_rows, bool by_neighbour,
                 index_t* indptr, index_t* neighbours, index_t* eids) {
  const auto is_listed = [&](int64_t k) {
    return (listed == nullptr || listed[k]) && !(unlist_self_loops && k < num_edges && keys[k] == others[k]);
  };
  std::fill(indptr, indptr + rows + 1, index_t{0});
  for (int64_t k = 0; k < num_edges; ++k)
    if (is_listed(k)) ++indptr[keys[k] + 1];
  for (int64_t i = 0; i < loops; ++i)
    if (is_listed(num_edges + i)) ++indptr[i + 1];
  for (int64_t r = 0; r < rows; ++r) indptr[r + 1] += indptr[r];
  std::vector<int64_t> next(indptr, indptr + rows);
  int64_t unlisted = indptr[rows];
  for (int64_t k = 0; k < num_edges; ++k) {
    const int64_t slot = is_listed(k) ? next[keys[k]]++ : unlisted++;
    neighbours[slot] = others[k];
    eids[slot] = k;
  }
  for (int64_t i = 0; i < loops; ++i) {
    const int64_t slot = is_listed(num_edges + i) ? next[i]++ : unlisted++;
    neighbours[slot] = i;
    eids[slot] = num_edges + i;
  }
  if (by_neighbour) sort_rows(indptr, neighbours, eids, rows, other_rows);
}

std::vector<at::Tensor> csr_layouts(const at::Tensor& src, const at::Tensor& dst, int64_t num_src, int64_t num_dst,
                                    const std::optional<at::Tensor>& listed, int64_t loops,
                                    std::optional<at::ScalarType> dtype, bool unlist_self_loops, bool by_neighbour) {
  const at::ScalarType index_dtype = dtype.value_or(at::kLong);
  TORCH_CHECK_TYPE(index_dtype == at::kLong || index_dtype == at::kInt, "seastar_layers::csr_layouts: 'dtype' "
                   "must be torch.int32 or torch.int64, got ", torch_name(index_dtype));
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"src", src}, {"dst", dst}}) {
    TORCH_CHECK_TYPE(t.scalar_type() == at::kLong, "seastar_layers::csr_layouts: '", name,
                     "' must hold int64 indices, got ", t.scalar_type());
    TORCH_CHECK_VALUE(t.dim() == 1 && t.is_contiguous(), "seastar_layers::csr_layouts: '", name,
                      "' must be a contiguous 1-d tensor, got shape ", t.sizes());
  }
  TORCH_CHECK_VALUE(src.numel() == dst.numel(), "seastar_layers::csr_layouts: 'src' and 'dst' must list the same "
                    "number of edges, got ", src.numel(), " and ", dst.numel());
  TORCH_CHECK_VALUE(num_src >= 0 && num_dst >= 0, "seastar_layers::csr_layouts: 'num_src' and 'num_dst' must be "
                    ">= 0, got ", num_src, " and ", num_dst);
  TORCH_CHECK_VALUE(loops >= 0 && loops <= num_src && loops <= num_dst, "seastar_layers::csr_layouts: 'loops' "
                    "(self-loops on the first vertices) must be in [0, min(num_src, num_dst)] = [0, ",
                    std::min(num_src, num_dst), "], got ", loops);
  const int64_t num_edges = src.numel();
  const bool* marks = nullptr;
  if (listed.has_value()) {
    TORCH_CHECK_TYPE(listed->scalar_type() == at::kBool, "seastar_layers::csr_layouts: 'listed' must be a bool "
                     "tensor, got ", listed->scalar_type());
    TORCH_CHECK_VALUE(listed->dim() == 1 && listed->is_contiguous() && listed->numel() == num_edges + loops,
                      "seastar_layers::csr_layouts: 'listed' must be a contiguous 1-d tensor with one entry per "
                      "edge slot (", num_edges + loops, "), got shape ", listed->sizes());
    marks = listed->data_ptr<bool>();
  }
  check_indices(src, "src", num_src);
  check_indices(dst, "dst", num_dst);
  const int64_t slots = num_edges + loops;
  TORCH_CHECK_VALUE(index_dtype == at::kLong || std::max({num_src, num_dst, slots}) <= INT32_MAX,
                    "seastar_layers::csr_layouts: ", num_src, " sources, ", num_dst, " destinations and ", slots,
                    " edge slots do not fit int32 indices; pass dtype=torch.int64");
  const auto options = src.options().dtype(index_dtype);
  std::vector<at::Tensor> out = {at::empty({num_dst + 1}, options), at::empty({slots}, options),
                                 at::empty({slots}, options), at::empty({num_src + 1}, options),
                                 at::empty({slots}, options), at::empty({slots}, options)};
  // the two layouts are independent: one thread each, where a graph is large enough to repay
  // starting them
  at::parallel_for(0, 2, slots < (int64_t{1} << 15) ? 3 : 1, [&](int64_t begin, int64_t end) {
    for (int64_t layout = begin; layout < end; ++layout) {
      const bool in = layout == 0;  // the in-layout: rows are destinations, neighbours sources
      const at::Tensor &keys = in ? dst : src, &others = in ? src : dst;
      AT_DISPATCH_INDEX_TYPES(index_dtype, "seastar_layers::csr_layouts", [&] {
        fill_layout(keys.const_data_ptr<int64_t>(), others.const_data_ptr<int64_t>(), marks, unlist_self_loops,
                    num_edges, loops, in ? num_dst : num_src, in ? num_src : num_dst, by_neighbour,
                    out[3 * layout].mutable_data_ptr<index_t>(),
                    out[3 * layout + 1].mutable_data_ptr<index_t>(), out[3 * layout + 2].mutable_data_ptr<index_t>());
      });
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(seastar_layers, m) {
  m.def("csr_layouts(Tensor src, Tensor dst, int num_src, int num_dst, Tensor? listed=None, int loops=0, "
        "ScalarType? dtype=None, bool unlist_self_loops=False, bool by_neighbour=False) -> Tensor[]",
        {at::Tag::pt2_compliant_tag});
}

TORCH_LIBRARY_IMPL(seastar_layers, CPU, m) { m.impl("csr_layouts", &csr_layouts); }

}  // namespace seastar

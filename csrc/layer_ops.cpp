// The layers' composite ops: what a layer does around its vertex program, in one call from Python.
//
//   seastar_layers::gat_conv        GAT: projections, attention scores, the gat_attention program,
//                                   dropout's scale, head merge, residual and bias;
//   seastar_layers::gcn_conv        PyG's GCN: projection, degree scales, the weighted_sum program, bias;
//   seastar_layers::appnp_propagate APPNP's K degree-normalised steps:
//       h_0 = h,  h_{k+1} = (1 - alpha) * dst_scale * S(src_scale * h_k) + alpha * h,
//       S(y)_v = sum over the in-edges u -> v of y_u  (the weighted_sum program).
//   seastar_layers::degree_scales   a CSR's degrees to the power -1/2 or -1 (the layers' degree
//                                   normalisations), `isolated` for rows without edges, shaped to scale rows.
//
// A layer calling these ops one by one from Python would pay a dispatch from Python for each, more than a small
// graph's kernel (docs/design.md has the figures). As CompositeImplicitAutograd ops they run here: autograd records
// the ops they call (the programs' own autograd kernels among them), autocast casts those ops as it would from
// Python, and torch.compile and torch.export trace through to them, so they need no fake and no backward of their
// own. Every device that has the programs' ops has these. Each computes what the layer computed in
// Python before, op for op, so results are unchanged bit for bit; in inference (plain_values) small
// projections, gat_conv's scores and bias, and a small graph's APPNP steps come from plain loops, equal
// up to rounding; gat_conv's scores of plain CPU values come from the same loop where gradients are wanted,
// recorded as one node (GatScoresBackward). On a small graph APPNP's steps, gcn_conv and gat_conv's usual call take a
// plain path also where gradients are wanted (of h; of x, weight and bias; of x, weight, the attention vectors and
// bias), each recorded as one node (AppnpStepsBackward, GcnConvBackward, GatConvBackward). gcn_conv's edges there are
// the weighted_sum program's kernels, called without the op's dispatch (Call on a checked graph), so its small and
// large paths give the same bits; GAT's attention and APPNP's steps are still plain loops (issue 40).
#include "seastar_ops.h"  // check_graph_arrays, kSerialWork

#include <ATen/ATen.h>
#include <ATen/AccumulateType.h>
#include <ATen/Dispatch.h>
#include <ATen/TensorSubclassLikeUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

namespace seastar {
namespace {

using OptionalTensor = std::optional<at::Tensor>;
using ProgramResults = std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>>;
using GatAttention = ProgramResults(at::TensorList, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const OptionalTensor&, const OptionalTensor&, const OptionalTensor&,
                                    const OptionalTensor&, const OptionalTensor&, bool, bool);
using WeightedSum = ProgramResults(at::TensorList, const at::Tensor&, const OptionalTensor&);

template <typename Signature>
c10::TypedOperatorHandle<Signature> program(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

// Sizes are SymInts and conditions on them SymBools (held, where traced with dynamic shapes, as guards):
// torch.compile and torch.export trace these ops with symbolic sizes.
bool holds(const c10::SymBool& condition) { return condition.guard_bool(__FILE__, __LINE__); }

c10::SymInt destinations(at::TensorList graph, const char* op) {
  TORCH_CHECK_VALUE(graph.size() >= 1 && graph[0].dim() == 1 && holds(graph[0].sym_numel() >= 1), op,
                    ": 'graph' must hold the arrays of a seastar_layers.Graph (graph.tensors()), whose first is the "
                    "in-edge row pointers");
  return graph[0].sym_numel() - 1;
}

at::Tensor cast(const at::Tensor& t, at::ScalarType dtype) { return t.scalar_type() == dtype ? t : t.to(dtype); }

// Whether `tensors` are values to read and write in plain loops here rather than through ATen ops:
// contiguous CPU tensors of one floating type (float or double), no gradient wanted of any, none traced
// (FakeTensor, functionalisation, vmap, a dispatch mode: at::isTensorSubclassLike). On a small graph ATen's per-op
// costs (dispatch, TensorIterator, allocation) are many times the arithmetic; in inference these loops compute it.
// A tensor the plain loops may read as `dtype` values: a contiguous CPU tensor of that float type, untraced, and
// not a dual tensor of forward-mode AD (whose tangent they would drop: the ops it takes instead refuse it).
bool plain_tensor(const at::Tensor& t, at::ScalarType dtype) {
  return (dtype == at::kFloat || dtype == at::kDouble) && t.is_cpu() && t.scalar_type() == dtype &&
         t.is_contiguous() && !at::isTensorSubclassLike(t) && !t._fw_grad(/*level=*/0).defined();
}

bool plain_values(std::initializer_list<const at::Tensor*> tensors) {
  const bool recording = at::GradMode::is_enabled();
  const at::ScalarType dtype = (*tensors.begin())->scalar_type();
  for (const at::Tensor* t : tensors)
    if (!plain_tensor(*t, dtype) || (recording && t->requires_grad())) return false;
  return true;
}

// A graph the plain loops may index: its arrays on the CPU and untraced, then the checks the programs' ops make
// (raising as they would), so that every index the loops read is in range; its sizes, or none where the loops
// cannot take it.
std::optional<GraphSizes> plain_graph(at::TensorList graph, const char* op) {
  for (const at::Tensor& t : graph)
    if (!t.defined() || !t.is_cpu() || at::isTensorSubclassLike(t)) return std::nullopt;
  return check_graph_arrays(op, graph);
}

// One scale per row of `rows`, as (rows, 1): the degree scales the layers pass (others broadcast in the ops).
bool one_per_row(const at::Tensor& scale, int64_t rows) {
  return scale.dim() == 2 && scale.size(0) == rows && scale.size(1) == 1;
}

// Products of up to this many multiply-adds run in plain_project where plain_values allows: at::mm's dispatches and
// MKL's threading driver cost more than such a product's arithmetic; BLAS is far faster on the larger ones.
constexpr int64_t kPlainProduct = int64_t(1) << 16;

// The plain loops' inner loops run along a row of features and vectorise: as the generated kernels
// (codegen/cpu.py: CLONES), the ones below are also compiled for AVX2, which the loader runs where
// the CPU has it. Contraction into FMA is off for both (toolchain.CXX_FLAGS): they compute the same bits.
#if defined(__x86_64__) && !defined(__AVX2__) && defined(__GNUC__)
#define SEASTAR_LOOP_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SEASTAR_LOOP_CLONES
#endif

// out = x @ w^T for plain_project, x (rows, in), w (outs, in) with strides (per output, per input). Through w^T,
// each input's weights for all outputs side by side (read where they lie when w is held as (in, outs), DGL's
// GraphConv's layout, else copied), the innermost loop runs along an output row and vectorises; each output sums
// its products in input order. The outputs go in blocks of kOutputBlock, summed in registers across the inputs
// rather than stored in `out` on every input.
template <typename T>
inline __attribute__((always_inline)) void dot_rows(const T* x, const T* w, int64_t w_out, int64_t w_in, T* out,
                                                    int64_t rows, int64_t in, int64_t outs) {
  constexpr int64_t kOutputBlock = 128 / sizeof(T);  // four AVX2 registers
  std::vector<T> copy;
  const T* by_input = w;  // input i's weights at by_input + i * input_stride, one output after another
  int64_t input_stride = w_in;
  if (w_out != 1) {
    copy.resize(in * outs);
    for (int64_t k = 0; k < outs; ++k)
      for (int64_t i = 0; i < in; ++i) copy[i * outs + k] = w[k * w_out + i * w_in];
    by_input = copy.data();
    input_stride = outs;
  }
  const int64_t blocked = outs - outs % kOutputBlock;
  for (int64_t r = 0; r < rows; ++r, x += in, out += outs) {
    for (int64_t first = 0; first < blocked; first += kOutputBlock) {
      T sums[kOutputBlock] = {};
      for (int64_t i = 0; i < in; ++i) {
        const T factor = x[i];
        const T* weights = by_input + i * input_stride + first;
#pragma omp simd
        for (int64_t k = 0; k < kOutputBlock; ++k) sums[k] += factor * weights[k];
      }
      std::copy(sums, sums + kOutputBlock, out + first);
    }
    std::fill(out + blocked, out + outs, T(0));
    for (int64_t i = 0; i < in && blocked < outs; ++i) {
      const T factor = x[i];
      const T* weights = by_input + i * input_stride;
#pragma omp simd
      for (int64_t k = blocked; k < outs; ++k) out[k] += factor * weights[k];
    }
  }
}

// (function multiversioning takes functions, not templates)
SEASTAR_LOOP_CLONES void dot_rows_of(const float* x, const float* w, int64_t w_out, int64_t w_in, float* out,
                                     int64_t rows, int64_t in, int64_t outs) {
  dot_rows(x, w, w_out, w_in, out, rows, in, outs);
}
SEASTAR_LOOP_CLONES void dot_rows_of(const double* x, const double* w, int64_t w_out, int64_t w_in, double* out,
                                     int64_t rows, int64_t in, int64_t outs) {
  dot_rows(x, w, w_out, w_in, out, rows, in, outs);
}

// A weight the plain products may read: a plain_tensor matrix, or the transpose of one (DGL's GraphConv holds its
// weight as (in, out) and passes weight.t()).
bool plain_weight(const at::Tensor& weight, at::ScalarType dtype) {
  return weight.dim() == 2 && (plain_tensor(weight, dtype) || plain_tensor(weight.t(), dtype));
}

// The width of the 2-d x's projection by `weight` where the plain loops take it (a plain_weight whose rows match x's,
// a product plain_project takes), or x's own width without a weight; none where they do not.
std::optional<int64_t> plain_projection_width(const at::Tensor& x, const OptionalTensor& weight) {
  if (!weight.has_value()) return x.size(1);
  if (!plain_weight(*weight, x.scalar_type()) || weight->size(1) != x.size(1) ||
      x.size(0) * x.size(1) * weight->size(0) > kPlainProduct)
    return std::nullopt;
  return weight->size(0);
}

// x @ weight^T for plain_values: x (rows, in), weight (out, in), a plain_weight
at::Tensor plain_project(const at::Tensor& x, const at::Tensor& weight) {
  at::Tensor out = at::empty({x.size(0), weight.size(0)}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "seastar_layers projection", [&] {
    dot_rows_of(x.const_data_ptr<scalar_t>(), weight.const_data_ptr<scalar_t>(), weight.stride(0), weight.stride(1),
                out.mutable_data_ptr<scalar_t>(), x.size(0), x.size(1), weight.size(0));
  });
  return out;
}

// x @ weight^T, as PyG's Linear and torch.nn.Linear project (weight: (out, in)); x itself without a weight
at::Tensor project(const at::Tensor& x, const OptionalTensor& weight) {
  if (!weight.has_value()) return x;
  // shapes that do not multiply go to at::mm, which says so
  if (x.dim() == 2 && plain_values({&x, &*weight}) && plain_projection_width(x, weight).has_value())
    return plain_project(x, *weight);
  // at::linear of a matrix without a bias is this mm, after two dispatches of its own (a microsecond)
  return x.dim() == 2 && weight->dim() == 2 ? at::mm(x, weight->t()) : at::linear(x, *weight);
}

// (h * att).sum(-1, true) for plain_values and recorded_scores: h (rows, groups * heads, channels), att (1, heads,
// channels), repeated over the groups; each score sums its channels in order. Rows in parallel past torch's grain.
at::Tensor plain_scores(const at::Tensor& h, const at::Tensor& att) {
  const int64_t heads = att.size(1), channels = att.size(2), per_row = h.size(1);
  at::Tensor out = at::empty({h.size(0), per_row, 1}, h.options());
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "seastar_layers::gat_conv scores", [&] {
    const scalar_t* x = h.const_data_ptr<scalar_t>();
    const scalar_t* vectors = att.const_data_ptr<scalar_t>();
    scalar_t* score = out.mutable_data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(kSerialWork / std::max<int64_t>(per_row * channels, 1), 1);
    at::parallel_for(0, h.size(0), grain, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin * per_row; k < end * per_row; ++k) {  // (row, group, head) in turn
        const scalar_t* row = x + k * channels;
        const scalar_t* v = vectors + (k % std::max<int64_t>(heads, 1)) * channels;
        scalar_t sum = 0;
        for (int64_t c = 0; c < channels; ++c) sum += row[c] * v[c];
        score[k] = sum;
      }
    });
  });
  return out;
}

// out += bias in place for plain_values, bias repeating along each row of the 2-d out
void add_rows(at::Tensor& out, const at::Tensor& bias) {
  const int64_t width = bias.numel(), repeats = out.numel() / width;
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "seastar_layers::gat_conv bias", [&] {
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    const scalar_t* b = bias.const_data_ptr<scalar_t>();
    for (int64_t r = 0; r < repeats; ++r, o += width)
      for (int64_t k = 0; k < width; ++k) o[k] += b[k];
  });
}

template <typename T>
const T* data_or_null(const at::Tensor& t) { return t.defined() ? t.const_data_ptr<T>() : nullptr; }
template <typename T>
const T* data_or_null(const OptionalTensor& t) { return t.has_value() ? t->const_data_ptr<T>() : nullptr; }

at::Tensor or_undefined(const OptionalTensor& t) { return t.has_value() ? *t : at::Tensor(); }

// The family of a layer's program (nn/programs.py) in the extension's generated tables.
const Family& program_family(const char* op) {
  const Family* family = family_named(op);
  TORCH_CHECK(family != nullptr, "internal: seastar_layers._C was built without ", op);
  return *family;
}

// out = in * scale per row (one scale per row), each element as torch's broadcast product computes it; `out` may be
// `in`.
void scale_rows(const at::Tensor& in, const at::Tensor& scale, const at::Tensor& out) {
  const int64_t rows = in.size(0), width = rows > 0 ? in.numel() / rows : 0;
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "seastar_layers scale_rows", [&] {
    const scalar_t *x = in.const_data_ptr<scalar_t>(), *by = scale.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t f = 0; f < width; ++f) o[r * width + f] = x[r * width + f] * by[r];
  });
}

at::Tensor scaled_rows(const at::Tensor& in, const at::Tensor& scale) {
  at::Tensor out = at::empty_like(in, at::MemoryFormat::Contiguous);
  scale_rows(in, scale, out);
  return out;
}

// The gradients of a small projection (plain_project's, out = x @ weight^T) for the plain loops' nodes, as small
// as their forward: of its input, grad_out @ weight (`other`: the weight (outs, in), a plain_weight), or of its
// weight, grad_out^T @ x (`other`: x (rows, in)), as (outs, in) or, for a weight held as (in, outs) (DGL's
// GraphConv's), as its transpose (the same products, summed over the rows in the same order); grad_out (rows, outs).
enum class GradientOf { kInput, kWeight, kTransposedWeight };

at::Tensor plain_projection_gradient(const at::Tensor& grad_out, const at::Tensor& other, GradientOf of) {
  const int64_t rows = grad_out.size(0), outs = grad_out.size(1), in = other.size(1);
  const bool of_input = of == GradientOf::kInput;
  at::Tensor result = of == GradientOf::kTransposedWeight ? at::zeros({in, outs}, grad_out.options())
                                                          : at::zeros({of_input ? rows : outs, in}, grad_out.options());
  AT_DISPATCH_FLOATING_TYPES(grad_out.scalar_type(), "seastar_layers projection backward", [&] {
    const scalar_t *g = grad_out.const_data_ptr<scalar_t>(), *m = other.const_data_ptr<scalar_t>();
    const int64_t along = other.stride(0), across = other.stride(1);
    scalar_t* r = result.mutable_data_ptr<scalar_t>();
    if (of == GradientOf::kTransposedWeight) {
      for (int64_t row = 0; row < rows; ++row)
        for (int64_t i = 0; i < in; ++i) {
          const scalar_t factor = m[row * along + i * across];
          const scalar_t* from = g + row * outs;
          scalar_t* into = r + i * outs;
          for (int64_t k = 0; k < outs; ++k) into[k] += from[k] * factor;
        }
      return;
    }
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t k = 0; k < outs; ++k) {
        const scalar_t factor = g[row * outs + k];
        scalar_t* into = r + (of_input ? row : k) * in;
        const scalar_t* from = m + (of_input ? k : row) * along;
        for (int64_t i = 0; i < in; ++i) into[i] += factor * from[i * across];
      }
  });
  return result;
}

// GAT's attention in plain loops (plain_gat_conv), each head as the gat_attention program computes it, up to
// rounding: over each destination v's in-edges u -> v (CSR slots e), s = leaky_relu(a_src[u] + a_dst[v]) (a_dst
// null: 0), alpha[e] = the softmax of s over v's in-edges, out[v] = the sum of alpha[e] * h[u]; a destination
// without in-edges gets 0. h (rows, heads, channels), the scores (rows, heads), alpha (edges, heads) by CSR slot,
// out (rows_dst, heads, channels).
template <typename T, typename index_t>
void plain_attention(const index_t* indptr, const index_t* sources, int64_t rows_dst, int64_t heads, int64_t channels,
                     const T* h, const T* a_src, const T* a_dst, T slope, T* alpha, T* out) {
  std::fill(out, out + rows_dst * heads * channels, T(0));
  for (int64_t v = 0; v < rows_dst; ++v)
    for (int64_t head = 0; head < heads; ++head) {
      const T dst_score = a_dst != nullptr ? a_dst[v * heads + head] : T(0);
      T top = -std::numeric_limits<T>::infinity(), total = 0;
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
        const T z = a_src[sources[e] * heads + head] + dst_score;
        alpha[e * heads + head] = z > 0 ? z : z * slope;
        top = std::max(top, alpha[e * heads + head]);
      }
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
        T& a = alpha[e * heads + head];
        total += a = std::exp(a - top);
      }
      T* o = out + (v * heads + head) * channels;
      for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
        const T a = alpha[e * heads + head] /= total;
        const T* row = h + (sources[e] * heads + head) * channels;
        for (int64_t c = 0; c < channels; ++c) o[c] += a * row[c];
      }
    }
}

// plain_attention's backward from grad_out (rows_dst, heads, channels): adds the sum's share to grad_h (rows, heads,
// channels) and the scores' gradients to grad_src (rows, heads) and grad_dst (rows_dst, heads; null: none), through
// the softmax (alpha * (dalpha - the sum over v's in-edges of alpha * dalpha)) and the leaky relu (slope where
// z <= 0, as torch's).
template <typename T, typename index_t>
void plain_attention_backward(const index_t* indptr, const index_t* sources, int64_t rows_dst, int64_t heads,
                              int64_t channels, const T* h, const T* a_src, const T* a_dst, const T* alpha, T slope,
                              const T* grad_out, T* grad_h, T* grad_src, T* grad_dst) {
  std::vector<T> dalpha;
  for (int64_t v = 0; v < rows_dst; ++v)
    for (int64_t head = 0; head < heads; ++head) {
      const T* g = grad_out + (v * heads + head) * channels;
      const int64_t first = indptr[v];
      dalpha.assign(indptr[v + 1] - first, T(0));
      T weighted = 0;
      for (int64_t e = first; e < indptr[v + 1]; ++e) {
        const int64_t at = (sources[e] * heads + head) * channels;
        const T a = alpha[e * heads + head];
        T d = 0;
        for (int64_t c = 0; c < channels; ++c) {
          d += g[c] * h[at + c];
          grad_h[at + c] += a * g[c];
        }
        dalpha[e - first] = d;
        weighted += a * d;
      }
      const T dst_score = a_dst != nullptr ? a_dst[v * heads + head] : T(0);
      for (int64_t e = first; e < indptr[v + 1]; ++e) {
        const T ds = alpha[e * heads + head] * (dalpha[e - first] - weighted);
        const T dz = a_src[sources[e] * heads + head] + dst_score > 0 ? ds : ds * slope;
        grad_src[sources[e] * heads + head] += dz;
        if (grad_dst != nullptr) grad_dst[v * heads + head] += dz;
      }
    }
}

// The scores' share of the gradients over `pairs` (row, head) pairs in turn (a row's groups are rows of their own):
// grad_h[k] = grad_score[k] * att[head] (kAdd: +=, onto what the backward summed there before), a null grad_h
// skipped, and grad_att[head] += grad_score[k] * h[k] in Acc, a null grad_att skipped; h, grad_h (pairs, channels),
// grad_score (pairs), att (heads, channels). GatConvBackward adds both in T; GatScoresBackward assigns grad_h and sums
// grad_att per chunk of rows in the accumulate type.
template <bool kAdd, typename T, typename Acc>
void plain_scores_backward(int64_t pairs, int64_t heads, int64_t channels, const T* h, const T* att,
                           const T* grad_score, T* grad_h, Acc* grad_att) {
  for (int64_t k = 0; k < pairs; ++k) {
    const int64_t head = k % std::max<int64_t>(heads, 1);
    const T gs = grad_score[k];
    const T* vector = att + head * channels;
    if (grad_h != nullptr)
      for (int64_t c = 0; c < channels; ++c) {
        const T share = gs * vector[c];
        grad_h[k * channels + c] = kAdd ? grad_h[k * channels + c] + share : share;
      }
    if (grad_att != nullptr)
      for (int64_t c = 0; c < channels; ++c) grad_att[head * channels + c] += gs * h[k * channels + c];
  }
}

// The plain loops' autograd nodes (GatConvBackward, GcnConvBackward, AppnpStepsBackward): named after their op,
// releasing what they keep after a backward (a second one then raises torch's own error), and returning
// gradients that refuse a double backward, naming the op.
class PlainLoopsBackward : public torch::autograd::Node {
 public:
  std::string name() const override { return std::string(op_) + "_backward"; }

 protected:
  explicit PlainLoopsBackward(const char* op) : op_(op) {}

  virtual std::vector<torch::autograd::SavedVariable*> kept() = 0;

  void release_variables() override {
    for (auto* v : kept()) v->reset_data();
  }

  torch::autograd::variable_list finish(torch::autograd::variable_list& gradients,
                                        const torch::autograd::variable_list& grads) const {
    if (at::GradMode::is_enabled()) refuse_double_backward(op_, gradients, grads, {});  // create_graph=True
    return gradients;
  }

 private:
  const char* op_;
};

// The backward of recorded_scores: grad_h = grad * att (per head, as the product's backward), and grad_att, the sum
// over the rows and groups of grad * h, in fixed chunks of rows (the same bits on any number of threads), each summed
// in the accumulate type. Where the ops computed these, their backward wrote (rows, groups * heads, channels) twice and
// read it once more to sum it.
class GatScoresBackward : public PlainLoopsBackward {
 public:
  GatScoresBackward(const at::Tensor& h, const at::Tensor& att)
      : PlainLoopsBackward("seastar_layers::gat_conv scores"), h_(h, false), att_(att, false) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    const at::Tensor h = h_.unpack(), att = att_.unpack();
    const at::Tensor grad = grads[0].defined() ? grads[0].contiguous() : input_metadata(0).zeros_like();
    const int64_t rows = h.size(0), per_row = h.size(1), heads = att.size(1), channels = att.size(2);
    torch::autograd::variable_list gradients(2);
    const bool want_h = should_compute_output(0), want_att = should_compute_output(1);
    if (want_h) gradients[0] = at::empty_like(h, at::MemoryFormat::Contiguous);
    if (want_att) gradients[1] = at::empty_like(att, at::MemoryFormat::Contiguous);
    AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "seastar_layers::gat_conv scores_backward", [&] {
      using acc_t = at::acc_type<scalar_t, /*is_cuda=*/false>;
      const scalar_t *x = h.const_data_ptr<scalar_t>(), *v = att.const_data_ptr<scalar_t>();
      const scalar_t* g = grad.const_data_ptr<scalar_t>();
      scalar_t* grad_h = want_h ? gradients[0].mutable_data_ptr<scalar_t>() : nullptr;
      const int64_t width = heads * channels, chunk = kScoreRows;
      const int64_t chunks = (rows + chunk - 1) / chunk;
      std::vector<acc_t> partial(want_att ? chunks * width : 0, acc_t(0));
      at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
        for (int64_t part = first; part < last; ++part) {
          const int64_t begin = part * chunk * per_row, end = std::min(rows, (part + 1) * chunk) * per_row;
          plain_scores_backward<false>(end - begin, heads, channels, x + begin * channels, v, g + begin,
                                       grad_h != nullptr ? grad_h + begin * channels : nullptr,
                                       want_att ? partial.data() + part * width : nullptr);
        }
      });
      if (want_att) {
        scalar_t* out = gradients[1].mutable_data_ptr<scalar_t>();
        for (int64_t i = 0; i < width; ++i) {
          acc_t total = 0;
          for (int64_t part = 0; part < chunks; ++part) total += partial[part * width + i];
          out[i] = static_cast<scalar_t>(total);
        }
      }
    });
    return finish(gradients, grads);
  }

 protected:
  std::vector<torch::autograd::SavedVariable*> kept() override { return {&h_, &att_}; }

 private:
  static constexpr int64_t kScoreRows = 1024;  // rows a chunk of the vectors' gradient sums
  torch::autograd::SavedVariable h_, att_;
};

// gat_conv's scores in plain_scores' loop, recorded as one GatScoresBackward node where h or att want gradients.
at::Tensor recorded_scores(const at::Tensor& h, const at::Tensor& att) {
  at::Tensor out = plain_scores(h, att);
  if (torch::autograd::compute_requires_grad(h, att)) {
    auto node = make_node<GatScoresBackward>(h, att);
    node->set_next_edges(torch::autograd::collect_next_edges(h, att));
    torch::autograd::set_history(out, node);
  }
  return out;
}

// The backward of gat_conv's plain loops where autograd records them: the gradients of x, weight, att_src,
// att_dst and bias (those wanted), from the forward's projection, scores and attention (alpha), kept.
class GatConvBackward : public PlainLoopsBackward {
 public:
  GatConvBackward(at::TensorList graph, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& h,
                  const at::Tensor& att_src, const at::Tensor& att_dst, const at::Tensor& a_src,
                  const at::Tensor& a_dst, const at::Tensor& alpha, double slope, bool concat, bool with_bias)
      : PlainLoopsBackward("seastar_layers::gat_conv"), indptr_(graph[0], false), sources_(graph[1], false),
        x_(x, false), weight_(weight, false), h_(h, false), att_src_(att_src, false), att_dst_(att_dst, false),
        a_src_(a_src, false), a_dst_(a_dst, false), alpha_(alpha, false), slope_(slope),
        with_weight_(weight.defined()), with_dst_(att_dst.defined()), concat_(concat), with_bias_(with_bias) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    const at::Tensor indptr = indptr_.unpack(), sources = sources_.unpack(), h = h_.unpack();
    const at::Tensor att_src = att_src_.unpack(), att_dst = with_dst_ ? att_dst_.unpack() : at::Tensor();
    const at::Tensor a_src = a_src_.unpack(), a_dst = with_dst_ ? a_dst_.unpack() : at::Tensor();
    const at::Tensor alpha = alpha_.unpack();
    const at::Tensor grad = grads[0].defined() ? grads[0].contiguous() : input_metadata(0).zeros_like();
    const int64_t rows = h.size(0), rows_dst = grad.size(0), heads = att_src.size(1), channels = att_src.size(2);
    torch::autograd::variable_list gradients(5);
    if (with_bias_ && should_compute_output(4)) gradients[4] = grad.sum(0);
    const bool want_h = should_compute_output(0) || (with_weight_ && should_compute_output(1));
    if (!want_h && !should_compute_output(2) && !(with_dst_ && should_compute_output(3)))
      return finish(gradients, grads);
    // the heads' mean spreads its gradient evenly, as torch's mean backward
    const at::Tensor grad_out = concat_ ? grad : (grad / heads).unsqueeze(1).expand({rows_dst, heads, channels})
                                                     .contiguous();
    at::Tensor grad_h = at::zeros({rows, heads * channels}, grad.options());
    at::Tensor grad_src = at::zeros({rows, heads}, grad.options());
    at::Tensor grad_dst = at::zeros({rows_dst, heads}, grad.options()), grad_att_src = at::zeros_like(att_src);
    at::Tensor grad_att_dst = with_dst_ ? at::zeros_like(att_dst) : at::Tensor();
    AT_DISPATCH_FLOATING_TYPES(grad.scalar_type(), "seastar_layers::gat_conv_backward", [&] {
      AT_DISPATCH_INDEX_TYPES(indptr.scalar_type(), "seastar_layers::gat_conv_backward", [&] {
        plain_attention_backward(indptr.const_data_ptr<index_t>(), sources.const_data_ptr<index_t>(), rows_dst, heads,
                                 channels, h.const_data_ptr<scalar_t>(), a_src.const_data_ptr<scalar_t>(),
                                 data_or_null<scalar_t>(a_dst), alpha.const_data_ptr<scalar_t>(),
                                 static_cast<scalar_t>(slope_), grad_out.const_data_ptr<scalar_t>(),
                                 grad_h.mutable_data_ptr<scalar_t>(), grad_src.mutable_data_ptr<scalar_t>(),
                                 with_dst_ ? grad_dst.mutable_data_ptr<scalar_t>() : nullptr);
      });
      plain_scores_backward<true>(rows * heads, heads, channels, h.const_data_ptr<scalar_t>(),
                                  att_src.const_data_ptr<scalar_t>(), grad_src.const_data_ptr<scalar_t>(),
                                  grad_h.mutable_data_ptr<scalar_t>(), grad_att_src.mutable_data_ptr<scalar_t>());
      if (with_dst_)  // the destinations are the first rows
        plain_scores_backward<true>(rows_dst * heads, heads, channels, h.const_data_ptr<scalar_t>(),
                                    att_dst.const_data_ptr<scalar_t>(), grad_dst.const_data_ptr<scalar_t>(),
                                    grad_h.mutable_data_ptr<scalar_t>(), grad_att_dst.mutable_data_ptr<scalar_t>());
    });
    if (should_compute_output(2)) gradients[2] = grad_att_src;
    if (with_dst_ && should_compute_output(3)) gradients[3] = grad_att_dst;
    if (!with_weight_) {
      gradients[0] = grad_h;  // x was h
    } else {
      if (should_compute_output(0))
        gradients[0] = plain_projection_gradient(grad_h, weight_.unpack(), GradientOf::kInput);
      if (should_compute_output(1)) gradients[1] = plain_projection_gradient(grad_h, x_.unpack(), GradientOf::kWeight);
    }
    return finish(gradients, grads);
  }

 protected:
  std::vector<torch::autograd::SavedVariable*> kept() override {
    return {&indptr_, &sources_, &x_, &weight_, &h_, &att_src_, &att_dst_, &a_src_, &a_dst_, &alpha_};
  }

 private:
  torch::autograd::SavedVariable indptr_, sources_, x_, weight_, h_, att_src_, att_dst_, a_src_, a_dst_, alpha_;
  double slope_;
  bool with_weight_, with_dst_, concat_, with_bias_;
};

// Whether gat_conv runs in plain loops (plain_gat_conv): the drop-ins' usual call on a small graph: one matrix of
// features for both ends (no x_dst: the destinations are the first sources), projected by a small weight or given
// projected, one group of heads, no edge scores, mask, residual, attention dropout or returned attention; every tensor
// contiguous (the weight or its transpose), of the features' float type, untraced and not dual; the sweep (edges and
// destinations, times the width) below torch's grain size. x, weight, att_src, att_dst and bias may want gradients
// (GatConvBackward). On such a graph the recorded path's ops and nodes cost more than their arithmetic.
bool plain_gat(at::TensorList graph, const at::Tensor& x, const OptionalTensor& x_dst, const OptionalTensor& weight,
               const OptionalTensor& weight_dst, const at::Tensor& att_src, const OptionalTensor& att_dst,
               const OptionalTensor& a_edge, const OptionalTensor& mask, const OptionalTensor& residual,
               const OptionalTensor& bias, double dropout, bool concat, bool with_attention) {
  if (x_dst.has_value() || weight_dst.has_value() || a_edge.has_value() || mask.has_value() || residual.has_value() ||
      dropout > 0 || with_attention || x.dim() != 2)
    return false;
  const auto plain = [&](const at::Tensor& t) { return plain_tensor(t, x.scalar_type()); };
  for (const OptionalTensor* t : {&att_dst, &bias})
    if (t->has_value() && !plain(**t)) return false;
  if (!plain(x) || !plain(att_src)) return false;
  const int64_t heads = att_src.size(1), channels = att_src.size(2);
  const std::optional<int64_t> width = plain_projection_width(x, weight);
  if (!width.has_value() || heads == 0 || channels == 0 || *width != heads * channels ||
      (att_dst.has_value() && att_dst->sizes() != att_src.sizes()) ||
      (bias.has_value() && (bias->dim() != 1 || bias->size(0) != (concat ? *width : channels))))
    return false;
  const std::optional<GraphSizes> sizes = plain_graph(graph, "seastar_layers::gat_conv");
  return sizes.has_value() && (*sizes)[0] == x.size(0) && (*sizes)[1] <= x.size(0) &&
         ((*sizes)[2] + (*sizes)[1]) * *width < kSerialWork;
}

at::Tensor plain_gat_conv(at::TensorList graph, const at::Tensor& x, const OptionalTensor& weight,
                          const at::Tensor& att_src, const OptionalTensor& att_dst, const OptionalTensor& bias,
                          double negative_slope, bool concat) {
  const int64_t rows = x.size(0), rows_dst = graph[0].numel() - 1, edges = graph[1].numel();
  const int64_t heads = att_src.size(1), channels = att_src.size(2);
  const at::Tensor h = weight.has_value() ? plain_project(x, *weight) : x;
  const at::Tensor by_heads = h.view({rows, heads, channels});
  const at::Tensor a_src = plain_scores(by_heads, att_src);
  const at::Tensor a_dst =
      att_dst.has_value() ? plain_scores(by_heads.narrow(0, 0, rows_dst), *att_dst) : at::Tensor();
  at::Tensor alpha = at::empty({edges, heads}, x.options());
  at::Tensor attended = at::empty({rows_dst, heads, channels}, x.options());
  at::Tensor out = concat ? attended.view({rows_dst, heads * channels}) : at::empty({rows_dst, channels}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "seastar_layers::gat_conv", [&] {
    AT_DISPATCH_INDEX_TYPES(graph[0].scalar_type(), "seastar_layers::gat_conv", [&] {
      plain_attention(graph[0].const_data_ptr<index_t>(), graph[1].const_data_ptr<index_t>(), rows_dst, heads,
                      channels, h.const_data_ptr<scalar_t>(), a_src.const_data_ptr<scalar_t>(),
                      data_or_null<scalar_t>(a_dst), static_cast<scalar_t>(negative_slope),
                      alpha.mutable_data_ptr<scalar_t>(), attended.mutable_data_ptr<scalar_t>());
    });
    if (!concat) {  // the heads' mean, as torch's: their sum, then divided
      const scalar_t* a = attended.const_data_ptr<scalar_t>();
      scalar_t* o = out.mutable_data_ptr<scalar_t>();
      for (int64_t v = 0; v < rows_dst; ++v)
        for (int64_t c = 0; c < channels; ++c) {
          scalar_t sum = 0;
          for (int64_t head = 0; head < heads; ++head) sum += a[(v * heads + head) * channels + c];
          o[v * channels + c] = sum / static_cast<scalar_t>(heads);
        }
    }
  });
  if (bias.has_value()) add_rows(out, *bias);
  if (torch::autograd::compute_requires_grad(x, weight, att_src, att_dst, bias)) {
    auto node = make_node<GatConvBackward>(graph, x, or_undefined(weight), h, att_src, or_undefined(att_dst), a_src,
                                           a_dst, alpha, negative_slope, concat, bias.has_value());
    node->set_next_edges(torch::autograd::collect_next_edges(x, weight, att_src, att_dst, bias));
    torch::autograd::set_history(out, node);
  }
  return out;
}

// GATConv of PyG and of DGL, after the graph and the features' dropout:
//   h_src = project(x_src, weight_src) as (rows, groups * heads, channels), heads and channels those of
//   att_src (1, heads, channels); groups fold DGL's (N, *, D) middle axes, 1 for PyG;
//   h_dst = project(x_dst, weight_dst, else weight_src), or without x_dst the first num_dst rows of h_src
//   (one vertex set, or DGL's blocks, whose destinations come first among the sources);
//   scores (h * att).sum(-1) (the destinations' only with att_dst), cast to the features' dtype (under
//   autocast they come out float32 beside half features); the gat_attention program over groups * heads,
//   with a_edge and mask per edge and attention dropout drawn in the kernel with probability `dropout`
//   (a seed from torch's generator; kept coefficients scaled by 1 / (1 - dropout), as F.dropout does);
//   the heads concatenated (num_dst, groups * heads * channels) or averaged (num_dst, channels); then
//   + residual, + bias (broadcast over the groups). Returns [out], and with_attention [out, alpha]
//   with alpha (edges, groups * heads, 1) in edge order.
std::vector<at::Tensor> gat_conv(at::TensorList graph, const at::Tensor& x_src, const OptionalTensor& x_dst,
                                 const OptionalTensor& weight_src, const OptionalTensor& weight_dst,
                                 const at::Tensor& att_src, const OptionalTensor& att_dst, const OptionalTensor& a_edge,
                                 const OptionalTensor& mask, const OptionalTensor& residual, const OptionalTensor& bias,
                                 double negative_slope, double dropout, bool concat, bool with_attention) {
  static const auto attention = program<GatAttention>("seastar_layers::gat_attention");
  const char* op = "seastar_layers::gat_conv";
  const c10::SymInt num_dst = destinations(graph, op);
  TORCH_CHECK_VALUE(att_src.dim() == 3 && holds(att_src.sym_size(0) == 1), op,
                    ": 'att_src' must have shape (1, heads, channels), got ", att_src.sym_sizes());
  TORCH_CHECK_VALUE(dropout >= 0 && dropout <= 1, op, ": 'dropout' must be in [0, 1], got ", dropout);
  if (plain_gat(graph, x_src, x_dst, weight_src, weight_dst, att_src, att_dst, a_edge, mask, residual, bias, dropout,
                concat, with_attention))
    return {plain_gat_conv(graph, x_src, weight_src, att_src, att_dst, bias, negative_slope, concat)};
  const c10::SymInt heads = att_src.sym_size(1), channels = att_src.sym_size(2);
  // (rows, groups * heads, channels): as the program takes the features
  auto by_heads = [&](const at::Tensor& h, const char* name) {
    TORCH_CHECK_VALUE(h.dim() >= 1, op, ": '", name, "' must have one row per vertex, got a 0-d tensor");
    c10::SymInt per_row = 1;  // from the shape, not numel / rows: a graph may have no vertices
    for (const c10::SymInt& size : h.sym_sizes().slice(1)) per_row = per_row * size;
    TORCH_CHECK_VALUE(holds(per_row % (heads * channels).max(1) == 0), op, ": '", name, "' projected to shape ",
                      h.sym_sizes(), ", which does not split into ", heads, " heads of ", channels,
                      " channels per row (att_src's shape)");
    return h.reshape_symint({h.sym_size(0), per_row / channels.max(1), channels});
  };
  const at::Tensor h_src = by_heads(project(x_src, weight_src), "x_src");
  const c10::SymInt groups = h_src.sym_size(1) / heads.max(1);
  const bool grouped = !holds(groups == 1);
  TORCH_CHECK_VALUE(concat || !grouped, op, ": heads are averaged (concat=False) only without middle axes");
  // the destinations' projection is needed for their scores only
  std::optional<at::Tensor> h_dst;
  if (att_dst.has_value() && x_dst.has_value()) {
    h_dst = by_heads(project(*x_dst, weight_dst.has_value() ? weight_dst : weight_src), "x_dst");
  } else if (att_dst.has_value()) {
    TORCH_CHECK_VALUE(holds(h_src.sym_size(0) >= num_dst), op, ": without 'x_dst' the destinations are the first "
                      "sources, but the graph has ", num_dst, " destinations and 'x_src' ", h_src.sym_size(0), " rows");
    h_dst = holds(h_src.sym_size(0) == num_dst) ? h_src : h_src.narrow_symint(0, 0, num_dst);
  }
  const at::ScalarType dtype = h_src.scalar_type();
  const at::TensorOptions options = at::TensorOptions().dtype(compute_dtype(dtype)).device(x_src.device());
  // each (group, head) attends on its own: the scores' vectors repeat over the groups. Plain values with one vector
  // per head (att (1, heads, channels)) take the loops, with or without gradients; the ops take the rest (other
  // devices and types, traced, or a vector that broadcasts over the heads, or fails to, as the ops say).
  auto scores = [&](const at::Tensor& h, const at::Tensor& att) {
    if (plain_tensor(h, h.scalar_type()) && plain_tensor(att, h.scalar_type()) && h.dim() == 3 && att.dim() == 3 &&
        att.size(0) == 1 && att.size(1) == att_src.size(1) && att.size(2) == h.size(2) &&
        h.size(1) == h_src.size(1))
      return recorded_scores(h, att);
    return cast((h * (grouped ? att.repeat_symint({1, groups, 1}) : att)).sum(-1, true), dtype);
  };
  std::optional<at::Tensor> a_dst, keep, seed;
  if (h_dst.has_value()) a_dst = scores(*h_dst, *att_dst);
  if (dropout > 0) {
    keep = at::scalar_tensor(1 - dropout, options);
    seed = at::randint(0, int64_t(1) << 62, {1}, options.dtype(at::kLong)).select(0, 0);  // as library.draw_seed
  }
  const auto mask_in = mask.has_value() ? std::optional<at::Tensor>(cast(*mask, dtype).contiguous()) : std::nullopt;
  const auto edge_in = a_edge.has_value() ? std::optional<at::Tensor>(cast(*a_edge, dtype)) : std::nullopt;
  const at::Tensor a_src = scores(h_src, att_src);
  const at::Tensor slope = at::scalar_tensor(negative_slope, options);
  // for_backward: the program's autograd kernel turns it on where it records a backward
  std::vector<at::Tensor> results = std::get<0>(attention.call(graph, a_src, h_src.contiguous(), slope, a_dst, edge_in,
                                                               mask_in, keep, seed, with_attention, false));
  if (keep.has_value()) {
    const double scale = dropout < 1 ? 1.0 / (1 - dropout) : 0.0;  // as programs.kept_scale
    for (at::Tensor& r : results) r = r * scale;
  }
  at::Tensor out = concat ? results[0].reshape_symint({num_dst, groups * heads * channels}) : results[0].mean(1);
  if (residual.has_value()) out = out + *residual;
  // the loops take only a bias the ops below would add without broadcasting it: any other fails there, as before
  const bool plain_bias = bias.has_value() && plain_values({&out, &*bias}) && bias->dim() == 1 && out.dim() == 2 &&
                          bias->numel() > 0 && holds(bias->sym_numel() * (grouped ? groups : 1) == out.sym_size(1));
  if (plain_bias) {
    add_rows(out, *bias);  // out is the program's own result (or a sum made above): no one else holds it
  } else if (bias.has_value()) {  // per group: over DGL's middle axes
    out = grouped ? (out.view_symint({num_dst, groups, heads * channels}) + *bias).flatten(1) : out + *bias;
  }
  if (!with_attention) return {out};
  return {out, results[1]};
}

// One step's scaled neighbour sum for APPNP's plain loops (forward and backward), over a CSR (indptr, neighbours) of
// one vertex set with `rows` rows: out[r] = (sum over r's edges to n, in CSR order, of values[n] * before[n]) *
// after[r], each product and sum as the recorded ops (the weighted_sum program) compute it. It reads all of
// `values` before it writes `out`, which may be `values`.
template <typename T, typename index_t>
void scaled_neighbour_sum(const index_t* indptr, const index_t* neighbours, int64_t rows, int64_t width,
                          const T* values, const T* before, const T* after, T* out) {
  std::vector<T> scaled(values, values + rows * width), sum(width);
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t f = 0; f < width; ++f) scaled[n * width + f] *= before[n];
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(sum.begin(), sum.end(), T(0));
    for (int64_t e = indptr[r]; e < indptr[r + 1]; ++e) {
      const T* row = scaled.data() + neighbours[e] * width;
      for (int64_t f = 0; f < width; ++f) sum[f] += row[f];
    }
    T* o = out + r * width;
    for (int64_t f = 0; f < width; ++f) o[f] = sum[f] * after[r];
  }
}

// The backward of gcn_conv's plain path where autograd records it: the gradients of x, weight and bias (those
// wanted): the weighted_sum program's backward kernel between the scales, the projection's by plain products, as
// small as the forward's. The scales and edge weights are constants.
class GcnConvBackward : public PlainLoopsBackward {
 public:
  GcnConvBackward(at::TensorList graph, const GraphSizes& sizes, const at::Tensor& x, const at::Tensor& weight,
                  bool weight_transposed, const at::Tensor& scaled, const at::Tensor& src_scale,
                  const at::Tensor& dst_scale, const at::Tensor& edge_weight, bool with_bias)
      : PlainLoopsBackward("seastar_layers::gcn_conv"), sizes_(sizes), x_(x, false), weight_(weight, false),
        scaled_(scaled, false), src_scale_(src_scale, false), dst_scale_(dst_scale, false),
        edge_weight_(edge_weight, false), with_weight_(weight.defined()), weight_transposed_(weight_transposed),
        with_bias_(with_bias) {
    for (const at::Tensor& t : graph) graph_.emplace_back(t, false);
  }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    static const Family& weighted_sum = program_family("seastar_layers::weighted_sum");
    const at::Tensor x = x_.unpack(), scaled = scaled_.unpack();
    const at::Tensor held = with_weight_ ? weight_.unpack() : at::Tensor();
    const at::Tensor weight = weight_transposed_ && held.defined() ? held.t() : held;  // as (out, in)
    const at::Tensor src_scale = src_scale_.unpack(), dst_scale = dst_scale_.unpack();
    const at::Tensor edge_weight = edge_weight_.unpack();
    const at::Tensor grad = grads[0].defined() ? grads[0].contiguous() : input_metadata(0).zeros_like();
    torch::autograd::variable_list gradients(3);
    if (with_bias_ && should_compute_output(2)) gradients[2] = grad.sum(0);
    if (!should_compute_output(0) && !(with_weight_ && should_compute_output(1))) return finish(gradients, grads);
    std::vector<at::Tensor> graph;
    for (const auto& v : graph_) graph.push_back(v.unpack());
    // the sum's transpose between the scales, the destinations' first
    const at::Tensor adjoint = dst_scale.defined() ? scaled_rows(grad, dst_scale) : grad;
    at::Tensor grad_h = Call(weighted_sum, graph, sizes_, {&scaled, edge_weight.defined() ? &edge_weight : nullptr},
                             {}).backward({}, {adjoint})[0];  // a buffer of its own
    if (src_scale.defined()) scale_rows(grad_h, src_scale, grad_h);
    if (!with_weight_) {
      gradients[0] = grad_h;
    } else {
      if (should_compute_output(0)) gradients[0] = plain_projection_gradient(grad_h, weight, GradientOf::kInput);
      if (should_compute_output(1))
        gradients[1] = plain_projection_gradient(
            grad_h, x, weight_transposed_ ? GradientOf::kTransposedWeight : GradientOf::kWeight);
    }
    return finish(gradients, grads);
  }

 protected:
  std::vector<torch::autograd::SavedVariable*> kept() override {
    std::vector<torch::autograd::SavedVariable*> all = {&x_, &weight_, &scaled_, &src_scale_, &dst_scale_,
                                                        &edge_weight_};
    for (auto& v : graph_) all.push_back(&v);
    return all;
  }

 private:
  GraphSizes sizes_;
  std::vector<torch::autograd::SavedVariable> graph_;
  torch::autograd::SavedVariable x_, weight_, scaled_, src_scale_, dst_scale_, edge_weight_;
  bool with_weight_, weight_transposed_, with_bias_;
};

// The graph's sizes where gcn_conv takes its plain path, else none: 2-d CPU features on a graph whose sum (its edges
// and destinations, times the width) is below torch's grain size, a projection plain_project would take, every tensor
// contiguous (the weight or its transpose) and of the features' float type, untraced and not dual; x, weight and bias
// may want gradients (GcnConvBackward), the scales and edge weights not. The edges are the weighted_sum program's
// kernel, as on a large graph; the projection, scales and bias plain loops, cheaper there than the recorded ops.
std::optional<GraphSizes> plain_gcn(at::TensorList graph, const at::Tensor& x, const OptionalTensor& weight,
                                    const OptionalTensor& src_scale, const OptionalTensor& dst_scale,
                                    const OptionalTensor& edge_weight, const OptionalTensor& bias) {
  const auto plain = [&](const at::Tensor& t) { return plain_tensor(t, x.scalar_type()); };
  const bool recording = at::GradMode::is_enabled();
  for (const OptionalTensor* constant : {&src_scale, &dst_scale, &edge_weight})
    if (constant->has_value() && (!plain(**constant) || (recording && (*constant)->requires_grad())))
      return std::nullopt;
  if (x.dim() != 2 || !plain(x) || (bias.has_value() && !plain(*bias))) return std::nullopt;
  const std::optional<int64_t> width = plain_projection_width(x, weight);
  if (!width.has_value() || (bias.has_value() && (bias->dim() != 1 || bias->size(0) != *width))) return std::nullopt;
  const std::optional<GraphSizes> sizes = plain_graph(graph, "seastar_layers::gcn_conv");
  if (!sizes.has_value() || (*sizes)[0] != x.size(0) || ((*sizes)[2] + (*sizes)[1]) * *width >= kSerialWork)
    return std::nullopt;
  if ((!src_scale.has_value() || one_per_row(*src_scale, (*sizes)[0])) &&
      (!dst_scale.has_value() || one_per_row(*dst_scale, (*sizes)[1])) &&
      (!edge_weight.has_value() || (edge_weight->dim() == 1 && edge_weight->size(0) == (*sizes)[2])))
    return sizes;
  return std::nullopt;
}

// `linear` is the weight as (out, in), `weight` as given (the node's input; (in, out) where weight_transposed)
at::Tensor plain_gcn_conv(at::TensorList graph, const GraphSizes& sizes, const at::Tensor& x,
                          const OptionalTensor& linear, const OptionalTensor& weight, bool weight_transposed,
                          const OptionalTensor& src_scale, const OptionalTensor& dst_scale,
                          const OptionalTensor& edge_weight, const OptionalTensor& bias) {
  static const Family& weighted_sum = program_family("seastar_layers::weighted_sum");
  const at::Tensor h = linear.has_value() ? plain_project(x, *linear) : x;
  const at::Tensor scaled = src_scale.has_value() ? scaled_rows(h, *src_scale) : h;
  at::Tensor out = std::get<0>(Call(weighted_sum, graph, sizes, {&scaled, given(edge_weight)}, {}).forward())[0];
  if (dst_scale.has_value()) scale_rows(out, *dst_scale, out);  // the program's own result: no one else holds it
  if (bias.has_value()) add_rows(out, *bias);
  if (torch::autograd::compute_requires_grad(x, weight, bias)) {
    auto node = make_node<GcnConvBackward>(graph, sizes, x, or_undefined(weight), weight_transposed, scaled,
                                           or_undefined(src_scale), or_undefined(dst_scale), or_undefined(edge_weight),
                                           bias.has_value());
    node->set_next_edges(torch::autograd::collect_next_edges(x, weight, bias));
    torch::autograd::set_history(out, node);
  }
  return out;
}

// PyG's GCNConv where its normalisation follows from degrees (or comes as edge weights):
//   h = project(x, weight); h * src_scale (per source row); the weighted_sum program over the rows (the
//   features' axes after the first folded into one), with one weight per edge or none; * dst_scale;
//   + bias. The scales and weights are cast to h's dtype (under autocast, the projection's).
// Where the projection widens 2-d rows (out > in), the sum comes first and the destinations' sums are
// projected (DGL's GraphConv's order, the same up to rounding): each edge gathers in features instead of
// out, and num_dst rows are projected instead of num_src. The sum is then in x's dtype.
// With weight_transposed the weight is held as (in, out), DGL's GraphConv's layout: transposed here, where the plain
// loops read it through its strides and their node takes its gradient as it is held (a weight.t() the caller recorded
// cost a node, and a copy of the weight's gradient into the weight's layout, in every backward).
at::Tensor gcn_conv(at::TensorList graph, const at::Tensor& x, const OptionalTensor& given_weight,
                    const OptionalTensor& src_scale, const OptionalTensor& dst_scale, const OptionalTensor& edge_weight,
                    const OptionalTensor& bias, bool weight_transposed) {
  static const auto weighted_sum = program<WeightedSum>("seastar_layers::weighted_sum");
  const c10::SymInt num_dst = destinations(graph, "seastar_layers::gcn_conv");
  TORCH_CHECK_VALUE(x.dim() >= 2, "seastar_layers::gcn_conv: 'x' must have one row of features per source vertex, "
                    "got shape ", x.sym_sizes());
  const bool transpose = weight_transposed && given_weight.has_value();
  OptionalTensor unrecorded = given_weight;  // (out, in), for the plain loops, which record their own node
  if (transpose) {
    TORCH_CHECK_VALUE(given_weight->dim() == 2, "seastar_layers::gcn_conv: a 'weight' held as (in, out) "
                      "(weight_transposed=True) must be a matrix, got shape ", given_weight->sym_sizes());
    at::NoGradGuard unrecorded_view;
    unrecorded = given_weight->t();
  }
  if (const auto sizes = plain_gcn(graph, x, unrecorded, src_scale, dst_scale, edge_weight, bias))
    return plain_gcn_conv(graph, *sizes, x, unrecorded, given_weight, transpose, src_scale, dst_scale, edge_weight,
                          bias);
  const OptionalTensor weight = transpose ? OptionalTensor(given_weight->t()) : given_weight;
  const bool sum_first = weight.has_value() && x.dim() == 2 && weight->dim() == 2 &&
                         weight->sym_size(0) > x.sym_size(1);
  at::Tensor h = sum_first ? x : project(x, weight);
  const at::ScalarType dtype = h.scalar_type();
  if (src_scale.has_value()) h = h * src_scale->to(dtype);
  std::vector<c10::SymInt> shape = h.sym_sizes().vec();
  shape[0] = num_dst;
  const auto weights =
      edge_weight.has_value() ? std::optional<at::Tensor>(edge_weight->to(dtype).contiguous()) : std::nullopt;
  const at::Tensor rows = h.flatten(1).contiguous();
  at::Tensor out = std::get<0>(weighted_sum.call(graph, rows, weights))[0];
  if (h.dim() != 2) out = out.view_symint(shape);
  if (sum_first) out = project(out, weight);
  if (dst_scale.has_value()) out = out * dst_scale->to(out.scalar_type());
  if (bias.has_value()) out = out + *bias;
  return out;
}

// appnp_propagate's steps for plain_values, on the in-edges' CSR (indptr, sources) of a graph with `rows`
// vertices, each step as the ops compute it: the in-edges' sum of h_k * src_scale, * kept, + teleported.
template <typename T, typename index_t>
void appnp_steps(const index_t* indptr, const index_t* sources, int64_t rows, int64_t width, const T* h,
                 const T* src_scale, const T* dst_scale, T alpha, T keep, int64_t steps, T* out) {
  std::vector<T> teleported(rows * width), kept(rows);
  for (int64_t i = 0; i < rows * width; ++i) teleported[i] = h[i] * alpha;
  for (int64_t v = 0; v < rows; ++v) kept[v] = dst_scale[v] * keep;
  for (int64_t k = 0; k < steps; ++k) {
    scaled_neighbour_sum<T, index_t>(indptr, sources, rows, width, k == 0 ? h : out, src_scale, kept.data(), out);
    for (int64_t i = 0; i < rows * width; ++i) out[i] += teleported[i];
  }
}

// appnp_steps' backward, as the recorded steps' ops compute it (up to rounding), on the out-edges' CSR (indptr,
// destinations): with g_K = grad and, for k = K-1 down to 0, g_k[u] = src_scale[u] * sum over the out-edges u -> v
// of g_{k+1}[v] * kept[v], grad_h = (g_1 + ... + g_K) * alpha + g_0 (h's teleported share, then h as h_0).
template <typename T, typename index_t>
void appnp_steps_backward(const index_t* indptr, const index_t* destinations, int64_t rows, int64_t width,
                          const T* grad, const T* src_scale, const T* dst_scale, T alpha, T keep, int64_t steps,
                          T* grad_h) {
  std::vector<T> kept(rows), current(grad, grad + rows * width), teleported(rows * width, T(0));
  for (int64_t v = 0; v < rows; ++v) kept[v] = dst_scale[v] * keep;
  for (int64_t k = 0; k < steps; ++k) {
    for (int64_t i = 0; i < rows * width; ++i) teleported[i] += current[i];
    scaled_neighbour_sum<T, index_t>(indptr, destinations, rows, width, current.data(), kept.data(), src_scale,
                                     current.data());
  }
  for (int64_t i = 0; i < rows * width; ++i) grad_h[i] = teleported[i] * alpha + current[i];
}

// The backward of appnp_propagate's steps where they run in plain loops while autograd records them (only h wants a
// gradient): one node for the K steps, whose 3K recorded ops took about two thirds of a layer's call on a 10-vertex
// graph.
class AppnpStepsBackward : public PlainLoopsBackward {
 public:
  AppnpStepsBackward(at::TensorList graph, const at::Tensor& src_scale, const at::Tensor& dst_scale, double alpha,
                     int64_t steps)
      : PlainLoopsBackward("seastar_layers::appnp_propagate"), out_indptr_(graph[3], false),
        destinations_(graph[4], false), src_scale_(src_scale, false), dst_scale_(dst_scale, false), alpha_(alpha),
        steps_(steps) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    const at::Tensor indptr = out_indptr_.unpack(), destinations = destinations_.unpack();
    const at::Tensor src_scale = src_scale_.unpack(), dst_scale = dst_scale_.unpack();
    const at::Tensor grad = grads[0].defined() ? grads[0].contiguous() : input_metadata(0).zeros_like();
    at::Tensor grad_h = at::empty_like(grad, at::MemoryFormat::Contiguous);
    AT_DISPATCH_FLOATING_TYPES(grad.scalar_type(), "seastar_layers::appnp_propagate_backward", [&] {
      AT_DISPATCH_INDEX_TYPES(indptr.scalar_type(), "seastar_layers::appnp_propagate_backward", [&] {
        appnp_steps_backward(indptr.const_data_ptr<index_t>(), destinations.const_data_ptr<index_t>(), grad.size(0),
                             grad.size(1), grad.const_data_ptr<scalar_t>(), src_scale.const_data_ptr<scalar_t>(),
                             dst_scale.const_data_ptr<scalar_t>(), static_cast<scalar_t>(alpha_),
                             static_cast<scalar_t>(1 - alpha_), steps_, grad_h.mutable_data_ptr<scalar_t>());
      });
    });
    torch::autograd::variable_list gradients = {grad_h};
    return finish(gradients, grads);
  }

 protected:
  std::vector<torch::autograd::SavedVariable*> kept() override {
    return {&out_indptr_, &destinations_, &src_scale_, &dst_scale_};
  }

 private:
  torch::autograd::SavedVariable out_indptr_, destinations_, src_scale_, dst_scale_;
  double alpha_;
  int64_t steps_;
};

// Whether appnp_propagate's steps run in appnp_steps: plain_values on one square graph with one row of
// h per vertex and one scale per row (the shapes the layers pass; others broadcast in the ops), and
// each step's work (edges and rows, times the features) below torch's grain size, where the program's
// kernel runs on one thread too: a step through its four ops (a multiply, the program's op, addcmul) costs many
// times its arithmetic there.
bool plain_steps(at::TensorList graph, const at::Tensor& h, const at::Tensor& src_scale, const at::Tensor& dst_scale) {
  // h may want a gradient (AppnpStepsBackward), the scales not
  if (h.dim() != 2 || !plain_values({&src_scale, &dst_scale}) ||
      !plain_tensor(h, src_scale.scalar_type()) || !one_per_row(src_scale, h.size(0)) ||
      !one_per_row(dst_scale, h.size(0)))
    return false;
  const std::optional<GraphSizes> sizes = plain_graph(graph, "seastar_layers::appnp_propagate");
  return sizes.has_value() && (*sizes)[0] == h.size(0) && (*sizes)[1] == h.size(0) &&
         ((*sizes)[2] + (*sizes)[1]) * h.size(1) < kSerialWork;
}

at::Tensor appnp_propagate(at::TensorList graph, const at::Tensor& h, const at::Tensor& src_scale,
                           const at::Tensor& dst_scale, double alpha, int64_t steps) {
  TORCH_CHECK_VALUE(steps >= 0, "seastar_layers::appnp_propagate: 'steps' must be >= 0, got ", steps);
  static const auto weighted_sum = program<WeightedSum>("seastar_layers::weighted_sum");
  if (steps > 0 && plain_steps(graph, h, src_scale, dst_scale)) {
    at::Tensor out = at::empty_like(h, at::MemoryFormat::Contiguous);
    AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "seastar_layers::appnp_propagate", [&] {
      AT_DISPATCH_INDEX_TYPES(graph[0].scalar_type(), "seastar_layers::appnp_propagate", [&] {
        // as the ops take a Python float beside a tensor of scalar_t: rounded to scalar_t
        appnp_steps(graph[0].const_data_ptr<index_t>(), graph[1].const_data_ptr<index_t>(), h.size(0), h.size(1),
                    h.const_data_ptr<scalar_t>(), src_scale.const_data_ptr<scalar_t>(),
                    dst_scale.const_data_ptr<scalar_t>(), static_cast<scalar_t>(alpha),
                    static_cast<scalar_t>(1 - alpha), steps, out.mutable_data_ptr<scalar_t>());
      });
    });
    if (torch::autograd::compute_requires_grad(h)) {
      auto node = make_node<AppnpStepsBackward>(graph, src_scale, dst_scale, alpha, steps);
      node->set_next_edges(torch::autograd::collect_next_edges(h));
      torch::autograd::set_history(out, node);
    }
    return out;
  }
  const at::Tensor kept = dst_scale * (1 - alpha);
  const at::Tensor teleported = h * alpha;
  at::Tensor out = h;
  for (int64_t k = 0; k < steps; ++k)
    out = at::addcmul(teleported, std::get<0>(weighted_sum.call(graph, out * src_scale, std::nullopt))[0], kept);
  return out;
}

// Every row's degree (indptr's row lengths) to `exponent`, as a (rows, 1, ..., 1) tensor of `dims` dimensions
// and `dtype` (shaped to scale `dims`-dimensional features' rows, saving a view from Python per new graph), and
// `isolated` where a row has no edges: PyG's gcn_norm (-1/2, 0 for isolated vertices) and DGL's GraphConv (its
// degrees clamped to 1 first, so 1). A sampled block is a new graph on every call: one plain pass instead of the
// seven ATen ops below (a slice, a difference, a cast, clamp, pow, a comparison, where). Both give the same bits:
// ATen's pow takes -1/2 as 1 / sqrt and -1 as 1 / x, as the loop does.
at::Tensor degree_scales(const at::Tensor& indptr, at::ScalarType dtype, double exponent, double isolated,
                         int64_t dims) {
  TORCH_CHECK_VALUE(exponent == -0.5 || exponent == -1.0, "seastar_layers::degree_scales: 'exponent' must be "
                    "-0.5 or -1, got ", exponent);
  TORCH_CHECK_VALUE(dims >= 1, "seastar_layers::degree_scales: 'dims' (the result's dimensions) must be >= 1, got ",
                    dims);
  TORCH_CHECK_TYPE(indptr.scalar_type() == at::kLong || indptr.scalar_type() == at::kInt,
                   "seastar_layers::degree_scales: 'indptr' must hold int32 or int64 row pointers, got ",
                   torch_name(indptr.scalar_type()));
  TORCH_CHECK_VALUE(indptr.dim() == 1 && indptr.sym_numel() >= 1, "seastar_layers::degree_scales: 'indptr' must be "
                    "a 1-d tensor of at least one row pointer, got shape ", indptr.sym_sizes());
  TORCH_CHECK_TYPE(at::isFloatingType(dtype), "seastar_layers::degree_scales: 'dtype' must be a floating dtype, got ",
                   torch_name(dtype));
  const auto options = indptr.options().dtype(dtype);
  // as plain_values, for an index array (which never wants a gradient) and an output dtype
  if ((dtype == at::kFloat || dtype == at::kDouble) && indptr.is_cpu() && indptr.is_contiguous() &&
      !at::isTensorSubclassLike(indptr)) {
    const int64_t rows = indptr.numel() - 1;
    std::vector<int64_t> sizes(dims, 1);
    sizes[0] = rows;
    at::Tensor out = at::empty(sizes, options);
    AT_DISPATCH_FLOATING_TYPES(dtype, "seastar_layers::degree_scales", [&] {
      AT_DISPATCH_INDEX_TYPES(indptr.scalar_type(), "seastar_layers::degree_scales", [&] {
        const index_t* p = indptr.const_data_ptr<index_t>();
        scalar_t* o = out.mutable_data_ptr<scalar_t>();
        const bool square_root = exponent == -0.5;
        const auto fill = static_cast<scalar_t>(isolated);
        at::parallel_for(0, rows, 1 << 16, [&](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) {
            const auto degree = static_cast<scalar_t>(p[k + 1] - p[k]);
            o[k] = degree == 0 ? fill : square_root ? scalar_t(1) / std::sqrt(degree) : scalar_t(1) / degree;
          }
        });
      });
    });
    return out;
  }
  const at::Tensor degrees = (indptr.slice(0, 1) - indptr.slice(0, 0, -1)).to(dtype);
  std::vector<c10::SymInt> shape(dims, 1);
  shape[0] = degrees.sym_size(0);
  return at::where(degrees == 0, at::scalar_tensor(isolated, options), degrees.clamp_min(1).pow(exponent))
      .view_symint(shape);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(seastar_layers, m) {
  m.def("gat_conv(Tensor[] graph, Tensor x_src, Tensor? x_dst, Tensor? weight_src, Tensor? weight_dst, "
        "Tensor att_src, Tensor? att_dst, Tensor? a_edge=None, Tensor? mask=None, Tensor? residual=None, "
        "Tensor? bias=None, float negative_slope=0.2, float dropout=0.0, bool concat=True, "
        "bool with_attention=False) -> Tensor[]",
        {at::Tag::pt2_compliant_tag});
  m.def("gcn_conv(Tensor[] graph, Tensor x, Tensor? weight, Tensor? src_scale=None, Tensor? dst_scale=None, "
        "Tensor? edge_weight=None, Tensor? bias=None, bool weight_transposed=False) -> Tensor",
        {at::Tag::pt2_compliant_tag});
  m.def("appnp_propagate(Tensor[] graph, Tensor h, Tensor src_scale, Tensor dst_scale, float alpha, int steps) "
        "-> Tensor",
        {at::Tag::pt2_compliant_tag});
  m.def("degree_scales(Tensor indptr, ScalarType dtype, float exponent, float isolated, int dims=1) -> Tensor",
        {at::Tag::pt2_compliant_tag});
}

TORCH_LIBRARY_IMPL(seastar_layers, CompositeImplicitAutograd, m) {
  m.impl("gat_conv", &gat_conv);
  m.impl("gcn_conv", &gcn_conv);
  m.impl("appnp_propagate", &appnp_propagate);
  m.impl("degree_scales", &degree_scales);
}

}  // namespace seastar

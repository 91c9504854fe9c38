// seastar_layers::appnp_propagate: APPNP's K degree-normalised steps in one call,
//
//   h_0 = h,  h_{k+1} = (1 - alpha) * dst_scale * S(src_scale * h_k) + alpha * h,
//   S(y)_v = sum over the in-edges u -> v of y_u  (the generated weighted_sum op),
//
// as both APPNP drop-ins run it where the normalisation follows from degrees. Looping in Python cost
// three dispatches from Python per step, about 15 us a step beside a kernel of 6 us on a small
// graph. As a CompositeImplicitAutograd op the loop runs here: autograd records the ops it calls
// (weighted_sum's own autograd kernel among them), and torch.compile and torch.export trace through
// to those ops, so it needs no fake and no backward of its own. Every device that has weighted_sum
// has this op.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <vector>

namespace seastar {
namespace {

using WeightedSum = std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>>(at::TensorList, const at::Tensor&,
                                                                                 const std::optional<at::Tensor>&);

at::Tensor appnp_propagate(at::TensorList graph, const at::Tensor& h, const at::Tensor& src_scale,
                           const at::Tensor& dst_scale, double alpha, int64_t steps) {
  TORCH_CHECK_VALUE(steps >= 0, "seastar_layers::appnp_propagate: 'steps' must be >= 0, got ", steps);
  static const auto weighted_sum =
      c10::Dispatcher::singleton().findSchemaOrThrow("seastar_layers::weighted_sum", "").typed<WeightedSum>();
  const at::Tensor kept = dst_scale * (1 - alpha);
  const at::Tensor teleported = h * alpha;
  at::Tensor out = h;
  for (int64_t k = 0; k < steps; ++k)
    out = at::addcmul(teleported, std::get<0>(weighted_sum.call(graph, out * src_scale, std::nullopt))[0], kept);
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(seastar_layers, m) {
  m.def("appnp_propagate(Tensor[] graph, Tensor h, Tensor src_scale, Tensor dst_scale, float alpha, int steps) "
        "-> Tensor",
        {at::Tag::pt2_compliant_tag});
}

TORCH_LIBRARY_IMPL(seastar_layers, CompositeImplicitAutograd, m) { m.impl("appnp_propagate", &appnp_propagate); }

}  // namespace seastar

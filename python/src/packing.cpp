// Packed rows (nn/packing.h) in ember._C._nn: a padded batch's kept positions as rows
// [N, E], and the forwards of the layers that run on them - the ones nn::Transformer
// runs its encoder (and an unpadded target's decoder) with. A model composed in Python
// from these calls computes what nn::Transformer computes, to the bit; the padded
// forwards give the same values to rounding only (attention over packed rows is another
// kernel, and the projections of one input run fused).
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "nn/packing.h"
#include "nn/transformer.h"

namespace ember::python {

void bind_packing(py::module_& m) {
  py::module_ f = m.attr("_nn").cast<py::module_>();
  py::class_<nn::Packing>(f, "Packing")
      .def_static("of", &nn::Packing::of, py::arg("ids"), py::arg("pad_id"), NoGil())
      .def("pack", &nn::Packing::pack, py::arg("padded"), NoGil())
      .def("unpack", &nn::Packing::unpack, py::arg("packed"), NoGil())
      .def_readonly("batch", &nn::Packing::batch)
      .def_readonly("length", &nn::Packing::length)
      .def_readonly("count", &nn::Packing::count)
      .def_readonly("rows", &nn::Packing::rows)
      .def_readonly("positions", &nn::Packing::positions)
      .def_property_readonly("padding", [](const nn::Packing& p) { return tensor_or_none(p.padding.blocked()); });

  f.def("_dropout_packed", [](nn::Dropout& d, const Tensor& rows, const nn::Packing& packing) {
    return d.forward(rows, packing);
  }, py::arg("module"), py::arg("rows"), py::arg("packing"), NoGil());
  f.def("_encoder_layer_packed", [](nn::EncoderLayer& layer, const Tensor& rows, const nn::Packing& packing) {
    return layer.forward(rows, packing);
  }, py::arg("module"), py::arg("rows"), py::arg("packing"), NoGil());
  // memory as packed rows of memory_packing; tgt as packed rows of tgt_packing, or padded
  // [B, T, d_model] with tgt_key_padding_mask; always causal
  f.def("_decoder_layer_packed", [](nn::DecoderLayer& layer, const Tensor& tgt, const Tensor& memory,
                                    const nn::Packing& memory_packing, const nn::Packing* tgt_packing,
                                    const std::optional<Tensor>& tgt_key_padding_mask) {
    return layer.forward(tgt, memory,
                         {.tgt_key_padding_mask = blocked_mask(tgt_key_padding_mask),
                          .memory_packing = &memory_packing,
                          .tgt_packing = tgt_packing});
  }, py::arg("module"), py::arg("tgt"), py::arg("memory"), py::arg("memory_packing"),
     py::arg("tgt_packing") = py::none(), py::arg("tgt_key_padding_mask") = py::none(), NoGil());
}

}  // namespace ember::python

// seastar_layers._C: the layers' kernels, compiled at install time from the sources the compiler
// generates (csrc/generated/*.cpp, *.cu), and the torch ops that run them (csrc/generated/
// registration.cpp, registered with TORCH_LIBRARY when this library is loaded). This module object
// exists so that the extension installs and imports like any other.
#include <Python.h>

static struct PyModuleDef seastar_module = {
    PyModuleDef_HEAD_INIT, "_C",
    "Prebuilt seastar_layers kernels and the torch.ops.seastar_layers ops that run them.", -1, nullptr,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&seastar_module); }

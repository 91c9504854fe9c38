// seastar_layers._C: the layers' kernels, compiled at install time from the sources the compiler
// generates (csrc/generated/*.cpp). The kernels have a plain C ABI and are called through ctypes;
// this module object exists so that the extension installs and imports like any other.
#include <Python.h>

static struct PyModuleDef seastar_module = {
    PyModuleDef_HEAD_INIT, "_C",
    "Prebuilt seastar_layers kernels (entry points seastar_<program>forward/backward, C ABI).", -1, nullptr,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&seastar_module); }

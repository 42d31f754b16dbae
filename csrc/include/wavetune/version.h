// The ABI version of the C++ libraries (libwavetune_kernels, libwavetune_lookup). It changes whenever a
// public struct, enum or function signature in these headers changes, and it names the libraries' files and
// SONAMEs (libwavetune_kernels.so.<N>): a program built against other headers then fails to load, instead
// of reading a struct laid out differently. tests/test_abi.py holds it to the headers' declarations.
#pragma once

#define WAVETUNE_ABI_VERSION 26

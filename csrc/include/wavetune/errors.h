// Errors as exceptions that carry where they were raised and the values involved.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "wavetune/types.h"

namespace wavetune {

// A request the library cannot serve (bad arguments, a variant that cannot run the problem).
class WAVETUNE_API InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A failure of the CUDA runtime or of CUTLASS while serving a valid request.
class WAVETUNE_API RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class Error, class... Parts>
[[noreturn]] void raise(const char* file, int line, const Parts&... parts) {
  std::ostringstream os;
  os << "wavetune: ";
  (os << ... << parts);
  os << " [" << file << ":" << line << "]";
  throw Error(os.str());
}
}  // namespace detail

}  // namespace wavetune

#define WAVETUNE_INVALID(...) ::wavetune::detail::raise<::wavetune::InvalidArgument>(__FILE__, __LINE__, __VA_ARGS__)
#define WAVETUNE_FAIL(...) ::wavetune::detail::raise<::wavetune::RuntimeError>(__FILE__, __LINE__, __VA_ARGS__)

// Errors as exceptions whose message names the problem and the values involved. No source location: the
// messages reach users (the Python package's errors, the CLI's one line), for whom a build path is noise.
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
[[noreturn]] void raise(const Parts&... parts) {
  std::ostringstream os;
  os << "wavetune: ";
  (os << ... << parts);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace wavetune

#define WAVETUNE_INVALID(...) ::wavetune::detail::raise<::wavetune::InvalidArgument>(__VA_ARGS__)
#define WAVETUNE_FAIL(...) ::wavetune::detail::raise<::wavetune::RuntimeError>(__VA_ARGS__)

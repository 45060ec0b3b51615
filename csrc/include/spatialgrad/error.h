// Typed errors raised by argument validation. Every message follows
// "op(): expected X, but got Y" and names the offending argument.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace spatialgrad {

// Which Python exception (or aclnn status) an error maps to.
enum class ErrorKind {
  kInvalidArgument,  // ValueError / ACLNN_ERR_PARAM_INVALID
  kType,             // TypeError / ACLNN_ERR_PARAM_INVALID
  kIndex,            // IndexError / ACLNN_ERR_PARAM_INVALID
  kOverflow,         // OverflowError / ACLNN_ERR_PARAM_INVALID
  kNullPointer,      // (aclnn only) ACLNN_ERR_PARAM_NULLPTR
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {

template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream stream;
  (stream << ... << std::forward<Parts>(parts));
  return stream.str();
}

template <class... Parts>
[[noreturn]] void fail(ErrorKind kind, Parts&&... parts) {
  throw Error(kind, concat(std::forward<Parts>(parts)...));
}

}  // namespace detail
}  // namespace spatialgrad

// SG_CHECK(cond, "op(): expected x to be 4-D, but got ", ndim) throws a ValueError-kind error.
#define SG_CHECK(cond, ...)                                                                            \
  do {                                                                                                 \
    if (!(cond)) ::spatialgrad::detail::fail(::spatialgrad::ErrorKind::kInvalidArgument, __VA_ARGS__); \
  } while (0)

// Same, with an explicit ErrorKind (kType, kIndex, kOverflow, ...).
#define SG_CHECK_KIND(cond, kind, ...)                                                     \
  do {                                                                                     \
    if (!(cond)) ::spatialgrad::detail::fail(::spatialgrad::ErrorKind::kind, __VA_ARGS__); \
  } while (0)

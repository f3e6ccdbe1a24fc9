// The bindings' error messages, built without iostreams, and the SK_CHECK* macros that raise them.
//
// Why: in the H200 build (torch 2.11.0+cu130, the machine's g++ and libstdc++) a TORCH_CHECK whose
// message inserts a number into the std::ostringstream of c10::str crashed the process (SIGSEGV
// in the library's c10::detail::_str_wrapper; results/h200/bad_input_probe.txt), while
// messages made of strings alone raised as they should. sk::bind::text formats numbers, sizes,
// devices and dtypes with std::to_string / snprintf and hands TORCH_CHECK one std::string, so a
// bad input is an exception on every toolchain. Every check of the bindings and of the generated
// wrappers (kernels_ext/checks.py) goes through these macros.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

namespace sk::bind {
namespace detail {

inline void append(std::string& s, c10::IntArrayRef dims) {
  s += '[';
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims[i]);
  }
  s += ']';
}

inline void append(std::string& s, const c10::Device& d) { s += d.str(); }

inline void append(std::string& s, c10::ScalarType t) { s += c10::toString(t); }

template <class T>
void append(std::string& s, const T& v) {
  using U = std::decay_t<T>;
  if constexpr (std::is_same_v<U, bool>) {
    s += v ? "true" : "false";
  } else if constexpr (std::is_same_v<U, char>) {
    s += v;
  } else if constexpr (std::is_integral_v<U>) {
    s += std::to_string(v);
  } else if constexpr (std::is_floating_point_v<U>) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(v));
    s += buf;
  } else {
    static_assert(std::is_convertible_v<const T&, std::string_view>,
                  "sk::bind::text: no formatting for this argument type");
    s += std::string_view(v);
  }
}

}  // namespace detail

// The pieces as one string: numbers in decimal (%g for floating point), sizes as [a, b],
// devices as "cuda:0", dtypes by c10's name.
template <class... Args>
std::string text(const Args&... args) {
  std::string s;
  (detail::append(s, args), ...);
  return s;
}

}  // namespace sk::bind

// TORCH_CHECK and its typed variants, the message built by sk::bind::text (only on failure).
#define SK_CHECK(cond, ...) TORCH_CHECK(cond, ::sk::bind::text(__VA_ARGS__))
#define SK_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE(cond, ::sk::bind::text(__VA_ARGS__))
#define SK_CHECK_TYPE(cond, ...) TORCH_CHECK_TYPE(cond, ::sk::bind::text(__VA_ARGS__))
#define SK_CHECK_INDEX(cond, ...) TORCH_CHECK_INDEX(cond, ::sk::bind::text(__VA_ARGS__))
#define SK_CHECK_NOT_IMPLEMENTED(cond, ...) TORCH_CHECK_NOT_IMPLEMENTED(cond, ::sk::bind::text(__VA_ARGS__))

#pragma once
// vessel::result<T>: a value or a std::error_code, from Boost.Outcome (Debian's Boost 1.74 ships it;
// std::expected needs C++23 and clang-14 cannot use libstdc++'s).

#include <system_error>

#include <boost/outcome/result.hpp>
#include <boost/outcome/try.hpp>

namespace vessel {

namespace outcome = boost::outcome_v2;

template <class T>
using result = outcome::result<T, std::error_code>;  // value() on an error throws std::system_error

}  // namespace vessel

/// Returns the error of `expr` from the enclosing function, or yields its value.
#define VESSEL_TRY BOOST_OUTCOME_TRY

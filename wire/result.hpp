#pragma once
// vessel::result<T>: a value or a std::error_code, from Boost.Outcome (Debian's Boost 1.74 ships
// it; std::expected needs C++23 and clang-14 cannot use libstdc++'s).
//
// std_result.hpp, not result.hpp: outcome::result is the same basic_result for a std::error_code,
// but its header brings Boost.System and Boost.Exception (for boost::system::error_code, which we
// never use), and nearly every file includes this one: ~1.6 s more per file at -O3 and ~2.2 s
// under ASan+UBSan (g++ 12, a file of standard headers alone with each).

#include <system_error>

#include <boost/outcome/std_result.hpp>
#include <boost/outcome/try.hpp>

namespace vessel {

namespace outcome = boost::outcome_v2;

template <class T>
using result =
    outcome::std_result<T, std::error_code>;  // value() on an error throws std::system_error

}  // namespace vessel

/// Returns the error of `expr` from the enclosing function, or yields its value.
#define VESSEL_TRY BOOST_OUTCOME_TRY

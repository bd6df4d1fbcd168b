#pragma once
// Elementwise reduction kernels used by every reducing collective. Buffers are raw bytes because
// they come straight from frames and pooled slices: any alignment is accepted.

#include <cstddef>
#include <cstdint>
#include <span>

#include "collectives/dtype.hpp"
#include "wire/result.hpp"

namespace vessel::collectives {

/// inout[i] = inout[i] op in[i] for every element. avg accumulates a sum (see finish_average).
/// Integers wrap around (two's complement) on sum and prod. float16 and bfloat16 are reduced in
/// float32 and rounded back to nearest-even. min and max on floats: NaN in either operand gives
/// NaN (IEEE 754-2019 minimum/maximum); for equal operands (+0 and -0) inout is kept.
/// Errors: unsupported_op (bitwise op on a float type), unsupported_type, size_mismatch (lengths
/// differ or are not a multiple of size_of(t)).
result<void> reduce_into(std::span<std::byte> inout, std::span<const std::byte> in, dtype t,
                         reduce_op op) noexcept;

/// Divides every element by `contributors` once an avg has been summed: integers truncate
/// toward zero, floats divide (float16/bfloat16 in float32, rounded back).
/// Errors: invalid_argument (zero contributors), unsupported_type, size_mismatch.
result<void> finish_average(std::span<std::byte> inout, dtype t,
                            std::uint32_t contributors) noexcept;

}  // namespace vessel::collectives

#pragma once
// Elementwise reduction kernels used by every reducing collective. Buffers are raw bytes because
// they come straight from frames and pooled slices: any alignment is accepted.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "collectives/dtype.hpp"
#include "wire/result.hpp"

namespace vessel::collectives {

/// The instruction sets the kernels are compiled for; the best one the CPU has is chosen once.
enum class kernel_isa : std::uint8_t {
  portable,  ///< 16-byte vectors: x86-64 baseline SSE2 (or the target's baseline, e.g. NEON)
  avx2,      ///< 32-byte AVX2 vectors, F16C conversions for float16
};

/// The set reduce_into uses: the best the CPU supports, or portable when
/// VESSEL_REDUCE_ISA=portable.
kernel_isa default_kernel_isa() noexcept;
/// Whether this CPU can run `isa`.
bool kernel_isa_supported(kernel_isa isa) noexcept;
std::string_view to_string(kernel_isa isa) noexcept;

/// inout[i] = inout[i] op in[i] for every element. avg accumulates a sum (see finish_average).
/// Integers wrap around (two's complement) on sum and prod. float16 and bfloat16 are reduced in
/// float32 and rounded back to nearest-even. min and max on floats: NaN in either operand gives
/// NaN (IEEE 754-2019 minimum/maximum, which NaN is unspecified); for operands that compare
/// equal (+0 and -0) inout is kept. The result does not depend on the kernel_isa, NaN payloads
/// aside, so ranks on different CPUs agree.
/// `in` may be `inout` itself (x op x); partially overlapping spans are not supported.
/// Errors: unsupported_op (bitwise op on a float type), unsupported_type, size_mismatch (lengths
/// differ or are not a multiple of size_of(t)).
result<void> reduce_into(std::span<std::byte> inout, std::span<const std::byte> in, dtype t,
                         reduce_op op) noexcept;
/// The same with a chosen instruction set (tests and benchmarks compare them); an unsupported
/// `isa` is unsupported_isa.
result<void> reduce_into(std::span<std::byte> inout, std::span<const std::byte> in, dtype t,
                         reduce_op op, kernel_isa isa) noexcept;

/// out[i] = a[i] op b[i]: reduce_into with the left operand read from `a` instead of `out`, so a
/// collective reduces its own input and a peer's chunk into the output in one pass (a copy of the
/// input first would cost a pass more over memory). `out` may be `a` itself; `b` must not overlap
/// `out`. Same results and errors as reduce_into (all three lengths equal).
result<void> reduce_to(std::span<std::byte> out, std::span<const std::byte> a,
                       std::span<const std::byte> b, dtype t, reduce_op op) noexcept;
/// The same with a chosen instruction set; an unsupported `isa` is unsupported_isa.
result<void> reduce_to(std::span<std::byte> out, std::span<const std::byte> a,
                       std::span<const std::byte> b, dtype t, reduce_op op,
                       kernel_isa isa) noexcept;

/// Divides every element by `contributors` once an avg has been summed: integers truncate
/// toward zero, floats divide (float16/bfloat16 in float32, rounded back).
/// Errors: invalid_argument (zero contributors), unsupported_type, size_mismatch.
result<void> finish_average(std::span<std::byte> inout, dtype t,
                            std::uint32_t contributors) noexcept;

}  // namespace vessel::collectives

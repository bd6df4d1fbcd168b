#pragma once
// VESSEL_TRACE for collectives::communicator: the recorder lives in actors/trace_recorder.hpp
// (vessel::comm's own barrier and allreduce record into the same one); here are its names in
// this namespace, for the communicator, the tools and the tests, and describe(), which names a
// collective's operation, element type and reduction in a trace event.

#include "actors/trace_recorder.hpp"
#include "collectives/dtype.hpp"
#include "collectives/operation.hpp"

namespace vessel::collectives {

using actors::collective_trace;
using actors::trace_event;
using actors::trace_lanes_per_communicator;
using actors::trace_now;
using actors::trace_peers;
using actors::trace_recorder;
using actors::trace_traffic;

/// Names `op` (and the type, and the reduction when `op` reduces, the root's presence when it has
/// one) in `e`, with the text to_string() gives them: the event outlives no name.
void describe(trace_event& e, collective_op op, dtype type, reduce_op reduction) noexcept;

}  // namespace vessel::collectives

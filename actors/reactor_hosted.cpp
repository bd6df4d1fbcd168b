#include "actors/reactor_hosted.hpp"

#include <caf/actor_system.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>

namespace vessel::actors {

reactor_execution_unit::reactor_execution_unit(caf::actor_system& sys, io::reactor& reactor,
                                               std::size_t max_throughput) noexcept
    : sys_{sys}, reactor_{reactor}, max_throughput_{max_throughput} {}

resident_unit::resident_unit(reactor_execution_unit& host, reactor_resident& resident) noexcept
    : caf::execution_unit{&host.system()}, host_{&host}, resident_{&resident} {}

void resident_unit::exec_later(caf::resumable* job) {
  if (job == resident_->job()) {
    host_->schedule(*resident_);
  } else {
    system().scheduler().enqueue(job);
  }
}

void reactor_execution_unit::schedule(reactor_resident& resident) {
  // CAF schedules a job once per time its mailbox goes from blocked to non-empty, holding a
  // reference for the scheduled run (released in resume()), so at most one run is posted per job.
  if (!reactor_.post(io::work_item{&reactor_execution_unit::resume, &resident}))
    sys_.scheduler().enqueue(resident.job());
}

void reactor_execution_unit::resume(void* ctx) noexcept {
  auto* resident = static_cast<reactor_resident*>(ctx);
  auto& unit = resident->unit();
  auto* job = resident->job();
  switch (job->resume(&resident->own_unit(), unit.max_throughput_)) {
    case caf::resumable::resume_later:
      unit.schedule(*resident);  // more mail: after the I/O this turn has waiting
      break;
    default:  // awaiting_message, done, shutdown_execution_unit: the run's reference goes
      intrusive_ptr_release(job);
      break;
  }
}

}  // namespace vessel::actors

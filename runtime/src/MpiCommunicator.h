// The MPI implementation of placert::Communicator and the few world-wide MPI calls the runtime
// makes outside the plan (initialization, metrics, checks). Internal: mpi.h stays out of the
// public header.
#ifndef PLACERT_SRC_MPICOMMUNICATOR_H
#define PLACERT_SRC_MPICOMMUNICATOR_H

#include "placert/placert.h"

namespace placert {

/// MPI_Init (as a singleton when not launched by mpirun) with errors returned, not fatal.
Status initializeMpi(int *argc, char ***argv, bool &owns, int &rank, int &worldSize);
void finalizeMpi();
void abortMpi(int code);

/// Splits the world: ranks with the same `color` form a group, ordered by `key`.
Status createMpiCommunicator(const std::string &name, int color, int key, int worldRank,
                             std::unique_ptr<Communicator> &result);

Status worldSumDoubles(double *values, int count, int rank);
Status worldReduceFloats(float *values, int64_t count, int root, int rank);
Status worldGatherStrings(const std::string &mine, std::vector<std::string> &all, int rank);
int worldBroadcast(int value);

} // namespace placert

#endif // PLACERT_SRC_MPICOMMUNICATOR_H

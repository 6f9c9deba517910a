// Distributed training on MPI (OpenMPI): the process group and collectives on tensors.
// Every MPI call of ember goes through this interface; an MPI failure is an ember::Error
// naming the function and carrying MPI's own error string.
//
// A program started by mpirun calls init() once (it reads mpirun's environment) and
// finalize() before it exits; started without mpirun, it is a world of one process.
// Collectives must be called by every rank in the same order with tensors of the same
// shape and dtype (float32, float64 or int64); they work on contiguous tensors in place,
// or return new ones.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace ember::dist {

void init(int* argc = nullptr, char*** argv = nullptr);
void finalize();
bool initialized();
int rank();        // 0 when not initialised
int world_size();  // 1 when not initialised

enum class ReduceOp { Sum, Mean };

// Every rank's t replaced by the elementwise sum (or mean) over the ranks. The result is
// bitwise the same on every rank: reduced to rank 0 in a fixed order, then broadcast.
void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
// Every rank's t replaced by root's.
void broadcast(Tensor& t, int root = 0);
// [world_size, ...t.shape]: every rank's t, in rank order.
Tensor allgather(const Tensor& t);
void barrier();

}  // namespace ember::dist

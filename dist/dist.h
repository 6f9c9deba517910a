// Distributed training on MPI (OpenMPI): the process group and collectives on tensors.
// Every MPI call of ember goes through this interface; an MPI failure is an ember::Error
// naming the function and carrying MPI's own error string. Built without MPI, it is a
// world of one process (dist_local.cpp). dist/mpi_comm.h gives the communicator itself.
//
// A program started by mpirun calls init() once (it reads mpirun's environment) and
// finalize() before it exits; started without mpirun, it is a world of one process.
// Collectives must be called by every rank in the same order with tensors of the same
// shape and dtype (float32, float64 or int64); they work on contiguous tensors in place,
// or return new ones.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace ember::dist {

// Starts MPI (unless the program already did) and makes ember's communicator; a second
// call does nothing. An Error carrying MPI's message when MPI fails. Built without MPI, it
// does nothing.
void init(int* argc = nullptr, char*** argv = nullptr);
// Frees the communicator and ends MPI; does nothing when not initialised.
void finalize();
bool initialized();  // Whether init() has run and finalize() has not.
int rank();  // 0 when not initialised
int world_size();  // 1 when not initialised

// Whether this process was started by mpirun (its environment says so): a program calls
// init() then, and runs as a world of one without MPI otherwise.
bool launched_by_mpirun();
// Ends every rank of the job with this exit code (MPI_Abort): for a rank that cannot go
// on, so that no other rank waits for it in a collective.
[[noreturn]] void abort_job(int code);

// The threads this process's share of the machine's cores comes to: the processes of
// the job on this machine (mpirun's OMPI_COMM_WORLD_LOCAL_SIZE, else the world size)
// share num_threads() cores evenly, each taking at least one.
int threads_per_process();

// How a reduction combines the ranks' tensors: Mean divides the sum by the world size, and
// needs a float32 or float64 tensor.
enum class ReduceOp { Sum, Mean };

// Every rank's t replaced by the elementwise sum (or mean) over the ranks. The result is
// bitwise the same on every rank: reduced to rank 0 in a fixed order, then broadcast. An
// Error when t is undefined, not contiguous, not float32, float64 or int64 (float only
// for Mean), or has more than 2^31 - 1 elements.
void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum);

// An allreduce under way (MPI_Iallreduce): started at once, finished by wait(). MPI
// moves it on only inside MPI calls, so test() - which says whether it is done - also
// makes progress. Every rank must start its reductions in the same order. OpenMPI's
// algorithms for it (binomial tree, ring, reduce-scatter + allgather) sum in a fixed order
// for a given world size and size, and give every rank the same bits: the tests check it,
// and check_same_on_all_ranks can check it during training.
class Work {
 public:
  // Starts reducing t (which shares its storage with the caller's) in place; the checks
  // and Errors of allreduce. allreduce_async is the usual way to make one.
  Work(Tensor t, ReduceOp op);
  ~Work();  // waits for a reduction still under way (MPI owns its buffer until then)
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  bool test();  // Whether the reduction is done; moves it on.
  void wait();  // Blocks until the reduction is done (a no-op after that).

 private:
  void complete();
  struct Request;  // MPI's handle
  Tensor t_;
  ReduceOp op_;
  std::unique_ptr<Request> request_;
  bool done_ = false;
};
// Starts an allreduce of t in place and returns its Work; t must not be read or written
// until the Work is done.
std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum);
// Every rank's t replaced by root's.
void broadcast(Tensor& t, int root = 0);
// [world_size, ...t.shape]: every rank's t, in rank order.
Tensor allgather(const Tensor& t);
void barrier();  // Waits until every rank has called it; nothing when not initialised.

// Whether `flag` holds on any rank.
bool any(bool flag);
// Every rank's generator set to root's state.
void broadcast(Generator& gen, int root = 0);

// The rows [first, first + count) of a global batch of `rows` that `rank` takes: the batch
// cut into world_size consecutive parts as even as can be, in rank order (the first
// rows % world_size ranks take one more). Every rank walks the same global order.
struct Shard {
  // The first row and the number of rows.
  ///@{
  int64_t first = 0, count = 0;
  ///@}
};
// The shard of rank (this process's, by default); an Error when rank is not in
// [0, world_size) or rows is negative.
///@{
Shard shard(int64_t rows, int rank, int world_size);
inline Shard shard(int64_t rows) { return shard(rows, rank(), world_size()); }
///@}

// A 64-bit digest of the tensors' bytes (FNV-1a), for checking that ranks agree.
uint64_t checksum(const std::vector<Tensor>& tensors);
// Fails, naming the ranks that differ from rank 0, unless every rank's checksum of
// `tensors` is the same. `what` names them in the message ("parameters").
void check_same_on_all_ranks(const std::vector<Tensor>& tensors, const std::string& what);
// The same for several parts in one collective; the message names each part that differs
// and the ranks it differs on ("the parameters and optimizer state of rank(s) 1 differ
// from rank 0's"), then `context`. Every rank fails alike.
struct Part {
  std::string name;  // The part's name in the message ("the parameters").
  std::vector<Tensor> tensors;  // The tensors whose checksum is compared.
};
// See Part: one collective that checks every part.
void check_same_on_all_ranks(const std::vector<Part>& parts, const std::string& context = "");

}  // namespace ember::dist

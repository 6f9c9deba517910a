// The MPI calls behind dist.h.
#include "dist/dist.h"

#include <mpi.h>

#include <string>

#include "core/ops.h"

namespace ember::dist {

namespace {

bool g_initialized = false;

// MPI errors come back as codes (MPI_ERRORS_RETURN on the world communicator): each one
// becomes an Error naming the call and carrying MPI's string.
void check(int code, const char* op, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail(op, call, " failed: ", std::string(text, (size_t)len));
}

MPI_Datatype mpi_type(const char* op, const Tensor& t) {
  switch (t.dtype()) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
    default: break;
  }
  fail(op, "expected a float32, float64 or int64 tensor, got ", dtype_name(t.dtype()), " of shape ", t.shape());
}

void need_contiguous(const char* op, const Tensor& t) {
  if (!t.defined()) fail(op, "got an undefined tensor");
  if (!t.is_contiguous())
    fail(op, "expected a contiguous tensor (it is reduced in place), got shape ", t.shape(), " with strides ",
         t.strides());
  if (t.numel() > INT32_MAX) fail(op, "a tensor of ", t.numel(), " elements is more than one call can carry");
}

}  // namespace

void init(int* argc, char*** argv) {
  if (g_initialized) return;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) check(MPI_Init(argc, argv), "dist::init", "MPI_Init");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  g_initialized = true;
}

void finalize() {
  if (!g_initialized) return;
  g_initialized = false;
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

bool initialized() { return g_initialized; }

int rank() {
  if (!g_initialized) return 0;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  if (!g_initialized) return 1;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void allreduce(Tensor& t, ReduceOp op) {
  const char* name = "dist::allreduce";
  need_contiguous(name, t);
  MPI_Datatype type = mpi_type(name, t);
  if (op == ReduceOp::Mean && !is_floating(t.dtype()))
    fail(name, "a mean needs a float32 or float64 tensor, got ", dtype_name(t.dtype()));
  if (!g_initialized || world_size() == 1 || t.numel() == 0) return;
  const int n = (int)t.numel();
  // MPI_Reduce sums in the same order for a given world size, and the broadcast gives
  // every rank the very same bits
  if (rank() == 0) check(MPI_Reduce(MPI_IN_PLACE, t.raw_data(), n, type, MPI_SUM, 0, MPI_COMM_WORLD), name, "MPI_Reduce");
  else check(MPI_Reduce(t.raw_data(), nullptr, n, type, MPI_SUM, 0, MPI_COMM_WORLD), name, "MPI_Reduce");
  if (op == ReduceOp::Mean && rank() == 0) {
    NoGradGuard ng;
    Tensor(t).copy_(div(t, (double)world_size()));
  }
  check(MPI_Bcast(t.raw_data(), n, type, 0, MPI_COMM_WORLD), name, "MPI_Bcast");
  t.storage()->version++;
}

void broadcast(Tensor& t, int root) {
  const char* name = "dist::broadcast";
  need_contiguous(name, t);
  MPI_Datatype type = mpi_type(name, t);
  if (root < 0 || root >= world_size()) fail(name, "root ", root, " is not a rank of a world of ", world_size());
  if (!g_initialized || world_size() == 1 || t.numel() == 0) return;
  check(MPI_Bcast(t.raw_data(), (int)t.numel(), type, root, MPI_COMM_WORLD), name, "MPI_Bcast");
  t.storage()->version++;
}

Tensor allgather(const Tensor& t_in) {
  const char* name = "dist::allgather";
  if (!t_in.defined()) fail(name, "got an undefined tensor");
  Tensor t = t_in.contiguous();
  MPI_Datatype type = mpi_type(name, t);
  Shape s = t.shape();
  s.insert(s.begin(), world_size());
  Tensor out = empty(s, t.dtype());
  if (!g_initialized || world_size() == 1) {
    if (t.numel()) out.select(0, 0).copy_(t);
    return out;
  }
  if (t.numel() == 0) return out;
  need_contiguous(name, t);
  check(MPI_Allgather(t.raw_data(), (int)t.numel(), type, out.raw_data(), (int)t.numel(), type, MPI_COMM_WORLD), name,
        "MPI_Allgather");
  return out;
}

void barrier() {
  if (!g_initialized) return;
  check(MPI_Barrier(MPI_COMM_WORLD), "dist::barrier", "MPI_Barrier");
}

}  // namespace ember::dist

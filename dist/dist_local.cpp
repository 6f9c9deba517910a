// dist.h without MPI: a world of one process, whose collectives leave tensors as they are.
#include <cstdio>
#include <cstdlib>

#include "core/ops.h"
#include "dist/dist.h"

namespace ember::dist {

namespace {
void need(const char* op, const Tensor& t) {
  if (!t.defined()) fail(op, "got an undefined tensor");
  if (!t.is_contiguous()) fail(op, "expected a contiguous tensor, got shape ", t.shape(), " with strides ", t.strides());
}
}  // namespace

void init(int*, char***) {}
void finalize() {}
bool initialized() { return false; }
int rank() { return 0; }
int world_size() { return 1; }
bool launched_by_mpirun() { return false; }
void abort_job(int code) {
  std::fflush(stdout);
  std::exit(code);
}
void allreduce(Tensor& t, ReduceOp) { need("dist::allreduce", t); }
struct Work::Request {};
Work::Work(Tensor t, ReduceOp op) : t_(std::move(t)), op_(op) {
  need("dist::allreduce_async", t_);
  done_ = true;
}
Work::~Work() = default;
bool Work::test() { return true; }
void Work::wait() {}
void Work::complete() {}
std::unique_ptr<Work> allreduce_async(Tensor& t, ReduceOp op) { return std::make_unique<Work>(t, op); }
void broadcast(Tensor& t, int root) {
  need("dist::broadcast", t);
  if (root != 0) fail("dist::broadcast", "root ", root, " is not a rank of a world of 1");
}
Tensor allgather(const Tensor& t) { return t.contiguous().unsqueeze(0).clone(); }
void barrier() {}

}  // namespace ember::dist

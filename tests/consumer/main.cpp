// Fits y = 3x - 1 with one gradient step loop through the installed library, checks the
// gradient of a small matmul by finite differences, writes and reads back an HDF5 file
// (argv[1]) and asks ember::dist for a shard; says which version of ember it runs with.
#include <ember/ember.h>  // the whole API

#include <cstdio>
#include <string>

using namespace ember;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer FILE.h5\n");
    return 2;
  }
  Tensor x = from_vector(std::vector<double>{0, 1, 2, 3}, {4, 1});
  Tensor y = from_vector(std::vector<double>{-1, 2, 5, 8}, {4, 1});
  Tensor w = zeros({1, 1}, kFloat64).requires_grad_();
  Tensor b = zeros({1}, kFloat64).requires_grad_();
  for (int step = 0; step < 500; step++) {
    Tensor loss = mean(square(sub(add(matmul(x, w), b), y)));
    loss.backward();
    NoGradGuard ng;
    w.copy_(sub(w, mul(w.grad(), 0.1)));
    b.copy_(sub(b, mul(b.grad(), 0.1)));
    w.zero_grad();
    b.zero_grad();
  }
  std::printf("w = %.4f, b = %.4f\n", w.item(), b.item());
  auto report = gradcheck([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
                          {randn({2, 3}, kFloat64).requires_grad_(), randn({3, 2}, kFloat64).requires_grad_()});
  std::printf("%s", report.to_string().c_str());
  nn::MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2, .dtype = kFloat64});
  Tensor seq = randn({1, 3, 8}, kFloat64).requires_grad_();
  auto mha_report = gradcheck([&](const std::vector<Tensor>& in) { return mha.forward(in[0], in[0], in[0]).output; }, {seq});
  std::printf("%s", mha_report.to_string().c_str());
  {
    h5::Writer out(argv[1]);
    out.write("w", w);
    out.close();
  }
  const double saved = h5::Reader(argv[1]).read("w").item();
  const dist::Shard shard = dist::shard(10, 1, 3);
  std::printf("read back w = %.4f; rank 1 of 3 takes rows [%lld, %lld) of 10\n", saved, (long long)shard.first,
              (long long)(shard.first + shard.count));
  bool ok = std::abs(w.item() - 3) < 1e-3 && std::abs(b.item() + 1) < 1e-3 && report.passed && mha_report.passed &&
            saved == w.item() && shard.first == 4 && shard.count == 3;
  std::printf("ember %s\n", ember::version());
  ok = ok && std::string(ember::version()) == PACKAGE_VERSION;
  std::printf("%s\n", ok ? "consumer OK" : "consumer FAILED");
  return ok ? 0 : 1;
}

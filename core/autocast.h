// Mixed precision, as torch.autocast("cpu", dtype=torch.bfloat16): while an Autocast lives
// on a thread, the float32 matrix products that thread runs - matmul, Linear, attention's
// products, forward and backward - round their inputs to bfloat16 and sum the products in
// float32; every other op (softmax, LayerNorm, cross-entropy, the residual stream, the
// optimizer) and every tensor stays float32, the parameters included. A product's
// backward runs at the precision its forward ran at, wherever backward() is called.
//
//   {
//     ember::Autocast bf16;                      // bfloat16 products from here
//     Tensor loss = nn::cross_entropy(model.forward(src, tgt_in), ...);
//     loss.backward();                           // (also bfloat16 outside the scope)
//   }
//
// The products run in ember's own kernels on processors with AVX512_BF16 (Intel Cooper
// Lake and Sapphire Rapids onward, AMD Zen 4 onward), at about twice float32's rate; they
// flush subnormal inputs to zero, as the instructions do. On other processors they stay
// float32, and the first Autocast of the process says so on stderr. float64 products, the
// skinny products of a few rows (a decoder's single step) and products of fewer than 2^17
// multiply-adds (attention over short sequences) are never converted.
#pragma once

namespace ember {

// Whether float32 matrix products on this thread take bfloat16 inputs now.
bool autocast_enabled();
// Turns them on or off for this thread, as torch.set_autocast_cpu_enabled; the first time
// it is turned on in a process without bf16_products_available(), it says so on stderr.
void set_autocast_enabled(bool on);

// Whether this processor runs ember's bfloat16 products (AVX512_BF16), unless the
// environment variable EMBER_NO_BF16 is set (to anything but empty, 0, false, no or off:
// then as on a processor without them).
bool bf16_products_available();

// Turns bfloat16 matrix products on for this thread (or off, with enabled false) until it
// is destroyed; scopes nest, each restoring the setting it found.
class Autocast {
 public:
  explicit Autocast(bool enabled = true);  // On (or off), saying once if this CPU cannot.
  ~Autocast();  // Restores the setting before.
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool prev_;
};

namespace autocast_detail {
// Sets this thread's setting without the notice (the engine, running a node's backward at
// its forward's precision; the kernels, on their worker threads); returns the previous.
bool set_enabled(bool on);
}  // namespace autocast_detail

}  // namespace ember

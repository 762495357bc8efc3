// One pipeline stage's slice of the model, and the synthetic data.
//
// The model is a stack of `layers` Linear+GELU blocks (with residual
// connections), split evenly over the stages; the last stage adds a Linear
// head and computes an MSE loss. The data is learnable and deterministic:
// inputs x ~ N(0, 1) drawn from (seed, step, microbatch, replica), targets
// tanh(x W) for a fixed random W, so every stage can make what it needs
// without shipping data between ranks, and replicas see different samples.
//
// Thread safety: not thread-safe; one per rank.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "tensor_parallel.h"

namespace lens::train {

class StageModelImpl : public torch::nn::Module {
 public:
  // Blocks [first_layer, first_layer + count) of the stack; `head` on the
  // last stage. Initial weights depend only on (seed, layer), so replicas
  // start identical. With `tp` (tensor parallelism over more than one rank)
  // each Linear is split over the TP group (tensor_parallel.h): even layers
  // and the head column-parallel, odd layers row-parallel, the function the
  // same.
  StageModelImpl(int first_layer, int count, int hidden, bool head, std::uint64_t seed,
                 TensorParallel* tp = nullptr);
  torch::Tensor forward(torch::Tensor x);

 private:
  // One block's or the head's Linear, whole or tensor-parallel.
  static torch::Tensor linear(const std::shared_ptr<torch::nn::Module>& layer,
                              const torch::Tensor& x);
  torch::nn::ModuleList blocks_;
  std::shared_ptr<torch::nn::Module> head_;
};
TORCH_MODULE(StageModel);

class SyntheticData {
 public:
  SyntheticData(int hidden, int microbatch_size, std::uint64_t seed);
  torch::Tensor input(std::int64_t step, int microbatch, int replica) const;
  torch::Tensor target(std::int64_t step, int microbatch, int replica) const;

 private:
  std::uint64_t sample_seed(std::int64_t step, int microbatch, int replica) const;
  int hidden_;
  int microbatch_size_;
  std::uint64_t seed_;
  torch::Tensor true_weight_;
};

}  // namespace lens::train

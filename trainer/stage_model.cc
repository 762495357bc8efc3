#include "stage_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

namespace lens::train {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

StageModelImpl::StageModelImpl(int first_layer, int count, int hidden, bool head,
                               std::uint64_t seed, TensorParallel* tp) {
  const bool split = tp != nullptr && tp->size() > 1;
  const auto make = [&](ParallelLinearImpl::Split how) -> std::shared_ptr<torch::nn::Module> {
    if (!split) return torch::nn::Linear(hidden, hidden).ptr();
    return ParallelLinear(hidden, how, tp).ptr();
  };
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < count; ++i) {
    const int layer = first_layer + i;
    torch::manual_seed(mix(seed ^ static_cast<std::uint64_t>(layer)));
    blocks_->push_back(make(layer % 2 == 0 ? ParallelLinearImpl::Split::kColumn
                                           : ParallelLinearImpl::Split::kRow));
  }
  if (head) {
    torch::manual_seed(mix(seed ^ 0xfeedULL));
    head_ = register_module("head", make(ParallelLinearImpl::Split::kColumn));
  }
}

torch::Tensor StageModelImpl::linear(const std::shared_ptr<torch::nn::Module>& layer,
                                     const torch::Tensor& x) {
  if (auto* whole = layer->as<torch::nn::Linear>()) return whole->forward(x);
  return layer->as<ParallelLinear>()->forward(x);
}

torch::Tensor StageModelImpl::forward(torch::Tensor x) {
  for (const auto& block : *blocks_) x = x + torch::gelu(linear(block, x)) * 0.5;
  if (head_) x = linear(head_, x);
  return x;
}

SyntheticData::SyntheticData(int hidden, int microbatch_size, std::uint64_t seed)
    : hidden_(hidden), microbatch_size_(microbatch_size), seed_(seed) {
  auto gen = at::detail::createCPUGenerator(mix(seed ^ 0x7a11ULL));
  true_weight_ = torch::randn({hidden, hidden}, gen) / std::sqrt(static_cast<double>(hidden));
}

std::uint64_t SyntheticData::sample_seed(std::int64_t step, int microbatch, int replica) const {
  return mix(
      mix(mix(seed_ ^ static_cast<std::uint64_t>(step)) ^ static_cast<std::uint64_t>(microbatch)) ^
      static_cast<std::uint64_t>(replica));
}

torch::Tensor SyntheticData::input(std::int64_t step, int microbatch, int replica) const {
  auto gen = at::detail::createCPUGenerator(sample_seed(step, microbatch, replica));
  return torch::randn({microbatch_size_, hidden_}, gen);
}

torch::Tensor SyntheticData::target(std::int64_t step, int microbatch, int replica) const {
  return torch::tanh(torch::matmul(input(step, microbatch, replica), true_weight_));
}

}  // namespace lens::train

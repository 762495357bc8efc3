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
                               std::uint64_t seed) {
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < count; ++i) {
    torch::manual_seed(mix(seed ^ static_cast<std::uint64_t>(first_layer + i)));
    blocks_->push_back(torch::nn::Linear(hidden, hidden));
  }
  if (head) {
    torch::manual_seed(mix(seed ^ 0xfeedULL));
    head_ = register_module("head", torch::nn::Linear(hidden, hidden));
  }
}

torch::Tensor StageModelImpl::forward(torch::Tensor x) {
  for (const auto& block : *blocks_) {
    x = x + torch::gelu(block->as<torch::nn::Linear>()->forward(x)) * 0.5;
  }
  if (head_) x = head_->forward(x);
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

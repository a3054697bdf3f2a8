// expect: the child computes under another policy bundle
// A bf16 module registered under an fp32 module is refused at compile time.
#include <memory>

#include "accel/nn/layers.hpp"

struct Block : accel::nn::BasicModule<Block> {
  Block() : BasicModule("Block") {
    register_module("proj", std::make_shared<accel::nn::BasicLinear<accel::policies<accel::policy::bf16>>>(4, 4));
  }
};

int main() { return Block().class_name().empty() ? 1 : 0; }

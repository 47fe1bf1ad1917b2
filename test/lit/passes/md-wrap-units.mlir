// RUN: sed -e 's/WRAP/blocks(h)/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-wrap-units))' | FileCheck %s --check-prefix=BLOCKS
// RUN: sed -e 's/WRAP/none/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-wrap-units))' | FileCheck %s --check-prefix=NONE
// RUN: sed -e 's/WRAP/size(min_params = 20)/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-wrap-units))' | FileCheck %s --check-prefix=SIZE

// blocks(h): one unit per instance of h, numbered in md.param order; the
// rest in the root unit.
// BLOCKS: md.param @emb : tensor<8x4xf32> {{.*}} unit 0
// BLOCKS: md.param @h.0.w : tensor<4x4xf32> {{.*}} unit 1
// BLOCKS: md.param @h.0.b : tensor<4xf32> {{.*}} unit 1
// BLOCKS: md.param @h.1.w : tensor<4x4xf32> {{.*}} unit 2
// BLOCKS: md.param @h.1.b : tensor<4xf32> {{.*}} unit 2
// BLOCKS: md.param @head : tensor<3x4xf32> {{.*}} unit 0

// none: one unit: all six params in unit 0, and no other param.
// NONE-COUNT-6: md.param {{.*}} unit 0{{$}}
// NONE-NOT: md.param

// size(min_params = 20): emb (32) closes unit 0; h.0.w + h.0.b (20) unit 1;
// h.1.w + h.1.b (20) unit 2; head (12) is too small alone and joins unit 2.
// SIZE: md.param @emb : tensor<8x4xf32> {{.*}} unit 0
// SIZE: md.param @h.0.w : tensor<4x4xf32> {{.*}} unit 1
// SIZE: md.param @h.0.b : tensor<4xf32> {{.*}} unit 1
// SIZE: md.param @h.1.w : tensor<4x4xf32> {{.*}} unit 2
// SIZE: md.param @h.1.b : tensor<4xf32> {{.*}} unit 2
// SIZE: md.param @head : tensor<3x4xf32> {{.*}} unit 2

md.model @m attributes {plan = #md.plan<name = "p", preset = "fsdp-full", shard = full, wrap = WRAP, precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = true, checkpoint_activations = none>} {
  md.param @emb : tensor<8x4xf32> init <zeros> unit 0
  md.param @h.0.w : tensor<4x4xf32> init <zeros> unit 1
  md.param @h.0.b : tensor<4xf32> init <zeros> unit 1
  md.param @h.1.w : tensor<4x4xf32> init <zeros> unit 2
  md.param @h.1.b : tensor<4xf32> init <zeros> unit 2
  md.param @head : tensor<3x4xf32> init <zeros> unit 0
}

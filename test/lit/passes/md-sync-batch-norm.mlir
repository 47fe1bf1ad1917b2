// RUN: md-opt %s -split-input-file --pass-pipeline='builtin.module(md.model(md-sync-batch-norm))' | FileCheck %s

// With sync_batch_norm, a batch norm normalises with the global batch's
// statistics: averaged means over the world, then the averaged variance
// around the global mean.
// CHECK-LABEL: md.model @sync
// CHECK: md.forward @forward(%[[X:.*]]: tensor<4x3x8xf32>)
// CHECK-NOT: md.batch_norm
// CHECK: %[[G:.*]] = md.param_ref @bn.weight
// CHECK: %[[B:.*]] = md.param_ref @bn.bias
// CHECK: %[[M0:.*]] = md.mean %[[X]] dims [0, 1] : tensor<4x3x8xf32> to tensor<8xf32>
// CHECK-NEXT: %[[M:.*]] = md.all_reduce %[[M0]] avg group world {md.sync_batch_norm} : tensor<8xf32>
// CHECK-NEXT: %[[C:.*]] = md.sub %[[X]], %[[M]] : tensor<4x3x8xf32>, tensor<8xf32> -> tensor<4x3x8xf32>
// CHECK-NEXT: %[[S:.*]] = md.mul %[[C]], %[[C]]
// CHECK-NEXT: %[[V0:.*]] = md.mean %[[S]] dims [0, 1] : tensor<4x3x8xf32> to tensor<8xf32>
// CHECK-NEXT: %[[V:.*]] = md.all_reduce %[[V0]] avg group world {md.sync_batch_norm} : tensor<8xf32>
// CHECK-NEXT: %[[I:.*]] = md.rsqrt %[[V]] eps 1.000000e-03 : tensor<8xf32>
// CHECK-NEXT: %[[N:.*]] = md.mul %[[C]], %[[I]]
// CHECK-NEXT: %[[T:.*]] = md.mul %[[N]], %[[G]]
// CHECK-NEXT: %[[Y:.*]] = md.add %[[T]], %[[B]]
// CHECK-NEXT: md.sum %[[Y]]
md.model @sync {
  md.param @bn.weight : tensor<8xf32> init <ones> unit 0
  md.param @bn.bias : tensor<8xf32> init <zeros> unit 0
  md.forward @forward(%x: tensor<4x3x8xf32>) -> tensor<f32> {
    %g = md.param_ref @bn.weight : tensor<8xf32>
    %b = md.param_ref @bn.bias : tensor<8xf32>
    %y, %m, %i = md.batch_norm %x, %g, %b eps 1.0e-3 : tensor<4x3x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x3x8xf32>, tensor<8xf32>, tensor<8xf32>
    %l = md.sum %y dims [0, 1, 2] : tensor<4x3x8xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 4 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 sync_batch_norm step {
  } hooks {
  }
}

// -----

// Without it, batch norm stays local.
// CHECK-LABEL: md.model @local
// CHECK: md.batch_norm
// CHECK-NOT: md.all_reduce
md.model @local {
  md.param @bn.weight : tensor<8xf32> init <ones> unit 0
  md.param @bn.bias : tensor<8xf32> init <zeros> unit 0
  md.forward @forward(%x: tensor<4x8xf32>) -> tensor<f32> {
    %g = md.param_ref @bn.weight : tensor<8xf32>
    %b = md.param_ref @bn.bias : tensor<8xf32>
    %y, %m, %i = md.batch_norm %x, %g, %b : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %l = md.sum %y dims [0, 1] : tensor<4x8xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 4 optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 step {
  } hooks {
  }
}

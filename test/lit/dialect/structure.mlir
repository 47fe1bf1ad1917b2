// RUN: md-opt %s | md-opt | FileCheck %s
// RUN: md-opt %s --mlir-print-op-generic | md-opt | FileCheck %s

// CHECK-LABEL: md.model @mlp attributes {shard_group_size = 2 : i64, world_size = 4 : i64} {
md.model @mlp attributes {world_size = 4 : i64, shard_group_size = 2 : i64} {
  // CHECK: md.param @fc.weight : tensor<16x8xf32> init <normal(0.000000e+00, 2.000000e-02)> unit 0
  md.param @fc.weight : tensor<16x8xf32> init #md.init<normal(0.0, 0.02)> unit 0
  // CHECK: md.param @fc.bias : tensor<16xf32> init <zeros> frozen
  md.param @fc.bias : tensor<16xf32> init #md.init<zeros> frozen
  // CHECK: md.param @ln.weight : tensor<8xbf16> init <ones>
  md.param @ln.weight : tensor<8xbf16> init #md.init<ones>
  // CHECK: md.param @scale : tensor<1xf16> init <constant(5.000000e-01)>
  md.param @scale : tensor<1xf16> init #md.init<constant(0.5)>
  // CHECK: md.param @u : tensor<2x2xf32> init <uniform(-1.000000e-01, 1.000000e-01)> unit 3
  md.param @u : tensor<2x2xf32> init #md.init<uniform(-0.1, 0.1)> unit 3

  // CHECK: md.func @block(%[[X:.*]]: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: md.return %[[X]] : tensor<4x8xf32>
  md.func @block(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    md.return %x : tensor<4x8xf32>
  }
  // CHECK: md.func @two(%{{.*}}: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  md.func @two(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    md.return %x, %x : tensor<4xf32>, tensor<4xf32>
  }

  // CHECK: md.forward @forward(%[[A:.*]]: tensor<4x8xf32>, %{{.*}}: tensor<4xi32>) -> (tensor<f32>, tensor<4x8xf32>) {
  md.forward @forward(%x: tensor<4x8xf32>, %y: tensor<4xi32>) -> (tensor<f32>, tensor<4x8xf32>) {
    // CHECK: md.param_ref @fc.weight : tensor<16x8xf32>
    %w = md.param_ref @fc.weight : tensor<16x8xf32>
    // CHECK: %[[H:.*]] = md.call @block(%[[A]]) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %h = md.call @block(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %l = arith.constant dense<1.0> : tensor<f32>
    // CHECK: md.return %{{.*}}, %[[H]] : tensor<f32>, tensor<4x8xf32>
    md.return %l, %h : tensor<f32>, tensor<4x8xf32>
  }

  // CHECK: md.train @forward data <tokens, "data/train.bin"> global_batch 32 micro_batch 4
  // CHECK-SAME: optimizer #md.adamw<lr = 6.000000e-04, beta1 = 9.000000e-01, beta2 = 0.94999999999999996, eps = 1.000000e-08, weight_decay = 1.000000e-01>
  // CHECK-SAME: schedule <cosine, warmup = 10, steps = 100, min_lr = 0.000000e+00> seed 1337 clip_grad_norm 1.000000e+00 sync_batch_norm step {
  // CHECK: } hooks {
  // CHECK-NEXT: }
  md.train @forward data #md.data<tokens, "data/train.bin"> global_batch 32 micro_batch 4
      optimizer #md.adamw<lr = 6.0e-4, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8, weight_decay = 0.1>
      schedule #md.schedule<cosine, warmup = 10, steps = 100, min_lr = 0.0>
      seed 1337 clip_grad_norm 1.0 sync_batch_norm step {
  } hooks {
  }
}

// CHECK-LABEL: md.model @sgd {
md.model @sgd {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // CHECK: md.train @forward data <synthetic, "", seed = 5> global_batch 8 micro_batch 8
  // CHECK-SAME: optimizer #md.sgd<lr = 1.000000e-01, momentum = 9.000000e-01, dampening = 0.000000e+00, weight_decay = 0.000000e+00, nesterov = true>
  // CHECK-SAME: schedule <linear, warmup = 0, steps = 10, min_lr = 0.000000e+00> seed 0 step {
  md.train @forward data #md.data<synthetic, "", seed = 5> global_batch 8 micro_batch 8
      optimizer #md.sgd<lr = 0.1, momentum = 0.9, dampening = 0.0, weight_decay = 0.0, nesterov = true>
      schedule #md.schedule<linear, warmup = 0, steps = 10, min_lr = 0.0> seed 0 step {
  } hooks {
  }
}

// CHECK-LABEL: md.model @npy
md.model @npy {
  md.forward @forward(%x: tensor<2xf32>) -> tensor<f32> {
    %l = arith.constant dense<0.0> : tensor<f32>
    md.return %l : tensor<f32>
  }
  // CHECK: data <npy, "x.npy">
  // CHECK-SAME: schedule <constant, warmup = 0, steps = 1, min_lr = 0.000000e+00>
  md.train @forward data #md.data<npy, "x.npy"> global_batch 2 micro_batch 1
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 1, min_lr = 0.0> seed 7 step {
  } hooks {
  }
}

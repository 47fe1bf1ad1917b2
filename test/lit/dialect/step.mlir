// RUN: md-opt %s | md-opt | FileCheck %s
// RUN: md-opt %s --mlir-print-op-generic | md-opt | FileCheck %s

// Every op of the per-step program round-trips.

// CHECK-LABEL: md.model @m
md.model @m {
  // CHECK: md.param @w : tensor<4x8xf32> init <normal(0.000000e+00, 2.000000e-02)> unit 0 offset 0
  md.param @w : tensor<4x8xf32> init #md.init<normal(0.0, 0.02)> unit 0 offset 0
  // CHECK: md.param @b : tensor<4xf32> init <zeros> unit 0 offset 32
  md.param @b : tensor<4xf32> init #md.init<zeros> unit 0 offset 32
  // CHECK: md.state @u0.master : tensor<?xf32> shard(36) group world role master unit 0
  md.state @u0.master : tensor<?xf32> shard(36) group world role master unit 0
  // CHECK: md.state @u0.exp_avg : tensor<?xf32> shard(36) group shard role exp_avg unit 0
  md.state @u0.exp_avg : tensor<?xf32> shard(36) group shard role exp_avg unit 0
  // CHECK: md.state @u0.params : tensor<36xbf16> role params unit 0
  md.state @u0.params : tensor<36xbf16> role params unit 0
  // CHECK: md.state @u1.frozen : tensor<?xbf16> shard(16) group world role frozen unit 1
  md.state @u1.frozen : tensor<?xbf16> shard(16) group world role frozen unit 1
  // CHECK: md.state @u0.grad_acc : tensor<36xf32> role grad_acc unit 0 {note = "x"}
  md.state @u0.grad_acc : tensor<36xf32> role grad_acc unit 0 {note = "x"}
  // CHECK: md.state @scratch : tensor<2xf32> role momentum
  md.state @scratch : tensor<2xf32> role momentum
  md.forward @forward(%x: tensor<2x8xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<2x8xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 2
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    // CHECK: md.micro_steps {
    md.micro_steps {
      // CHECK: md.batch : tensor<2x8xf32>
      %x = md.batch : tensor<2x8xf32>
      %g = md.flatten %x : tensor<2x8xf32> to tensor<36xf32>
      // CHECK: md.grad_accumulate %{{.*}} into @u0.grad_acc : tensor<36xf32>
      md.grad_accumulate %g into @u0.grad_acc : tensor<36xf32>
    }
    %x = md.batch : tensor<2x8xf32>
    // CHECK: md.accum_scale : tensor<f32>
    %s = md.accum_scale : tensor<f32>
    // CHECK: md.record_loss %{{.*}} : tensor<f32>
    md.record_loss %s : tensor<f32>
    %g = md.flatten %x : tensor<2x8xf32> to tensor<36xf32>
    // CHECK: md.grad_total %{{.*}} from @u0.grad_acc : tensor<36xf32> -> tensor<36xf32>
    %t = md.grad_total %g from @u0.grad_acc : tensor<36xf32> -> tensor<36xf32>
    // CHECK: md.shard_slice %{{.*}} group world : tensor<36xf32> -> tensor<?xf32>
    %sh = md.shard_slice %t group world : tensor<36xf32> -> tensor<?xf32>
    // CHECK: md.state_load @u0.master : tensor<?xf32>
    %m = md.state_load @u0.master : tensor<?xf32>
    // CHECK: md.state_store %{{.*}}, @u0.master : tensor<?xf32>
    md.state_store %sh, @u0.master : tensor<?xf32>
    // CHECK: md.sqrt %{{.*}} : tensor<f32>
    %r = md.sqrt %s : tensor<f32>
  } hooks {
  }
}
